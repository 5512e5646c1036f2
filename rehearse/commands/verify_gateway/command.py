"""Check that demo 1 (the EKS Hybrid Nodes gateway) is ready: the demo guide's verify.sh
(docs/demo-guide.md#demo-1-the-gateway), made exact. Checks: two gateway pods Running and Ready on two gateway nodes in two zones; the Lease
holder (<node name>_<uuid>) is a node running a gateway pod, and the Lease was renewed within
its duration (judged by the API server's clock: its Date header); every gateway pod's
:8088/healthz answers 200 (through the API server's pod proxy; the standby answers too, so this
says nothing about leadership); the holder's pod says it leads in its own :10080/metrics
(hybrid_gateway_leader_is_active 1) and the other says it does not (0); in each gateway route
table the route for the hybrid pod CIDR is active and targets the leader node's primary ENI;
the CiliumVTEPConfig hybrid-gateway points at the leader's IP; the demo probers' recent logs
show traffic cloud -> hybrid and hybrid -> cloud, through the ClusterIP Service and pod to pod
(a log the API server cannot fetch — a kubelet it cannot dial — is reported as such); Cilium
has VTEP on and the L7 proxy off; the Pod Identity agent runs.

The collector records what it reads as events (pods, nodes, the Lease with the answer's Date,
each gateway pod's healthz and metrics, the route tables and the gateway nodes' instances, the
VTEP config, cilium-config, the agent's DaemonSet, the probers' kubelet-timestamped logs or the
Status that refused them); the analyser (``rehearse.gateway_analysis``) is pure over them, so
``python -m rehearse report <folder>`` gives the same report again.
"""

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect (and analyse).
from rehearse.commands.verify_gateway.collect import TITLE, LAYERS, OUTPUTS, add_arguments, check_inputs, collect, analyse

__all__ = ["TITLE", "LAYERS", "OUTPUTS", "add_arguments", "check_inputs", "collect", "analyse"]
