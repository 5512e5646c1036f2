"""Scenario B's deletion costs written by the real Kyverno (v1.19.0, what the lab's chart 3.9.0
installs): its admission controller and background controller, out of cluster, against the real
control plane (engines/control_plane.py), each as its own ServiceAccount with the RBAC and the
``kyverno`` ConfigMap as Helm renders the lab's chart values.

Two halves:

- ``plan(run, cases)`` (in the test process): everything the lab decides, from the lab's own
  program run and Helm's render — the chart's CRDs, ServiceAccounts, (Cluster)Roles and Bindings
  and ConfigMaps for the lab's values and for each degraded variant, the ClusterPolicy, the
  demo-burst Namespace and Deployment, the hybrid nodes and one cloud-burst node, the Karpenter
  Deployment (verify burst reads its gate from it) and the stack's outputs. Written as JSON.
- ``python -m tests.real_kyverno PLAN RESULT`` (in a private network namespace): starts the
  control plane and Kyverno, runs the cases and writes what happened as JSON. Kyverno's
  controller-runtime metrics server defaults to ``:8080`` and its other servers to every
  interface (cmd/internal/flag.go, cmd/kyverno/main.go); every one is given 127.0.0.1 here, and
  the whole run is under ``unshare -n`` anyway, so nothing it opens is reachable from outside —
  which means the clients (this script, ``python -m rehearse verify burst``) run in there too.

Each case: make the cluster as the case's render says (what ``helm upgrade`` would: apply the
rendered objects, delete those the render no longer has), restart the burst Deployment so every
pod is bound afresh, then watch each pod from its binding until it carries the cost or the
window ends, and run ``verify burst`` against the server.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Optional

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT / "engines"))
from control_plane import ControlPlane, die_with_parent, free_port, stop_process  # noqa: E402
from karpenter import NETNS_MARK  # noqa: E402

COST = "controller.kubernetes.io/pod-deletion-cost"
HYBRID = ("eks.amazonaws.com/compute-type", "hybrid")
KWOK = {"kwok.x-k8s.io/node": "fake"}
NS = "kyverno"
#: The chart's objects Kyverno needs on the server. Its Deployments, Services, Jobs and test
#: Pods are the in-cluster way of running the controllers; here the binaries run out of cluster.
KINDS = ("Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole",
         "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap")
CONTROLLERS = {"admission": ("kyverno", "kyverno-admission-controller"),
               "background": ("kyverno-background-controller", "kyverno-background-controller")}
#: The degraded cases: which chart values change (components/kyverno.py's settings taken away).
CASES = ("lab", "no-binding-exclusion", "admission-no-nodes", "background-no-nodes")


# --- the plan (test process) ---------------------------------------------------------------------

def variant_values(values: dict, case: str) -> dict:
    """The lab's chart values with one of its settings taken away."""
    changed = copy.deepcopy(values)
    if case == "no-binding-exclusion":
        changed["config"].pop("resourceFiltersExclude")
    elif case == "admission-no-nodes":
        changed["admissionController"]["rbac"]["clusterRole"]["extraResources"] = [
            r for r in changed["admissionController"]["rbac"]["clusterRole"]["extraResources"]
            if "nodes" not in r["resources"]]
    elif case == "background-no-nodes":
        changed["backgroundController"]["rbac"]["clusterRole"]["extraResources"] = [
            r for r in changed["backgroundController"]["rbac"]["clusterRole"]["extraResources"]
            if "nodes" not in r["resources"]]
    elif case != "lab":
        raise ValueError(case)
    return changed


def _render(release, values: dict) -> list[dict]:
    import yaml
    from offline import chart_render

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for _, text in chart_render.render_texts(release, values)
            for d in yaml.load_all(text, Loader=loader) if isinstance(d, dict)]


def _node(name: str, labels: dict, taints, allocatable, max_pods: int) -> dict:
    resources = {"cpu": f"{allocatable.cpu_m}m", "memory": f"{allocatable.memory_mib}Mi",
                 "pods": str(max_pods)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict(KWOK),
                         "labels": {**labels, "kubernetes.io/hostname": name}},
            "spec": {"taints": [{"key": t.key, "effect": t.effect,
                                 **({"value": t.value} if t.value else {})} for t in taints]},
            "status": {"allocatable": resources, "capacity": dict(resources)}}


def module_crds() -> list[dict]:
    """The policies.kyverno.io CRDs Kyverno 1.19 waits for at start. The chart installs them
    through its remote dependency kyverno-api, which the chart archive here lacks
    (../shared/charts/README.md); Kyverno's module carries the same definitions."""
    import yaml

    folder = Path(subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "github.com/kyverno/kyverno"],
                                 cwd=PROJECT / "engines" / "kyverno", check=True,
                                 capture_output=True, text=True).stdout.strip())
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return [d for path in sorted((folder / "config/crds/policies.kyverno.io").glob("*.yaml"))
            for d in yaml.load_all(path.read_text(), Loader=loader) if isinstance(d, dict)]


def controllers_plan(run, extra_crds: Optional[list[dict]] = None) -> dict:
    """What ``Scenario.bring_up`` needs to run Kyverno as the lab's chart values install it,
    from the lab's program run ``run``: the chart's objects Kyverno needs on the server (KINDS,
    with the policies.kyverno.io CRDs) as ``renders["lab"]``, the chart's Deployments (the
    controllers' args and env) and the lab's ClusterPolicy as registered — None where the run
    registers none (scenario A installs Kyverno without it: stacks/layers/demo.py)."""
    from offline import chart_render
    from tests.real_placement import integers

    [kyverno] = [r for r in chart_render.registered_releases(run) if r.name == "kyverno"]
    rendered = _render(kyverno, kyverno.values)
    policies = [r.inputs for r in run.registrations if r.type.endswith(":ClusterPolicy")]
    extra_crds = module_crds() if extra_crds is None else extra_crds
    return {"renders": {"lab": extra_crds + [d for d in rendered if d.get("kind") in KINDS]},
            "chart_deployments": [d for d in rendered if d.get("kind") == "Deployment"],
            "policy": {**integers(policies[0]), "kind": "ClusterPolicy"} if policies else None}


def plan(run, cases=CASES, replicas: int = 10) -> dict:
    """What the scenario script needs, from the lab's program run ``run`` (burstScenario B)."""
    from offline import chart_render, scheduling
    from tests.real_placement import integers

    [kyverno] = [r for r in chart_render.registered_releases(run) if r.name == "kyverno"]
    [karpenter] = [r for r in chart_render.registered_releases(run) if r.name == "karpenter"]
    regs = {(r.type, r.name): r for r in run.registrations}
    extra_crds = module_crds()
    controllers = controllers_plan(run, extra_crds)
    burst = next(r.inputs for (t, n), r in regs.items()
                 if t == "kubernetes:apps/v1:Deployment" and r.inputs["metadata"]["name"] == "burst")
    namespace = next(r.inputs for (t, _), r in regs.items()
                     if t == "kubernetes:core/v1:Namespace"
                     and r.inputs["metadata"]["name"] == burst["metadata"]["namespace"])
    model = scheduling.evaluate(run)
    hybrid = [n for n in model.nodes if n.role == "hybrid"]
    # One cloud-burst node of the NodePool's largest type: the pods past the hybrid room land
    # on a cloud node without Karpenter having to launch one (its own tier tests that).
    cloud = max((n for n in model.nodes if n.role == "burst"), key=lambda n: n.allocatable.cpu_m)
    nodes = [_node(n.name, n.labels, n.taints, n.allocatable, n.max_pods) for n in hybrid]
    nodes.append(_node("cloud-burst-0", {k: v for k, v in cloud.labels.items()
                                         if k != "topology.kubernetes.io/zone"},
                       cloud.taints, cloud.allocatable, cloud.max_pods))
    deployment = integers(copy.deepcopy(burst))
    deployment["spec"]["replicas"] = replicas
    karpenter_deployment = next(d for d in chart_render.render_workloads(karpenter)
                                if d["kind"] == "Deployment")
    return {
        "renders": {"lab": controllers["renders"]["lab"],
                    **{case: extra_crds + [d for d in _render(kyverno, variant_values(kyverno.values, case))
                                           if d.get("kind") in KINDS] for case in cases}},
        "chart_deployments": controllers["chart_deployments"],
        "values": {case: variant_values(kyverno.values, case) for case in ("lab", *cases)},
        "cases": list(cases),
        "policy": controllers["policy"],
        "namespace": {**integers(namespace), "kind": "Namespace", "apiVersion": "v1"},
        "deployment": {**deployment, "kind": "Deployment", "apiVersion": "apps/v1"},
        "nodes": nodes,
        "hybrid_nodes": [n["metadata"]["name"] for n in nodes
                         if n["metadata"]["labels"].get(HYBRID[0]) == HYBRID[1]],
        "karpenter": karpenter_deployment,
        # The outputs verify burst reads (``--outputs``); the cluster is ``--kubeconfig``'s.
        "outputs": {k: run.outputs[k] for k in ("region", "demo2", "karpenterNodePool", "layers",
                                                "karpenterPodDeletionCostManagement")
                    if k in run.outputs},
    }


def run_in_netns(bindir: Path, workdir: Path, the_plan: dict, timeout: float = 600,
                 module: str = "tests.real_kyverno") -> dict:
    """Runs the scenario script (``python -m module BINDIR WORKDIR PLAN RESULT``, this one's
    by default) in a private network namespace; its result (or why it failed). The namespace
    is marked as private for engines/karpenter.py, which refuses to start outside one."""
    workdir.mkdir(parents=True, exist_ok=True)
    plan_file, result_file = workdir / "plan.json", workdir / "result.json"
    plan_file.write_text(json.dumps(the_plan))
    inner = (f"ip link set lo up && exec env {NETNS_MARK}=1 {sys.executable} -m {module} "
             f"{bindir} {workdir} {plan_file} {result_file}")
    log = open(workdir / "scenario.log", "wb")
    # unshare and sh exec, so this PID ends as the scenario's Python; it gets SIGTERM when the
    # test process dies (even by SIGKILL), and its engines and Kyverno die with it in turn.
    process = subprocess.Popen(["unshare", "-n", "--", "sh", "-c", inner], cwd=PROJECT,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                               preexec_fn=die_with_parent)
    log.close()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)
    if not result_file.exists():
        tail = "\n".join((workdir / "scenario.log").read_text(errors="replace").splitlines()[-40:])
        raise RuntimeError(f"{module} wrote no result (exit {process.returncode}):\n{tail}")
    return json.loads(result_file.read_text())


# --- the scenario (in the network namespace) -----------------------------------------------------

def _key(obj: dict) -> tuple:
    md = obj["metadata"]
    return obj["kind"], md.get("namespace") or "", md["name"]


class Scenario:
    def __init__(self, bindir: Path, workdir: Path, the_plan: dict):
        self.bindir, self.work, self.plan = bindir, workdir, the_plan
        self.plane: Optional[ControlPlane] = None
        self.kyverno: dict[str, subprocess.Popen] = {}
        self.current: list[dict] = []
        self.log_lines: list[str] = []
        self.t0 = time.monotonic()

    def log(self, message: str) -> None:
        line = f"[{time.monotonic() - self.t0:7.2f}] {message}"
        self.log_lines.append(line)
        print(line, flush=True)

    def ok(self, answer, what: str):
        if answer.status >= 300:
            raise RuntimeError(f"{what}: HTTP {answer.status}: {answer.body}")
        return answer.body

    # the chart's objects, as helm install/upgrade would leave them

    def install(self, objects: list[dict]) -> None:
        plane = self.plane
        if not self.current:
            self.ok(plane.apply({"apiVersion": "v1", "kind": "Namespace",
                                 "metadata": {"name": NS}}), "namespace kyverno")
        crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
        for crd in crds:
            if crd not in self.current:
                self.ok(plane.apply(crd, field_manager="helm"), crd["metadata"]["name"])
        if crds and not self.current:
            for crd in crds:
                plane.wait_for(f"CRD {crd['metadata']['name']} Established", lambda crd=crd: any(
                    c["type"] == "Established" and c["status"] == "True" for c in
                    (plane.call("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                + crd["metadata"]["name"]).body.get("status") or {})
                    .get("conditions", [])))
            plane.forget_discovery()
        wanted = {_key(o) for o in objects}
        for obj in objects:
            if obj["kind"] != "CustomResourceDefinition":
                self.ok(plane.apply(obj, field_manager="helm"), str(_key(obj)))
        for obj in self.current:
            if _key(obj) not in wanted:  # helm upgrade deletes what the chart no longer renders
                self.ok(plane.call("DELETE", plane.path_of(obj)), f"delete {_key(obj)}")
        self.current = objects

    def kubeconfig_for(self, account: str) -> Path:
        """A kubeconfig with a token the TokenRequest API issues for ``kyverno:account``."""
        body = self.ok(self.plane.call(
            "POST", f"/api/v1/namespaces/{NS}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 7200}}), f"token for {account}")
        path = self.work / f"kubeconfig-{account}"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "lab",
            "clusters": [{"name": "lab", "cluster": {"server": self.plane.url,
                                                     "certificate-authority": str(self.plane.ca_file)}}],
            "users": [{"name": account, "user": {"token": body["status"]["token"]}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": account}}]}))
        return path

    def start_kyverno(self) -> dict:
        """Both controllers, each with the chart's args and env for its container, plus what out
        of cluster needs: the kubeconfig, 127.0.0.1 for every server, free ports."""
        times = {}
        deployments = {d["metadata"]["name"]: d for d in self.plan["chart_deployments"]}
        self.webhook_port = free_port()
        for role, (binary, deployment) in CONTROLLERS.items():
            pod = deployments[deployment]["spec"]["template"]["spec"]
            container = pod["containers"][0]
            account = pod["serviceAccountName"]
            env = {}
            for item in container.get("env") or []:
                if "value" in item:
                    env[item["name"]] = item["value"]
                else:
                    path = item["valueFrom"]["fieldRef"]["fieldPath"]
                    env[item["name"]] = {"metadata.namespace": NS,
                                         "metadata.name": f"{deployment}-local"}[path]
            env.pop("TUF_ROOT", None)
            args = [a for a in container.get("args") or []
                    if not a.startswith(("--controllerRuntimeMetricsAddress", "--metricsPort",
                                         "--webhookServerPort"))]
            args += ["--kubeconfig", str(self.kubeconfig_for(account)),
                     "--metricsHost=127.0.0.1", f"--metricsPort={free_port()}",
                     f"--controllerRuntimeMetricsAddress=127.0.0.1:{free_port()}",
                     "--profileAddress=127.0.0.1"]
            if role == "admission":
                args += ["--webhookServerHost=127.0.0.1", f"--webhookServerPort={self.webhook_port}",
                         f"--serverIP=127.0.0.1:{self.webhook_port}"]
            out = open(self.work / f"kyverno-{role}.log", "wb")
            started = time.monotonic()
            self.kyverno[role] = subprocess.Popen(
                [str(self.bindir / binary), *args], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=self.work,
                env={"PATH": os.environ.get("PATH", ""), "HOME": str(self.work), **env},
                start_new_session=True, preexec_fn=die_with_parent)
            out.close()
            times[f"{role}_started"] = started
        insecure = ssl._create_unverified_context()  # Kyverno's own CA, checked by the API server

        def ready() -> bool:
            self.check_kyverno()
            return urllib.request.urlopen(f"https://127.0.0.1:{self.webhook_port}/health/readiness",
                                          context=insecure, timeout=2).status == 200

        self.plane.wait_for("Kyverno's admission controller /health/readiness", ready, timeout=180)
        return {"admission_ready_s": round(time.monotonic() - times["admission_started"], 2)}

    def bring_up(self, plane: ControlPlane) -> dict:
        """On ``plane``: the chart's objects for the lab's values, both controllers started and
        ready, then the plan's ClusterPolicy (if any) until Kyverno says it is Ready. Returns
        the timings (seconds)."""
        self.plane = plane
        self.install(self.plan["renders"]["lab"])
        self.log("chart objects applied")
        timings = self.start_kyverno()
        self.log(f"kyverno ready {timings}")
        if self.plan.get("policy") is not None:
            t = time.monotonic()
            self.ok(plane.apply(self.plan["policy"]), "policy")
            plane.wait_for("the ClusterPolicy Ready", lambda: self.policy_status().get("conditions")
                           and any(c["type"] == "Ready" and c["status"] == "True"
                                   for c in self.policy_status()["conditions"]), timeout=120)
            timings["policy_ready_s"] = round(time.monotonic() - t, 2)
        return timings

    def check_kyverno(self) -> None:
        for role, process in self.kyverno.items():  # those meant to be running
            if process.poll() is not None:
                tail = (self.work / f"kyverno-{role}.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"Kyverno's {role} controller exited {process.returncode}:\n{tail}")

    def stop_kyverno(self) -> None:
        for process in self.kyverno.values():
            stop_process(process)

    def stop(self) -> None:
        self.stop_kyverno()
        if self.plane is not None:
            self.plane.stop()

    # the workload

    def pods(self) -> list[dict]:
        ns = self.plan["deployment"]["metadata"]["namespace"]
        items = self.ok(self.plane.call("GET", f"/api/v1/namespaces/{ns}/pods",
                                        params={"labelSelector": "app=burst"}), "pods")["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def policy_status(self) -> dict:
        found = self.plane.call("GET", f"/apis/kyverno.io/v1/clusterpolicies/"
                                       f"{self.plan['policy']['metadata']['name']}")
        return (found.body.get("status") or {}) if found.status == 200 else {}

    def scale(self, replicas: int) -> None:
        dep = self.plan["deployment"]
        ns, name = dep["metadata"]["namespace"], dep["metadata"]["name"]
        self.ok(self.plane.call("PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/{name}/scale",
                                {"spec": {"replicas": replicas}},
                                content_type="application/merge-patch+json"), "scale")

    def roll(self, window: float) -> dict:
        """Every burst pod made afresh (scaled to 0, then to the plan's replicas, so the hybrid
        room is free again as in the demo's scale-up); each new pod watched from the moment its
        binding is seen until its cost is, until ``window`` seconds after all are Running."""
        self.scale(0)
        self.plane.wait_for("the burst pods gone", lambda: not self.pods(), timeout=120)
        replicas = self.plan["deployment"]["spec"]["replicas"]
        self.scale(replicas)
        bound: dict[str, float] = {}
        costed: dict[str, float] = {}
        seen: dict[str, dict] = {}
        settled_at = None
        deadline = time.monotonic() + self.plan.get("roll_timeout", 90.0)
        while time.monotonic() < deadline:
            self.check_kyverno()
            now = time.monotonic()
            current = self.pods()
            for p in current:
                pod = p["metadata"]["name"]
                seen[pod] = p
                if p["spec"].get("nodeName") and pod not in bound:
                    bound[pod] = now
                if (p["metadata"].get("annotations") or {}).get(COST) is not None and pod not in costed:
                    costed[pod] = now
            running = [p for p in current if p["status"].get("phase") == "Running"]
            if len(running) == replicas == len(current) and settled_at is None:
                settled_at = now
            if settled_at is not None and now - settled_at >= window:
                break
            time.sleep(0.1)
        hybrid = set(self.plan["hybrid_nodes"])
        pods = []
        for pod, p in sorted(seen.items()):
            node = p["spec"].get("nodeName")
            pods.append({"name": pod, "node": node, "hybrid": node in hybrid,
                         "phase": p["status"].get("phase"),
                         "ready": any(c["type"] == "Ready" and c["status"] == "True"
                                      for c in p["status"].get("conditions") or []),
                         "cost": (p["metadata"].get("annotations") or {}).get(COST),
                         "delay_s": round(costed[pod] - bound[pod], 2)
                         if pod in costed and pod in bound else None})
        return {"pods": pods, "settled": settled_at is not None, "window_s": window}

    def verify(self, case: str) -> dict:
        """``python -m rehearse verify burst`` against this server, with the lab's outputs."""
        outputs = self.work / "outputs.json"
        outputs.write_text(json.dumps(self.plan["outputs"]))
        out = self.work / f"rehearsals-{case}"
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "rehearse", "verify", "burst",
                               "--outputs", str(outputs), "--kubeconfig", str(self.plane.kubeconfig),
                               "--out", str(out), "--interval", "0.5", "--within", "3"],
                              cwd=PROJECT, capture_output=True, text=True, timeout=120)
        folders = sorted(out.iterdir()) if out.exists() else []
        report = json.loads((folders[-1] / "report.json").read_text()) if folders else None
        return {"exit": done.returncode, "seconds": round(time.monotonic() - started, 2),
                "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:], "report": report}

    def webhooks(self) -> list[dict]:
        """Every webhook Kyverno registered: its configuration, failurePolicy, URL and rules."""
        found = []
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
            for config in self.ok(self.plane.call(
                    "GET", f"/apis/admissionregistration.k8s.io/v1/{kind}"), kind)["items"]:
                for hook in config.get("webhooks") or []:
                    found.append({"kind": kind, "configuration": config["metadata"]["name"],
                                  "name": hook["name"], "failurePolicy": hook.get("failurePolicy"),
                                  "url": hook["clientConfig"].get("url"),
                                  "resources": sorted({r for rule in hook.get("rules") or []
                                                       for r in rule.get("resources") or []})})
        return found

    def review(self, account: str, verb: str, resource: str) -> bool:
        body = self.ok(self.plane.call("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": f"system:serviceaccount:{NS}:{account}",
                     "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}",
                                "system:authenticated"],
                     "resourceAttributes": {"verb": verb, "resource": resource}}}), "SAR")
        return bool(body["status"].get("allowed"))

    # the run

    def run(self) -> dict:
        result: dict[str, Any] = {"cases": {}, "timings": {},
                                  "hybrid_nodes": self.plan["hybrid_nodes"]}
        start = time.monotonic()
        self.plane = ControlPlane.start(self.bindir, self.work / "plane", log=self.log)
        result["timings"]["control_plane_s"] = round(time.monotonic() - start, 2)
        plane = self.plane
        for node in self.plan["nodes"]:
            self.ok(plane.apply(node), node["metadata"]["name"])
        result["timings"].update(self.bring_up(plane))
        result["policy_status"] = self.policy_status()
        # The chart's Deployments of the two controllers too: verify burst reads their service
        # accounts from them, as on the lab. Their pods stay Pending (the lab's nodeSelector
        # names system nodes, which this cluster has not); the binaries above do the work.
        for deployment in self.plan["chart_deployments"]:
            if deployment["metadata"]["name"] in {d for _, d in CONTROLLERS.values()}:
                self.ok(plane.apply(deployment, field_manager="helm"), "kyverno deployment")
        self.ok(plane.apply(self.plan["karpenter"]), "karpenter deployment")
        self.ok(plane.apply(self.plan["namespace"]), "namespace")
        plane.wait_for("the burst namespace's default ServiceAccount", lambda: plane.call(
            "GET", f"/api/v1/namespaces/{self.plan['namespace']['metadata']['name']}"
                   "/serviceaccounts/default").status == 200)
        self.ok(plane.apply(self.plan["deployment"]), "burst deployment")
        self.log("burst applied")
        window = self.plan.get("window", 5.0)
        for case in ["lab", *self.plan["cases"]]:
            t = time.monotonic()
            self.install(self.plan["renders"][case])
            # The ClusterRole aggregation controller folds the :additional roles into the ones
            # bound; wait until the server's own answer matches the render before rolling.
            expect_admission = any("nodes" in r["resources"] for r in self.plan["values"][case]
                                   ["admissionController"]["rbac"]["clusterRole"]["extraResources"])
            expect_background = any("nodes" in r["resources"] for r in self.plan["values"][case]
                                    ["backgroundController"]["rbac"]["clusterRole"]["extraResources"])
            plane.wait_for(f"{case}: RBAC as rendered", lambda: (
                self.review("kyverno-admission-controller", "get", "nodes") == expect_admission
                and self.review("kyverno-background-controller", "get", "nodes") == expect_background),
                timeout=60)
            time.sleep(self.plan.get("config_settle", 2.0))  # Kyverno's ConfigMap informer
            logs = {role: (self.work / f"kyverno-{role}.log").stat().st_size for role in CONTROLLERS}
            rolled = self.roll(window)
            self.log(f"{case}: rolled")
            verified = self.verify(case)
            self.log(f"{case}: verify exit {verified['exit']}")
            # What the controllers say of it: their logs are the only trace (the policy stays
            # Ready, the pods run).
            denied = {}
            for role, offset in logs.items():
                with open(self.work / f"kyverno-{role}.log", "rb") as f:
                    f.seek(offset)
                    denied[role] = f.read().decode(errors="replace").count("permission denied")
            result["cases"][case] = {**rolled, "verify": verified, "denied_in_log": denied,
                                     "policy_status": self.policy_status(),
                                     "seconds": round(time.monotonic() - t, 2)}
        # Last, Kyverno's outage: the webhooks it registered stay (a crash removes nothing), so
        # the API server keeps calling a dead URL; the policy's failurePolicy decides whether
        # pods can still be bound.
        result["webhooks"] = self.webhooks()
        result["listeners"] = _listeners()
        if self.plan.get("outage", True):
            t = time.monotonic()
            self.kyverno["admission"].kill()
            self.kyverno["admission"].wait()
            self.kyverno.pop("admission")
            self.log("admission controller killed")
            result["cases"]["admission-down"] = {**self.roll(window),
                                                 "webhooks": self.webhooks(),
                                                 "seconds": round(time.monotonic() - t, 2)}
        result["timings"]["total_s"] = round(time.monotonic() - start, 2)
        result["log"] = self.log_lines
        return result


def _listeners() -> list[str]:
    """The listening TCP sockets in this namespace (ss), to show where Kyverno bound."""
    done = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True)
    return done.stdout.splitlines()


def main(argv: list[str]) -> int:
    bindir, workdir, plan_file, result_file = (Path(a) for a in argv)
    # A SIGTERM (the test's timeout, or its death) ends the run through the finally below,
    # which stops Kyverno and the control plane by PID.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    the_plan = json.loads(plan_file.read_text())
    scenario = Scenario(bindir, workdir, the_plan)
    try:
        result = scenario.run()
    except BaseException as error:  # noqa: BLE001 - reported to the test with the logs
        result = {"error": f"{type(error).__name__}: {error}", "log": scenario.log_lines}
    finally:
        scenario.stop()
    result_file.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
