"""What ``verify gateway`` records and reports: the event kinds with the fields each carries,
the traffic check's defaults (recorded in ``gateway.inputs``), and the check names — shared by
its collector (``rehearse.commands.verify_gateway.collect``) and its analysis (``analyse`` and
the check modules beside it). The gateway's own names, ports and Lease timings are facts of the
deployed gateway (``rehearse.lab.gateway``); the probers' names are ``rehearse.lab.probes``'."""

from __future__ import annotations

from rehearse.lab import probes

# --- what it reads besides the gateway ------------------------------------------------------

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

# --- event kinds (the strings are as recorded: old runs replay from them) --------------------

#: region, namespace, lease, routeTables, hybridPodCidr, cloudVpcCidr, podSelector,
#: nodeSelector, demoNamespace, probers (key -> Deployment), window, minSuccesses, maxFailures,
#: maxLogAge.
INPUTS = "gateway.inputs"
#: items: each node's view (``rehearse.lab.nodes.node_view``).
NODES = "kube.nodes"
#: namespace, selector (None when every pod of the namespace was taken), items (pod views).
PODS = "gateway.pods"
#: name, found, holderIdentity, acquireTime, renewTime, leaseDurationSeconds,
#: leaseTransitions, serverDate (the answer's Date header).
LEASE = "gateway.lease"
#: pod, node, path, status, body (one per gateway pod).
HEALTHZ = "gateway.healthz"
#: id, found, routes (or error), one per route table (``rehearse.lab.route_tables``).
ROUTE_TABLE = "ec2.route_table"
#: node, lookup, found, and instanceId, privateIp, privateDnsName, state, interfaces (or error).
INSTANCE = "ec2.instance"
#: name, found, version, tried, spec.
VTEP = "cilium.vtep_config"
#: found, data (the VTEP and L7 proxy keys).
CILIUM_CONFIG = "cilium.config"
#: name, found, status (the DaemonSet's scheduled/ready counts).
AGENT = "kube.pod_identity_agent"
#: direction (a prober key), prober, namespace, items (pod views).
PROBER_PODS = "prober.pods"
#: direction, prober, pod, namespace, node, container, sinceSeconds (the seconds asked for: the
#: field is named as recorded), lines, error (the API server's Status, or None).
PROBER_LOG = "prober.log"
#: pod, node, path, status, gauge, lines, body (one per gateway pod).
METRICS = "gateway.metrics"

# --- check names (the report's checklist, in order) ------------------------------------------

CHECK_PODS = "gateway pods"
CHECK_LEASE = "lease holder"
CHECK_HEALTH = "gateway healthz"
CHECK_LEADERSHIP = "leader by its own metrics"
CHECK_ROUTE = "VPC route to the leader"
CHECK_VTEP = "CiliumVTEPConfig names the leader"
CHECK_TRAFFIC = {p.key: f"traffic {p.direction}" for p in probes.PROBERS}
CHECK_CILIUM = "Cilium: VTEP on, L7 proxy off"
CHECK_AGENT = "Pod Identity agent"
