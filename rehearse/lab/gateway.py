"""What the deployed EKS Hybrid Nodes gateway is: the names, ports and timings of the chart and
binary this lab pins (aws/eks-hybrid-nodes-gateway), which every tool that reads or measures
the gateway has to agree on. Facts of the lab, not of any one command: ``verify gateway`` checks
them, ``failover`` measures against the Lease timings, ``lab.leader`` resolves its Lease."""

from __future__ import annotations

#: The chart's name, and its pods' ``app.kubernetes.io/name`` label.
GATEWAY_NAME = "eks-hybrid-nodes-gateway"
#: The label of the nodes the gateway runs on (the gateway layer's node group sets it ``true``).
GATEWAY_NODE_LABEL = "hybrid-gateway-node"
#: The chart's selector label (its ``_helpers.tpl`` selectorLabels; AWS's e2e suite lists the
#: gateway pods with it too).
GATEWAY_POD_SELECTOR = f"app.kubernetes.io/name={GATEWAY_NAME}"
GATEWAY_NODE_SELECTOR = f"{GATEWAY_NODE_LABEL}=true"
#: The Lease the replicas elect their leader with (the chart's default).
LEASE_NAME = "hybrid-gateway-leader"
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
#: The CiliumVTEPConfig the leader writes, naming its node IP as the tunnel endpoint.
VTEP_CONFIG = "hybrid-gateway"
#: Versions the CiliumVTEPConfig CRD may be served at, tried in this order (as the lab's
#: cleanup does): the gateway writes cilium.io/v2.
VTEP_VERSIONS = ("v2", "v2alpha1")
