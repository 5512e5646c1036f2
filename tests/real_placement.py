"""The lab's nodes and pods on the real control plane (engines/control_plane.py): kwok Nodes built
from the scheduling model's own node facts (offline/scheduling.py ``lab_nodes``: labels, taints,
allocatable CPU, memory, pods and GPUs) and the model's workloads (``lab_workloads``: the pod
templates it read — the lab's Deployments as registered, the charts' DaemonSets and Deployments
as Helm renders them — and the EKS add-ons' pods built from the model's description of them),
scheduled by the real kube-scheduler and DaemonSet controller; then where each pod went.

Isolation: Nodes are cluster-scoped, so a scenario marks what it owns (tests/test_real_placement.py
also runs its own control plane: a pod that tolerates every taint, as Cilium's agent does, would
still reach these nodes, and ``Observed.strangers`` lists any that did). Every node it creates carries the label and the NoSchedule
taint ``placement.eks-hybrid-lab.io/scenario=<prefix>``; every pod it creates selects that label
and tolerates exactly that taint. The pair changes no decision among the scenario's own nodes
(every one of them has the label; the toleration matches only the added taint, and a NoSchedule
taint does not score), and keeps everyone else's pods off its nodes and its pods off everyone
else's. Its namespaces are ``<prefix>-<namespace>`` (one for each namespace of the lab, so
namespace-scoped pod affinity and spread still group as in the lab); node names are
``<prefix>-<model name>`` and the hostname label follows them.
"""

from __future__ import annotations

import copy
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from offline import scheduling

SCENARIO = "placement.eks-hybrid-lab.io/scenario"
WORKLOAD = "placement.eks-hybrid-lab.io/workload"
KWOK = {"kwok.x-k8s.io/node": "fake"}
#: PriorityClasses every API server has (the Priority admission plugin refuses other names
#: unless they exist).
BUILT_IN_PRIORITIES = {"system-node-critical", "system-cluster-critical"}


def integers(value: Any) -> Any:
    """The program's mocks hand numbers back as floats (8080.0); the API wants integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: integers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [integers(v) for v in value]
    return value


def _name(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].rstrip("-")


def kwok_node(node: scheduling.Node, prefix: str) -> dict:
    name = _name(f"{prefix}-{node.name}")
    size = node.allocatable
    resources = {"cpu": f"{size.cpu_m}m", "memory": f"{size.memory_mib}Mi",
                 "pods": str(node.max_pods)}
    if size.gpus:
        resources["nvidia.com/gpu"] = str(size.gpus)
    taints = [{"key": t.key, "effect": t.effect, **({"value": t.value} if t.value else {})}
              for t in node.taints]
    taints.append({"key": SCENARIO, "value": prefix, "effect": "NoSchedule"})
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": dict(KWOK),
                         "labels": {**node.labels, scheduling.HOSTNAME: name, SCENARIO: prefix}},
            "spec": {"taints": taints},
            "status": {"allocatable": resources, "capacity": dict(resources)}}


def _addon_template(w: scheduling.Workload) -> dict:
    """A pod template for an add-on the model describes without one: what it says of it."""
    container: dict = {"name": w.name, "image": "registry.k8s.io/pause:3.10"}
    requests = {}
    if w.request.cpu_m:
        requests["cpu"] = f"{w.request.cpu_m}m"
    if w.request.memory_mib:
        requests["memory"] = f"{w.request.memory_mib}Mi"
    if requests:
        container["resources"] = {"requests": requests}
    spec: dict = {"containers": [container], "tolerations": list(w.tolerations),
                  "hostNetwork": w.host_network}
    if w.node_selector:
        spec["nodeSelector"] = dict(w.node_selector)
    if w.affinity:
        spec["affinity"] = copy.deepcopy(dict(w.affinity))
    if w.topology_spread:
        spec["topologySpreadConstraints"] = list(w.topology_spread)
    return {"metadata": {"labels": {"app": w.name}}, "spec": spec}


def pod_template(w: scheduling.Workload, prefix: str) -> dict:
    """The workload's pod template, as the lab would create it, plus the scenario's selector and
    toleration and its workload label; without what cannot exist here and decides no placement
    (service accounts, claims of volumes that are not there, priority classes not created)."""
    template = integers(copy.deepcopy(dict(w.template))) if w.template else _addon_template(w)
    meta = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), SCENARIO: prefix, WORKLOAD: w.name}
    meta.pop("annotations", None)
    spec = template["spec"]
    spec.pop("serviceAccountName", None)
    spec.pop("serviceAccount", None)
    if spec.get("priorityClassName") not in BUILT_IN_PRIORITIES:
        spec.pop("priorityClassName", None)
        spec.pop("priority", None)
    for volume in spec.get("volumes") or []:
        if "persistentVolumeClaim" in volume:
            volume.pop("persistentVolumeClaim")
            volume["emptyDir"] = {}
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), SCENARIO: prefix}
    spec["tolerations"] = [*(spec.get("tolerations") or []),
                           {"key": SCENARIO, "operator": "Equal", "value": prefix,
                            "effect": "NoSchedule"}]
    return template


def workload_object(w: scheduling.Workload, prefix: str, namespace: str) -> dict:
    template = pod_template(w, prefix)
    selector = {"matchLabels": {SCENARIO: prefix, WORKLOAD: w.name}}
    spec: dict = {"selector": selector, "template": template}
    if w.kind == "Deployment":
        spec["replicas"] = w.replicas
    return {"apiVersion": "apps/v1", "kind": w.kind,
            "metadata": {"name": w.name, "namespace": namespace,
                         "labels": {SCENARIO: prefix}},
            "spec": spec}


@dataclass
class Observed:
    """Where the real scheduler put each workload's pods: model node names, None for a pod it
    left Pending (with the scheduler's message)."""
    pods: dict[str, list[Optional[str]]] = field(default_factory=dict)
    messages: dict[str, set[str]] = field(default_factory=dict)
    #: Pods of other tests found on this scenario's nodes (isolation broken).
    strangers: list[str] = field(default_factory=list)

    def on(self, workload: str) -> Counter:
        return Counter(n for n in self.pods.get(workload, []) if n is not None)

    def pending(self, workload: str) -> int:
        return sum(1 for n in self.pods.get(workload, []) if n is None)


class Scenario:
    """One lab's nodes and pods on the control plane, under ``prefix``."""

    def __init__(self, plane, prefix: str):
        self.plane = plane
        self.prefix = prefix
        self.nodes: dict[str, scheduling.Node] = {}  # kwok name -> model node
        self.namespaces: dict[str, str] = {}
        self.workloads: list[scheduling.Workload] = []

    # --- creating -------------------------------------------------------------------------

    def add_nodes(self, nodes: Sequence[scheduling.Node]) -> None:
        for node in nodes:
            obj = kwok_node(node, self.prefix)
            answer = self.plane.call("POST", "/api/v1/nodes", obj)
            assert answer.status == 201, answer.body
            self.nodes[obj["metadata"]["name"]] = node
        names = [kwok_node(n, self.prefix)["metadata"]["name"] for n in nodes]
        self.plane.wait_for(f"{len(names)} kwok nodes Ready and untainted",
                            lambda: all(self._ready(n) for n in names), timeout=60)

    def _ready(self, name: str) -> bool:
        node = self.plane.call("GET", f"/api/v1/nodes/{name}").body
        ready = any(c["type"] == "Ready" and c["status"] == "True"
                    for c in node.get("status", {}).get("conditions") or [])
        # The API server taints a new node not-ready; the node lifecycle controller lifts it.
        tainted = any(t["key"].startswith("node.kubernetes.io/")
                      for t in node.get("spec", {}).get("taints") or [])
        return ready and not tainted

    def namespace(self, original: str) -> str:
        if original not in self.namespaces:
            name = _name(f"{self.prefix}-{original or 'kube-system'}")
            answer = self.plane.apply({"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name}})
            assert answer.status in (200, 201), answer.body
            self.namespaces[original] = name
        return self.namespaces[original]

    def add_workloads(self, workloads: Sequence[scheduling.Workload]) -> None:
        for w in workloads:
            obj = workload_object(w, self.prefix, self.namespace(w.namespace or "kube-system"))
            answer = self.plane.apply(obj)
            assert answer.status in (200, 201), (w.name, answer.body)
            self.workloads.append(w)
        # A new DaemonSet's status is current once its observedGeneration is (the nodes were
        # all there before it): a short quiet spell is enough.
        self.settle(quiet=1.0)

    # --- reading --------------------------------------------------------------------------

    def _pods(self) -> list[dict]:
        answer = self.plane.call("GET", "/api/v1/pods",
                                 params={"labelSelector": f"{SCENARIO}={self.prefix}"})
        return [p for p in answer.body["items"] if not p["metadata"].get("deletionTimestamp")]

    def _decided(self) -> Optional[tuple]:
        """The pods' placements when every expected pod exists and the scheduler has decided
        each (bound, or marked Unschedulable); None before."""
        pods = self._pods()
        count = Counter(p["metadata"]["labels"][WORKLOAD] for p in pods)
        for w in self.workloads:
            if w.kind == "Deployment" and count[w.name] != w.replicas:
                return None
            if w.kind == "DaemonSet":
                ns = self.namespace(w.namespace or "kube-system")
                ds = self.plane.call("GET", f"/apis/apps/v1/namespaces/{ns}/daemonsets/{w.name}").body
                status = ds.get("status") or {}
                if status.get("observedGeneration") != ds["metadata"]["generation"] or \
                        status.get("desiredNumberScheduled", -1) != count[w.name]:
                    return None
        placed = []
        for p in pods:
            node = p["spec"].get("nodeName")
            if not node and not any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                                    for c in p.get("status", {}).get("conditions") or []):
                return None
            placed.append((p["metadata"]["name"], node))
        return tuple(sorted(placed, key=str))

    def settle(self, quiet: float = 2.0, timeout: float = 120) -> None:
        """Until every pod is decided and nothing changes for ``quiet`` seconds (after nodes
        join, the DaemonSet controller's status can trail a node it has just seen)."""
        self.plane.wait_quiet(f"scenario {self.prefix}'s pods decided", self._decided,
                              quiet=quiet, timeout=timeout)

    def observe(self) -> Observed:
        seen = Observed()
        for p in self._pods():
            workload = p["metadata"]["labels"][WORKLOAD]
            node = p["spec"].get("nodeName")
            seen.pods.setdefault(workload, []).append(self.nodes[node].name if node else None)
            if not node:
                seen.messages.setdefault(workload, set()).update(
                    c.get("message", "") for c in p["status"].get("conditions") or []
                    if c["type"] == "PodScheduled")
        everyone = self.plane.call("GET", "/api/v1/pods").body["items"]
        seen.strangers = sorted(
            f"{p['metadata']['namespace']}/{p['metadata']['name']} on {p['spec']['nodeName']}"
            for p in everyone if p["spec"].get("nodeName") in self.nodes
            and (p["metadata"].get("labels") or {}).get(SCENARIO) != self.prefix)
        return seen

    def remove_workload(self, w: scheduling.Workload) -> None:
        """Deletes the workload and waits until none of its pods is left (kwok finishes the
        ones on its nodes)."""
        ns = self.namespace(w.namespace or "kube-system")
        kind = "deployments" if w.kind == "Deployment" else "daemonsets"
        answer = self.plane.call("DELETE", f"/apis/apps/v1/namespaces/{ns}/{kind}/{w.name}",
                                 {"kind": "DeleteOptions", "apiVersion": "v1",
                                  "propagationPolicy": "Background"})
        assert answer.status in (200, 202), answer.body
        self.workloads.remove(w)
        selector = f"{SCENARIO}={self.prefix},{WORKLOAD}={w.name}"
        self.plane.wait_for(f"{w.name}'s pods gone", lambda: not self.plane.call(
            "GET", "/api/v1/pods", params={"labelSelector": selector}).body["items"], timeout=60)

    # --- removing -------------------------------------------------------------------------

    def delete(self) -> None:
        for name in self.namespaces.values():
            self.plane.call("DELETE", f"/api/v1/namespaces/{name}")
        for name in self.nodes:
            self.plane.call("DELETE", f"/api/v1/nodes/{name}")


@dataclass
class Run:
    """What a scenario saw: ``fixed`` with the lab's fixed nodes only (Karpenter's pods wait,
    Pending), ``burst`` after one node of each instance type the burst NodePool may launch
    joined, ``warm`` after ``burst`` was deleted and made again with those nodes still there
    (a demo run that starts before Karpenter has removed the last one's nodes); None when the
    lab has no NodePool, or they were not asked for."""
    model: scheduling.SchedulingModel
    fixed: Observed
    burst: Optional[Observed]
    warm: Optional[Observed] = None


def run_scenario(plane, model: scheduling.SchedulingModel, prefix: str, *,
                 karpenter_nodes: bool = True) -> Run:
    """The model's nodes and workloads on the real control plane, in the model's order: the
    fixed nodes Ready, then every workload but ``burst`` settled, then ``burst`` at its demo
    peak; then (``karpenter_nodes``) one node of each burst instance type, standing for what
    Karpenter would launch, and ``burst`` made again with them there."""
    scenario = Scenario(plane, prefix)
    try:
        scenario.add_nodes([n for n in model.nodes if not n.elastic])
        workloads = model.workloads
        scenario.add_workloads([w for w in workloads if w.name != scheduling.BURST])
        scenario.add_workloads([w for w in workloads if w.name == scheduling.BURST])
        fixed = scenario.observe()
        burst = warm = None
        elastic = [n for n in model.nodes if n.elastic]
        if karpenter_nodes and elastic:
            scenario.add_nodes(elastic)
            scenario.settle()
            burst = scenario.observe()
            [demo] = [w for w in workloads if w.name == scheduling.BURST]
            scenario.remove_workload(demo)
            scenario.add_workloads([demo])
            warm = scenario.observe()
        return Run(model, fixed, burst, warm)
    finally:
        scenario.delete()


# --- the comparison ------------------------------------------------------------------------------

def _role(model: scheduling.SchedulingModel, node_name: str) -> str:
    return next(n.role for n in model.nodes if n.name == node_name)


def disagreements(model: scheduling.SchedulingModel, seen: Observed, *,
                  with_karpenter_nodes: bool) -> list[str]:
    """Where the real scheduler's placement differs from the model's, in what is decidable:

    - a DaemonSet: the exact set of nodes it runs on (the controller's choice, not a score);
    - a Deployment: how many pods stay Pending; how many go to each node role (system, gateway,
      hybrid, gpu, burst); and that no pod runs on a node the model says cannot take it (its
      labels, affinity, taints) — so where only one node of a role admits the pod, the node
      is exact. Which of several admitting nodes of one role a pod lands on is the scheduler's
      scoring, which the model does not claim.

    Without Karpenter's nodes, the pods the model hands Karpenter must be Pending; with one node
    of each burst type present, they must run on those nodes, and only the pods the model finds
    no room for anywhere may stay Pending."""
    found = []
    by_name = {n.name: n for n in model.nodes}
    for p in model.result.placements:
        w = p.workload
        real = seen.on(w.name)
        expected = Counter({n: c for n, c in p.nodes.items() if c and
                            (with_karpenter_nodes or not by_name[n].elastic)})
        if w.kind == "DaemonSet":
            if set(real) != set(expected):
                found.append(f"{w.name}: DaemonSet on {sorted(real)}, model {sorted(expected)}")
            continue
        if with_karpenter_nodes:
            pending = p.pending
            # The model's elastic nodes stand for as many as Karpenter launches: its pods there
            # count by role only.
            expected_roles = _roles(model, expected)
            expected_roles["burst"] += p.karpenter
        else:
            pending = p.pending + p.karpenter
            expected_roles = _roles(model, expected)
        real_pending = seen.pending(w.name)
        if real_pending != pending:
            found.append(f"{w.name}: {real_pending} Pending, model {pending} "
                         f"({'; '.join(sorted(seen.messages.get(w.name, ())))})")
        real_roles = _roles(model, real)
        if +real_roles != +expected_roles:
            found.append(f"{w.name}: by role {dict(real_roles)}, model {dict(+expected_roles)}")
        for node in real:
            problem = scheduling.placement_problem(w, by_name[node])
            if problem:
                found.append(f"{w.name}: on {node}, where the model says it cannot run: {problem}")
    return found


def _roles(model: scheduling.SchedulingModel, counts: Counter) -> Counter:
    roles: Counter = Counter()
    for node, count in counts.items():
        roles[_role(model, node)] += count
    return roles


def spread_case() -> tuple[list[scheduling.Node], scheduling.Workload]:
    """Three zones, the third's only node tainted against the pod; four replicas spread by zone
    (maxSkew 1, DoNotSchedule)."""
    def node(name, zone, taints=()):
        return scheduling.Node(name, "system", "m6i.large",
                               {"kubernetes.io/os": "linux", scheduling.HOSTNAME: name,
                                scheduling.ZONE: zone, "role": "system"},
                               tuple(taints), scheduling.Request(1930, 7000), max_pods=29)

    nodes = [node("a", "za"), node("b", "zb"),
             node("c", "zc", [scheduling.Taint("dedicated", "other", "NoSchedule")])]
    template = {"metadata": {"labels": {"app": "spread"}}, "spec": {
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "100m"}}}],
        "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": scheduling.ZONE, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "spread"}}}]}}
    workload = scheduling._pod_workload(
        {"kind": "Deployment", "metadata": {"name": "spread", "namespace": "spread"},
         "spec": {"replicas": 4, "template": template}}, "test")
    return nodes, workload


def small_node(name: str, cpu_m: int) -> scheduling.Node:
    return scheduling.Node(name, "system", "m6i.large",
                           {"kubernetes.io/os": "linux", scheduling.HOSTNAME: name, "probe": name},
                           (), scheduling.Request(cpu_m, 4096), max_pods=29)


def requests_case() -> tuple[list[scheduling.Node], list[scheduling.Workload]]:
    """One 1000m node per workload; two replicas each of: a pod with a 400m container, a 400m
    sidecar (an init container with restartPolicy Always) and a 500m init container after it
    (the scheduler counts 900m); a pod with a 100m container and pod-level requests of 600m
    (the scheduler counts 600m). One replica of each fits; the other stays Pending."""
    def container(name, cpu, **extra):
        return {"name": name, "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": cpu}}, **extra}

    sidecar = {"containers": [container("main", "400m")],
               "initContainers": [container("sidecar", "400m", restartPolicy="Always"),
                                  container("setup", "500m")],
               "nodeSelector": {"probe": "sidecar-node"}}
    pod_level = {"containers": [container("main", "100m")],
                 "resources": {"requests": {"cpu": "600m"}},
                 "nodeSelector": {"probe": "pod-level-node"}}
    workloads = [scheduling._pod_workload(
        {"kind": "Deployment", "metadata": {"name": name, "namespace": "requests"},
         "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": name}},
                                              "spec": spec}}}, "test")
        for name, spec in (("sidecar", sidecar), ("pod-level", pod_level))]
    return [small_node("sidecar-node", 1000), small_node("pod-level-node", 1000)], workloads


def anti_affinity_case() -> tuple[list[scheduling.Node], list[list[scheduling.Workload]]]:
    """Two nodes; created in three steps: ``y`` (app=y) pinned to node a; ``x``, two replicas
    whose required anti-affinity on the hostname selects app In (x, y); ``v`` (app=y) pinned to
    node b. The scheduler keeps x off a (y is there) and v off b (x's term selects it): one x
    runs, and neither the second x nor v."""
    def workload(name, labels, replicas, spec):
        template = {"metadata": {"labels": labels}, "spec": {
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], **spec}}
        return scheduling._pod_workload(
            {"kind": "Deployment", "metadata": {"name": name, "namespace": "anti"},
             "spec": {"replicas": replicas, "template": template}}, "test")

    term = {"labelSelector": {"matchExpressions": [
        {"key": "app", "operator": "In", "values": ["x", "y"]}]},
        "topologyKey": scheduling.HOSTNAME}
    steps = [[workload("y", {"app": "y"}, 1, {"nodeSelector": {"probe": "a"}})],
             [workload("x", {"app": "x"}, 2,
                       {"affinity": {"podAntiAffinity": {
                           "requiredDuringSchedulingIgnoredDuringExecution": [term]}}})],
             [workload("v", {"app": "y"}, 1, {"nodeSelector": {"probe": "b"}})]]
    return [small_node("a", 1000), small_node("b", 1000)], steps


def host_port_case() -> tuple[list[scheduling.Node], list[list[scheduling.Workload]]]:
    """One node; first a host-network pod with container port 9963 (its host port too), then
    a pod asking host port 9963/TCP (it cannot join) and one asking 9963/UDP (it can)."""
    def workload(name, spec, ports):
        template = {"metadata": {"labels": {"app": name}}, "spec": {
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                            "ports": ports}], **spec}}
        return scheduling._pod_workload(
            {"kind": "Deployment", "metadata": {"name": name, "namespace": "ports"},
             "spec": {"replicas": 1, "template": template}}, "test")

    steps = [[workload("host-network", {"hostNetwork": True}, [{"containerPort": 9963}])],
             [workload("tcp", {}, [{"containerPort": 80, "hostPort": 9963}]),
              workload("udp", {}, [{"containerPort": 80, "hostPort": 9963, "protocol": "UDP"}])]]
    return [small_node("a", 1000)], steps


def empty_term_case() -> tuple[list[scheduling.Node], list[scheduling.Workload]]:
    """Two 1000m nodes, ``a`` and ``b``; ``ored``: two 600m replicas whose required node
    affinity ORs a term selecting ``a`` with an empty term; ``empty``: one pod whose only term
    is empty. An empty term selects no node, so one ``ored`` replica runs on ``a`` and the
    other, and ``empty``, stay Pending."""
    def workload(name, replicas, cpu, terms):
        container = {"name": "c", "image": "registry.k8s.io/pause:3.10"}
        if cpu:
            container["resources"] = {"requests": {"cpu": cpu}}
        template = {"metadata": {"labels": {"app": name}}, "spec": {
            "containers": [container],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}}}}
        return scheduling._pod_workload(
            {"kind": "Deployment", "metadata": {"name": name, "namespace": "terms"},
             "spec": {"replicas": replicas, "template": template}}, "test")

    on_a = {"matchExpressions": [{"key": "probe", "operator": "In", "values": ["a"]}]}
    return ([small_node("a", 1000), small_node("b", 1000)],
            [workload("ored", 2, "600m", [on_a, {}]), workload("empty", 1, None, [{}])])
