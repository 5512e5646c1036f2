"""Demo 2 as numbers: scale the ``burst`` Deployment 3 -> 15 -> 12 -> 10 -> 3 under scenarios
A, B and C (seed 002 §5) and measure which pods each scale-in removes, beside what
``rehearse.predict`` forecast and what the scenario's rule says (REFERENCE §6).

For each scenario asked (``--scenarios A B C``; default the stack's current one) the run
switches the stack's ``burstScenario`` through the Pulumi Automation API and runs ``pulumi up``
(only when it differs), restarts the Deployment at 3 replicas (annotations outlive a scenario),
waits for the cloud-burst NodeClaims of a previous run to go, and proves the scenario is in
place — B and C: Kyverno's admission and background controllers may ``get nodes``
(SubjectAccessReview), Kyverno sees pod bindings, the policy is Ready and the pods bound to
hybrid nodes carry ``pod-deletion-cost: "1"`` within seconds; C: the running Karpenter has
``PodDeletionCostManagement`` on, is 1.15.0 or later and may patch pods, and the NodePool's
budget is 100%; A: nobody writes costs. A scenario that is not in place is refused, not
measured. Then the seed's sequence: the time from the scale to 15 until the first NodeClaim
exists and until all 15 pods are Ready (cluster clocks, beside the seed's 1-2 s and 37-38 s);
before each scale-in a snapshot and the forecast; after it the pods removed (hybrid or cloud,
node, cost), Karpenter's evictions (``DisruptionTarget``) told apart from scale-in victims. After
the last scale-in the consolidation watch (``--watch S``, default 180, 0 skips it) asks seed 002
§7's open question: does Karpenter disrupt a cloud node whose burst pods would fit in the hybrid
nodes' free room (it should not, REFERENCE §4)? It records every NodeClaim and node that goes,
every burst pod that goes or appears and where, and Karpenter's events (``DisruptionTerminating``,
``DisruptionBlocked``, ``Unconsolidatable``...), and answers per scenario with that evidence. The
stack's original scenario is put back at the end, also on an interrupt or a failure.

``verify burst`` is the preconditions alone, quick enough for the minutes before the talk: the
stack's scenario in place (without restarting anything), the NodePool's limits and budget, and
the capacity arithmetic (8 burst pods fit on the two hybrid nodes, a 9th does not).

The collector records what it saw (events.jsonl); the analysis is pure over those events, so
``python -m rehearse report <folder>`` gives the same report, tables and chart again.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from rehearse import clock_window
from rehearse.arguments import seconds
from rehearse.errors import RunError
from rehearse.stack import open_stack
from rehearse.switch import ConfigSwitch, RestoreBlocked, Scope, require_confirmation, require_stack
from rehearse.record import RUN_STARTED, every, first, iso, parse_time
from rehearse.report import FAIL, PASS, SKIP, Check, Measurement, Report

TITLE = "demo 2: run the scale sequence under scenarios A/B/C and measure which pods go"
VERIFY_TITLE = "demo 2: check the scenario is in place, the NodePool and the capacity arithmetic"

# --- what the lab deploys (stacks/layers/demo.py, components/kyverno.py, components/karpenter.py,
# stacks/layers/karpenter.py); the stack's outputs name most of it -----------------------------

COST = "controller.kubernetes.io/pod-deletion-cost"
HYBRID_LABEL, HYBRID_VALUE = "eks.amazonaws.com/compute-type", "hybrid"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
RESTARTED_AT = "kubectl.kubernetes.io/restartedAt"
REVISION = "deployment.kubernetes.io/revision"
TEMPLATE_HASH = "pod-template-hash"
POLICY = "hybrid-pod-deletion-cost"
KYVERNO_NS = "kyverno"
#: Kyverno's controllers (the chart's Deployments; their service accounts are read from them).
KYVERNO_CONTROLLERS = (("admission", "kyverno-admission-controller"),
                       ("background", "kyverno-background-controller"))
KYVERNO_CONFIGMAP = "kyverno"
#: The default filters drop bindings; the lab re-enables them (REFERENCE §5).
BINDING_FILTERS = ("[Pod/binding,*,*]", "[Binding,*,*]")
KARPENTER_NS, KARPENTER_DEPLOYMENT, KARPENTER_SA = "kube-system", "karpenter", "karpenter"
KARPENTER_POD_LABEL = ("app.kubernetes.io/name", "karpenter")
GATE = "PodDeletionCostManagement"
#: The first Karpenter with the gate; older ones ignore the Helm value silently.
GATE_SINCE = (1, 15, 0)
SCENARIO_KEY = "eks-hybrid-lab:burstScenario"
SCENARIOS = ("A", "B", "C")
SCENARIO_WORDS = {"A": "no policy, Karpenter's gate off",
                  "B": "Kyverno writes pod-deletion-cost \"1\" on hybrid pods",
                  "C": "B plus Karpenter's podDeletionCostManagement"}
DEFAULT_SEQUENCE = (3, 15, 12, 10, 3)
#: Seed 002 §5: four burst pods per hybrid node on two hybrid nodes (stacks/capacity.py).
HYBRID_NODES, PODS_PER_HYBRID_NODE = 2, 4
SEED_NODECLAIM = "seed: 1–2 s"
SEED_READY = "seed: 37–38 s"
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"

DEFAULTS = {"interval": 0.5, "timeout": 300.0, "within": 15.0, "rank_timeout": 150.0, "pause": 5.0,
            "watch": 180.0}
#: The consolidation watch polls at most this often (it lists four kinds each time).
WATCH_EVERY = 5.0
#: Karpenter's disruption events (kubernetes-sigs/karpenter pkg/controllers/disruption/events:
#: DisruptionTerminating's message is "Disrupting Node: <Reason>" / "Disrupting NodeClaim:
#: <Reason>", the reason being Empty, Underutilized, Drifted...).
KARPENTER_REASONS = ("DisruptionBlocked", "DisruptionLaunching", "DisruptionTerminating",
                     "DisruptionWaitingReadiness", "Unconsolidatable", "ConsolidationCandidate",
                     "ConsolidationRejected")

# --- event kinds ------------------------------------------------------------------------------

SETTINGS = "burst.settings"
ORIGINAL = "scenario.original"
SWITCHED = "scenario.switched"
RESTORED = "scenario.restored"
RESTARTED = "deployment.restarted"
ROLLOUT = "deployment.rollout"
SETTLED_NODECLAIMS = "nodeclaims.settled"
PRECONDITIONS = "burst.preconditions"
REFUSED = "scenario.refused"
SCALED = "scale.requested"
SCALEUP_POLL = "scaleup.poll"
SCALEUP = "scaleup.done"
COSTS_SETTLED = "costs.settled"
SNAPSHOT = "scalein.snapshot"
FORECAST = "scalein.forecast"
STEP_POLL = "scalein.poll"
STEP = "scalein.done"
ABORTED = "scenario.aborted"
DONE = "scenario.done"
REPLICAS_BACK = "deployment.replicas_restored"
WATCH_STARTED = "consolidation.watch_started"
WATCH_DONE = "consolidation.watch_done"
WATCH_SKIPPED = "consolidation.watch_skipped"

# --- check names (tests and report.json readers key on them) ---------------------------------


def check_name(scenario: str, what: str) -> str:
    return f"scenario {scenario}: {what}"


C_IN_PLACE = "in place"
C_NO_POLICY = "no deletion-cost policy"
C_GATE_OFF = "Karpenter's podDeletionCostManagement off"
C_GATE_ON = "Karpenter's podDeletionCostManagement on in the running controller"
C_GATE_VERSION = "the running Karpenter knows the gate (1.15.0 or later)"
C_KARPENTER_PATCH = "Karpenter may patch pods"
C_KYVERNO_NODES = "Kyverno's {role} controller may get nodes"
C_KYVERNO_UPDATE = "Kyverno's background controller may update pods"
C_FILTERS = "Kyverno sees pod bindings (resource filters)"
C_POLICY = f"ClusterPolicy {POLICY} Ready"
C_HYBRID_COST = "pods on hybrid nodes carry pod-deletion-cost \"1\""
C_FOREIGN_COST = "no deletion cost the scenario does not write"
C_BUDGET = "the NodePool lets Karpenter rank every node (budget 100%)"
C_RESTART = "the restart replaced every pod"
C_SWITCH = "switched with pulumi up"
C_SCALEUP = "15 pods Ready: 8 on hybrid nodes, 7 on cloud-burst"
C_COSTS_SETTLED = "costs in place before the first scale-in"
C_FORECAST = "each scale-in removed the forecast pods"
C_RULE = "the outcome follows the scenario's rule"
C_COMPLETED = "the sequence ran to the end"
C_CONSOLIDATION = "consolidation does not move cloud pods onto the hybrid nodes' free room"
CHECK_NODEPOOL = "NodePool {pool}: CPU limit and disruption budget"
CHECK_CAPACITY = "capacity: 8 burst pods fit on the hybrid nodes, a 9th does not"
CHECK_RESTORED = "the stack's burstScenario put back"

M_NODECLAIM = "scale to 15 → first NodeClaim"
M_READY = "scale to 15 → all 15 Ready"


# --- arguments --------------------------------------------------------------------------------

def _scenario(text: str) -> str:
    if text.upper() not in SCENARIOS:
        raise argparse.ArgumentTypeError(f"{text!r}: a scenario is A, B or C")
    return text.upper()


def _common_arguments(group: Any) -> None:
    group.add_argument("--interval", type=seconds(0.1), default=DEFAULTS["interval"], metavar="S",
                       help="poll the cluster every S seconds (default 0.5)")
    group.add_argument("--within", type=seconds(0.0), default=DEFAULTS["within"], metavar="S",
                       help="pods bound to hybrid nodes must carry Kyverno's cost within S "
                            "seconds (default 15; in A the run watches S seconds that nobody "
                            "writes one)")


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    _common_arguments(parser.add_argument_group("demo 2"))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("demo 2")
    group.add_argument("--scenarios", nargs="+", type=_scenario, metavar="X",
                       help="run these scenarios in this order, switching the stack's "
                            "burstScenario with `pulumi up` (default: the stack's current one, "
                            "no switch); the original is put back at the end, and the pods' "
                            "leftover deletion costs removed. Each switch and the restore print "
                            "`pulumi preview`'s plan first, refuse one that changes anything "
                            "but the scenario's resources, and ask before applying; needs --stack")
    group.add_argument("--yes", action="store_true",
                       help="apply each previewed switch without asking (a run whose stdin is "
                            "not a terminal needs it)")
    _common_arguments(group)
    group.add_argument("--timeout", type=seconds(1.0), default=DEFAULTS["timeout"], metavar="S",
                       help="give up a wait (rollout, NodeClaims gone, 15 Ready, a scale-in) "
                            "after S seconds and record it (default 300)")
    group.add_argument("--rank-timeout", type=seconds(0.0), default=DEFAULTS["rank_timeout"],
                       metavar="S",
                       help="scenario C: wait up to S seconds for Karpenter to rank the cloud "
                            "pods before the first scale-in (it re-ranks at most once a minute; "
                            "default 150)")
    group.add_argument("--pause", type=seconds(0.0), default=DEFAULTS["pause"], metavar="S",
                       help="wait S seconds between steps, as a presenter would (default 5)")
    group.add_argument("--watch", type=seconds(0.0), default=DEFAULTS["watch"], metavar="S",
                       help="after the last scale-in, watch Karpenter for S seconds: does it "
                            "disrupt a cloud node whose pods would fit on the hybrid nodes' free "
                            "room? (NodeClaims, pods, its events; default 180, 0 skips it)")


@dataclass(frozen=True)
class Settings:
    mode: str  # "verify" | "burst"
    namespace: str
    deployment: str
    app: str
    nodepool: str
    sequence: tuple[int, ...]
    stack_scenario: str
    scenarios: tuple[str, ...]
    interval: float = DEFAULTS["interval"]
    timeout: float = DEFAULTS["timeout"]
    within: float = DEFAULTS["within"]
    rank_timeout: float = DEFAULTS["rank_timeout"]
    pause: float = DEFAULTS["pause"]
    watch: float = DEFAULTS["watch"]

    @property
    def peak(self) -> int:
        return max(self.sequence)

    @property
    def on_hybrid(self) -> int:
        return HYBRID_NODES * PODS_PER_HYBRID_NODE


def settings_from(ctx: Any, mode: str) -> Settings:
    outputs = ctx.outputs
    demo2 = outputs.optional("demo2")
    if not isinstance(demo2, dict):
        if outputs.layers and "demo" not in outputs.layers:
            raise RunError(f"the stack {outputs.stack} has no demo layer (no output demo2): set "
                           "upToLayer to demo and run `pulumi up`")
        raise RunError(f"the stack {outputs.stack} has no output demo2 (demo 2's names): run "
                       "`pulumi up` with this version of the lab")
    scenario = str(demo2.get("scenario") or "A").upper()
    sequence = tuple(int(n) for n in (demo2.get("scaleSequence") or DEFAULT_SEQUENCE))
    if len(sequence) < 3 or max(sequence) != sequence[1]:
        raise RunError(f"the stack's demo2 scaleSequence {list(sequence)} is not a scale-up "
                       "followed by scale-ins (the seed's is 3, 15, 12, 10, 3)")
    options = ctx.options

    def number(key: str) -> float:
        value = options.get(key)
        return float(DEFAULTS[key] if value is None else value)

    asked = options.get("scenarios") if mode == "burst" else None
    scenarios = tuple(dict.fromkeys(asked)) if asked else (scenario,)
    return Settings(mode=mode, namespace=str(demo2.get("namespace") or "demo-burst"),
                    deployment=str(demo2.get("deployment") or "burst"),
                    app=str(demo2.get("app") or demo2.get("deployment") or "burst"),
                    nodepool=str(outputs.optional("karpenterNodePool") or "cloud-burst"),
                    sequence=sequence, stack_scenario=scenario, scenarios=scenarios,
                    interval=number("interval"), within=number("within"),
                    timeout=number("timeout") if mode == "burst" else DEFAULTS["timeout"],
                    rank_timeout=number("rank_timeout") if mode == "burst" else DEFAULTS["rank_timeout"],
                    pause=number("pause") if mode == "burst" else DEFAULTS["pause"],
                    watch=number("watch") if mode == "burst" else DEFAULTS["watch"])


# --- reading the cluster: summaries (what is recorded) ----------------------------------------

def _condition(obj: dict, kind: str) -> Optional[dict]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), None)


def cost_of(value: Optional[str]) -> int:
    """The ReplicaSet controller's reading of a pod-deletion-cost (REFERENCE §6): absent or
    invalid counts as 0."""
    if value is None or not re.fullmatch(r"-?[1-9][0-9]*|0", value):
        return 0
    number = int(value)
    return number if -2 ** 31 <= number < 2 ** 31 else 0


def pod_summary(pod: dict, places: dict[str, str]) -> dict:
    """What the tables need of a burst pod."""
    md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ready = _condition(pod, "Ready")
    scheduled = _condition(pod, "PodScheduled")
    disruption = _condition(pod, "DisruptionTarget")
    node = spec.get("nodeName")
    return {
        "name": md.get("name"), "uid": md.get("uid"), "node": node,
        "place": places.get(node) if node else None,
        "phase": status.get("phase"),
        "ready": bool(ready and ready.get("status") == "True"),
        "ready_at": ready.get("lastTransitionTime") if ready and ready.get("status") == "True" else None,
        "created": md.get("creationTimestamp"),
        "deleting": bool(md.get("deletionTimestamp")),
        "cost": (md.get("annotations") or {}).get(COST),
        "hash": (md.get("labels") or {}).get(TEMPLATE_HASH),
        "unschedulable": bool(scheduled and scheduled.get("status") == "False"),
        "disruption_target": ({k: disruption.get(k) for k in ("status", "reason", "message",
                                                               "lastTransitionTime")}
                              if disruption and disruption.get("status") == "True" else None),
    }


def active(pod: dict) -> bool:
    return not pod.get("deleting") and pod.get("phase") not in ("Succeeded", "Failed")


def pod_for_forecast(pod: dict) -> dict:
    """The Pod as the API returns it, trimmed to what the ReplicaSet controller reads."""
    md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    keep = ("name", "namespace", "uid", "labels", "annotations", "ownerReferences",
            "creationTimestamp", "deletionTimestamp")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {k: md[k] for k in keep if md.get(k) is not None},
            "spec": {"nodeName": spec.get("nodeName")} if spec.get("nodeName") else {},
            "status": {"phase": status.get("phase"),
                       "conditions": status.get("conditions") or [],
                       "containerStatuses": [{"name": c.get("name"),
                                              "restartCount": c.get("restartCount", 0),
                                              "ready": c.get("ready")}
                                             for c in status.get("containerStatuses") or []]}}


def node_summary(node: dict, nodepool: str) -> dict:
    md, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    labels = md.get("labels") or {}
    ready = _condition(node, "Ready")
    if labels.get(HYBRID_LABEL) == HYBRID_VALUE:
        place = "hybrid"
    elif labels.get(NODEPOOL_LABEL) == nodepool:
        place = "cloud"
    else:
        place = "other"
    return {"name": md.get("name"), "place": place,
            "nodepool": labels.get(NODEPOOL_LABEL),
            "instance_type": labels.get("node.kubernetes.io/instance-type"),
            "allocatable": {k: (status.get("allocatable") or {}).get(k) for k in ("cpu", "memory")},
            "capacity": {k: (status.get("capacity") or {}).get(k) for k in ("cpu", "memory")},
            "taints": [{k: t.get(k) for k in ("key", "value", "effect")}
                       for t in spec.get("taints") or []],
            "unschedulable": bool(spec.get("unschedulable")),
            "ready": bool(ready and ready.get("status") == "True")}


def _resources(containers: Iterable[dict]) -> list[dict]:
    return [{"name": c.get("name"),
             "resources": {"requests": dict(((c.get("resources") or {}).get("requests") or {}))}}
            for c in containers]


def neighbour_summary(pod: dict) -> dict:
    """A pod sharing a hybrid node with the burst pods: what the scheduler counts of it."""
    md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return {"name": md.get("name"), "namespace": md.get("namespace"), "node": spec.get("nodeName"),
            "labels": {k: v for k, v in (md.get("labels") or {}).items() if k == "app"},
            "phase": status.get("phase"), "deleting": bool(md.get("deletionTimestamp")),
            "containers": _resources(spec.get("containers") or []),
            "init_containers": _resources(spec.get("initContainers") or [])}


def deployment_summary(deployment: Optional[dict]) -> dict:
    if deployment is None:
        return {"found": False}
    spec = deployment.get("spec") or {}
    template = spec.get("template") or {}
    pod = template.get("spec") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return {"found": True, "name": (deployment.get("metadata") or {}).get("name"),
            "replicas": spec.get("replicas"),
            "template_cost": annotations.get(COST),
            "restarted_at": annotations.get(RESTARTED_AT),
            "tolerations": pod.get("tolerations") or [],
            "containers": _resources(pod.get("containers") or []),
            "init_containers": _resources(pod.get("initContainers") or [])}


def nodeclaim_summary(claim: dict) -> dict:
    md, status = claim.get("metadata") or {}, claim.get("status") or {}
    ready = _condition(claim, "Ready")
    return {"name": md.get("name"), "created": md.get("creationTimestamp"),
            "nodepool": (md.get("labels") or {}).get(NODEPOOL_LABEL),
            "node": status.get("nodeName"),
            "instance_type": (md.get("labels") or {}).get("node.kubernetes.io/instance-type"),
            "ready": bool(ready and ready.get("status") == "True"),
            "deleting": bool(md.get("deletionTimestamp"))}


def event_summary(event: dict) -> dict:
    """A v1 Event as the consolidation watch records it."""
    md, involved = event.get("metadata") or {}, event.get("involvedObject") or {}
    series = event.get("series") or {}
    return {"key": f"{md.get('namespace')}/{md.get('name')}", "uid": md.get("uid"),
            "kind": involved.get("kind"), "object": involved.get("name"),
            "object_namespace": involved.get("namespace"),
            "reason": event.get("reason"), "message": event.get("message"),
            "type": event.get("type"), "count": event.get("count") or 1,
            "first": event.get("firstTimestamp") or event.get("eventTime"),
            "last": (event.get("lastTimestamp") or series.get("lastObservedTime")
                     or event.get("eventTime") or event.get("firstTimestamp")),
            "source": ((event.get("source") or {}).get("component")
                       or event.get("reportingComponent") or event.get("reportingController"))}


def is_karpenter_event(event: dict, namespace: str) -> bool:
    """Karpenter's, about a Node, a NodeClaim, a NodePool or a burst pod."""
    about = event.get("kind") in ("Node", "NodeClaim", "NodePool") or (
        event.get("kind") == "Pod" and event.get("object_namespace") in (namespace, None))
    source = str(event.get("source") or "").lower()
    return about and ("karpenter" in source or event.get("reason") in KARPENTER_REASONS)


def feature_gates(container: dict) -> tuple[dict[str, bool], Optional[str]]:
    """Karpenter's feature gates as its controller container starts with them: the chart renders
    ``settings.featureGates`` into the ``FEATURE_GATES`` env var (``Name=true,...``); a
    ``--feature-gates`` argument counts too. (gates, where they were read)."""
    text, source = None, None
    for env in container.get("env") or []:
        if env.get("name") == "FEATURE_GATES" and env.get("value") is not None:
            text, source = env["value"], "env FEATURE_GATES"
    args = [str(a) for a in (container.get("args") or []) + (container.get("command") or [])]
    for i, arg in enumerate(args):
        if arg.startswith("--feature-gates="):
            text, source = arg.split("=", 1)[1], "argument --feature-gates"
        elif arg == "--feature-gates" and i + 1 < len(args):
            text, source = args[i + 1], "argument --feature-gates"
    gates = {}
    for item in (text or "").split(","):
        name, _, value = item.strip().partition("=")
        if name:
            gates[name] = value.strip().lower() == "true"
    return gates, source


def image_version(image: Optional[str]) -> Optional[tuple[int, int, int]]:
    """The version in an image reference's tag (``.../controller:1.15.0@sha256:...``)."""
    if not image:
        return None
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", tag)
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def karpenter_summary(pod_or_template: dict, name: Optional[str] = None, ready: bool = True) -> dict:
    containers = pod_or_template.get("containers") or []
    container = next((c for c in containers if c.get("name") == "controller"),
                     containers[0] if containers else {})
    gates, source = feature_gates(container)
    version = image_version(container.get("image"))
    return {"name": name, "ready": ready, "image": container.get("image"),
            "version": ".".join(map(str, version)) if version else None,
            "gates": gates, "gates_source": source,
            "service_account": pod_or_template.get("serviceAccountName")}


# --- the Kubernetes side of the collector -------------------------------------------------------

def _types() -> dict[str, Any]:
    from lightkube.generic_resource import create_global_resource
    from lightkube.resources.apps_v1 import Deployment, ReplicaSet
    from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod

    return {"Pod": Pod, "Node": Node, "ConfigMap": ConfigMap, "Deployment": Deployment,
            "Event": Event,
            "ReplicaSet": ReplicaSet,
            "NodePool": create_global_resource("karpenter.sh", "v1", "NodePool", "nodepools"),
            "NodeClaim": create_global_resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
            "ClusterPolicy": create_global_resource("kyverno.io", "v1", "ClusterPolicy",
                                                    "clusterpolicies")}


def _not_found(error: BaseException) -> bool:
    from rehearse.leader import not_found

    return not_found(error)


def _http_errors() -> tuple[type[BaseException], ...]:
    import httpx2
    from lightkube import ApiError

    return (ApiError, httpx2.HTTPStatusError)


class Cluster:
    """The reads and writes the runs make, as dicts."""

    def __init__(self, ctx: Any, settings: Settings):
        self.ctx, self.s = ctx, settings
        self.t = _types()
        self.client = ctx.kube.client
        #: Every node seen in this run -> hybrid | cloud | other (a consolidated node keeps its
        #: place in the tables).
        self.places: dict[str, str] = {}
        self.node_summaries: dict[str, dict] = {}

    def get(self, kind: str, name: str, namespace: Optional[str] = None) -> Optional[dict]:
        try:
            if namespace is None:
                found = self.client.get(self.t[kind], name)
            else:
                found = self.client.get(self.t[kind], name, namespace=namespace)
        except _http_errors() as error:
            if _not_found(error):
                return None
            raise
        return found.to_dict() if hasattr(found, "to_dict") else dict(found)

    def list(self, kind: str, namespace: Optional[str] = None, **kwargs: Any) -> Optional[list[dict]]:
        """The objects, or None when the API does not serve the kind (a CRD not installed)."""
        try:
            if namespace is None:
                found = list(self.client.list(self.t[kind], **kwargs))
            else:
                found = list(self.client.list(self.t[kind], namespace=namespace, **kwargs))
        except _http_errors() as error:
            if _not_found(error):
                return None
            raise
        return [f.to_dict() if hasattr(f, "to_dict") else dict(f) for f in found]

    # nodes and pods

    def nodes(self) -> list[dict]:
        found = [node_summary(n, self.s.nodepool) for n in self.list("Node") or []]
        for node in found:
            self.places[node["name"]] = node["place"]
            self.node_summaries[node["name"]] = node
        return sorted(found, key=lambda n: n["name"])

    def burst_pods(self) -> list[dict]:
        """Raw burst pods (the label is sent and applied here again: the emulator ignores it)."""
        app = self.s.app
        found = self.list("Pod", self.s.namespace, labels={"app": app}) or []
        pods = [p for p in found if ((p.get("metadata") or {}).get("labels") or {}).get("app") == app]
        if any((p.get("spec") or {}).get("nodeName") not in self.places
               for p in pods if (p.get("spec") or {}).get("nodeName")):
            self.nodes()
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def summaries(self, pods: Optional[list[dict]] = None) -> list[dict]:
        return [pod_summary(p, self.places) for p in (pods if pods is not None else self.burst_pods())]

    def workload(self) -> dict:
        """The Deployment, its ReplicaSets, and its pods: those of the newest revision (the ones
        a scale-in chooses from) and those of every ReplicaSet (which set the ranks)."""
        deployment = self.get("Deployment", self.s.deployment, self.s.namespace)
        replica_sets = []
        for rs in self.list("ReplicaSet", self.s.namespace) or []:
            owners = (rs.get("metadata") or {}).get("ownerReferences") or []
            if any(o.get("kind") == "Deployment" and o.get("name") == self.s.deployment for o in owners):
                replica_sets.append(rs)

        def revision(rs: dict) -> int:
            try:
                return int(((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION, 0))
            except ValueError:
                return 0

        def template_hash(rs: dict) -> Optional[str]:
            labels = (rs.get("metadata") or {}).get("labels") or {}
            selector = ((rs.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            return labels.get(TEMPLATE_HASH) or selector.get(TEMPLATE_HASH)

        newest = max(replica_sets, key=revision) if replica_sets else None
        hashes = {template_hash(rs) for rs in replica_sets} - {None}
        pods = self.burst_pods()
        current_hash = template_hash(newest) if newest else None
        current = [p for p in pods if newest is None
                   or ((p["metadata"].get("labels") or {}).get(TEMPLATE_HASH) == current_hash)]
        related = [p for p in pods if not hashes
                   or (p["metadata"].get("labels") or {}).get(TEMPLATE_HASH) in hashes]
        return {"deployment": deployment, "revision": revision(newest) if newest else None,
                "hash": current_hash, "all": pods, "current": current, "related": related}

    def nodeclaims(self) -> Optional[list[dict]]:
        found = self.list("NodeClaim")
        if found is None:
            return None
        return sorted((nodeclaim_summary(c) for c in found
                       if ((c.get("metadata") or {}).get("labels") or {}).get(NODEPOOL_LABEL)
                       == self.s.nodepool), key=lambda c: (c["created"] or "", c["name"]))

    def karpenter_events(self) -> list[dict]:
        """Karpenter's events, every namespace (a Node's or NodeClaim's land in default), in
        the order they last happened."""
        found = [event_summary(e) for e in self.list("Event", "*") or []]
        return sorted((e for e in found if is_karpenter_event(e, self.s.namespace)),
                      key=lambda e: (e["last"] or "", e["key"]))

    def hybrid_neighbours(self, hybrid_nodes: Iterable[str]) -> list[dict]:
        found = []
        for node in hybrid_nodes:
            for pod in self.list("Pod", "*", fields={"spec.nodeName": node}) or []:
                if (pod.get("spec") or {}).get("nodeName") != node:
                    continue  # the emulator ignores field selectors
                labels = (pod.get("metadata") or {}).get("labels") or {}
                if (pod.get("metadata") or {}).get("namespace") == self.s.namespace \
                        and labels.get("app") == self.s.app:
                    continue
                found.append(neighbour_summary(pod))
        return sorted(found, key=lambda p: (p["node"], p["namespace"], p["name"]))

    def scale(self, replicas: int, restart_at: Optional[str] = None) -> None:
        body: dict[str, Any] = {"spec": {"replicas": replicas}}
        if restart_at is not None:
            body["spec"]["template"] = {"metadata": {"annotations": {RESTARTED_AT: restart_at}}}
        self.client.patch(self.t["Deployment"], self.s.deployment, body, namespace=self.s.namespace)

    # the scenario's machinery

    def review(self, who: str, namespace: str, account: str, verb: str, resource: str,
               in_namespace: Optional[str] = None) -> dict:
        """A SubjectAccessReview: may ``namespace:account`` ``verb`` ``resource``?"""
        import json

        attributes = {"verb": verb, "group": "", "resource": resource}
        if in_namespace:
            attributes["namespace"] = in_namespace
        user = f"system:serviceaccount:{namespace}:{account}"
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": ["system:serviceaccounts",
                                                  f"system:serviceaccounts:{namespace}",
                                                  "system:authenticated"],
                         "resourceAttributes": attributes}}
        seen = {"who": who, "user": user, "verb": verb, "resource": resource,
                "namespace": in_namespace}
        status, text = self.ctx.kube.post_raw(SAR_PATH, body)
        try:
            answer = json.loads(text)
        except ValueError:
            answer = {}
        if status >= 300 or not isinstance(answer, dict):
            message = answer.get("message") if isinstance(answer, dict) else None
            return {**seen, "http": status, "allowed": None,
                    "error": message or text.strip()[:200] or f"HTTP {status}"}
        result = answer.get("status") or {}
        return {**seen, "http": status, "allowed": bool(result.get("allowed")),
                "denied": bool(result.get("denied")), "reason": result.get("reason") or "",
                "error": result.get("evaluationError") or None}

    def service_account(self, namespace: str, deployment: str, default: str) -> str:
        found = self.get("Deployment", deployment, namespace)
        pod = (((found or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        return pod.get("serviceAccountName") or default

    def karpenter(self) -> dict:
        """The gate as the running controller started with it: its pods' spec (the gate is read
        at start), the Deployment's when no pod runs."""
        key, value = KARPENTER_POD_LABEL
        pods = [p for p in self.list("Pod", KARPENTER_NS, labels={key: value}) or []
                if ((p.get("metadata") or {}).get("labels") or {}).get(key) == value
                and not (p.get("metadata") or {}).get("deletionTimestamp")]
        running = [karpenter_summary(p.get("spec") or {}, p["metadata"]["name"],
                                     ready=bool((_condition(p, "Ready") or {}).get("status") == "True"))
                   for p in sorted(pods, key=lambda p: p["metadata"]["name"])]
        deployment = self.get("Deployment", KARPENTER_DEPLOYMENT, KARPENTER_NS)
        template = (((deployment or {}).get("spec") or {}).get("template") or {}).get("spec")
        return {"deployment_found": deployment is not None,
                "deployment": karpenter_summary(template, KARPENTER_DEPLOYMENT) if template else None,
                "pods": running}


# --- the preconditions (collected by both commands) ----------------------------------------------

def costs_settled(scenario: str, pods: list[dict]) -> bool:
    """What the scenario's writers have written on the active pods: B and C, "1" on every pod
    on a hybrid node."""
    if scenario == "A":
        return True
    hybrid = [p for p in pods if active(p) and p.get("place") == "hybrid"]
    return bool(hybrid) and all(p.get("cost") == "1" for p in hybrid)


def observe_preconditions(ctx: Any, cluster: Cluster, scenario: str, phase: str,
                          watch_whole_window: bool) -> dict:
    """Everything the scenario checks read, in one event's worth of observations."""
    s = cluster.s
    ctx.progress(f"scenario {scenario}: checking it is in place ({SCENARIO_WORDS[scenario]})")
    nodes = cluster.nodes()
    hybrid_nodes = [n["name"] for n in nodes if n["place"] == "hybrid"]
    work = cluster.workload()
    accounts = {role: cluster.service_account(KYVERNO_NS, deployment, deployment)
                for role, deployment in KYVERNO_CONTROLLERS}
    karpenter_sa = cluster.service_account(KARPENTER_NS, KARPENTER_DEPLOYMENT, KARPENTER_SA)
    reviews = [cluster.review("kyverno admission", KYVERNO_NS, accounts["admission"], "get", "nodes"),
               cluster.review("kyverno background", KYVERNO_NS, accounts["background"], "get", "nodes"),
               cluster.review("kyverno background", KYVERNO_NS, accounts["background"], "update",
                              "pods", s.namespace),
               cluster.review("karpenter", KARPENTER_NS, karpenter_sa, "patch", "pods", s.namespace)]
    policy = cluster.get("ClusterPolicy", POLICY)
    ready = _condition(policy, "Ready") if policy else None
    config = cluster.get("ConfigMap", KYVERNO_CONFIGMAP, KYVERNO_NS)
    nodepool = cluster.get("NodePool", s.nodepool)
    pool_spec = (nodepool or {}).get("spec") or {}
    observed = {
        "scenario": scenario, "phase": phase, "namespace": s.namespace,
        "deployment": {**deployment_summary(work["deployment"]), "revision": work["revision"],
                       "hash": work["hash"]},
        "nodes": nodes,
        "hybrid_neighbours": cluster.hybrid_neighbours(hybrid_nodes),
        "reviews": reviews, "service_accounts": {**accounts, "karpenter": karpenter_sa},
        "policy": {"found": policy is not None,
                   "ready": (ready or {}).get("status") == "True" if ready else
                   ((policy or {}).get("status") or {}).get("ready"),
                   "reason": (ready or {}).get("reason"), "message": (ready or {}).get("message")},
        "kyverno_config": {"found": config is not None,
                           "resource_filters": ((config or {}).get("data") or {}).get("resourceFilters")},
        "karpenter": cluster.karpenter(),
        "nodepool": {"name": s.nodepool, "found": nodepool is not None,
                     "limits": pool_spec.get("limits") or {},
                     "budgets": (pool_spec.get("disruption") or {}).get("budgets"),
                     "taints": ((pool_spec.get("template") or {}).get("spec") or {}).get("taints") or []},
        "within": s.within,
    }
    polls = []
    start = ctx.monotonic()
    while True:
        pods = cluster.summaries()
        waited = round(ctx.monotonic() - start, 3)
        polls.append({"at": iso(ctx.clock()), "waited": waited, "pods": pods})
        done = costs_settled(scenario, pods) and not watch_whole_window
        if done or waited >= s.within:
            break
        ctx.sleep(s.interval)
    observed["pod_polls"] = polls
    return observed


# --- judging the preconditions (pure; the collector decides with it, the analysis reports it) -----

def _review(observed: dict, who: str, verb: str, resource: str) -> Optional[dict]:
    return next((r for r in observed.get("reviews") or []
                 if r["who"] == who and r["verb"] == verb and r["resource"] == resource), None)


def _review_check(name: str, found: Optional[dict], fix: str, consequence: str) -> Check:
    where = f" in {found['namespace']}" if found and found.get("namespace") else ""
    command = (f"kubectl auth can-i {found['verb']} {found['resource']}{' -n ' + found['namespace'] if found.get('namespace') else ''} "
               f"--as={found['user']}" if found else "")
    if found is None:
        return Check(name, FAIL, "not asked (not recorded)", "run the command again", command)
    if found.get("allowed") is None:
        return Check(name, FAIL, f"could not ask the API server (HTTP {found.get('http')}): "
                                 f"{found.get('error')}",
                     "your identity needs `create subjectaccessreviews` (cluster-admin has it)",
                     command)
    what = f"{found['user']} may {'' if found['allowed'] else 'not '}{found['verb']} {found['resource']}{where}"
    if found.get("reason"):
        what += f" ({found['reason']})"
    if found["allowed"]:
        return Check(name, PASS, what, "", command)
    return Check(name, FAIL, f"{what}: {consequence}", fix, command)


def _gates(observed: dict) -> tuple[Optional[bool], str, list[dict]]:
    """Whether the running Karpenter has the gate on: (on, what was seen, the controllers)."""
    karpenter = observed.get("karpenter") or {}
    controllers = [p for p in karpenter.get("pods") or []] or (
        [karpenter["deployment"]] if karpenter.get("deployment") else [])
    if not controllers:
        return None, f"no Karpenter controller in {KARPENTER_NS} (no pod, no Deployment {KARPENTER_DEPLOYMENT})", []
    states = [c["gates"].get(GATE, False) for c in controllers]
    shown = "; ".join(f"{c['name']}: {GATE}={'true' if c['gates'].get(GATE) else 'false' if GATE in c['gates'] else 'absent'} "
                      f"({c['gates_source'] or 'no feature gates set'}), image {c['image']}"
                      for c in controllers)
    if not karpenter.get("pods"):
        shown += " (no running pod: read from the Deployment)"
    if all(states):
        return True, shown, controllers
    if not any(states):
        return False, shown, controllers
    return None, shown + " — the controllers disagree (a rollout under way?)", controllers


def _pods_text(pods: list[dict]) -> str:
    return ", ".join(f"{p['name']} on {p['node'] or 'no node'} ({p['place'] or '?'}): "
                     f"{'no cost' if p['cost'] is None else repr(p['cost'])}" for p in pods)


def _final_pods(observed: dict) -> list[dict]:
    polls = observed.get("pod_polls") or []
    return [p for p in (polls[-1]["pods"] if polls else []) if active(p)]


def _restart_fix(observed: dict) -> str:
    ns = observed.get("namespace", "demo-burst")
    dep = (observed.get("deployment") or {}).get("name") or "burst"
    fix = (f"restart the Deployment so every pod starts fresh: `kubectl -n {ns} rollout restart "
           f"deploy/{dep}` (`python -m rehearse burst` does it before measuring)")
    if (observed.get("deployment") or {}).get("template_cost") is not None:
        fix = (f"the Deployment's pod template itself carries {COST}="
               f"{observed['deployment']['template_cost']!r}, so every new pod starts with it: "
               f"remove it (`kubectl -n {ns} patch deploy {dep} --type=json -p "
               "'[{\"op\":\"remove\",\"path\":\"/spec/template/metadata/annotations/"
               "controller.kubernetes.io~1pod-deletion-cost\"}]'`), then `pulumi up`")
    return fix


def scenario_checks(observed: dict) -> list[Check]:
    """The checks that prove ``observed['scenario']`` is in place, in order."""
    s = observed["scenario"]
    ns = observed.get("namespace", "demo-burst")
    checks: list[Check] = []
    policy = observed.get("policy") or {}
    gate_on, gates_seen, controllers = _gates(observed)
    karpenter_cmd = (f"kubectl -n {KARPENTER_NS} get pods -l app.kubernetes.io/name=karpenter -o "
                     "jsonpath='{range .items[*]}{.metadata.name} {.spec.containers[0].image} "
                     "{.spec.containers[0].env[?(@.name==\"FEATURE_GATES\")].value}{\"\\n\"}{end}'")
    pods = _final_pods(observed)
    placement_cmd = (f"kubectl -n {ns} get pods -l app={(observed.get('deployment') or {}).get('name') or 'burst'} "
                     "-o custom-columns=POD:.metadata.name,NODE:.spec.nodeName,"
                     "COST:'.metadata.annotations.controller\\.kubernetes\\.io/pod-deletion-cost'")
    policy_cmd = f"kubectl get clusterpolicy {POLICY} -o wide"

    def name(what: str) -> str:
        return check_name(s, what)

    if s == "A":
        checks.append(Check(name(C_NO_POLICY), FAIL if policy.get("found") else PASS,
                            f"ClusterPolicy {POLICY} exists: Kyverno writes \"1\" on hybrid pods, "
                            "so A would look like B" if policy.get("found") else
                            f"no ClusterPolicy {POLICY}",
                            "scenario A has no policy: `pulumi config set burstScenario A` and "
                            "`pulumi up` deletes it" if policy.get("found") else "", policy_cmd))
    else:
        for role in ("admission", "background"):
            found = _review(observed, f"kyverno {role}", "get", "nodes")
            checks.append(_review_check(
                name(C_KYVERNO_NODES.format(role=role)), found,
                f"grant it through the chart values {role}Controller.rbac.clusterRole."
                "extraResources (components/kyverno.py does) and `pulumi up`",
                "Kyverno drops the policy's node lookup silently, so no pod gets \"1\": "
                f"{s} would look like A"))
        checks.append(_review_check(
            name(C_KYVERNO_UPDATE), _review(observed, "kyverno background", "update", "pods"),
            "grant it through backgroundController.rbac.clusterRole.extraResources and "
            "`pulumi up`",
            "the mutate-existing rule cannot patch the bound pod: no \"1\""))
        config = observed.get("kyverno_config") or {}
        filters = config.get("resource_filters") or ""
        dropped = [f for f in BINDING_FILTERS if f in filters]
        config_cmd = (f"kubectl -n {KYVERNO_NS} get configmap {KYVERNO_CONFIGMAP} -o "
                      "jsonpath='{.data.resourceFilters}'")
        if not config.get("found"):
            checks.append(Check(name(C_FILTERS), FAIL,
                                f"no ConfigMap {KYVERNO_NS}/{KYVERNO_CONFIGMAP} (Kyverno's config)",
                                "is Kyverno installed? the demo layer installs it: `pulumi up`",
                                config_cmd))
        elif dropped:
            checks.append(Check(name(C_FILTERS), FAIL,
                                f"Kyverno's resourceFilters drop {', '.join(dropped)}: the policy "
                                "never sees a binding",
                                "set config.resourceFiltersExclude to exactly "
                                "[\"[Pod/binding,*,*]\", \"[Binding,*,*]\"] (components/kyverno.py); "
                                "the chart preserves an existing ConfigMap (config.preserve), so "
                                "delete it and `pulumi up`", config_cmd))
        else:
            checks.append(Check(name(C_FILTERS), PASS,
                                "Kyverno's resourceFilters keep Pod/binding and Binding", "",
                                config_cmd))
        if not policy.get("found"):
            checks.append(Check(name(C_POLICY), FAIL, f"no ClusterPolicy {POLICY}",
                                f"scenario {s} needs it: `pulumi config set burstScenario {s}` "
                                "and `pulumi up`", policy_cmd))
        elif policy.get("ready"):
            checks.append(Check(name(C_POLICY), PASS, f"Ready ({policy.get('reason') or 'True'})",
                                "", policy_cmd))
        else:
            checks.append(Check(name(C_POLICY), FAIL,
                                f"not Ready: {policy.get('reason') or ''} {policy.get('message') or ''}".strip(),
                                f"`kubectl describe clusterpolicy {POLICY}` and Kyverno's admission "
                                f"controller's log (`kubectl -n {KYVERNO_NS} logs deploy/"
                                "kyverno-admission-controller`)", policy_cmd))
        hybrid = [p for p in pods if p.get("place") == "hybrid"]
        polls = observed.get("pod_polls") or []
        waited = polls[-1]["waited"] if polls else 0.0
        if not hybrid:
            checks.append(Check(name(C_HYBRID_COST), FAIL,
                                "no burst pod runs on a hybrid node to look at",
                                f"scale the Deployment to 3 (`kubectl -n {ns} scale deploy/"
                                f"{(observed.get('deployment') or {}).get('name') or 'burst'} "
                                "--replicas=3`) and run this again", placement_cmd))
        else:
            without = [p for p in hybrid if p.get("cost") != "1"]
            first_ok = next((poll["waited"] for poll in polls
                             if costs_settled(s, [p for p in poll["pods"] if active(p)])), None)
            if not without:
                checks.append(Check(name(C_HYBRID_COST), PASS,
                                    f"{len(hybrid)} of {len(hybrid)} pods on hybrid nodes carry "
                                    f"\"1\" (seen after {first_ok:g} s)", "", placement_cmd))
            else:
                checks.append(Check(
                    name(C_HYBRID_COST), FAIL,
                    f"{len(without)} of {len(hybrid)} pods on hybrid nodes carry no \"1\" after "
                    f"{waited:g} s: {_pods_text(without)}",
                    "Kyverno did not annotate them: the checks above say why (RBAC, filters, "
                    f"policy); Kyverno's background controller's log: `kubectl -n {KYVERNO_NS} "
                    "logs deploy/kyverno-background-controller`", placement_cmd))
    # Values nobody in this scenario writes: a previous scenario's, or a stray writer's.
    foreign = []
    for pod in pods:
        value = pod.get("cost")
        if value is None:
            continue
        if s == "A":
            foreign.append(pod)
        elif pod.get("place") == "hybrid" and value != "1":
            foreign.append(pod)
        elif pod.get("place") != "hybrid" and not (s == "C" and pod.get("place") == "cloud"
                                                   and cost_of(value) < 0):
            foreign.append(pod)
    if foreign:
        checks.append(Check(name(C_FOREIGN_COST), FAIL,
                            f"{len(foreign)} pod(s) carry a cost scenario {s} does not write "
                            f"(left from a previous scenario?): {_pods_text(foreign)}",
                            _restart_fix(observed), placement_cmd))
    else:
        checks.append(Check(name(C_FOREIGN_COST), PASS,
                            f"{len(pods)} burst pod(s): " + (
                                "none carries a cost" if all(p.get("cost") is None for p in pods)
                                else "only the scenario's costs"), "", placement_cmd))
    # Karpenter's gate.
    if s in ("A", "B"):
        if gate_on is False:
            checks.append(Check(name(C_GATE_OFF), PASS, gates_seen, "", karpenter_cmd))
        else:
            checks.append(Check(name(C_GATE_OFF), FAIL,
                                f"{gates_seen}: Karpenter ranks the cloud pods, so {s} would look "
                                "like C" if gate_on else gates_seen,
                                f"`pulumi config set burstScenario {s}` and `pulumi up` turns it "
                                "off; then remove the negative costs it left (switching from C "
                                "does)", karpenter_cmd))
    else:
        if gate_on:
            checks.append(Check(name(C_GATE_ON), PASS, gates_seen, "", karpenter_cmd))
        else:
            checks.append(Check(name(C_GATE_ON), FAIL,
                                f"{gates_seen}: Karpenter writes no ranks, so C would look like B",
                                "`pulumi config set burstScenario C` and `pulumi up` sets the Helm "
                                "value settings.featureGates.podDeletionCostManagement=true; a chart "
                                "older than 1.15.0 ignores it silently", karpenter_cmd))
        versions = [(c.get("name"), c.get("version"), c.get("image")) for c in controllers]
        old = [v for v in versions if v[1] and tuple(int(x) for x in v[1].split(".")) < GATE_SINCE]
        unknown = [v for v in versions if not v[1]]
        if not versions:
            checks.append(Check(name(C_GATE_VERSION), FAIL, "no Karpenter controller found",
                                "the karpenter layer installs it: `pulumi up`", karpenter_cmd))
        elif old:
            checks.append(Check(name(C_GATE_VERSION), FAIL,
                                "running " + ", ".join(f"{n}: {v}" for n, v, _ in old) +
                                f": {GATE} arrived in 1.15.0 and an older controller ignores it "
                                "silently, so C would look like B",
                                "set karpenterVersion to 1.15.0 or later (both charts) and "
                                "`pulumi up`", karpenter_cmd))
        elif unknown:
            checks.append(Check(name(C_GATE_VERSION), SKIP,
                                "no version in the image reference: " +
                                ", ".join(i or "?" for _, _, i in unknown) +
                                " (the runtime check before the first scale-in still applies)",
                                "", karpenter_cmd))
        else:
            checks.append(Check(name(C_GATE_VERSION), PASS,
                                ", ".join(f"{n}: {v}" for n, v, _ in versions), "", karpenter_cmd))
        checks.append(_review_check(
            name(C_KARPENTER_PATCH), _review(observed, "karpenter", "patch", "pods"),
            "the Helm value settings.featureGates.podDeletionCostManagement=true grants it "
            "(a chart older than 1.15.0 does not): `pulumi up`",
            "Karpenter cannot write its ranks: C would look like B"))
        checks.append(budget_check(observed, name(C_BUDGET)))
    return checks


def budget_check(observed: dict, name: str) -> Check:
    pool = observed.get("nodepool") or {}
    command = f"kubectl get nodepool {pool.get('name')} -o jsonpath='{{.spec.disruption.budgets}}'"
    if not pool.get("found"):
        return Check(name, FAIL, f"no NodePool {pool.get('name')}",
                     "the karpenter layer creates it: `pulumi up`", command)
    budgets = pool.get("budgets")
    if not budgets:
        return Check(name, FAIL, "no budgets: Karpenter's default is nodes: 10%, so only about "
                     "one node gets a rank",
                     "set disruption.budgets: [{nodes: \"100%\"}] (stacks/layers/karpenter.py)",
                     command)
    tight = [b for b in budgets if str(b.get("nodes")) != "100%"]
    if tight:
        return Check(name, FAIL, f"budgets {budgets}: " + ", ".join(
            f"nodes {b.get('nodes')}" + (f" on schedule {b['schedule']}" if b.get("schedule") else "")
            for b in tight) + " keep some nodes unranked",
                     "one budget, nodes: \"100%\" (stacks/layers/karpenter.py), and `pulumi up`",
                     command)
    return Check(name, PASS, f"budgets {budgets}", "", command)


def in_place(scenario: str, checks: list[Check], measuring: bool = True) -> Check:
    failing = [c for c in checks if c.status == FAIL]
    name = check_name(scenario, C_IN_PLACE)
    if failing:
        reasons = "; ".join(f"{c.name.split(': ', 1)[-1]} — {c.seen}" for c in failing)
        return Check(name, FAIL, f"not in place{', not measured' if measuring else ''}: {reasons}",
                     "fix the checks below, then run again")
    return Check(name, PASS, f"{SCENARIO_WORDS[scenario]}: {len(checks)} checks passed")


def _quantity_cpu(value: Any) -> Optional[int]:
    if value is None:
        return None
    from offline.scheduling import cpu_millis

    return cpu_millis(value)


def nodepool_check(observed: dict, settings: dict) -> Check:
    pool = observed.get("nodepool") or {}
    name = CHECK_NODEPOOL.format(pool=pool.get("name"))
    command = f"kubectl get nodepool {pool.get('name')} -o jsonpath='{{.spec.limits}} {{.spec.disruption}}'"
    if not pool.get("found"):
        return Check(name, FAIL, f"no NodePool {pool.get('name')}: nothing bursts to the cloud",
                     "the karpenter layer creates it: `pulumi up`", command)
    limit = _quantity_cpu((pool.get("limits") or {}).get("cpu"))
    request = _burst_request(observed)
    overflow = settings["peak"] - settings["on_hybrid"]
    problems = []
    if limit is None:
        problems.append("no CPU limit: nothing caps what Karpenter launches (the lab's cost guard)")
    elif request is not None and limit < overflow * request.cpu_m:
        problems.append(f"CPU limit {limit}m is below what the {overflow} overflow pods request "
                        f"({overflow} × {request.cpu_m}m): they would stay Pending")
    budget = budget_check(observed, name)
    if budget.status == FAIL:
        problems.append(budget.seen)
    seen = (f"limits.cpu {(pool.get('limits') or {}).get('cpu')}"
            + (f" (the {overflow} overflow pods need {overflow * request.cpu_m}m)" if request and limit else "")
            + f"; budgets {pool.get('budgets')}")
    if problems:
        return Check(name, FAIL, "; ".join(problems),
                     "stacks/layers/karpenter.py sets limits.cpu (burstCpuLimit) and budgets "
                     "[{nodes: \"100%\"}]: `pulumi up`", command)
    return Check(name, PASS, seen, "", command)


def _burst_request(observed: dict):
    from offline.scheduling import pod_request

    deployment = observed.get("deployment") or {}
    if not deployment.get("found"):
        return None
    return pod_request(deployment.get("containers") or [], deployment.get("init_containers") or [])


def _tolerated(taints: list[dict], tolerations: list[dict]) -> bool:
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True


def _tolerates(toleration: dict, taint: dict) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration.get("key") == taint.get("key")
    return toleration.get("key") == taint.get("key") and \
        (toleration.get("value") or "") == (taint.get("value") or "")


def capacity(observed: dict) -> dict:
    """How many burst pods fit on each hybrid node the burst pods may use: (allocatable - what
    the node's other pods request) // the burst pod's request, as the scheduler counts requests
    (stacks.scheduling.pod_request: the larger of the containers' sum and the largest init
    container). Each node's allocatable is also set beside stacks.capacity's EKS AMI formula
    (capacity - kube-reserved), which sized the burst request: a kubelet reserving more shows
    there."""
    from components.capacity import kube_reserved_cpu_m
    from offline.scheduling import Request, memory_mib, pod_request

    request = _burst_request(observed)
    tolerations = (observed.get("deployment") or {}).get("tolerations") or []
    rows = []
    for node in observed.get("nodes") or []:
        if node["place"] != "hybrid":
            continue
        eligible = node["ready"] and not node["unschedulable"] and _tolerated(node["taints"], tolerations)
        alloc = node.get("allocatable") or {}
        allocatable = Request(_quantity_cpu(alloc.get("cpu")) or 0,
                              memory_mib(alloc["memory"]) if alloc.get("memory") else 0)
        used, others = Request(), []
        for pod in observed.get("hybrid_neighbours") or []:
            if pod["node"] != node["name"] or pod["deleting"] or pod["phase"] in ("Succeeded", "Failed"):
                continue
            r = pod_request(pod["containers"], pod["init_containers"])
            used = used + r
            others.append((pod["name"], r.cpu_m))
        free = allocatable - used
        cores = _quantity_cpu((node.get("capacity") or {}).get("cpu"))
        formula = cores - kube_reserved_cpu_m(cores // 1000) if cores else None
        fit = 0
        if request is not None and eligible and request.cpu_m > 0:
            fit = free.cpu_m // request.cpu_m
            if request.memory_mib:
                fit = min(fit, free.memory_mib // request.memory_mib)
            fit = max(fit, 0)
        rows.append({"node": node["name"], "eligible": eligible, "taints": node["taints"],
                     "allocatable_cpu_m": allocatable.cpu_m, "used_cpu_m": used.cpu_m,
                     "free_cpu_m": free.cpu_m, "others": others, "fit": fit,
                     "formula_cpu_m": formula})
    return {"request_cpu_m": request.cpu_m if request else None,
            "request_memory_mib": request.memory_mib if request else None,
            "nodes": rows, "total": sum(r["fit"] for r in rows if r["eligible"])}


def capacity_check(observed: dict, settings: dict) -> Check:
    expected = settings["on_hybrid"]
    command = ("kubectl describe nodes -l eks.amazonaws.com/compute-type=hybrid | "
               "grep -A8 'Allocated resources'")
    found = capacity(observed)
    if found["request_cpu_m"] is None:
        return Check(CHECK_CAPACITY, FAIL, "no burst Deployment to read the CPU request from",
                     "the demo layer deploys it: `pulumi up`", command)
    parts = []
    for r in found["nodes"]:
        if not r["eligible"]:
            parts.append(f"{r['node']}: not for burst pods (not Ready, cordoned or a taint they do "
                         f"not tolerate: {', '.join(t['key'] for t in r['taints'])})")
            continue
        others = ", ".join(f"{n} {m}m" for n, m in r["others"] if m) or "nothing"
        formula = (f" (stacks/capacity.py's formula gives {r['formula_cpu_m']}m: the kubelet "
                   "reserves otherwise)" if r["formula_cpu_m"] not in (None, r["allocatable_cpu_m"]) else "")
        parts.append(f"{r['node']}: {r['allocatable_cpu_m']}m allocatable{formula} − {r['used_cpu_m']}m "
                     f"({others}) = {r['free_cpu_m']}m → {r['fit']} × {found['request_cpu_m']}m")
    seen = "; ".join(parts) or "no hybrid node"
    total = found["total"]
    if total == expected:
        return Check(CHECK_CAPACITY, PASS, f"{seen}: {total} fit, a {total + 1}th does not", "", command)
    if total > expected:
        consequence = (f"{total} fit: at {settings['peak']} only {settings['peak'] - total} burst to "
                       "the cloud and the scale-ins show other numbers than the seed's")
    else:
        consequence = (f"only {total} fit: {settings['peak'] - total} burst to the cloud instead of "
                       f"{settings['peak'] - expected}")
    return Check(CHECK_CAPACITY, FAIL, f"{seen}: {consequence}",
                 "the burst request is sized for 4 pods per hybrid node next to demo 1's pods "
                 "(stacks/capacity.py): another pod on a hybrid node, or a different host type, "
                 "breaks it — move the extra pod off, or `pulumi up` to resize", command)


# --- switching scenarios: the Pulumi Automation API ---------------------------------------------

def _pulumi_error(error: BaseException) -> str:
    from rehearse.outputs import _first_line

    return _first_line(error) if isinstance(error, Exception) else type(error).__name__


#: What a burstScenario change touches in the program: Kyverno's ClusterPolicy in B and C
#: (stacks/layers/demo.py, components/kyverno.py), the Karpenter controller's Helm release, whose
#: values carry the podDeletionCostManagement gate in C (stacks/layers/karpenter.py,
#: components/karpenter.py), and DeletionCostRanks in C (stacks/layers/demo.py).
SCENARIO_SCOPE = Scope(
    SCENARIO_KEY, "the scenario's resources (Kyverno's ClusterPolicy, the Karpenter controller's "
    "Helm release, DeletionCostRanks)",
    resources=(("kubernetes:kyverno.io/v1:ClusterPolicy", "-kyverno-deletion-cost"),
               ("kubernetes:helm.sh/v3:Release", "-karpenter-controller-release"),
               ("pulumi-python:dynamic/cleanup:DeletionCostRanks", "-deletion-cost-ranks")))


class Switcher:
    """Switches ``burstScenario`` (rehearse.switch: preview, confirm, up) and puts it back."""

    def __init__(self, ctx: Any, record: Any):
        self.ctx, self.record = ctx, record
        self.config = ConfigSwitch(ctx, self._open, SCENARIO_SCOPE)

    def _open(self) -> Any:
        work_dir = getattr(self.ctx, "work_dir", None) or Path(__file__).resolve().parent.parent
        try:
            return open_stack(self.ctx.outputs.stack, Path(work_dir))
        except FileNotFoundError:
            raise RunError("switching scenarios needs the pulumi CLI (the Automation API runs "
                           "it): install it, or run one scenario at a time without "
                           "--scenarios") from None
        except Exception as error:  # noqa: BLE001 automation's CommandError
            raise RunError(f"pulumi could not find the stack {self.ctx.outputs.stack}: "
                           f"{_pulumi_error(error)}") from None

    @property
    def original(self) -> Optional[str]:
        return self.config.original

    @property
    def changed(self) -> bool:
        return self.config.touched

    def read_original(self) -> Optional[str]:
        return self.config.read_original()

    def switch(self, scenario: str) -> dict:
        started = self.ctx.monotonic()
        try:
            result = self.config.switch(scenario, f"burstScenario {scenario}")
        except (KeyboardInterrupt, RunError):
            raise
        except Exception as error:  # noqa: BLE001 automation's CommandError
            return {"ok": False, "error": _pulumi_error(error),
                    "seconds": round(self.ctx.monotonic() - started, 1)}
        return {**result, "seconds": round(self.ctx.monotonic() - started, 1)}

    def restore(self) -> dict:
        started = self.ctx.monotonic()
        result = self.config.restore(f"burstScenario back to {self.original or 'the default'}")
        return {**result, "seconds": round(self.ctx.monotonic() - started, 1)}


def clear_costs(cluster: "Cluster", scenario: str) -> list[dict]:
    """After a restore: removes from the running burst pods the deletion costs ``scenario``
    does not write — in A every one, in B all but Kyverno's "1" (Karpenter's negative ranks);
    C writes both. Deleting the ClusterPolicy or turning Karpenter's gate off stops new
    writes but leaves the values on the pods (the seed's ``karpenter-gate.sh off`` strips
    them; DeletionCostRanks strips Karpenter's only), and A would then rank like B.
    Stripping, not a rollout restart: the pods stay (no new pods, no NodeClaims, nothing to
    wait for), and it is exactly the annotation ``verify burst`` checks."""
    if scenario == "C":
        return []
    cleared = []
    for pod in cluster.burst_pods():
        meta = pod.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(COST)
        if value is None or meta.get("deletionTimestamp") or (scenario == "B" and value.strip() == "1"):
            continue
        cluster.client.patch(cluster.t["Pod"], meta["name"], {"metadata": {"annotations": {COST: None}}},
                             namespace=cluster.s.namespace)
        cleared.append({"name": meta["name"], "cost": value})
    return cleared


# --- the collector --------------------------------------------------------------------------------

class Aborted(Exception):
    """A wait ran out: the scenario's sequence stops here (recorded), the run goes on."""


class Runner:
    def __init__(self, ctx: Any, record: Any, settings: Settings):
        self.ctx, self.record, self.s = ctx, record, settings
        self.cluster = Cluster(ctx, settings)

    # waits

    def _wait(self, what: str, test: Callable[[], Any], timeout: float) -> Any:
        start = self.ctx.monotonic()
        last = -1e9
        while True:
            result = test()
            if result:
                return result
            elapsed = self.ctx.monotonic() - start
            if elapsed >= timeout:
                raise Aborted(f"{what}: not after {timeout:g} s")
            if elapsed - last >= 10:
                last = elapsed
                self.ctx.progress(f"waiting for {what} ({elapsed:.0f} s)")
            self.ctx.sleep(self.s.interval)

    # one scenario

    def restart(self, scenario: str) -> None:
        s, ctx = self.s, self.ctx
        before = self.cluster.workload()
        stamp = iso(ctx.clock())
        ctx.progress(f"scenario {scenario}: restarting deploy/{s.deployment} at {s.sequence[0]} "
                     "replicas (annotations outlive a scenario)")
        self.cluster.scale(s.sequence[0], restart_at=stamp)
        self.record(RESTARTED, scenario=scenario, restarted_at=stamp, replicas=s.sequence[0],
                    revision_before=before["revision"], hash_before=before["hash"])

        def rolled() -> Optional[dict]:
            work = self.cluster.workload()
            if work["revision"] is None or (before["revision"] is not None
                                            and work["revision"] <= before["revision"]):
                return None
            pods = self.cluster.summaries(work["all"])
            current = [p for p in pods if p["hash"] == work["hash"]]
            others = [p for p in pods if p["hash"] != work["hash"]]
            if others or len([p for p in current if active(p)]) != s.sequence[0] \
                    or not all(p["ready"] for p in current if active(p)) \
                    or any(not active(p) for p in current):
                return None
            return {"revision": work["revision"], "hash": work["hash"], "pods": pods}

        try:
            done = self._wait(f"the restart of deploy/{s.deployment}", rolled, s.timeout)
        except Aborted:
            work = self.cluster.workload()
            self.record(ROLLOUT, scenario=scenario, done=False, revision=work["revision"],
                        hash=work["hash"], pods=self.cluster.summaries(work["all"]))
            raise
        self.record(ROLLOUT, scenario=scenario, done=True, **done)

    def settle_nodeclaims(self, scenario: str) -> None:
        claims = self.cluster.nodeclaims()
        if claims is None:
            self.record(SETTLED_NODECLAIMS, scenario=scenario, crd=False, nodeclaims=[])
            raise Aborted("the API serves no NodeClaims: is Karpenter installed?")
        if claims:
            self.ctx.progress(f"waiting for {len(claims)} {self.s.nodepool} NodeClaim(s) of an "
                              "earlier run to go (consolidation after 30 s)")
        try:
            self._wait(f"the {self.s.nodepool} NodeClaims to go",
                       lambda: (self.cluster.nodeclaims() or []) == [], self.s.timeout)
        except Aborted:
            self.record(SETTLED_NODECLAIMS, scenario=scenario, crd=True, settled=False,
                        nodeclaims=self.cluster.nodeclaims() or [])
            raise
        self.record(SETTLED_NODECLAIMS, scenario=scenario, crd=True, settled=True,
                    waited_for=[c["name"] for c in claims])

    def scale_up(self, scenario: str, step: int, target: int) -> None:
        ctx, s, cluster = self.ctx, self.s, self.cluster
        before = cluster.workload()
        claims_before = {c["name"] for c in cluster.nodeclaims() or []}
        sent = ctx.clock()
        cluster.scale(target)
        answered = ctx.clock()
        self.record(SCALED, scenario=scenario, step=step, replicas=target,
                    replicas_before=len([p for p in cluster.summaries(before["current"]) if active(p)]),
                    sent=iso(sent), answered=iso(answered),
                    pods_before=[p["metadata"]["name"] for p in before["current"]])
        ctx.progress(f"scenario {scenario}: scaled to {target}; waiting for the NodeClaim and "
                     f"{target} Ready pods")
        seen_claim: Optional[str] = None
        start = ctx.monotonic()
        last_progress = -1e9
        while True:
            claims = cluster.nodeclaims() or []
            new = [c for c in claims if c["name"] not in claims_before]
            if new and seen_claim is None:
                seen_claim = iso(ctx.clock())
            work = cluster.workload()
            pods = cluster.summaries(work["current"])
            live = [p for p in pods if active(p)]
            ready = [p for p in live if p["ready"]]
            self.record(SCALEUP_POLL, scenario=scenario, step=step, active=len(live),
                        ready=len(ready), pending=len([p for p in live if not p["node"]]),
                        nodeclaims=[c["name"] for c in new])
            if len(live) == target and len(ready) == target:
                break
            elapsed = ctx.monotonic() - start
            if elapsed >= s.timeout:
                self.record(SCALEUP, scenario=scenario, step=step, done=False, replicas=target,
                            sent=iso(sent), answered=iso(answered), nodeclaims=new, pods=pods,
                            nodes=cluster.nodes(), first_nodeclaim_seen=seen_claim,
                            all_ready_seen=None)
                raise Aborted(f"{target} pods Ready: {len(ready)} after {s.timeout:g} s")
            if elapsed - last_progress >= 5:
                last_progress = elapsed
                ctx.progress(f"  {elapsed:.0f} s: {len(ready)}/{target} Ready, "
                             f"{len(new)} new NodeClaim(s)")
            ctx.sleep(s.interval)
        self.record(SCALEUP, scenario=scenario, step=step, done=True, replicas=target,
                    sent=iso(sent), answered=iso(answered), nodeclaims=new, pods=pods,
                    nodes=cluster.nodes(), first_nodeclaim_seen=seen_claim,
                    all_ready_seen=iso(ctx.clock()))

    def settle_costs(self, scenario: str) -> None:
        """Before the first scale-in: B and C, Kyverno's "1" on every hybrid pod; C, Karpenter's
        ranks on the cloud pods (it re-ranks at most once a minute)."""
        if scenario == "A":
            return
        ctx, s = self.ctx, self.s
        timeout = s.rank_timeout if scenario == "C" else s.within

        def settled(pods: list[dict]) -> bool:
            live = [p for p in pods if active(p)]
            if not costs_settled(scenario, live):
                return False
            if scenario == "C":
                return all(cost_of(p["cost"]) < 0 for p in live if p["place"] == "cloud")
            return True

        if scenario == "C":
            ctx.progress(f"scenario C: waiting up to {timeout:g} s for Karpenter to rank the "
                         "cloud pods")
        start = ctx.monotonic()
        while True:
            pods = self.cluster.summaries()
            waited = round(ctx.monotonic() - start, 3)
            if settled(pods) or waited >= timeout:
                break
            ctx.sleep(s.interval)
        self.record(COSTS_SETTLED, scenario=scenario, settled=settled(pods), waited=waited,
                    timeout=timeout, pods=pods)

    def scale_in(self, scenario: str, step: int, target: int) -> None:
        from rehearse import predict

        ctx, s, cluster = self.ctx, self.s, self.cluster
        work = cluster.workload()
        nodes = cluster.nodes()
        snapshot = cluster.summaries(work["current"])
        # The controller sorts later, by the API server's clock: measured here, bounded.
        offset = clock_window.measure_offset(ctx.kube, ctx.clock)
        now = ctx.clock()
        self.record(SNAPSHOT, scenario=scenario, step=step, replicas=target,
                    replicas_before=len([p for p in snapshot if active(p)]), pods=snapshot,
                    nodes=nodes, raw_pods=[pod_for_forecast(p) for p in work["current"]],
                    # None: the same pods (one ReplicaSet), not written twice.
                    raw_related=None if [p["metadata"]["name"] for p in work["related"]]
                    == [p["metadata"]["name"] for p in work["current"]]
                    else [pod_for_forecast(p) for p in work["related"]], now=iso(now),
                    server_offset=offset)
        try:
            forecast = predict.forecast(work["current"], work["related"], target, now,
                                        clock_window.window(offset))
        except KeyboardInterrupt:
            raise
        except Exception as error:  # noqa: BLE001 a forecast that fails is reported, not fatal
            self.record(FORECAST, scenario=scenario, step=step, ok=False,
                        error=f"{type(error).__name__}: {error}"[:300])
        else:
            self.record(FORECAST, scenario=scenario, step=step, ok=True, **forecast_event(forecast))
        sent = ctx.clock()
        cluster.scale(target)
        answered = ctx.clock()
        self.record(SCALED, scenario=scenario, step=step, replicas=target,
                    replicas_before=len([p for p in snapshot if active(p)]),
                    sent=iso(sent), answered=iso(answered))
        ctx.progress(f"scenario {scenario}: scaled {len([p for p in snapshot if active(p)])} → {target}")
        names = {p["name"] for p in snapshot if active(p)}
        terminating: dict[str, dict] = {}
        gone: dict[str, str] = {}
        start = ctx.monotonic()
        while True:
            pods = cluster.summaries(cluster.burst_pods())
            by_name = {p["name"]: p for p in pods}
            for name in names:
                pod = by_name.get(name)
                if pod is None:
                    gone.setdefault(name, iso(ctx.clock()))
                elif not active(pod):
                    terminating.setdefault(name, pod)
                    if pod["disruption_target"] and not terminating[name]["disruption_target"]:
                        terminating[name] = pod
            live = [p for p in pods if active(p) and p["hash"] == work["hash"]]
            leaving = [p for p in pods if not active(p)]
            self.record(STEP_POLL, scenario=scenario, step=step, active=len(live),
                        ready=len([p for p in live if p["ready"]]),
                        terminating=[p["name"] for p in leaving],
                        new=[p["name"] for p in pods if p["name"] not in names])
            if len(live) == target and all(p["ready"] for p in live) and not leaving:
                done = True
                break
            if ctx.monotonic() - start >= s.timeout:
                done = False
                break
            ctx.sleep(s.interval)
        removed = []
        before = {p["name"]: p for p in snapshot}
        for name in sorted(set(gone) | set(terminating)):
            seen = terminating.get(name)
            removed.append({**before[name], "seen_terminating": seen is not None,
                            "cost_at_deletion": seen["cost"] if seen else None,
                            "disruption_target": seen["disruption_target"] if seen else None,
                            "gone_at": gone.get(name)})
        self.record(STEP, scenario=scenario, step=step, done=done, replicas=target,
                    removed=removed, created=[p for p in pods if p["name"] not in names],
                    after=[p for p in pods if p["name"] not in gone], nodes=cluster.nodes())
        if not done:
            raise Aborted(f"the scale-in to {target}: not settled after {s.timeout:g} s")

    def watch(self, scenario: str) -> None:
        """After the last scale-in: the situation (which cloud nodes' burst pods would fit in
        the hybrid nodes' free room, worked out at report time from what is recorded here),
        then ``--watch`` seconds of Karpenter's decisions — every NodeClaim and node that goes,
        every burst pod that goes or appears and where, every event of Karpenter's."""
        ctx, s, cluster = self.ctx, self.s, self.cluster
        if s.watch <= 0:
            self.record(WATCH_SKIPPED, scenario=scenario, reason="--watch 0")
            return
        every = max(s.interval, min(WATCH_EVERY, s.watch))
        nodes = cluster.nodes()
        work = cluster.workload()
        pods = cluster.summaries(work["all"])
        claims = cluster.nodeclaims() or []
        pool = cluster.get("NodePool", s.nodepool)
        disruption = ((pool or {}).get("spec") or {}).get("disruption") or {}
        events = cluster.karpenter_events()
        hybrid = [n["name"] for n in nodes if n["place"] == "hybrid"]
        started = iso(ctx.clock())
        self.record(WATCH_STARTED, scenario=scenario, seconds=s.watch, every=every, at=started,
                    nodes=nodes, pods=pods, nodeclaims=claims,
                    hybrid_neighbours=cluster.hybrid_neighbours(hybrid),
                    deployment=deployment_summary(work["deployment"]),
                    nodepool={"name": s.nodepool, "found": pool is not None,
                              "consolidation_policy": disruption.get("consolidationPolicy"),
                              "consolidate_after": disruption.get("consolidateAfter"),
                              "budgets": disruption.get("budgets")},
                    events=events)
        ctx.progress(f"scenario {scenario}: watching Karpenter for {s.watch:g} s (does it move "
                     "cloud pods onto the hybrid nodes' free room?)")
        seen_claims = {c["name"]: c for c in claims}
        seen_nodes = {n["name"]: n for n in nodes}
        seen_pods = {p["name"]: p for p in pods}
        seen_events = {e["key"]: e for e in events}
        changes: list[dict] = []
        start = ctx.monotonic()
        last_progress = 0.0
        while True:
            ctx.sleep(every)
            at = iso(ctx.clock())
            now_claims = {c["name"]: c for c in cluster.nodeclaims() or []}
            for name, claim in seen_claims.items():
                if name not in now_claims:
                    changes.append({"at": at, "what": "nodeclaim deleted", "name": name,
                                    "node": claim.get("node")})
                elif now_claims[name]["deleting"] and not claim["deleting"]:
                    changes.append({"at": at, "what": "nodeclaim deleting", "name": name,
                                    "node": now_claims[name].get("node")})
            for name, claim in now_claims.items():
                if name not in seen_claims:
                    changes.append({"at": at, "what": "nodeclaim created", "name": name,
                                    "node": claim.get("node")})
            now_nodes = {n["name"]: n for n in cluster.nodes()}
            for name, node in seen_nodes.items():
                if name not in now_nodes:
                    changes.append({"at": at, "what": "node gone", "name": name,
                                    "place": node["place"]})
            for name, node in now_nodes.items():
                if name not in seen_nodes:
                    changes.append({"at": at, "what": "node appeared", "name": name,
                                    "place": node["place"]})
            now_pods = {p["name"]: p for p in cluster.summaries()}
            for name, pod in seen_pods.items():
                now = now_pods.get(name)
                if now is None:
                    if active(pod):
                        changes.append({"at": at, "what": "pod gone", "name": name,
                                        "node": pod["node"], "place": pod["place"],
                                        "disruption_target": pod["disruption_target"]})
                elif active(pod) and not active(now):
                    changes.append({"at": at, "what": "pod terminating", "name": name,
                                    "node": now["node"], "place": now["place"],
                                    "disruption_target": now["disruption_target"]})
                elif now["node"] and now["node"] != pod["node"]:
                    changes.append({"at": at, "what": "pod bound", "name": name,
                                    "node": now["node"], "place": now["place"]})
            for name, pod in now_pods.items():
                if name not in seen_pods:
                    changes.append({"at": at, "what": "pod created", "name": name,
                                    "node": pod["node"], "place": pod["place"]})
            for event in cluster.karpenter_events():
                before = seen_events.get(event["key"])
                if before is None or (before["count"], before["last"]) != (event["count"], event["last"]):
                    changes.append({"at": at, "what": "event", **event})
                seen_events[event["key"]] = event
            seen_claims, seen_nodes = now_claims, now_nodes
            seen_pods = now_pods
            elapsed = ctx.monotonic() - start
            if elapsed >= s.watch:
                break
            if elapsed - last_progress >= 30:
                last_progress = elapsed
                ctx.progress(f"  {elapsed:.0f} s: {len(now_claims)} NodeClaim(s), "
                             f"{len([c for c in changes if c['what'] != 'event'])} change(s), "
                             f"{len([c for c in changes if c['what'] == 'event'])} event(s)")
        self.record(WATCH_DONE, scenario=scenario, started=started, ended=iso(ctx.clock()),
                    watched=round(ctx.monotonic() - start, 3), changes=changes,
                    nodes=sorted(seen_nodes.values(), key=lambda n: n["name"]),
                    nodeclaims=list(seen_claims.values()),
                    pods=sorted(seen_pods.values(), key=lambda p: p["name"]))

    def run_scenario(self, scenario: str) -> None:
        s, ctx = self.s, self.ctx
        try:
            self.restart(scenario)
            self.settle_nodeclaims(scenario)
        except Aborted as stopped:
            self.record(REFUSED, scenario=scenario, reasons=[str(stopped)])
            ctx.progress(f"scenario {scenario}: not measured: {stopped}")
            return
        observed = observe_preconditions(ctx, self.cluster, scenario, "before-run",
                                         watch_whole_window=scenario == "A")
        self.record(PRECONDITIONS, **observed)
        checks = scenario_checks(observed)
        verdict = in_place(scenario, checks)
        if verdict.status == FAIL:
            self.record(REFUSED, scenario=scenario,
                        reasons=[f"{c.name}: {c.seen}" for c in checks if c.status == FAIL])
            ctx.progress(f"scenario {scenario}: {verdict.seen}")
            return
        try:
            for step, (previous, target) in enumerate(zip(s.sequence, s.sequence[1:]), start=1):
                if step > 1:
                    ctx.sleep(s.pause)
                if target > previous:
                    self.scale_up(scenario, step, target)
                    self.settle_costs(scenario)
                else:
                    self.scale_in(scenario, step, target)
        except Aborted as stopped:
            self.record(ABORTED, scenario=scenario, reason=str(stopped))
            ctx.progress(f"scenario {scenario}: stopped: {stopped}")
            return
        self.watch(scenario)
        self.record(DONE, scenario=scenario)


def forecast_event(forecast: Any) -> dict:
    return {"replicas_before": forecast.replicas_before, "replicas_after": forecast.replicas_after,
            "delete": [asdict(v) for v in forecast.delete], "order": list(forecast.order),
            "clock_undecided": list(forecast.clock_undecided), "window": forecast.window}


def _settings_event(settings: Settings) -> dict:
    return {**asdict(settings), "sequence": list(settings.sequence),
            "scenarios": list(settings.scenarios), "peak": settings.peak,
            "on_hybrid": settings.on_hybrid}


def collect_verify(ctx: Any, record: Any) -> None:
    settings = settings_from(ctx, "verify")
    record(SETTINGS, **_settings_event(settings))
    cluster = Cluster(ctx, settings)
    observed = observe_preconditions(ctx, cluster, settings.stack_scenario, "verify",
                                     watch_whole_window=False)
    record(PRECONDITIONS, **observed)


def collect(ctx: Any, record: Any) -> None:
    settings = settings_from(ctx, "burst")
    record(SETTINGS, **_settings_event(settings))
    runner = Runner(ctx, record, settings)
    deployed = settings.stack_scenario
    switcher = Switcher(ctx, record)
    switching = any(x != deployed for x in settings.scenarios)
    if switching:
        # Before anything changes: a stack named, and someone to confirm each plan.
        require_stack(ctx, "burst --scenarios")
        require_confirmation(ctx, "burst --scenarios")
        original = switcher.read_original()
        record(ORIGINAL, deployed=deployed, config=original)
        if (original or "A") != deployed:
            ctx.progress(f"note: the stack's config says burstScenario {original or 'A (default)'} "
                         f"but {deployed} is deployed; it is put back to {original or 'the default'}")
    before = runner.cluster.get("Deployment", settings.deployment, settings.namespace)
    if before is None:
        raise RunError(f"no Deployment {settings.namespace}/{settings.deployment}: the demo layer "
                       "deploys it (`pulumi up`)")
    replicas_before = (before.get("spec") or {}).get("replicas")
    current = deployed
    try:
        for scenario in settings.scenarios:
            if scenario != current:
                ctx.progress(f"switching to scenario {scenario} ({SCENARIO_WORDS[scenario]})")
                result = switcher.switch(scenario)
                record(SWITCHED, scenario=scenario, previous=current, **result)
                if result.get("refused") or result.get("declined"):
                    # Nothing applied: the stack is still on `current`.
                    record(REFUSED, scenario=scenario,
                           reasons=[f"burstScenario {scenario} not applied: {result['error']}"])
                    ctx.progress(f"scenario {scenario}: not applied: {result['error']}")
                    continue
                current = scenario
                if not result["ok"]:
                    record(REFUSED, scenario=scenario,
                           reasons=[f"pulumi up for burstScenario {scenario} failed: {result['error']}"])
                    continue
            runner.run_scenario(scenario)
    finally:
        # Back to the size it had (a run stopped at 15 would keep paying for the cloud nodes;
        # `pulumi up` does not see a replica count changed behind its back).
        if replicas_before is not None:
            try:
                runner.cluster.scale(int(replicas_before))
                record(REPLICAS_BACK, replicas=replicas_before)
            except Exception as error:  # noqa: BLE001 best effort; the run's result stands
                record(REPLICAS_BACK, replicas=replicas_before, error=str(error)[:200])
        if switcher.changed:
            try:
                result = switcher.restore()
            except BaseException as error:
                if isinstance(error, RestoreBlocked):
                    message = (f"could not put burstScenario back to "
                               f"{switcher.original or 'the default'}: {error}")
                else:
                    message = (f"could not put burstScenario back to {switcher.original or 'the default'}: "
                               f"{_pulumi_error(error)}; run `pulumi config set burstScenario "
                               f"{switcher.original or 'A'}` and `pulumi up`")
                record(RESTORED, scenario=switcher.original, ok=False, error=message)
                ctx.progress(message)
                raise RunError(message) from None
            if result.get("applied"):
                back = switcher.original or "A"
                try:
                    result["costs_cleared"] = clear_costs(runner.cluster, back)
                except Exception as error:  # noqa: BLE001 said in the report, with the command
                    result["costs_error"] = (f"{str(error)[:200]}: remove them with `kubectl -n "
                                             f"{settings.namespace} annotate pod -l app={settings.app} "
                                             f"{COST}-` (or `kubectl rollout restart`)")
            record(RESTORED, scenario=switcher.original, **result)


# --- the analysis (pure: events -> report) ---------------------------------------------------------

def rank_of(pods: list[dict], pod: dict) -> int:
    """Related active pods on the pod's node, itself included (REFERENCE §6, rule 5)."""
    return len([p for p in pods if active(p) and p.get("node") == pod.get("node")])


@dataclass
class StepRow:
    step: int
    before: int
    after: int
    hybrid: tuple[int, int]
    cloud: tuple[int, int]
    removed: list[dict] = field(default_factory=list)
    evicted: list[dict] = field(default_factory=list)
    forecast: Optional[list[dict]] = None
    forecast_error: Optional[str] = None
    forecast_note: Optional[str] = None
    verdict: str = ""  # "", "same", "explained", "unexplained"
    explanation: str = ""
    done: bool = True
    #: The pods before the scale-in (the snapshot the forecast was made from).
    snapshot: list[dict] = field(default_factory=list)
    #: Cloud-burst nodes still holding burst pods after the step.
    cloud_nodes: int = 0


def _counts(pods: Iterable[dict]) -> tuple[int, int]:
    live = [p for p in pods if active(p)]
    return (len([p for p in live if p.get("place") == "hybrid"]),
            len([p for p in live if p.get("place") == "cloud"]))


def compare(snapshot: list[dict], victims: list[dict], forecast: Optional[dict],
            evicted: list[dict], after: Sequence[dict] = ()) -> tuple[str, str]:
    """The scale-in's victims against the forecast: (verdict, explanation). A divergence is
    explained when Karpenter evicted pods during the step (the ReplicaSet then had fewer pods to
    remove), when a cost changed between the snapshot and the scale-in (Karpenter re-ranks), or
    when the forecast marked the choice a tie (the controller breaks those at random) and the
    pods removed instead have the same cost and rank; otherwise it is unexplained."""
    if forecast is None:
        return "", "no forecast recorded"
    if not forecast.get("ok", True):
        return "", f"no forecast: {forecast.get('error')}"
    predicted = {v["name"] for v in forecast.get("delete") or []}
    measured = {v["name"] for v in victims}
    missing, extra = sorted(predicted - measured), sorted(measured - predicted)
    if not missing and not extra:
        return "same", ""
    by_name = {p["name"]: p for p in snapshot}
    later = {p["name"]: p.get("cost") for p in after}
    later.update({v["name"]: v.get("cost_at_deletion") for v in victims if v.get("seen_terminating")})

    def key(name: str) -> tuple[int, int]:
        pod = by_name.get(name) or {}
        return cost_of(pod.get("cost")), rank_of(snapshot, pod)

    reasons = []
    if evicted:
        reasons.append(f"Karpenter evicted {', '.join(p['name'] for p in evicted)} during the "
                       "step (DisruptionTarget): an eviction is not the scale-in's choice, and "
                       "the ReplicaSet had that many fewer pods to remove")
    changed = [n for n in missing + extra if n in later and n in by_name
               and later[n] != by_name[n].get("cost")]
    if changed:
        reasons.append("costs changed between the snapshot and the scale-in: " + ", ".join(
            f"{n} {by_name[n].get('cost')!r} → {later[n]!r}" for n in changed) +
                       " (Karpenter re-ranks at most once a minute)")
    clock = set(forecast.get("clock_undecided") or [])
    if (missing or extra) and set(missing) | set(extra) <= clock:
        reasons.append(f"the controller's clock: {', '.join(sorted(clock))} were undecided, each "
                       "going at some controller clocks of the window "
                       f"({forecast.get('window') or 'sync lag and skew'}) and staying at others "
                       "(an age crossing a log2 bucket edge)")
    ties = {v["name"] for v in forecast.get("delete") or [] if v.get("tie")}
    if missing and len(missing) == len(extra) and set(missing) <= ties \
            and sorted(key(n) for n in missing) == sorted(key(n) for n in extra):
        reasons.append(f"a tie: the forecast marked {', '.join(missing)} as chosen at random "
                       f"among equal pods, and {', '.join(extra)} (same cost and rank) went instead")
    if reasons:
        return "explained", "; ".join(reasons)
    detail = (f"forecast {', '.join(missing) or 'no other pod'}, the cluster removed "
              f"{', '.join(extra) or 'no other pod'} — " + ", ".join(
                  f"{n} (cost {key(n)[0]}, rank {key(n)[1]})" for n in missing + extra))
    return "unexplained", (detail + ": no tie, eviction or cost change explains it; check the "
                           "cluster's kube-controller-manager against REFERENCE §6, and the "
                           "predictor")


@dataclass
class ScenarioResult:
    scenario: str
    checks: list[Check] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    rows: list[StepRow] = field(default_factory=list)
    start: Optional[tuple[int, int]] = None
    refused: list[str] = field(default_factory=list)
    aborted: Optional[str] = None
    nodeclaim_s: Optional[float] = None
    ready_s: Optional[float] = None
    #: The consolidation watch's answer (consolidation_answer), None when not reached.
    consolidation: Optional[dict] = None

    @property
    def states(self) -> list[tuple[str, int, int]]:
        """(label, hybrid, cloud) at the start and after each step: the chart's bars."""
        out = []
        if self.start is not None:
            out.append(("start", *self.start))
        for row in self.rows:
            out.append((str(row.after), row.hybrid[1], row.cloud[1]))
        return out


def _whole(seconds: float) -> float:
    return round(seconds, 3)


def _scaleup_measurements(scenario: str, done: dict, scaled: dict
                          ) -> tuple[list[Measurement], Optional[float], Optional[float]]:
    """The scale to the peak: to the first NodeClaim and to all Ready, on the cluster's clock
    (the scale's moment is the first pod it created)."""
    pods = done.get("pods") or []
    before = set(scaled.get("pods_before") or [])
    created = sorted(parse_time(p["created"]) for p in pods if p["name"] not in before and p.get("created"))
    claims = sorted((c for c in done.get("nodeclaims") or [] if c.get("created")),
                    key=lambda c: c["created"])
    sent = parse_time(scaled["sent"])
    if not created:
        return ([Measurement(check_name(scenario, M_NODECLAIM), None, "s", SEED_NODECLAIM,
                             "no pod was created by the scale"),
                 Measurement(check_name(scenario, M_READY), None, "s", SEED_READY, "")], None, None)
    origin = created[0]
    nodeclaim_s = ready_s = None
    ms = []
    if claims:
        first_claim = claims[0]
        nodeclaim_s = _whole((parse_time(first_claim["created"]) - origin).total_seconds())
        local = (f"; this machine saw it {(parse_time(done['first_nodeclaim_seen']) - sent).total_seconds():.1f} s "
                 "after sending the scale" if done.get("first_nodeclaim_seen") else "")
        ms.append(Measurement(check_name(scenario, M_NODECLAIM), nodeclaim_s, "s", SEED_NODECLAIM,
                              f"NodeClaim {first_claim['name']} created {first_claim['created']} − the "
                              f"scale (the first new pod created {iso(origin)}); the API server's "
                              f"clock, whole seconds (±1 s){local}"))
    else:
        ms.append(Measurement(check_name(scenario, M_NODECLAIM), None, "s", SEED_NODECLAIM,
                              "no NodeClaim of the pool was created: did the overflow fit elsewhere?"))
    ready = [parse_time(p["ready_at"]) for p in pods if active(p) and p.get("ready_at")]
    if done.get("done") and ready:
        ready_s = _whole((max(ready) - origin).total_seconds())
        local = (f"; this machine saw all Ready {(parse_time(done['all_ready_seen']) - sent).total_seconds():.1f} s "
                 "after sending the scale" if done.get("all_ready_seen") else "")
        ms.append(Measurement(check_name(scenario, M_READY), ready_s, "s", SEED_READY,
                              f"the last Ready condition ({iso(max(ready))}) − the scale; the "
                              f"pods' own conditions, whole seconds{local}"))
    else:
        ms.append(Measurement(check_name(scenario, M_READY), None, "s", SEED_READY,
                              f"not all {done.get('replicas')} Ready (see the checks)"))
    return ms, nodeclaim_s, ready_s


def _victim_text(pod: dict) -> str:
    cost = "no cost" if pod.get("cost") is None else f"cost {pod['cost']}"
    return f"{pod['name']} ({pod.get('place') or '?'}, {pod.get('node') or 'no node'}, {cost})"


def _rule_check(scenario: str, rows: list[StepRow], snapshots: dict[int, list[dict]],
                settled: Optional[dict]) -> Check:
    """What the scenario should show (REFERENCE §6): A — nobody writes costs and rule 5
    decides (the pods on the nodes holding the most burst pods go first); B — every cost-0
    cloud pod goes before any cost-1 hybrid pod; C — Karpenter's negative-cost cloud pods
    first, then cost 0, then hybrid (1)."""
    name = check_name(scenario, C_RULE)
    problems, facts = [], []
    for row in rows:
        if not row.removed and not row.evicted:
            continue
        snapshot = snapshots.get(row.step) or []
        live = [p for p in snapshot if active(p)]
        victims = {v["name"] for v in row.removed}
        kept = [p for p in live if p["name"] not in victims and p["name"] not in {e["name"] for e in row.evicted}]
        gone = [p for p in live if p["name"] in victims]
        if not gone or not kept:
            continue
        label = f"{row.before} → {row.after}"
        if scenario == "A":
            costs = [p for p in live if p.get("cost") is not None]
            if costs:
                problems.append(f"{label}: pods carried costs in A ({_pods_text(costs)})")
            low = min(rank_of(live, p) for p in gone)
            high = max(rank_of(live, p) for p in kept)
            if low < high:
                problems.append(f"{label}: a pod on a node with {low} burst pods went while one on "
                                f"a node with {high} stayed")
            else:
                facts.append(f"{label}: removed from nodes holding ≥ {low} burst pods")
        else:
            top = max(cost_of(p.get("cost")) for p in gone)
            bottom = min(cost_of(p.get("cost")) for p in kept)
            if top > bottom:
                problems.append(f"{label}: a pod with cost {top} went while one with cost {bottom} "
                                "stayed")
            hybrid_gone = [p for p in gone if p.get("place") == "hybrid"]
            cloud_kept = [p for p in kept if p.get("place") == "cloud"]
            if hybrid_gone and cloud_kept:
                problems.append(f"{label}: hybrid pods went ({', '.join(p['name'] for p in hybrid_gone)}) "
                                f"while cloud pods stayed ({', '.join(p['name'] for p in cloud_kept)})")
            facts.append(f"{label}: removed cost ≤ {top}, kept ≥ {bottom}"
                         + (f" ({len(hybrid_gone)} hybrid pods went, no cloud pod left)"
                            if hybrid_gone else ""))
    if scenario == "C":
        pods = (settled or {}).get("pods") or []
        cloud = [p for p in pods if active(p) and p.get("place") == "cloud"]
        ranked = [p for p in cloud if cost_of(p.get("cost")) < 0]
        if cloud and not ranked:
            problems.append(f"no cloud pod carried Karpenter's negative cost before the first "
                            f"scale-in (waited {(settled or {}).get('waited', 0):g} s): C looked like B")
        elif cloud:
            facts.append(f"Karpenter ranked {len(ranked)} of {len(cloud)} cloud pods "
                         f"({', '.join(sorted({str(p['cost']) for p in ranked}))})")
    if problems:
        return Check(name, FAIL, "; ".join(problems),
                     "see the step table: the scenario's writers or the controller did not act as "
                     "REFERENCE §6 says")
    if not facts:
        return Check(name, SKIP, "no scale-in measured")
    return Check(name, PASS, "; ".join(facts))


# --- the consolidation watch (pure) ---------------------------------------------------------------

EXPECTATION = ("Karpenter disrupts no cloud node whose burst pods would fit in the hybrid "
               "nodes' free room: it does not manage hybrid nodes (no NodeClaim), though it "
               "counts them as capacity when simulating consolidation (REFERENCE §4)")


#: Under WhenEmpty, Karpenter's consolidation methods skip non-empty nodes without an event
#: (kubernetes-sigs/karpenter, disruption/consolidation.go ShouldDisrupt); only Emptiness acts.
WHEN_EMPTY_NOTE = ("with consolidationPolicy WhenEmpty Karpenter considers only empty nodes and "
                   "says nothing about the others (no Unconsolidatable event), so this shows the "
                   "policy at work; whether its consolidation simulation would use the hybrid "
                   "room (REFERENCE §4: it counts hybrid nodes as capacity) is put to the test "
                   "only under WhenEmptyOrUnderutilized")


def hybrid_room(situation: dict) -> dict:
    """From the watch's starting situation: the free burst-pod slots on each hybrid node (what
    fits by allocatable less the other pods' requests, as ``capacity``, less the burst pods
    already there), and for each cloud node whether its burst pods would all fit in them (the
    burst pods are alike, so counting slots is the bin packing)."""
    found = capacity(situation)
    pods = [p for p in situation.get("pods") or [] if active(p)]
    request = found["request_cpu_m"] or 0
    hybrid, room = [], 0
    for row in found["nodes"]:
        on = len([p for p in pods if p.get("node") == row["node"]])
        free = max(row["fit"] - on, 0) if row["eligible"] else 0
        hybrid.append({"node": row["node"], "eligible": row["eligible"], "fit": row["fit"],
                       "burst_pods": on, "free_slots": free,
                       "free_cpu_m": row["free_cpu_m"] - on * request})
        room += free
    claims = {c.get("node"): c["name"] for c in situation.get("nodeclaims") or [] if c.get("node")}
    cloud = []
    for node in situation.get("nodes") or []:
        if node["place"] != "cloud":
            continue
        mine = sorted(p["name"] for p in pods if p.get("node") == node["name"])
        cloud.append({"node": node["name"], "nodeclaim": claims.get(node["name"]), "pods": mine,
                      "fits": bool(mine) and len(mine) <= room})
    return {"request_cpu_m": found["request_cpu_m"], "hybrid": hybrid, "room": room,
            "cloud": cloud}


def consolidation_answer(started: Optional[dict], done: Optional[dict],
                         skipped: Optional[dict]) -> Optional[dict]:
    """The answer to the question for one scenario, with its evidence (a dict: the report's
    section, its JSON and the check read it)."""
    if skipped is not None:
        return {"status": SKIP, "answer": f"not watched ({skipped.get('reason') or '--watch 0'})"}
    if started is None:
        return None
    room = hybrid_room(started)
    policy = started.get("nodepool") or {}
    base = {"expectation": EXPECTATION, "room": room, "seconds": started.get("seconds"),
            "consolidation_policy": policy.get("consolidation_policy"),
            "consolidate_after": policy.get("consolidate_after"),
            "note": WHEN_EMPTY_NOTE if policy.get("consolidation_policy") == "WhenEmpty" else None}
    if done is None:
        return {**base, "status": FAIL, "answer": "the watch did not finish (not recorded)",
                "disrupted": [], "events": [], "moved": [], "created": []}
    changes = done.get("changes") or []
    by_claim = {c["name"]: c.get("node") for c in started.get("nodeclaims") or []}
    by_claim.update({c["name"]: c.get("node") for c in changes
                     if c["what"].startswith("nodeclaim") and c.get("node")})
    cloud = {c["node"]: c for c in room["cloud"]}
    events = [c for c in changes if c["what"] == "event"]
    # A disruption: its NodeClaim deleted (or deleting), its node gone, or Karpenter saying
    # DisruptionTerminating about either.
    disrupted: dict[str, dict] = {}

    def mark(node: Optional[str], why: str, at: str, reason: Optional[str] = None) -> None:
        if node:
            entry = disrupted.setdefault(node, {"node": node, "evidence": [], "reasons": [],
                                                "at": at})
            if why not in entry["evidence"]:
                entry["evidence"].append(why)
            if reason and reason not in entry["reasons"]:
                entry["reasons"].append(reason)

    for c in changes:
        if c["what"] in ("nodeclaim deleted", "nodeclaim deleting"):
            mark(c.get("node") or by_claim.get(c["name"]), f"NodeClaim {c['name']} "
                 f"{c['what'].split()[1]} at {c['at']}", c["at"])
        elif c["what"] == "node gone" and c.get("place") == "cloud":
            mark(c["name"], f"node gone at {c['at']}", c["at"])
        elif c["what"] == "event" and c.get("reason") == "DisruptionTerminating":
            node = c["object"] if c.get("kind") == "Node" else by_claim.get(c.get("object"))
            message = str(c.get("message") or "")
            why = (message.split(": ", 1)[1] if message.startswith("Disrupting ") and ": " in message
                   else message)
            mark(node, f"{c['kind']} {c['object']}: {c['reason']} \"{message}\"", c["at"],
                 f"{c['reason']} ({why})")
    gone = [c for c in changes if c["what"] in ("pod gone", "pod terminating")]
    gone = list({c["name"]: c for c in reversed(gone)}.values())[::-1]
    final = {p["name"]: p for p in done.get("pods") or []}
    created = [{**c, "node": (final.get(c["name"]) or {}).get("node") or c.get("node"),
                "place": (final.get(c["name"]) or {}).get("place") or c.get("place")}
               for c in changes if c["what"] == "pod created"]
    rows = []
    for node, entry in sorted(disrupted.items()):
        info = cloud.get(node) or {"node": node, "pods": [], "fits": False, "nodeclaim": None}
        left = [c for c in gone if c.get("node") == node]
        rows.append({**entry, "nodeclaim": info.get("nodeclaim"), "pods": info["pods"],
                     "fits": info["fits"], "pods_gone": left,
                     "evicted": [c["name"] for c in left if c.get("disruption_target")]})
    moved_to = sorted({c["node"] for c in created if c.get("node")})
    answer = {**base, "disrupted": rows, "events": events, "moved": gone, "created": created,
              "changes": len(changes)}
    offending = [r for r in rows if r["fits"]]
    candidates = [c for c in room["cloud"] if c["fits"]]
    seen = _watch_evidence(answer)
    if offending:
        parts = []
        for r in offending:
            to = sorted({c["node"] for c in created if c.get("node") and c.get("place") == "hybrid"})
            parts.append(f"Karpenter disrupted {r['node']}"
                         + (f" (NodeClaim {r['nodeclaim']})" if r.get("nodeclaim") else "")
                         + (f", {'; '.join(r['reasons'])}" if r["reasons"] else "")
                         + f", which held {', '.join(r['pods'])} — they fit in the hybrid nodes' "
                         f"{room['room']} free slot(s) — and its pods moved to "
                         + (", ".join(to) or "no node yet"))
        return {**answer, "status": FAIL, "answer": "; ".join(parts), "seen": seen,
                "moved_to": moved_to}
    if not candidates:
        held = [c for c in room["cloud"] if c["pods"]]
        why = ("no cloud node held burst pods after the last scale-in" if not held else
               "no cloud node's burst pods fit in the hybrid nodes' free room ("
               + ", ".join(f"{c['node']}: {len(c['pods'])}" for c in held)
               + f" against {room['room']} free slot(s))")
        return {**answer, "status": SKIP, "answer": f"the question did not arise: {why}",
                "seen": seen, "moved_to": moved_to}
    names = ", ".join(f"{c['node']} ({len(c['pods'])} burst pod(s): {', '.join(c['pods'])})"
                      for c in candidates)
    return {**answer, "status": PASS,
            "answer": f"no disruption of a cloud node whose pods fit on hybrid: {names} could "
                      f"have moved into the hybrid nodes' {room['room']} free slot(s) and stayed "
                      f"for {done.get('watched'):g} s",
            "seen": seen, "moved_to": moved_to}


def _watch_evidence(answer: dict) -> str:
    parts = []
    for r in answer["disrupted"]:
        parts.append(f"{r['node']} disrupted ({'held ' + ', '.join(r['pods']) if r['pods'] else 'no burst pod: empty'}; "
                     + "; ".join(r["evidence"]) + ")")
    reasons: dict[str, int] = {}
    for e in answer["events"]:
        reasons[e.get("reason") or "?"] = reasons.get(e.get("reason") or "?", 0) + 1
    parts.append("Karpenter's events: " + (", ".join(f"{k} × {v}" for k, v in sorted(reasons.items()))
                                           or "none"))
    if answer["moved"]:
        parts.append("pods gone: " + ", ".join(f"{c['name']} from {c.get('node')}"
                                               + (" (evicted)" if c.get("disruption_target") else "")
                                               for c in answer["moved"]))
    if answer["created"]:
        parts.append("pods created: " + ", ".join(f"{c['name']} on {c.get('node') or 'no node'}"
                                                  for c in answer["created"]))
    if not answer["moved"] and not answer["created"]:
        parts.append("no burst pod moved")
    policy = answer.get("consolidation_policy")
    if policy:
        parts.append(f"NodePool consolidationPolicy {policy}"
                     + (f", consolidateAfter {answer['consolidate_after']}" if answer.get("consolidate_after") else ""))
    return "; ".join(parts)


def consolidation_check(scenario: str, answer: dict) -> Check:
    command = ("kubectl get events -A --field-selector source=karpenter -o wide; "
               "kubectl get nodeclaims -o wide")
    if answer["status"] == SKIP and "seen" not in answer:
        return Check(check_name(scenario, C_CONSOLIDATION), SKIP, answer["answer"])
    seen = answer["answer"] + (f" — {answer['seen']}" if answer.get("seen") else "")
    if answer["status"] == PASS and answer.get("note"):
        seen += f" (note: {answer['note']})"
    fix = ""
    if answer["status"] == FAIL:
        fix = ("expected: " + EXPECTATION + ". Read the NodePool's disruption settings (the lab "
               "sets consolidationPolicy WhenEmpty) and Karpenter's log "
               "(`kubectl -n kube-system logs deploy/karpenter | grep -i disrupt`)")
    return Check(check_name(scenario, C_CONSOLIDATION), answer["status"], seen, fix, command)


def _scenario_events(events: list[dict], scenario: str) -> list[dict]:
    return [e for e in events if e.get("scenario") == scenario]


def analyse_scenario(scenario: str, events: list[dict], settings: dict) -> ScenarioResult:
    result = ScenarioResult(scenario)
    mine = _scenario_events(events, scenario)

    def kinds(kind: str) -> list[dict]:
        return [e for e in mine if e["kind"] == kind]

    switched = next(iter(kinds(SWITCHED)), None)
    if switched is not None:
        result.checks.append(Check(
            check_name(scenario, C_SWITCH), PASS if switched.get("ok") else FAIL,
            (f"burstScenario {switched.get('previous')} → {scenario}, pulumi up took "
             f"{switched.get('seconds')} s") if switched.get("ok") else
            f"pulumi up for burstScenario {scenario} failed: {switched.get('error')}",
            "" if switched.get("ok") else "run `pulumi up` yourself to see the error; the stack's "
            "original scenario was put back", "pulumi config get burstScenario"))
    rollout = next(iter(kinds(ROLLOUT)), None)
    restarted = next(iter(kinds(RESTARTED)), None)
    observed = next(iter(kinds(PRECONDITIONS)), None)
    if observed is not None:
        checks = scenario_checks(observed)
        restart = _restart_check(scenario, restarted, rollout, observed)
        if restart is not None:
            checks.insert(0, restart)
        result.checks.append(in_place(scenario, checks))
        result.checks.extend(checks)
        result.start = _counts(_final_pods(observed))
    refused = next(iter(kinds(REFUSED)), None)
    if refused is not None:
        result.refused = list(refused.get("reasons") or [])
        if observed is None:
            if rollout is not None and not rollout.get("done"):
                result.checks.append(_restart_check(scenario, restarted, rollout, None))
            result.checks.append(Check(check_name(scenario, C_IN_PLACE), FAIL,
                                       "not in place, not measured: " + "; ".join(result.refused),
                                       "fix what the reason says, then run again"))
        return result
    aborted = next(iter(kinds(ABORTED)), None)
    result.aborted = aborted.get("reason") if aborted else None

    scaled = {e["step"]: e for e in kinds(SCALED)}
    snapshots = {e["step"]: e.get("pods") or [] for e in kinds(SNAPSHOT)}
    forecasts = {e["step"]: e for e in kinds(FORECAST)}
    for e in kinds(SNAPSHOT):
        if e["step"] in forecasts and not forecasts[e["step"]].get("ok"):
            forecasts[e["step"]] = _forecast_again(e, forecasts[e["step"]])
    settled = next(iter(kinds(COSTS_SETTLED)), None)
    previous = list(_final_pods(observed)) if observed else []
    for up in kinds(SCALEUP):
        ms, result.nodeclaim_s, result.ready_s = _scaleup_measurements(
            scenario, up, scaled.get(up["step"]) or {"sent": up["sent"]})
        result.measurements.extend(ms)
        pods = up.get("pods") or []
        row = StepRow(up["step"], len([p for p in previous if active(p)]), up["replicas"],
                      (_counts(previous)[0], _counts(pods)[0]), (_counts(previous)[1], _counts(pods)[1]),
                      done=bool(up.get("done")))
        result.rows.append(row)
        hybrid, cloud = _counts(pods)
        expected_h = settings.get("on_hybrid", 8)
        expected_c = up["replicas"] - expected_h
        status = PASS if up.get("done") and (hybrid, cloud) == (expected_h, expected_c) else FAIL
        result.checks.append(Check(
            check_name(scenario, C_SCALEUP), status,
            f"{len([p for p in pods if active(p) and p['ready']])} of {up['replicas']} Ready: "
            f"{hybrid} on hybrid nodes, {cloud} on {settings.get('nodepool')} nodes"
            + (f", {pending} Pending" if (pending := len([p for p in pods if active(p) and not p['node']]))
               else "")
            + ("" if up.get("done") else f" after {settings.get('timeout'):g} s"),
            "" if status == PASS else "the capacity check says how many fit on the hybrid nodes; "
            "pending pods: `kubectl -n {0} get pods --field-selector=status.phase=Pending` and "
            "`kubectl get nodeclaims`".format(settings.get("namespace")),
            f"kubectl -n {settings.get('namespace')} get pods -o wide"))
        previous = pods
    if settled is not None:
        ok = settled.get("settled")
        what = "every pod on a hybrid node carries \"1\"" + (
            " and every cloud pod Karpenter's negative rank" if scenario == "C" else "")
        result.checks.append(Check(
            check_name(scenario, C_COSTS_SETTLED), PASS if ok else FAIL,
            f"{what} after {settled.get('waited'):g} s" if ok else
            f"not after {settled.get('waited'):g} s: {_pods_text([p for p in settled.get('pods') or [] if active(p)])}",
            "" if ok else ("Karpenter re-ranks at most once a minute after its nodes initialize; "
                           "raise --rank-timeout, or check the gate (`kubectl -n kube-system logs "
                           "deploy/karpenter | grep -i deletioncost`)" if scenario == "C" else
                           "Kyverno is slow or failing: its background controller's log")))
    for done in kinds(STEP):
        step = done["step"]
        snapshot = snapshots.get(step) or []
        removed = done.get("removed") or []
        victims = [p for p in removed if not p.get("disruption_target")]
        evicted = [p for p in removed if p.get("disruption_target")]
        forecast = forecasts.get(step)
        row = StepRow(step, len([p for p in snapshot if active(p)]), done["replicas"],
                      (_counts(snapshot)[0], _counts(done.get("after") or [])[0]),
                      (_counts(snapshot)[1], _counts(done.get("after") or [])[1]),
                      removed=victims, evicted=evicted, done=bool(done.get("done")),
                      snapshot=snapshot,
                      cloud_nodes=len({p["node"] for p in done.get("after") or []
                                       if active(p) and p.get("place") == "cloud"}))
        if forecast is not None and forecast.get("ok"):
            row.forecast = forecast.get("delete") or []
            row.forecast_note = forecast.get("note")
        elif forecast is not None:
            row.forecast_error = forecast.get("error")
        row.verdict, row.explanation = compare(snapshot, victims, forecast, evicted,
                                               done.get("after") or [])
        result.rows.append(row)
    unexplained = [r for r in result.rows if r.verdict == "unexplained"]
    scaleins = [r for r in result.rows if r.after < r.before]
    if scaleins:
        compared = [r for r in scaleins if r.verdict]
        if unexplained:
            result.checks.append(Check(
                check_name(scenario, C_FORECAST), FAIL,
                "; ".join(f"{r.before} → {r.after}: {r.explanation}" for r in unexplained),
                "the measured outcome differs from the forecast: see the step table"))
        elif not compared:
            result.checks.append(Check(check_name(scenario, C_FORECAST), SKIP,
                                       "no forecast to compare with: " + "; ".join(
                                           sorted({r.explanation for r in scaleins}))))
        else:
            explained = [r for r in compared if r.verdict == "explained"]
            result.checks.append(Check(
                check_name(scenario, C_FORECAST), PASS,
                f"{len(compared) - len(explained)} of {len(compared)} scale-ins exactly as forecast"
                + ("; " + "; ".join(f"{r.before} → {r.after}: {r.explanation}" for r in explained)
                   if explained else "")))
        result.checks.append(_rule_check(scenario, result.rows, snapshots, settled))
    result.consolidation = consolidation_answer(next(iter(kinds(WATCH_STARTED)), None),
                                                next(iter(kinds(WATCH_DONE)), None),
                                                next(iter(kinds(WATCH_SKIPPED)), None))
    if result.consolidation is not None:
        result.checks.append(consolidation_check(scenario, result.consolidation))
    completed = next(iter(kinds(DONE)), None) is not None
    result.checks.append(Check(check_name(scenario, C_COMPLETED), PASS if completed else FAIL,
                               " → ".join(map(str, settings.get("sequence") or []))
                               if completed else f"stopped: {result.aborted or 'not recorded'}",
                               "" if completed else "the step that stopped says what it waited for"))
    return result


def _forecast_again(snapshot: dict, failed: dict) -> dict:
    """A forecast that failed when the run was made (e.g. before ``rehearse.predict`` was
    implemented), made again from the recorded snapshot: the same pods, the same clock."""
    from rehearse import predict

    try:
        forecast = predict.forecast(snapshot.get("raw_pods") or [],
                                    snapshot.get("raw_related") or snapshot.get("raw_pods") or [],
                                    snapshot["replicas"], parse_time(snapshot["now"]))
    except Exception:  # noqa: BLE001 still not available: keep the recorded failure
        return failed
    return {**failed, "ok": True, **forecast_event(forecast),
            "note": f"made at report time from the snapshot (the run's failed: {failed.get('error')})"}


def _restart_check(scenario: str, restarted: Optional[dict], rollout: Optional[dict],
                   observed: Optional[dict]) -> Optional[Check]:
    if restarted is None:
        return None
    name = check_name(scenario, C_RESTART)
    if rollout is None or not rollout.get("done"):
        return Check(name, FAIL, "the restart did not finish: " + (_pods_text(
            (rollout or {}).get("pods") or []) if rollout else "not recorded"),
                     "`kubectl -n <ns> rollout status deploy/burst` says what holds it")
    pods = rollout.get("pods") or []
    old = [p for p in pods if p.get("hash") != rollout.get("hash")]
    if old:
        return Check(name, FAIL, f"pods of an older revision remain: {_pods_text(old)}",
                     "wait for them to terminate, or delete them")
    return Check(name, PASS, f"revision {restarted.get('revision_before')} → {rollout.get('revision')}: "
                 f"{len(pods)} fresh pod(s) of {rollout.get('hash')}")


class BurstReport(Report):
    """The frame's report with demo 2's tables and chart."""

    def __init__(self, *args: Any, sections: Optional[list[str]] = None,
                 data: Optional[dict] = None, chart: Optional[dict] = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sections = sections or []
        self.data = data or {}
        self.chart = chart

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.data:
            out["demo2"] = self.data
        if self.chart:
            out["chart"] = "chart.png"
        return out

    def to_markdown(self) -> str:
        text = super().to_markdown()
        if not self.sections:
            return text
        head, sep, tail = text.partition("## Checklist")
        return head + "\n".join(self.sections).rstrip() + "\n\n" + sep + tail

    def write(self, folder: Path) -> None:
        if self.chart:
            from rehearse import chart as charts

            charts.write_burst_chart(folder / "chart.png", self.chart["title"], self.chart["panels"])
        super().write(folder)


def analyse(events: list[dict]) -> Report:
    started = first(events, RUN_STARTED) or {}
    settings = first(events, SETTINGS) or {}
    mode = settings.get("mode") or ("verify" if started.get("command") == "verify burst" else "burst")
    title = "Demo 2: " + ("ready to burst" if mode == "verify" else "scale-in under scenarios "
                          + "/".join(settings.get("scenarios") or []))
    report = BurstReport(command=started.get("command", "burst"), stack=started.get("stack", "?"),
                         started=started.get("at", "?"), title=title)
    if mode == "verify":
        return _analyse_verify(events, settings, report)
    return _analyse_burst(events, settings, report)


def _common_checks(observed: Optional[dict], settings: dict) -> list[Check]:
    if observed is None:
        return []
    return [nodepool_check(observed, settings), capacity_check(observed, settings)]


def _analyse_verify(events: list[dict], settings: dict, report: BurstReport) -> Report:
    observed = first(events, PRECONDITIONS)
    if observed is None:
        report.checks.append(Check("preconditions recorded", FAIL, "nothing was recorded",
                                   "run the command again"))
        return report
    scenario = observed["scenario"]
    checks = scenario_checks(observed)
    report.checks.append(in_place(scenario, checks, measuring=False))
    report.checks.extend(checks)
    report.checks.extend(_common_checks(observed, settings))
    report.notes.append(f"The stack's scenario is {scenario} ({SCENARIO_WORDS[scenario]}). "
                        "`verify burst` restarts nothing: pods older than a scenario switch carry "
                        "the previous scenario's costs until the Deployment is restarted "
                        "(`python -m rehearse burst` restarts it before measuring).")
    if scenario == "C":
        report.notes.append("Karpenter writes its ranks only on pods of initialized cloud-burst "
                            "nodes; at rest (3 pods, all on hybrid nodes) there are none to see: "
                            "`rehearse burst` waits for them before the first scale-in.")
    report.sections.append(_capacity_section(observed))
    return report


def _capacity_section(observed: dict) -> str:
    found = capacity(observed)
    lines = ["## Capacity on the hybrid nodes", "",
             f"A burst pod requests {found['request_cpu_m']}m CPU (the scheduler's count: the "
             "larger of its containers' sum and its largest init container).", "",
             "| node | for burst pods | allocatable | requested by other pods | free | burst pods that fit |",
             "|---|---|---|---|---|---|"]
    for r in found["nodes"]:
        others = ", ".join(f"{n} {m}m" for n, m in r["others"] if m) or "—"
        lines.append(f"| {r['node']} | {'yes' if r['eligible'] else 'no'} | {r['allocatable_cpu_m']}m | "
                     f"{r['used_cpu_m']}m ({others}) | {r['free_cpu_m']}m | {r['fit']} |")
    lines.append("")
    return "\n".join(lines)


def _step_table(result: ScenarioResult) -> list[str]:
    lines = ["| step | hybrid pods | cloud pods | removed by the scale-in | forecast | forecast vs measured |",
             "|---|---|---|---|---|---|"]
    if result.start is not None:
        lines.append(f"| start (restarted) | {result.start[0]} | {result.start[1]} | — | — | — |")
    for r in result.rows:
        if r.after > r.before:
            removed = forecast = match = "—"
        else:
            h = len([p for p in r.removed if p.get("place") == "hybrid"])
            c = len([p for p in r.removed if p.get("place") == "cloud"])
            removed = f"{len(r.removed)}: {h} hybrid, {c} cloud"
            if r.evicted:
                removed += f" (+{len(r.evicted)} evicted by Karpenter)"
            if r.forecast is not None:
                fh = len([v for v in r.forecast if _place_of(r, v["name"]) == "hybrid"])
                fc = len(r.forecast) - fh
                ties = len([v for v in r.forecast if v.get("tie")])
                forecast = f"{len(r.forecast)}: {fh} hybrid, {fc} cloud" + (
                    f" ({ties} chosen among equals)" if ties else "")
            else:
                forecast = f"— ({r.forecast_error or 'none'})"
            match = {"same": "same pods", "explained": "differs, explained",
                     "unexplained": "**DIFFERS — unexplained**", "": "not compared"}[r.verdict]
        state = "" if r.done else " (stopped)"
        lines.append(f"| {r.before} → {r.after}{state} | {r.hybrid[0]} → {r.hybrid[1]} | "
                     f"{r.cloud[0]} → {r.cloud[1]} | {removed} | {forecast} | {match} |")
    return lines


def _place_of(row: StepRow, name: str) -> Optional[str]:
    return next((p.get("place") for p in row.snapshot if p["name"] == name), None)


def _analyse_burst(events: list[dict], settings: dict, report: BurstReport) -> Report:
    scenarios = settings.get("scenarios") or []
    results = []
    for scenario in scenarios:
        result = analyse_scenario(scenario, events, settings)
        results.append(result)
        report.checks.extend(result.checks)
        report.measurements.extend(result.measurements)
    observed = next((e for e in every(events, PRECONDITIONS)), None)
    report.checks.extend(_common_checks(observed, settings))
    restored = first(events, RESTORED)
    original = first(events, ORIGINAL)
    if restored is not None:
        report.checks.append(Check(
            CHECK_RESTORED, PASS if restored.get("ok") else FAIL,
            f"burstScenario back to {restored.get('scenario') or 'the default (unset)'} "
            f"(pulumi up took {restored.get('seconds')} s)" if restored.get("ok") else restored.get("error"),
            "" if restored.get("ok") else "set it back yourself: the message says how",
            "pulumi config get burstScenario"))
    elif original is not None:
        report.checks.append(Check(CHECK_RESTORED, FAIL, "the run ended before putting it back "
                                   "(not recorded)", "check `pulumi config get burstScenario`"))
    for result in results:
        report.sections.append(_scenario_section(result, settings))
    if len([r for r in results if r.rows]) > 1:
        report.sections.append(_comparison_section(results, settings))
    panels = [(f"SCENARIO {r.scenario}", r.states) for r in results if r.states]
    if panels:
        report.chart = {"title": "DEMO 2: HYBRID VS CLOUD PODS AFTER EACH STEP", "panels": panels}
        report.sections.append("## Chart\n\n![hybrid vs cloud pods per step](chart.png)\n\n"
                               "`chart.png`: per scenario, the burst pods on hybrid nodes (blue, "
                               "bottom) and on cloud-burst nodes (orange, top) at the start and "
                               "after each step; drawn with the standard library (zlib PNG), no "
                               "plotting library needed.\n")
    report.data = {"scenarios": {r.scenario: _result_json(r) for r in results}}
    report.notes.append("Times are the cluster's own: NodeClaim creationTimestamp and the pods' "
                        "Ready conditions, against the scale (the first pod the scale created), in "
                        "whole seconds. The seed measured each scenario once (seed 002 §5).")
    report.notes.append("pod-deletion-cost is a preference: it does not apply to node failures or "
                        "evictions (seed 002 §5's talking point); Karpenter's evictions are listed "
                        "apart from the scale-in's victims.")
    return report


def _result_json(result: ScenarioResult) -> dict:
    return {"refused": result.refused, "aborted": result.aborted, "start": result.start,
            "nodeclaim_seconds": result.nodeclaim_s, "ready_seconds": result.ready_s,
            "steps": [{"step": r.step, "from": r.before, "to": r.after,
                       "hybrid": list(r.hybrid), "cloud": list(r.cloud),
                       "removed": r.removed, "evicted": r.evicted,
                       "forecast": r.forecast, "forecast_error": r.forecast_error,
                       "verdict": r.verdict, "explanation": r.explanation, "done": r.done}
                      for r in result.rows],
            "consolidation": result.consolidation}


def _scenario_section(result: ScenarioResult, settings: dict) -> str:
    s = result.scenario
    lines = [f"## Scenario {s}: {SCENARIO_WORDS[s]}", ""]
    if result.refused:
        lines += ["**Not measured** — the scenario was not in place:", ""]
        lines += [f"- {reason}" for reason in result.refused]
        lines.append("")
        return "\n".join(lines)
    lines += _step_table(result)
    lines.append("")
    for r in result.rows:
        if r.after >= r.before:
            continue
        lines.append(f"**{r.before} → {r.after}** removed: "
                     + (", ".join(_victim_text(p) for p in r.removed) or "nothing"))
        if r.evicted:
            lines.append("  Evicted by Karpenter (DisruptionTarget, not the scale-in's choice): "
                         + ", ".join(_victim_text(p) + f" — {p['disruption_target'].get('reason')}"
                                     for p in r.evicted))
        if r.forecast is not None:
            lines.append("  Forecast" + (f" ({r.forecast_note})" if r.forecast_note else "") + ": " + (", ".join(
                f"{v['name']} ({v.get('rule')}{', tie' if v.get('tie') else ''})"
                for v in r.forecast) or "nothing"))
        if r.verdict in ("explained", "unexplained"):
            lines.append(f"  {'⚠ ' if r.verdict == 'unexplained' else ''}Divergence: {r.explanation}")
        lines.append("")
    lines += ["| timing | measured | seed |", "|---|---|---|",
              f"| scale to 15 → first NodeClaim | {_fmt(result.nodeclaim_s)} | 1–2 s |",
              f"| scale to 15 → all 15 Ready | {_fmt(result.ready_s)} | 37–38 s |", ""]
    if result.aborted:
        lines += [f"Stopped: {result.aborted}", ""]
    lines += _consolidation_lines(result)
    return "\n".join(lines)


_ANSWER_WORD = {PASS: "as expected", FAIL: "**NOT as expected**", SKIP: "not answered"}


def _consolidation_lines(result: ScenarioResult) -> list[str]:
    answer = result.consolidation
    if answer is None:
        return []
    lines = [f"### Consolidation and hybrid capacity (scenario {result.scenario})", ""]
    if "room" not in answer:
        return lines + [answer["answer"][:1].upper() + answer["answer"][1:] + ".", ""]
    room = answer["room"]
    lines += [f"Expected: {answer['expectation']}.", "",
              f"Answer ({_ANSWER_WORD[answer['status']]}): {answer['answer']}.", "",
              f"Watched {answer.get('seconds'):g} s after the last scale-in"
              + (f"; NodePool consolidationPolicy {answer['consolidation_policy']}"
                 if answer.get("consolidation_policy") else "")
              + (f", consolidateAfter {answer['consolidate_after']}" if answer.get("consolidate_after") else "")
              + "." + (f" Note: {answer['note']}." if answer.get("note") else ""), "",
              "| hybrid node | burst pods that fit | burst pods on it | free slots |",
              "|---|---|---|---|"]
    for h in room["hybrid"]:
        lines.append(f"| {h['node']} | {h['fit']} | {h['burst_pods']} | {h['free_slots']} |")
    lines += ["", "| cloud node | NodeClaim | burst pods at the start | fit on the hybrid room | disrupted |",
              "|---|---|---|---|---|"]
    disrupted = {r["node"]: r for r in answer.get("disrupted") or []}
    for c in room["cloud"]:
        d = disrupted.get(c["node"])
        lines.append(f"| {c['node']} | {c.get('nodeclaim') or '—'} | {', '.join(c['pods']) or '—'} | "
                     f"{'yes' if c['fits'] else 'no' if c['pods'] else '— (empty)'} | "
                     f"{'; '.join(d['evidence']) if d else 'no'} |")
    lines.append("")
    events = answer.get("events") or []
    if events:
        lines += ["Karpenter's events during the watch:", ""]
        lines += [f"- {e['at']}: {e.get('kind')} {e.get('object')} — {e.get('reason')}: "
                  f"{e.get('message')}" + (f" (× {e['count']})" if (e.get("count") or 1) > 1 else "")
                  for e in events]
        lines.append("")
    else:
        lines += ["Karpenter's events during the watch: none.", ""]
    moved = answer.get("moved") or []
    created = answer.get("created") or []
    if moved or created:
        lines += ["Pods that moved: "
                  + (", ".join(f"{c['name']} left {c.get('node')}" + (" (evicted)" if c.get("disruption_target") else "")
                               for c in moved) or "none left")
                  + "; " + (", ".join(f"{c['name']} started on {c.get('node') or 'no node'} ({c.get('place') or '?'})"
                                       for c in created) or "none created"), ""]
    else:
        lines += ["No burst pod moved during the watch.", ""]
    return lines


def _fmt(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:g} s"


def _comparison_section(results: list[ScenarioResult], settings: dict) -> str:
    steps = [f"{a} → {b}" for a, b in zip(settings.get("sequence") or [], (settings.get("sequence") or [])[1:])
             if b < a]
    lines = ["## Across scenarios", "",
             "Removed by each scale-in (hybrid / cloud), what was left (a cloud node left empty "
             "is one Karpenter can consolidate), and the timings.", "",
             "| scenario | " + " | ".join(steps) + " | first NodeClaim | all Ready | "
             "consolidation and hybrid capacity |",
             "|---|" + "---|" * (len(steps) + 3)]
    for r in results:
        if r.refused:
            lines.append(f"| {r.scenario} | " + " | ".join("not measured" for _ in steps) + " | — | — | — |")
            continue
        cells = []
        for row in [row for row in r.rows if row.after < row.before]:
            h = len([p for p in row.removed if p.get("place") == "hybrid"])
            c = len([p for p in row.removed if p.get("place") == "cloud"])
            cells.append(f"{h} / {c} (left: {row.hybrid[1]} hybrid, {row.cloud[1]} cloud on "
                         f"{row.cloud_nodes} node{'' if row.cloud_nodes == 1 else 's'})")
        cells += ["—"] * (len(steps) - len(cells))
        answer = r.consolidation
        watch = (f"{_ANSWER_WORD[answer['status']]}: {answer['answer']}" if answer else "not watched")
        lines.append(f"| {r.scenario} | " + " | ".join(cells) + f" | {_fmt(r.nodeclaim_s)} | "
                     f"{_fmt(r.ready_s)} | {watch.replace('|', '/')} |")
    lines.append("")
    return "\n".join(lines)
