"""Where every pod the lab causes can run — including while its nodes bootstrap — and whether
demo 2's capacity arithmetic holds.

A small, explicit model of the kube-scheduler and the DaemonSet controller, over what registers:

- **Nodes** from the registrations: the managed node groups (their labels and taints), the
  hybrid hosts (the labels and taints their NodeConfig registers them with, read back from their
  user data, plus the ``compute-type=hybrid`` label nodeadm adds), and one node of each instance
  type the Karpenter NodePool may launch (its template labels and taints). Allocatable CPU and
  memory come from ``components/capacity.py``.
- **Pods**: the lab's Deployments as registered; each Helm release's DaemonSets and
  Deployments as Helm's own engine renders them from the registered values, name and namespace
  (``offline/chart_render.py``: rendered here when helm-python-sdk and the chart sources are
  present, else the render it recorded for exactly those values; a release with neither is
  listed as not modelled); the EKS add-ons' pods from their documented defaults
  (``EKS_ADDONS``).
- **Rules**: nodeSelector, required node affinity (terms ORed, a term's expressions ANDed; In,
  NotIn — which a missing label passes — Exists, DoesNotExist, Gt, Lt; Karpenter reads the
  terms one at a time), taints against tolerations (an empty key with Exists tolerates
  everything; NoSchedule and NoExecute taints filter), the tolerations the DaemonSet controller
  and the DefaultTolerationSeconds admission plugin add by themselves, required pod
  anti-affinity (``offline/pod_conflicts.py``: by the terms' selectors and namespaces, both
  ways) and host ports, DoNotSchedule zone spread (over every zone the pod's selector and affinity admit,
  tainted or not), requests against allocatable (a
  pod's request is its containers' and sidecars' sum, or its largest init container with the
  sidecars started before it if more; or its pod-level requests) and the
  node's pod limit, then
  preferred node affinity and the least-allocated node to choose among the nodes that fit.
- **Bootstrap**: a node is NotReady — tainted ``node.kubernetes.io/not-ready`` — until its CNI
  runs, so the CNI, and what it waits for (Cilium's operator hands out the pod CIDRs), must
  tolerate that.

What it cannot show: the scheduler's other scores and its order under load, Karpenter's
instance choice and timing, real memory figures (approximate here), chart hook Jobs and CronJobs (they run on the
untainted system nodes), and charts' pods from sources other than the nearest readable one
(docs/charts.md).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Optional, Sequence

import yaml

from components.hybrid_user_data import INSTANCE_ID_MARK
from components.instance_types import architecture
from offline import chart_render, karpenter_affinity
from components.capacity import HYBRID_MAX_PODS, allocatable
from offline.pod_conflicts import PodFacts, host_port_taken, host_ports, refused_by_anti_affinity
from offline.pod_requests import Request, cpu_millis, memory_mib, pod_request  # noqa: F401
from offline.runner import ProgramRun, Registration, Secret

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
RELEASE = "kubernetes:helm.sh/v3:Release"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
INSTANCE = "aws:ec2/instance:Instance"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"
ADDON = "aws:eks/addon:Addon"

COMPUTE_TYPE = "eks.amazonaws.com/compute-type"
HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
#: The demo scales burst up to this many pods (docs/demo-guide.md#demo-2-bursting-and-scale-in:
#: 3 -> 15 -> 12 -> 10 -> 3).
BURST_PEAK = 15
BURST = "burst"

# --- nodes and pods -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str  # NoSchedule | PreferNoSchedule | NoExecute

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


#: What a node carries from registration until its CNI makes it Ready.
NOT_READY = (Taint("node.kubernetes.io/not-ready", "", "NoSchedule"),
             Taint("node.kubernetes.io/not-ready", "", "NoExecute"))
#: EC2 nodes (kubelet with an external cloud provider) until the cloud controller sees them.
UNINITIALIZED = Taint("node.cloudprovider.kubernetes.io/uninitialized", "true", "NoSchedule")
#: Nodes Karpenter launches, until it has registered them.
KARPENTER_UNREGISTERED = Taint("karpenter.sh/unregistered", "", "NoExecute")
#: What a node of an instance type whose size the model does not know offers: no limit (its
#: placement is still checked; its capacity is listed as not checked).
UNKNOWN_SIZE = Request(10 ** 9, 10 ** 9, 0)


@dataclass(frozen=True)
class Node:
    name: str
    #: system | gateway | hybrid | gpu | burst — what the node is for in this lab.
    role: str
    instance_type: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: Request
    #: True for a node type Karpenter may launch (one stands for as many as needed).
    elastic: bool = False
    #: The kubelet's pod limit (allocatable ``pods``): the VPC CNI's ENI arithmetic on EC2,
    #: the kubelet's default on hybrid hosts.
    max_pods: int = HYBRID_MAX_PODS

    @property
    def zone(self) -> str:
        return self.labels.get(ZONE, "")

    def bootstrap_taints(self) -> tuple[Taint, ...]:
        extra: tuple[Taint, ...] = () if self.role in ("hybrid", "gpu") else (UNINITIALIZED,)
        if self.elastic:
            extra += (KARPENTER_UNREGISTERED,)
        return (*self.taints, *NOT_READY, *extra)


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # DaemonSet | Deployment
    replicas: int
    request: Request
    node_selector: Mapping[str, str]
    affinity: Mapping[str, Any]
    tolerations: tuple[Mapping[str, Any], ...]
    host_network: bool
    #: Where it comes from: "lab", "chart cilium 1.18.8-1", "EKS add-on vpc-cni".
    source: str
    topology_spread: tuple[Mapping[str, Any], ...] = ()
    #: Where its pods are created ("" for the add-ons' pods, which EKS puts in kube-system).
    namespace: str = ""
    #: The pod template it was read from (None for the add-ons, modelled from their defaults):
    #: what tests/test_real_placement.py hands the real scheduler.
    template: Optional[Mapping[str, Any]] = field(default=None, compare=False, repr=False)

    @property
    def pod_facts(self) -> PodFacts:
        """Its pods' labels, namespace and affinity, for the pod anti-affinity rule."""
        template = self.template or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        return PodFacts(labels, self.namespace or "kube-system", self.affinity,
                        host_ports(template.get("spec") or {}))

    @property
    def spreads_by_host(self) -> bool:
        """A required pod anti-affinity term on the hostname: one replica per node (chart
        templates fill in the workload's own selector when the values give none)."""
        terms = ((self.affinity.get("podAntiAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        return any(t.get("topologyKey") == HOSTNAME for t in terms)


#: Tolerations the DaemonSet controller adds to every DaemonSet pod (kubernetes
#: ``pkg/controller/daemon/util/daemonset_util.go`` ``AddOrUpdateDaemonPodTolerations``): not
#: ``not-ready:NoSchedule``.
DAEMONSET_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
#: ... and to host-network DaemonSet pods.
HOST_NETWORK_DAEMONSET_TOLERATIONS = (
    {"key": "node.kubernetes.io/network-unavailable", "operator": "Exists", "effect": "NoSchedule"},
)
#: The DefaultTolerationSeconds admission plugin gives every pod these (for 300 s).
ADMISSION_TOLERATIONS = (
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
)


def effective_tolerations(w: Workload) -> list[Mapping[str, Any]]:
    extra: list = list(ADMISSION_TOLERATIONS)
    if w.kind == "DaemonSet":
        extra += DAEMONSET_TOLERATIONS
        if w.host_network:
            extra += HOST_NETWORK_DAEMONSET_TOLERATIONS
    return [*w.tolerations, *extra]


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Taint) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.effect:
            continue
        key, operator = t.get("key", ""), t.get("operator", "Equal")
        if operator == "Exists" and (not key or key == taint.key):
            return True
        if operator == "Equal" and key == taint.key and str(t.get("value", "")) == taint.value:
            return True
    return False


def _expression_holds(labels: Mapping[str, str], e: Mapping[str, Any]) -> bool:
    key, operator, values = e["key"], e["operator"], [str(v) for v in e.get("values") or []]
    if operator == "In":
        return key in labels and labels[key] in values
    if operator == "NotIn":
        return key not in labels or labels[key] not in values
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator in ("Gt", "Lt") and key in labels:
        a, b = int(labels[key]), int(values[0])
        return a > b if operator == "Gt" else a < b
    return False


def _terms(affinity: Mapping[str, Any]) -> Optional[list]:
    required = ((affinity.get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    return required.get("nodeSelectorTerms")


def _term_holds(node: Node, term: Mapping[str, Any]) -> bool:
    """Whether one node selector term selects ``node``: its label and ``metadata.name`` field
    expressions all hold; an empty term selects none (k8s.io/component-helpers v0.35.4
    ``scheduling/corev1/nodeaffinity``: ``isEmptyNodeSelectorTerm``)."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    return (all(_expression_holds(node.labels, e) for e in expressions)
            and all(_expression_holds({"metadata.name": node.name}, f) for f in fields))


def _selector_problem(w: Workload, node: Node) -> Optional[str]:
    """Why ``w``'s nodeSelector or required node affinity refuses ``node``, or None. The terms
    are ORed (``LazyErrorNodeSelector.Match``, same package as ``_term_holds``)."""
    for key, value in w.node_selector.items():
        if node.labels.get(key) != str(value):
            return f"nodeSelector {key}={value}"
    terms = _terms(w.affinity)
    if terms and not any(_term_holds(node, term) for term in terms):
        return "required node affinity"
    return None


def _taint_problem(w: Workload, node: Node, bootstrapping: bool = False) -> Optional[str]:
    tolerations = effective_tolerations(w)
    for taint in (node.bootstrap_taints() if bootstrapping else node.taints):
        if taint.effect in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return f"taint {taint}"
    return None


def placement_problem(w: Workload, node: Node, *, bootstrapping: bool = False) -> Optional[str]:
    """Why ``w`` cannot run on ``node`` (labels, affinity, taints), or None if it can."""
    return _selector_problem(w, node) or _taint_problem(w, node, bootstrapping)


def karpenter_problem(w: Workload, node: Node) -> Optional[str]:
    """Why Karpenter launches no node like the elastic ``node`` for ``w``'s pending pods, or
    None: the scheduler's own rules must admit it, and one of the requirement sets Karpenter
    tries in turn (offline/karpenter_affinity.py) must hold on its labels."""
    if (problem := placement_problem(w, node)) is not None:
        return problem
    steps = karpenter_affinity.requirement_steps(w.affinity)
    if steps is None:
        return "Karpenter refuses a required node selector term with matchFields"
    if not any(all(_expression_holds(node.labels, e) for e in step) for step in steps):
        return ("Karpenter drops required node selector terms in order before the preferences, "
                "so it never tries this pool's term with the preference gone")
    return None


def _preference(w: Workload, node: Node) -> int:
    """The weights of the preferred terms that select ``node`` (``NewPreferredSchedulingTerms``)."""
    preferred = ((w.affinity.get("nodeAffinity") or {})
                 .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    return sum(p["weight"] for p in preferred if _term_holds(node, p["preference"]))


# --- the lab's nodes ----------------------------------------------------------------------------

def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Secret) else value


def _subnet_zones(run: ProgramRun) -> dict[str, str]:
    return {r.id: r.inputs.get("availabilityZone", "")
            for r in run.of_type("aws:ec2/subnet:Subnet")}


def _arch(instance_type: str) -> str:
    return "arm64" if architecture(instance_type) == "arm64" else "amd64"


def _ec2_labels(name: str, instance_type: str, zone: str) -> dict[str, str]:
    return {"kubernetes.io/os": "linux", "kubernetes.io/arch": _arch(instance_type),
            HOSTNAME: name, "node.kubernetes.io/instance-type": instance_type, ZONE: zone}


_EKS_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute",
                "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def _allocatable(instance_type: str, max_pods: int) -> Request:
    try:
        cap = allocatable(instance_type, max_pods)
    except ValueError:
        return UNKNOWN_SIZE
    return Request(cap.cpu_m, cap.memory_mib, cap.gpus)


def _node_group_nodes(run: ProgramRun, reg: Registration) -> list[Node]:
    inputs = reg.inputs
    [instance_type] = inputs["instanceTypes"]
    labels = dict(inputs.get("labels") or {})
    taints = tuple(Taint(t["key"], str(t.get("value", "")), _EKS_EFFECTS[t["effect"]])
                   for t in inputs.get("taints") or [])
    role = "gateway" if any(t.key == "hybrid-gateway-node" for t in taints) else "system"
    zones = _subnet_zones(run)
    subnets = inputs["subnetIds"]
    # VPC CNI: max pods from the ENI limits; the m/c/r large and xlarge sizes allow 29 and 58.
    max_pods = 29 if instance_type.endswith(".large") else 58
    size = _allocatable(instance_type, max_pods)
    nodes = []
    for index in range(int(inputs["scalingConfig"]["desiredSize"])):
        name = f"{reg.name}-{index}"
        # Managed node groups spread their nodes over the subnets' zones.
        zone = zones.get(subnets[index % len(subnets)], "")
        nodes.append(Node(
            name=name, role=role, instance_type=instance_type,
            labels={**_ec2_labels(name, instance_type, zone), **labels,
                    "eks.amazonaws.com/nodegroup": reg.name,
                    "eks.amazonaws.com/capacityType": "ON_DEMAND"},
            taints=taints, allocatable=size, max_pods=max_pods))
    return nodes


def node_config_of(user_data: str) -> Optional[dict]:
    """The NodeConfig a hybrid host's join script writes (None for other user data)."""
    match = re.search(r"<<'NODECONFIG'\n(.*?)\nNODECONFIG\n", user_data, re.S)
    return yaml.safe_load(match.group(1)) if match else None


def _flag(flags: Sequence[str], name: str) -> list[str]:
    for flag in flags:
        if flag.startswith(f"--{name}="):
            return [item for item in flag.split("=", 1)[1].split(",") if item]
    return []


def _hybrid_node(reg: Registration) -> Optional[Node]:
    config = node_config_of(str(_plain(reg.inputs.get("userData", ""))))
    if config is None:
        return None
    flags = ((config["spec"].get("kubelet") or {}).get("flags") or [])
    # The join script writes the instance's own id where the mark stands, at boot
    # (components/templates/hybrid-host.sh); the instance's id is its registration's.
    labels = {key: value.replace(INSTANCE_ID_MARK, str(reg.id)) for key, value in
              (item.split("=", 1) for item in _flag(flags, "node-labels"))}
    taints = []
    for item in _flag(flags, "register-with-taints"):
        key_value, effect = item.rsplit(":", 1)
        key, _, value = key_value.partition("=")
        taints.append(Taint(key, value, effect))
    instance_type = reg.inputs["instanceType"]
    role = "gpu" if labels.get("nvidia.com/gpu.present") == "true" else "hybrid"
    return Node(
        name=reg.name, role=role, instance_type=instance_type,
        labels={"kubernetes.io/os": "linux", "kubernetes.io/arch": _arch(instance_type),
                HOSTNAME: reg.name, **labels, COMPUTE_TYPE: "hybrid"},
        taints=tuple(taints), allocatable=_allocatable(instance_type, HYBRID_MAX_PODS))


def _burst_nodes(reg: Registration) -> list[Node]:
    spec = reg.inputs["spec"]
    template = spec["template"]
    pool = reg.inputs["metadata"]["name"]
    types = next(r["values"] for r in template["spec"]["requirements"]
                 if r["key"] == "node.kubernetes.io/instance-type")
    taints = tuple(Taint(t["key"], str(t.get("value", "")), t["effect"])
                   for t in template["spec"].get("taints") or [])
    nodes = []
    for instance_type in types:
        name = f"karpenter:{pool}:{instance_type}"
        nodes.append(Node(
            name=name, role="burst", instance_type=instance_type,
            labels={**_ec2_labels(name, instance_type, ""),
                    **(template.get("metadata") or {}).get("labels", {}),
                    "karpenter.sh/nodepool": pool, "karpenter.sh/capacity-type": "on-demand"},
            taints=taints, allocatable=_allocatable(instance_type, max_pods=58), elastic=True,
            max_pods=58))
    return nodes


def lab_nodes(run: ProgramRun) -> list[Node]:
    nodes: list[Node] = []
    for reg in run.of_type(NODE_GROUP):
        nodes += _node_group_nodes(run, reg)
    for reg in run.of_type(INSTANCE):
        node = _hybrid_node(reg)
        if node is not None:
            nodes.append(node)
    for reg in run.of_type(NODE_POOL):
        nodes += _burst_nodes(reg)
    return nodes


# --- the pods -----------------------------------------------------------------------------------

_ANY_LINUX = {"matchExpressions": [
    {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}]}


def _excluding(*compute_types: str) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [*_ANY_LINUX["matchExpressions"],
                              {"key": COMPUTE_TYPE, "operator": "NotIn",
                               "values": list(compute_types)}]}]}}}


#: The pods of the EKS managed add-ons, as EKS installs them (docs/capacity.md#allocatable; the add-ons'
#: public charts: amazon-vpc-cni-k8s, eks-pod-identity-agent; the EKS CoreDNS and kube-proxy
#: manifests). Keyed by add-on name.
EKS_ADDONS: dict[str, Workload] = {
    "vpc-cni": Workload(
        "aws-node", "DaemonSet", 1, Request(25, 0), {}, _excluding("fargate", "hybrid", "auto"),
        ({"operator": "Exists"},), True, "EKS add-on vpc-cni (cloud nodes only: mixed mode)"),
    "kube-proxy": Workload(
        "kube-proxy", "DaemonSet", 1, Request(100, 0), {}, _excluding("fargate", "auto"),
        ({"operator": "Exists"},), True, "EKS add-on kube-proxy"),
    "eks-pod-identity-agent": Workload(
        "eks-pod-identity-agent", "DaemonSet", 1, Request(0, 0), {},
        _excluding("fargate", "hybrid"), ({"operator": "Exists"},), True,
        "EKS add-on eks-pod-identity-agent (excludes hybrid nodes)"),
    "coredns": Workload(
        "coredns", "Deployment", 2, Request(100, 70), {},
        {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [_ANY_LINUX]}}},
        ({"key": "CriticalAddonsOnly", "operator": "Exists"},
         {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}),
        False, "EKS add-on coredns"),
}


def _pod_workload(obj: Mapping[str, Any], source: str, namespace: str = "") -> Workload:
    """A workload from a rendered (or registered) DaemonSet or Deployment: what its pod template
    says, and the replicas Kubernetes defaults to (one) when the spec gives none."""
    spec = obj["spec"]
    pod = spec["template"]["spec"]
    kind = obj["kind"]
    return Workload(
        name=obj["metadata"]["name"], kind="DaemonSet" if kind == "DaemonSet" else "Deployment",
        replicas=1 if kind == "DaemonSet" else int(spec.get("replicas") or 1),
        request=pod_request(pod.get("containers") or [], pod.get("initContainers") or [],
                            pod.get("resources")),
        node_selector=pod.get("nodeSelector") or {}, affinity=pod.get("affinity") or {},
        tolerations=tuple(pod.get("tolerations") or ()), host_network=bool(pod.get("hostNetwork")),
        source=source, topology_spread=tuple(pod.get("topologySpreadConstraints") or ()),
        namespace=obj["metadata"].get("namespace") or namespace, template=spec["template"])


def release_renders(run: ProgramRun) -> list[chart_render.Rendered]:
    """Each registered release's workloads, rendered by Helm here or recorded by it
    (``offline/chart_render.py``)."""
    return [chart_render.release_workloads(release)
            for release in sorted(chart_render.registered_releases(run), key=lambda r: r.chart)]


def _release_workloads(rendered: chart_render.Rendered) -> list[Workload]:
    release = rendered.release
    source = f"chart {release.chart.rsplit('/', 1)[-1]} {release.version}"
    return [_pod_workload(obj, source, release.namespace) for obj in rendered.workloads]


def _deployment_workload(reg: Registration, replicas: Optional[int] = None) -> Workload:
    workload = _pod_workload({"kind": "Deployment", **reg.inputs}, "lab")
    return workload if replicas is None else replace(workload, replicas=replicas)


def lab_workloads(run: ProgramRun,
                  renders: Optional[Sequence[chart_render.Rendered]] = None) -> list[Workload]:
    """Every pod template the lab causes, in the order they would be scheduled (add-ons, then the
    charts, then the demos; ``burst`` at its demo peak). A release whose render is not available
    (``Rendered.problem``) contributes no pods: ``evaluate`` says so."""
    found: list[Workload] = []
    addons = {r.inputs["addonName"] for r in run.of_type(ADDON)}
    found += [w for name, w in EKS_ADDONS.items() if name in addons]
    for rendered in (release_renders(run) if renders is None else renders):
        found += _release_workloads(rendered)
    ours = []
    for reg in run.of_type(DEPLOYMENT):
        name = reg.inputs["metadata"]["name"]
        ours.append(_deployment_workload(reg, BURST_PEAK if name == BURST else None))
    # Registration order is not creation order: a fixed order keeps the plan repeatable. Demo 2
    # scales burst up once everything else runs, so it comes last.
    found += sorted(ours, key=lambda w: (w.name == BURST, w.name))
    return found


# --- scheduling ---------------------------------------------------------------------------------

@dataclass
class Placement:
    workload: Workload
    #: node name -> pods there (elastic Karpenter nodes: under the pool's name, "karpenter").
    nodes: Counter = field(default_factory=Counter)
    karpenter: int = 0
    pending: int = 0
    #: Why it could not run where it did not (node role -> reason), for unplaced pods.
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.nodes.values()) + self.karpenter


@dataclass
class Schedule:
    nodes: list[Node]
    placements: list[Placement]
    used: dict[str, Request]

    def of(self, name: str) -> Placement:
        [found] = [p for p in self.placements if p.workload.name == name]
        return found

    def roles_of(self, name: str) -> set[str]:
        by_name = {n.name: n for n in self.nodes}
        placement = self.of(name)
        roles = {by_name[n].role for n, count in placement.nodes.items() if count}
        return roles | ({"burst"} if placement.karpenter else set())


def _why_not(w: Workload, nodes: Sequence[Node]) -> dict[str, str]:
    reasons = {}
    for node in nodes:
        problem = karpenter_problem(w, node) if node.elastic else placement_problem(w, node)
        reasons.setdefault(node.role, problem or "no room")
    return reasons


def schedule(nodes: Sequence[Node], workloads: Sequence[Workload]) -> Schedule:
    """Places every workload's pods: DaemonSets on every node they admit (Karpenter's node types
    stand for the nodes it launches), then each Deployment's replicas one at a time, on the
    fixed node that admits and fits it with the highest preference and the most free CPU, or on
    a node Karpenter launches when no fixed node fits and the NodePool admits the pod."""
    fixed = [n for n in nodes if not n.elastic]
    elastic = [n for n in nodes if n.elastic]
    used: dict[str, Request] = {n.name: Request() for n in nodes}
    pods: Counter = Counter()
    #: Each workload's pods on each fixed node, once: what pod anti-affinity reads.
    placed: dict[tuple[int, str], tuple[PodFacts, Mapping[str, str]]] = {}
    placements = []
    for w in sorted(workloads, key=lambda w: w.kind != "DaemonSet"):
        placement = Placement(w)
        placements.append(placement)
        if w.kind == "DaemonSet":
            for node in nodes:
                if placement_problem(w, node) is None and pods[node.name] < node.max_pods:
                    placement.nodes[node.name] += 1
                    used[node.name] = used[node.name] + w.request
                    pods[node.name] += 1
                    placed[id(w), node.name] = (w.pod_facts, node.labels)
            continue
        for _ in range(w.replicas):
            candidates = []
            for node in fixed:
                if placement_problem(w, node) is not None:
                    continue
                if not w.request.fits(node.allocatable - used[node.name]):
                    continue
                if pods[node.name] >= node.max_pods:
                    continue
                if refused_by_anti_affinity(w.pod_facts, node.labels, placed.values()):
                    continue
                if host_port_taken(w.pod_facts, (facts for (_, on), (facts, _) in placed.items()
                                                 if on == node.name)):
                    continue
                if not _spread_allows(w, node, placement, fixed):
                    continue
                free = node.allocatable - used[node.name]
                candidates.append((-_preference(w, node),
                                   -free.cpu_m / max(node.allocatable.cpu_m, 1), node.name, node))
            if candidates:
                node = min(candidates)[-1]
                placement.nodes[node.name] += 1
                used[node.name] = used[node.name] + w.request
                pods[node.name] += 1
                placed[id(w), node.name] = (w.pod_facts, node.labels)
                continue
            if any(karpenter_problem(w, n) is None and
                   w.request.fits(n.allocatable - used[n.name]) for n in elastic):
                placement.karpenter += 1
                continue
            placement.pending += 1
        if placement.pending:
            placement.reasons = _why_not(w, nodes)
    return Schedule(list(nodes), placements, used)


def _spread_domain(w: Workload, node: Node, constraint: Mapping[str, Any]) -> bool:
    """Whether ``node`` counts as a domain of a spread constraint: by default, when the pod's
    nodeSelector and required node affinity admit it, whatever its taints — the constraint's
    ``nodeAffinityPolicy`` defaults to Honor, its ``nodeTaintsPolicy`` to Ignore (kubernetes
    ``pkg/scheduler/framework/plugins/podtopologyspread/common.go``,
    ``topologySpreadConstraint.matchNodeInclusionPolicies``). A zone whose only nodes the pod
    does not tolerate is still a domain, with no pods, and holds the others' skew down."""
    if constraint.get("nodeAffinityPolicy", "Honor") == "Honor" and \
            _selector_problem(w, node) is not None:
        return False
    if constraint.get("nodeTaintsPolicy", "Ignore") == "Honor" and \
            _taint_problem(w, node) is not None:
        return False
    return True


def _spread_allows(w: Workload, node: Node, placement: Placement, fixed: Sequence[Node]) -> bool:
    """DoNotSchedule zone spread: after placing on ``node``, no zone may hold more than
    ``maxSkew`` pods over the emptiest zone among the constraint's domains
    (``_spread_domain``)."""
    by_name = {n.name: n for n in fixed}
    for constraint in w.topology_spread:
        if constraint.get("whenUnsatisfiable") != "DoNotSchedule":
            continue
        key = constraint["topologyKey"]
        domains = {n.labels.get(key) for n in fixed
                   if _spread_domain(w, n, constraint) and n.labels.get(key)}
        counts = Counter({d: 0 for d in domains})
        for name, count in placement.nodes.items():
            counts[by_name[name].labels.get(key)] += count
        counts[node.labels.get(key)] += 1
        if max(counts.values()) - min(counts.values()) > int(constraint["maxSkew"]):
            return False
    return True


# --- checks -------------------------------------------------------------------------------------

#: What each node role needs running before it is Ready, and so must start on a NotReady node:
#: the CNI, and for Cilium's cluster-pool IPAM the operator that hands out the pod CIDRs.
BOOTSTRAP_NEEDS = {
    "hybrid": ("cilium", "cilium-operator"),
    "gpu": ("cilium",),
    "system": ("aws-node",),
    "gateway": ("aws-node",),
    "burst": ("aws-node",),
}


def bootstrap_problems(nodes: Sequence[Node], workloads: Sequence[Workload],
                       unmodelled: Sequence[str] = ()) -> list[str]:
    """Every node can become Ready: what it needs first can start on it while it is NotReady.
    With releases ``unmodelled``, a missing need is not a finding (``unchecked_bootstrap``)."""
    by_name = {w.name: w for w in workloads}
    problems = []
    for node in nodes:
        for needed in BOOTSTRAP_NEEDS[node.role]:
            w = by_name.get(needed)
            if w is None:
                if not unmodelled:
                    problems.append(f"{node.name}: nothing provides {needed}, so it never "
                                    "becomes Ready")
                continue
            problem = placement_problem(w, node, bootstrapping=True)
            if problem:
                problems.append(f"{node.name} ({node.role}) never becomes Ready: {needed} "
                                f"({w.source}) cannot start on it while it bootstraps: {problem}")
    return problems


def unschedulable(result: Schedule) -> list[str]:
    return [f"{p.workload.name} ({p.workload.source}): {p.pending} of "
            f"{p.workload.replicas} pods cannot be scheduled; "
            + "; ".join(f"{role}: {why}" for role, why in sorted(p.reasons.items()))
            for p in result.placements if p.pending]


def burst_pool_intruders(nodes: Sequence[Node], workloads: Sequence[Workload]) -> list[str]:
    """Nothing but ``burst`` (and the per-node DaemonSets) can land on a Karpenter burst node:
    any other pod there keeps the node from ever becoming empty."""
    burst_nodes = [n for n in nodes if n.role == "burst"]
    return sorted({f"{w.name} ({w.source}) can land on the burst node {n.name}"
                   for w in workloads if w.kind == "Deployment" and w.name != BURST
                   for n in burst_nodes if placement_problem(w, n) is None})


@dataclass(frozen=True)
class BurstCapacity:
    request_m: int
    #: hybrid node -> allocatable CPU and what its DaemonSets take.
    nodes: dict[str, tuple[int, int]]
    #: Other pods that may share those nodes: (workload, replicas, CPU each).
    co_tenants: list[tuple[str, int, int]]
    #: Burst pods that fit on the hybrid nodes, fewest and most over every placement of the
    #: co-tenants.
    fewest: int
    most: int


def burst_capacity(result: Schedule) -> Optional[BurstCapacity]:
    """How many ``burst`` pods fit on the hybrid nodes, for every way the lab's other hybrid
    pods could be spread over them."""
    by_name = {w.workload.name: w.workload for w in result.placements}
    burst = by_name.get(BURST)
    if burst is None:
        return None
    hosts = [n for n in result.nodes if not n.elastic and n.role in ("hybrid", "gpu")
             and placement_problem(burst, n) is None]
    daemons = {n.name: sum(p.workload.request.cpu_m for p in result.placements
                           if p.workload.kind == "DaemonSet" and p.nodes[n.name]) for n in hosts}
    others = [p.workload for p in result.placements
              if p.workload.kind == "Deployment" and p.workload.name != BURST
              and any(placement_problem(p.workload, n) is None for n in hosts)]
    slots = [(w, i) for w in others for i in range(w.replicas)]
    fits = []
    for choice in itertools.product(range(len(hosts)), repeat=len(slots)):
        load = Counter()
        taken = defaultdict(set)
        valid = True
        for (w, _), index in zip(slots, choice):
            node = hosts[index]
            if placement_problem(w, node) is not None or (
                    w.spreads_by_host and node.name in taken[w.name]):
                valid = False
                break
            taken[w.name].add(node.name)
            load[node.name] += w.request.cpu_m
        if not valid:
            continue
        fits.append(sum(max(0, n.allocatable.cpu_m - daemons[n.name] - load[n.name])
                        // max(burst.request.cpu_m, 1) for n in hosts))
    if not fits:
        fits = [0]
    return BurstCapacity(
        request_m=burst.request.cpu_m,
        nodes={n.name: (n.allocatable.cpu_m, daemons[n.name]) for n in hosts},
        co_tenants=[(w.name, w.replicas, w.request.cpu_m) for w in others],
        fewest=min(fits), most=max(fits))


@dataclass
class SchedulingModel:
    nodes: list[Node]
    workloads: list[Workload]
    result: Schedule
    bootstrap: list[str]
    unschedulable: list[str]
    intruders: list[str]
    burst: Optional[BurstCapacity]
    #: How each release's pods were read (offline/chart_render.py).
    renders: list[chart_render.Rendered] = field(default_factory=list)

    @property
    def unmodelled(self) -> list[str]:
        """Releases whose pods are not in the model, each with why and how to model them."""
        return [r.problem for r in self.renders if r.problem]

    @property
    def unchecked(self) -> list[str]:
        """Instance types whose size the model does not know (their capacity is not checked),
        and the releases whose pods are not modelled (what they place and ask is not checked)."""
        sizes = sorted({f"capacity of {n.instance_type} nodes ({n.role}): size unknown to "
                        "components/capacity.py" for n in self.nodes if n.allocatable == UNKNOWN_SIZE})
        return sizes + self.unmodelled

    @property
    def problems(self) -> list[str]:
        refused = [r.refused for r in self.renders if r.refused]
        return [*refused, *self.bootstrap, *self.unschedulable, *self.intruders]


def evaluate(run: ProgramRun,
             renders: Optional[Sequence[chart_render.Rendered]] = None) -> SchedulingModel:
    """The model over ``run``; ``renders`` (default: ``release_renders(run)``) are the charts'
    workloads."""
    renders = list(release_renders(run) if renders is None else renders)
    nodes = lab_nodes(run)
    workloads = lab_workloads(run, renders)
    result = schedule(nodes, workloads)
    unmodelled = [r.problem for r in renders if r.problem]
    return SchedulingModel(nodes, workloads, result,
                           bootstrap_problems(nodes, workloads, unmodelled),
                           unschedulable(result), burst_pool_intruders(nodes, workloads),
                           burst_capacity(result), renders)


def _origins(renders: Sequence[chart_render.Rendered]) -> str:
    counts = Counter(r.origin for r in renders)
    parts = []
    if counts["helm"]:
        parts.append(f"{counts['helm']} rendered by Helm here")
    if counts["recorded"]:
        parts.append(f"{counts['recorded']} from Helm's recorded render "
                     f"(offline/{chart_render.RECORDED.name}, same values)")
    if counts[""]:
        parts.append(f"{counts['']} NOT MODELLED")
    return ", ".join(parts) or "none"
