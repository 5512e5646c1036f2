"""What ``verify gateway`` records and reports: the lab's defaults, the event kinds and the
check names, shared by its collector (``rehearse.gateway``) and its analyser
(``rehearse.gateway_analysis``)."""

from __future__ import annotations

from typing import Optional

TITLE = "demo 1: check that the hybrid nodes gateway is ready"

# --- what the lab deploys (used when the stack predates the outputs that say so) -------------

#: The chart's selector label (its ``_helpers.tpl`` selectorLabels; AWS's e2e suite lists the
#: gateway pods with it too).
GATEWAY_POD_SELECTOR = "app.kubernetes.io/name=eks-hybrid-nodes-gateway"
GATEWAY_NODE_SELECTOR = "hybrid-gateway-node=true"
#: The gateway's health endpoint (chart port ``healthz``, the binary's ``:8088`` default). Every
#: replica answers it, the standby too: it says the process is up, nothing about leadership.
HEALTH_PORT = 8088
#: The gateway's metrics (aws/eks-hybrid-nodes-gateway cmd/gateway/main.go:
#: ``--metrics-bind-address`` default ``:10080``, controller-runtime's metrics server, plain
#: HTTP at /metrics).
METRICS_PORT = 10080
#: 1 on the replica whose leader-only setup is running, 0 on a standby (internal/metrics/
#: metrics.go ``LeaderIsActive``; internal/gateway/setup.go sets it to 1 when leadership is won
#: and back to 0 when it ends).
LEADER_GAUGE = "hybrid_gateway_leader_is_active"
#: The gateway's own election defaults (cmd/gateway/main.go): the Lease lasts 3 s, the leader
#: gives up if it cannot renew within 2 s, and it tries every 1 s. Used when the Lease does
#: not say its duration.
LEASE_DURATION_SECONDS = 3
RENEW_DEADLINE_SECONDS = 2
RETRY_PERIOD_SECONDS = 1
VTEP_CONFIG = "hybrid-gateway"
#: Versions the CiliumVTEPConfig CRD may be served at, tried in this order (as the lab's
#: cleanup does): the gateway writes cilium.io/v2.
VTEP_VERSIONS = ("v2", "v2alpha1")
PROBERS = {"cloudToHybrid": "prober-cloud", "hybridToCloud": "prober-hybrid"}
DIRECTIONS = {"cloudToHybrid": "cloud → hybrid", "hybridToCloud": "hybrid → cloud"}
PROBER_CONTAINER = "prober"
CILIUM_KEYS = ("enable-vtep", "enable-l7-proxy")
POD_IDENTITY_AGENT = "eks-pod-identity-agent"
ZONE_LABELS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")

#: Defaults of the traffic check (overridable on the command line).
WINDOW_SECONDS = 60.0
#: AWS's e2e suite wants at least 5 good probes per direction before it trusts a baseline.
MIN_SUCCESSES = 5
MAX_FAILURES = 0
#: The probers log every second; a newest line older than this means the prober stopped, or
#: this machine's clock is that far from the cluster's.
MAX_LOG_AGE_SECONDS = 15.0
#: Lines kept per prober pod (two a second).
MAX_LINES = 2000

# Event kinds.
INPUTS = "gateway.inputs"
NODES = "kube.nodes"
PODS = "gateway.pods"
LEASE = "gateway.lease"
HEALTHZ = "gateway.healthz"
ROUTE_TABLE = "ec2.route_table"
INSTANCE = "ec2.instance"
VTEP = "cilium.vtep_config"
CILIUM_CONFIG = "cilium.config"
AGENT = "kube.pod_identity_agent"
PROBER_PODS = "prober.pods"
PROBER_LOG = "prober.log"
METRICS = "gateway.metrics"

# Check names (the report's checklist, in order).
CHECK_PODS = "gateway pods"
CHECK_LEASE = "lease holder"
CHECK_HEALTH = "gateway healthz"
CHECK_LEADERSHIP = "leader by its own metrics"
CHECK_ROUTE = "VPC route to the leader"
CHECK_VTEP = "CiliumVTEPConfig names the leader"
CHECK_TRAFFIC = {"cloudToHybrid": "traffic cloud → hybrid", "hybridToCloud": "traffic hybrid → cloud"}
CHECK_CILIUM = "Cilium: VTEP on, L7 proxy off"
CHECK_AGENT = "Pod Identity agent"


def parse_selector(text: str) -> dict[str, str]:
    key, _, value = text.partition("=")
    return {key.strip(): value.strip()}


def labels_match(labels: Optional[dict], selector: dict[str, str]) -> bool:
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())
