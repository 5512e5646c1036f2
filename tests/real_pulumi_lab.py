"""The whole lab under the real Pulumi engine: this repository's project (Pulumi.yaml, the
program, its layers) run by the built CLI, with the real pulumi-kubernetes provider on the real
kube-apiserver, the dynamic providers in the engine's own provider host, and the AWS resources
answered by tests/pulumi_aws_standin.py (pulumi-aws cannot be built here).

Two seams, both outside the program's own code:

- the charts: a stack transformation (the only code prepended to ``__main__.py``) gives each
  Helm Release the chart file from ../shared/charts in place of its repository or OCI address,
  and drops the version, which a local file does not take. Values, names, namespaces,
  timeouts and hooks are the program's. ../shared/charts has Karpenter 1.14.1 and the gateway
  1.0.0 where the program pins 1.15.0 and 1.0.1 (the newest this machine can get:
  docs/charts.md). Kyverno's is its source, not its published package: three of its
  dependencies (kyverno-api, openreports, reports-server) come from other repositories and are
  not in its ``charts/``, and Helm's install refuses a chart whose declared dependencies are
  missing, whatever their conditions (helm pkg/action ``CheckDependencies``). The copy given
  to the engine declares only the subcharts it carries; the three are CRD and add-on charts
  the program neither enables nor uses (its policies are kyverno.io/v1, in the ``crds``
  subchart that is there).
- none for ``aws eks get-token``, which the program's kubeconfig runs
  (components/eks_cluster.py ``kubeconfig``): that is the real AWS CLI (awscli from PyPI, a
  test requirement), presigning locally for the moto server the engine points AWS at, and the
  EKS authenticator (tests/eks_authenticator.py) trusting that server as STS.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
from pathlib import Path
from typing import Optional

from tests.conftest import PROJECT_DIR
from tests.real_pulumi import PulumiEngine, PulumiProject

from control_plane import KWOK_NODE_ANNOTATION  # noqa: E402 (engines/, on the path since real_pulumi)

CHARTS = PROJECT_DIR.parent / "shared" / "charts"

#: The program's chart references (components/*.py ``CHART``) -> the chart's source here.
LOCAL_CHARTS = {
    "oci://public.ecr.aws/eks/cilium/cilium": CHARTS / "cilium/1.18.8/cilium-1.18.8.tgz",
    "oci://public.ecr.aws/karpenter/karpenter-crd":
        CHARTS / "karpenter-crd/1.14.1/karpenter-crd-1.14.1.tgz",
    "oci://public.ecr.aws/karpenter/karpenter": CHARTS / "karpenter/1.14.1/karpenter-1.14.1.tgz",
    "kyverno": CHARTS / "kyverno/3.9.0/kyverno-3.9.0.tgz",
    "nvidia-device-plugin": CHARTS / "nvidia-device-plugin/0.18.0/nvidia-device-plugin-0.18.0.tgz",
    "oci://public.ecr.aws/eks/eks-hybrid-nodes-gateway":
        CHARTS / "eks-hybrid-nodes-gateway/1.0.0/eks-hybrid-nodes-gateway-1.0.0.tgz",
}

PRELUDE = '''# --- prepended by tests/real_pulumi_lab.py: the charts from ../shared/charts ---
import json as _json
import os as _os

import pulumi as _pulumi

_LOCAL_CHARTS = _json.loads(_os.environ["LAB_LOCAL_CHARTS"])


def _local_chart(args):
    if args.type_ != "kubernetes:helm.sh/v3:Release":
        return None
    chart = args.props.get("chart")
    if chart not in _LOCAL_CHARTS:
        raise RuntimeError(f"no local source for chart {chart!r} (tests/real_pulumi_lab.py)")
    props = {k: v for k, v in args.props.items()
             if k not in ("repository_opts", "repositoryOpts", "version")}
    props["chart"] = _LOCAL_CHARTS[chart]
    return _pulumi.ResourceTransformationResult(props, args.opts)


_pulumi.runtime.register_stack_transformation(_local_chart)
# --- the program, unchanged ---
'''

AWS_PLUGIN = """#!/bin/sh
# The stand-in pulumi-aws (tests/pulumi_aws_standin.py), run from the repository.
PYTHONPATH={project} exec {python} -m tests.pulumi_aws_standin "$@"
"""

def vendored_only(chart: Path, dest: Path) -> Path:
    """A copy of the chart archive whose Chart.yaml declares only the dependencies that are in
    its ``charts/`` folder (and no Chart.lock, which would name the others)."""
    import io
    import tarfile

    import yaml

    dest.mkdir(parents=True, exist_ok=True)
    out = dest / chart.name
    with tarfile.open(chart) as source, tarfile.open(out, "w:gz") as copy:
        members = source.getmembers()
        root = members[0].name.split("/")[0]
        present = {m.name.split("/")[2] for m in members
                   if m.name.startswith(f"{root}/charts/") and m.name.count("/") >= 2}
        for member in members:
            if member.name == f"{root}/Chart.lock":
                continue
            data = source.extractfile(member).read() if member.isfile() else None
            if member.name == f"{root}/Chart.yaml":
                meta = yaml.safe_load(data)
                meta["dependencies"] = [d for d in meta.get("dependencies", [])
                                        if d.get("alias", d["name"]) in present
                                        or d["name"] in present]
                data = yaml.safe_dump(meta, sort_keys=False).encode()
                member.size = len(data)
            copy.addfile(member, io.BytesIO(data) if data is not None else None)
    return out


def chart_files(dest: Path) -> dict[str, str]:
    """LOCAL_CHARTS as the engine is given them: Kyverno's with only its vendored subcharts."""
    files = {ref: str(path) for ref, path in LOCAL_CHARTS.items()}
    files["kyverno"] = str(vendored_only(LOCAL_CHARTS["kyverno"], dest))
    return files


def lab_project(dest: Path) -> PulumiProject:
    """This repository's project, with the chart seam prepended to ``__main__.py``."""
    project = PulumiProject.copy_of(PROJECT_DIR, dest, parts=(
        "Pulumi.yaml", "__main__.py", "requirements.txt", "stacks", "components", "offline"))
    main = dest / "__main__.py"
    main.write_text(PRELUDE + main.read_text())
    return project


def standin_bindir(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    path = dest / "pulumi-resource-aws"
    path.write_text(AWS_PLUGIN.format(project=PROJECT_DIR, python=sys.executable))
    path.chmod(0o755)
    return dest


def journal_of(workdir: Path) -> Path:
    """The stand-in AWS provider's journal of a ``lab_engine`` made in ``workdir``."""
    return workdir / "standin-journal.jsonl"


def read_journal(journal: Path) -> list[dict]:
    """Each call the stand-in AWS provider was asked (tests/pulumi_aws_standin.py), in order."""
    return [json.loads(line) for line in journal.read_text().splitlines()] if journal.exists() else []


def state_resources(state: dict) -> list[dict]:
    """The resources of a state file the engine wrote (``EngineStack.state``, parsed)."""
    return state["checkpoint"]["latest"].get("resources", [])


def lab_engine(pulumi_bindir: Path, workdir: Path, eks, *, aws_endpoint: Optional[str],
               account_id: str, deadline: float = 900) -> PulumiEngine:
    """An engine whose PATH has the stand-in AWS plugin first, whose EKS clusters report
    ``eks``'s (an EksControlPlane, tests/real_cluster.py) address and CA, and whose caller is ``account_id``."""
    standins = standin_bindir(workdir / "standin-bin")
    path = os.pathsep.join([str(standins), str(pulumi_bindir), str(Path(sys.prefix) / "bin"),
                            os.environ.get("PATH", "")])
    return PulumiEngine(pulumi_bindir, workdir / "engine", deadline=deadline,
                        aws_endpoint=aws_endpoint, env={
                            "PATH": path,
                            "STANDIN_EKS_ENDPOINT": eks.endpoint,
                            "STANDIN_EKS_CA": eks.certificate_authority,
                            "STANDIN_JOURNAL": str(journal_of(workdir)),
                            "LAB_LOCAL_CHARTS": json.dumps(chart_files(workdir / "charts")),
                            "STANDIN_ACCOUNT_ID": account_id,
                        })


def kwok_node(name: str, labels: dict, taints: list[dict], cpu: str = "16") -> dict:
    """A Node kwok keeps Ready (and runs its pods), as a kubelet would."""
    resources = {"cpu": cpu, "memory": "64Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict([KWOK_NODE_ANNOTATION]),
                         "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                    "kubernetes.io/hostname": name, **labels}},
            "spec": {"taints": taints},
            "status": {"capacity": resources, "allocatable": dict(resources)}}


def joined_node(instance_id: str, user_data: str) -> dict:
    """The Node nodeadm registers for a host that boots with ``user_data``: the kubelet's
    ``--node-labels`` and ``--register-with-taints`` from it (components/hybrid_user_data.py
    writes them), the instance-id mark filled in as the script does at boot, and the name of
    the host's SSM managed instance, which nodeadm gives the Node."""
    from components.hybrid_user_data import INSTANCE_ID_MARK

    labels_flag = re.search(r"--node-labels=([^\s\"']+)", user_data)
    taints_flag = re.search(r"--register-with-taints=([^\s\"']+)", user_data)
    if not labels_flag:
        raise AssertionError(f"the user data of {instance_id} sets no --node-labels")
    labels = dict(pair.split("=", 1) for pair in
                  labels_flag.group(1).replace(INSTANCE_ID_MARK, instance_id).split(","))
    # nodeadm's own label on every hybrid node (the EKS Hybrid Nodes user guide, "Prepare
    # nodes"; the program does not write it, and selects hybrid nodes by it).
    labels["eks.amazonaws.com/compute-type"] = "hybrid"
    taints = []
    for spec in (taints_flag.group(1).split(",") if taints_flag else []):
        key_value, effect = spec.rsplit(":", 1)
        key, _, value = key_value.partition("=")
        taints.append({"key": key, "value": value, "effect": effect})
    return kwok_node("mi-0" + instance_id.removeprefix("i-")[-16:], labels, taints)


#: EKS's taint effects (the NodeGroup API) as Kubernetes spells them.
EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute",
           "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def group_nodes(group: dict, region: str, subnet: int) -> list[dict]:
    """The Nodes of a managed node group once its instances join: the group's labels and
    taints, and the labels EKS gives a node group's nodes (its name, capacity type, instance
    type), spread over two zones, named as EC2 names them (``subnet``: the third octet of the
    group's addresses, so two groups' names differ; a name is also the hostname label, at
    most 63 characters)."""
    nodes = []
    for n in range(int(group["desiredSize"])):
        zone = f"{region}{'ab'[n % 2]}"
        name = f"ip-10-0-{subnet + n % 2}-{10 + n}.{region}.compute.internal"
        labels = {**group["labels"], "eks.amazonaws.com/nodegroup": group["name"],
                  "eks.amazonaws.com/capacityType": "ON_DEMAND",
                  "node.kubernetes.io/instance-type": (group["instanceTypes"] or ["m6i.large"])[0],
                  "topology.kubernetes.io/zone": zone}
        taints = [{"key": t["key"], "value": t.get("value", ""), "effect": EFFECTS[t["effect"]]}
                  for t in group["taints"]]
        nodes.append(kwok_node(name, labels, taints))
    return nodes


class NodesJoin:
    """Plays the kubelets while the engine runs, from what the stand-in AWS provider was asked
    to create (its journal): each hybrid host's Node registers as its user data tells nodeadm
    to, and each managed node group's Nodes register as EKS's would. A node group's delete
    takes its Nodes with it (EKS drains and terminates them); a hybrid host's does not (its
    Node stays until the host's Node cleanup deletes it, as in EKS). ``joined`` maps each Node
    made to the resource id it came from."""

    def __init__(self, plane, journal: Path, region: str, ssm=None):
        #: tests/moto_ssm_instances.py's table: a hybrid host's SSM agent registers the host
        #: (its ``mi-…``, under the activation its NodeConfig names) before nodeadm joins it.
        self.ssm = ssm
        self.plane = plane
        self.journal = journal
        self.region = region
        self.joined: dict[str, str] = {}
        self.hybrid: set[str] = set()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nodes-join", daemon=True)

    def __enter__(self) -> "NodesJoin":
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _post(self, node: dict, source: str) -> None:
        answer = self.plane.call("POST", "/api/v1/nodes", node)
        if answer.status != 201:
            self.errors.append(f"{node['metadata']['name']}: {answer.status} {answer.body}")
        self.joined[node["metadata"]["name"]] = source

    def _run(self) -> None:
        done = groups = 0
        while not self._stop.wait(0.3):
            calls = read_journal(self.journal)
            for call in calls[done:]:
                if call["op"] == "create" and "nodeadm" in call.get("userData", ""):
                    node = joined_node(call["id"], call["userData"])
                    self.hybrid.add(node["metadata"]["name"])
                    activation = re.search(r"activationId:\s*['\"]?([0-9a-f-]{36})", call["userData"])
                    if self.ssm is not None and activation:
                        self.ssm.register(node["metadata"]["name"], activation.group(1))
                    self._post(node, call["id"])
                elif call["op"] == "create" and "nodeGroup" in call:
                    groups += 1
                    for node in group_nodes(call["nodeGroup"], self.region, 10 * groups):
                        self._post(node, call["id"])
                elif call["op"] == "delete" and call["type"] == "aws:eks/nodeGroup:NodeGroup":
                    for name in [n for n, source in self.joined.items() if source == call["id"]]:
                        self.plane.call("DELETE", f"/api/v1/nodes/{name}")
            done = len(calls)


def _owner_workload(plane, pod: dict) -> Optional[dict]:
    """The Deployment, DaemonSet or StatefulSet a pod belongs to (through its ReplicaSet)."""
    namespace = pod["metadata"]["namespace"]
    obj = pod
    for _ in range(3):
        owners = [o for o in obj["metadata"].get("ownerReferences", []) if o.get("controller")]
        if not owners:
            return obj if obj is not pod else None
        owner = owners[0]
        answer = plane.call("GET", plane.path_of({"apiVersion": owner["apiVersion"],
                                                  "kind": owner["kind"],
                                                  "metadata": {"name": owner["name"],
                                                               "namespace": namespace}}))
        if answer.status != 200:
            return None
        obj = answer.body
        if obj["kind"] in ("Deployment", "DaemonSet", "StatefulSet"):
            return obj
    return None


def pods_by_resource(plane, state: dict, nodes: set[str]) -> dict[str, set[str]]:
    """For each Node in ``nodes``, the names of the Pulumi resources whose pods run on it: the
    workload the program made itself, or the Helm release that made it (Helm's
    ``meta.helm.sh/release-name`` annotation), read from the API server and the state."""
    made: dict[tuple[str, str, str], str] = {}
    for resource in state_resources(state):
        outputs = resource.get("outputs", {})
        name = resource["urn"].rsplit("::", 1)[-1]
        if resource["type"] == "kubernetes:helm.sh/v3:Release":
            made[("release", outputs.get("namespace", ""), outputs.get("name", ""))] = name
        elif resource["type"].startswith("kubernetes:") and "metadata" in outputs:
            meta = outputs["metadata"]
            made[(outputs.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))] = name
    placed: dict[str, set[str]] = {node: set() for node in nodes}
    for pod in plane.call("GET", "/api/v1/pods").body["items"]:
        node = pod["spec"].get("nodeName")
        if node not in placed:
            continue
        workload = _owner_workload(plane, pod)
        if workload is None:
            continue
        meta = workload["metadata"]
        annotations = meta.get("annotations", {})
        key = (workload["kind"], meta["namespace"], meta["name"])
        release = ("release", annotations.get("meta.helm.sh/release-namespace", ""),
                   annotations.get("meta.helm.sh/release-name", ""))
        owner = made.get(key) or made.get(release)
        placed[node].add(owner or f"(not the program's: {'/'.join(key)})")
    return placed
