"""The names demo 2 shares between its collector, analysis and report: what the lab deploys
(and the stack's outputs name), the kinds of the events recorded, and the checks' names, which
tests and readers of report.json key on."""

from __future__ import annotations


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
#: The default filters drop bindings; the lab re-enables them (docs/scale-in.md#kyvernos-policy-scenarios-b-and-c).
BINDING_FILTERS = ("[Pod/binding,*,*]", "[Binding,*,*]")
KARPENTER_NS, KARPENTER_DEPLOYMENT, KARPENTER_SA = "kube-system", "karpenter", "karpenter"
KARPENTER_POD_LABEL = ("app.kubernetes.io/name", "karpenter")
GATE = "PodDeletionCostManagement"
#: The first Karpenter with the gate; older ones ignore the Helm value silently.
GATE_SINCE = (1, 15, 0)
SCENARIO_KEY = "eks-hybrid-lab:burstScenario"
SCENARIO_WORDS = {"A": "no policy, Karpenter's gate off",
                  "B": "Kyverno writes pod-deletion-cost \"1\" on hybrid pods",
                  "C": "B plus Karpenter's podDeletionCostManagement"}
DEFAULT_SEQUENCE = (3, 15, 12, 10, 3)
#: The demo guide (docs/demo-guide.md#demo-2-bursting-and-scale-in): four burst pods per hybrid node on two hybrid nodes (docs/capacity.md).
HYBRID_NODES, PODS_PER_HYBRID_NODE = 2, 4
SEED_NODECLAIM = "demo guide: 1–2 s"
SEED_READY = "demo guide: 37–38 s"
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
