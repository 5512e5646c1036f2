"""Demo 2's cluster for the real Karpenter (tests/test_real_karpenter.py): what the program
registers, turned into the objects a scenario script (tests/karpenter_scenario.py) creates on a
real control plane with Karpenter's kwok provider. Built here, in the test's process, from
``run_lab()`` and the scheduling model; handed to the script as JSON (``plan``), because the
script runs in a private network namespace (engines/karpenter.py) and imports no test code.

What is the lab's, unchanged: the ``cloud-burst`` NodePool as registered (requirements, taint,
labels, limits, disruption: WhenEmpty, consolidateAfter 30s, budget 100%) — only its
``nodeClassRef`` points at a KWOKNodeClass instead of the EC2NodeClass; the ``burst``
Deployment and the ``demo-burst`` Namespace as registered (Pod Security restricted, the real
admission judges the pods); the fixed nodes (system, gateway, the two hybrid hosts) with the
model's labels, taints and allocatable (offline/scheduling.py ``lab_nodes``).

What stands in: the DaemonSets (kube-proxy, aws-node, the pod identity agent, Cilium) as pause
pods with the model's requests, tolerations and affinity, run by the real DaemonSet controller
on every node they admit, Karpenter's too (Karpenter counts their overhead on a new node); the
other workloads' pods as bare pods bound to the node the model places them on (they only take
room); the EC2 instance types as a kwok instance-types file: the pool's four types, on-demand in
the cloud nodes' zones at the price table's prices (stacks/costs.py; no spot offering: there is
no spot price to give), each with capacity = the model's allocatable + kwok's fixed overhead
(100m CPU, 10Mi memory, kwok/cloudprovider/helpers.go), so Karpenter's nodes get the same
allocatable as EKS's nodes of that type have in the model.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Optional

from offline import chart_render, scheduling
from stacks import costs
from tests.real_placement import _name, integers

NAMESPACE = "demo-burst"
DEPLOYMENT = "burst"
NODEPOOL = "cloud-burst"
COST = "controller.kubernetes.io/pod-deletion-cost"
KWOK_NODE_CLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
KWOK_OVERHEAD_CPU_M, KWOK_OVERHEAD_MEMORY_MI = 100, 10
PAUSE = "registry.k8s.io/pause:3.10"


def node_object(node: scheduling.Node) -> dict:
    size = node.allocatable
    resources = {"cpu": f"{size.cpu_m}m", "memory": f"{size.memory_mib}Mi",
                 "pods": str(node.max_pods)}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": dict(node.labels)},
            "spec": {"taints": [{"key": t.key, "effect": t.effect,
                                 **({"value": t.value} if t.value else {})}
                                for t in node.taints]},
            "status": {"allocatable": resources, "capacity": dict(resources)}}


def _container(w: scheduling.Workload) -> dict:
    requests = {}
    if w.request.cpu_m:
        requests["cpu"] = f"{w.request.cpu_m}m"
    if w.request.memory_mib:
        requests["memory"] = f"{w.request.memory_mib}Mi"
    return {"name": "c", "image": PAUSE, **({"resources": {"requests": requests}} if requests else {})}


def daemonset_object(w: scheduling.Workload) -> dict:
    spec: dict = {"containers": [_container(w)], "tolerations": list(w.tolerations)}
    if w.node_selector:
        spec["nodeSelector"] = dict(w.node_selector)
    if w.affinity:
        spec["affinity"] = integers(copy.deepcopy(dict(w.affinity)))
    name = _name(w.name)
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"ds": name}},
                     "template": {"metadata": {"labels": {"ds": name}}, "spec": spec}}}


def pinned_pod(w: scheduling.Workload, node: str, index: int) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": _name(f"{w.name}-{index}"), "namespace": "kube-system",
                         "labels": {"stand-in": _name(w.name)}},
            "spec": {"nodeName": node, "containers": [_container(w)],
                     "tolerations": [{"operator": "Exists"}]}}


def instance_types(model: scheduling.SchedulingModel, region: str) -> list[dict]:
    prices = costs.PRICES.get(region) or costs.PRICES[costs.FALLBACK_REGION]
    zones = sorted({n.labels.get(scheduling.ZONE) for n in model.nodes
                    if n.role == "system" and n.labels.get(scheduling.ZONE)})
    found = []
    for node in model.nodes:
        if not node.elastic:
            continue
        size = node.allocatable
        found.append({
            "name": node.instance_type, "architecture": "amd64", "operatingSystems": ["linux"],
            "resources": {"cpu": f"{size.cpu_m + KWOK_OVERHEAD_CPU_M}m",
                          "memory": f"{size.memory_mib + KWOK_OVERHEAD_MEMORY_MI}Mi",
                          "pods": str(node.max_pods)},
            "offerings": [{"Price": prices[f"ec2.{node.instance_type}"].usd, "Available": True,
                           "Requirements": [
                               {"key": "karpenter.sh/capacity-type", "operator": "In",
                                "values": ["on-demand"]},
                               {"key": scheduling.ZONE, "operator": "In", "values": [zone]}]}
                          for zone in zones]})
    return found


#: What runs is sigs.k8s.io/karpenter v1.15.0 (engines/karpenter/go.mod), the core of the AWS
#: provider's controller image of the same version.
CONTROLLER_IMAGE = "public.ecr.aws/karpenter/controller:1.15.0"


def gates(run: Any) -> str:
    """FEATURE_GATES for Karpenter as the lab's chart (1.15.0) renders the registered Release's
    ``settings.featureGates.podDeletionCostManagement`` into the controller's environment
    (components/karpenter.py ``controller_values``; the offline chart source is 1.14.1's,
    which predates the gate, so the value is read from the registration, not the render)."""
    [release] = [r for r in run.of_type(chart_render.RELEASE) if r.inputs.get("name") == "karpenter"]
    on = bool((((release.inputs.get("values") or {}).get("settings") or {})
               .get("featureGates") or {}).get("podDeletionCostManagement"))
    return f"PodDeletionCostManagement={'true' if on else 'false'}"


def kyverno_rule(run: Any) -> Optional[dict]:
    """What the lab's ClusterPolicy does (components/kyverno.py), as the scenario script's
    stand-in applies it: the node label its context reads, the value its precondition wants,
    what the label defaults to, and the strategic-merge patch it writes; None when the run
    registers no policy (scenario A)."""
    policies = [r for r in run.registrations if r.custom
                and r.type == "kubernetes:kyverno.io/v1:ClusterPolicy"]
    if not policies:
        return None
    [rule] = policies[0].inputs["spec"]["rules"]
    [context] = rule["context"]
    match = re.fullmatch(r"""metadata\.labels\."([^"]+)" \|\| '([^']*)'""",
                         context["apiCall"]["jmesPath"])
    assert match, context
    [condition] = rule["preconditions"]["all"]
    assert condition["operator"] == "Equals" and context["name"] in condition["key"], condition
    return {"label": match.group(1), "default": match.group(2), "value": condition["value"],
            "namespaces": rule["match"]["any"][0]["resources"]["namespaces"],
            "patch": integers(copy.deepcopy(rule["mutate"]["patchStrategicMerge"]))}


def controller_stand_in(w: scheduling.Workload, feature_gates: str) -> dict:
    """The chart's ``kube-system/karpenter`` Deployment (the model's render of it), standing for
    the karpenter-kwok process the script runs outside the cluster: its pods take the system
    nodes' room as the real controller's do, and ``rehearse burst`` reads the gates the
    controller started with from them (rehearse/commands/burst/reading.py ``karpenter``). Its image
    names the version that runs and its FEATURE_GATES are the process's."""
    template = integers(copy.deepcopy(dict(w.template)))
    container = next(c for c in template["spec"]["containers"] if c["name"] == "controller")
    container["image"] = CONTROLLER_IMAGE
    container["env"] = [e for e in container.get("env") or [] if e["name"] != "FEATURE_GATES"] + [
        {"name": "FEATURE_GATES", "value": feature_gates}]
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "karpenter", "namespace": "kube-system",
                         "labels": dict(template["metadata"]["labels"])},
            "spec": {"replicas": w.replicas,
                     "selector": {"matchLabels": dict(template["metadata"]["labels"])},
                     "template": template}}


def _registered(run, kind_type: str, name: str) -> dict:
    [reg] = [r for r in run.of_type(kind_type) if r.inputs["metadata"]["name"] == name]
    return integers(copy.deepcopy(dict(reg.inputs)))


def plan(scenario: str, run: Any = None, *, region: str = "ap-northeast-2") -> dict:
    """Everything the scenario script creates, as API objects, for the dev stack with
    ``burstScenario`` = ``scenario`` (or ``run``), and the facts the tests compare with."""
    if run is None:
        from tests.conftest import run_lab

        run = run_lab(burstScenario=scenario)
    model = scheduling.evaluate(run)
    pool = _registered(run, scheduling.NODE_POOL, NODEPOOL)
    pool["spec"]["template"]["spec"]["nodeClassRef"] = dict(KWOK_NODE_CLASS)
    deployment = _registered(run, scheduling.DEPLOYMENT, DEPLOYMENT)
    [namespace] = [integers(dict(r.inputs)) for r in run.of_type("kubernetes:core/v1:Namespace")
                   if r.inputs["metadata"]["name"] == NAMESPACE]
    fixed = [n for n in model.nodes if not n.elastic]
    pods: list[dict] = []
    daemonsets: list[dict] = []
    deployments: list[dict] = []
    for placement in model.result.placements:
        w = placement.workload
        if w.kind == "DaemonSet":
            daemonsets.append(daemonset_object(w))
        elif w.name == "karpenter" and w.namespace == "kube-system":
            deployments.append(controller_stand_in(w, gates(run)))
        elif w.name != scheduling.BURST:
            index = 0
            for node, count in sorted(placement.nodes.items()):
                for _ in range(count):
                    pods.append(pinned_pod(w, node, index))
                    index += 1
    return {
        "nodes": [node_object(n) for n in fixed],
        "hybrid": sorted(n.name for n in fixed if n.role == "hybrid"),
        "daemonsets": daemonsets, "pods": pods, "deployments": deployments,
        "feature_gates": gates(run), "scenario": scenario, "kyverno": kyverno_rule(run),
        "namespace": namespace, "deployment": deployment,
        "nodepool": pool,
        "nodeclass": {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
                      "metadata": {"name": KWOK_NODE_CLASS["name"]}},
        "instance_types": instance_types(model, region),
        "region": region,
    }


def outputs(scenario: str, sequence: Optional[list[int]] = None) -> dict:
    """The stack outputs ``python -m rehearse burst --outputs`` reads (what the demo layer
    exports: stacks/layers/demo.py)."""
    return {"region": "ap-northeast-2", "kubeconfig": "{}",
            "layers": ["network", "cluster", "hybrid", "gateway", "karpenter", "demo"],
            "karpenterNodePool": NODEPOOL, "karpenterPodDeletionCostManagement": scenario == "C",
            "demo2": {"namespace": NAMESPACE, "deployment": DEPLOYMENT, "app": DEPLOYMENT,
                      "scenario": scenario, "scaleSequence": sequence or [3, 15, 12, 10, 3],
                      "cpuRequestPerPod": "900m"}}
