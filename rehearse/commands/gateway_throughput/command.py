"""`python -m rehearse gateway-throughput`: what the gateway carries, pod to pod, each way
(throughput per gateway instance type was never measured: docs/demo-guide.md#open-questions).

In the lab's own namespace (the ``demo1`` output's, ``demo-gateway``) an iperf3 server pod on a
hybrid node and a client pod on a cloud node measure cloud → hybrid; then the server on a cloud
node and the client on a hybrid node measure hybrid → cloud. The client connects to the
server pod's IP, so the traffic crosses the gateway (VXLAN to the leader, docs/gateway.md#what-it-does). Both
pods meet Pod Security "restricted", run a bounded test (``-t``, ``-P``, ``activeDeadlineSeconds``)
and are deleted by name when it ends — also after a failure or Ctrl-C.

Recorded beside the numbers: the gateway nodes' instance type, the leader node (Lease holder →
node) and the MTU in force (Cilium's ``cilium-config`` ``mtu``, or the lab's configured 8450:
a Transit Gateway carries at most 8500-byte packets, docs/networking.md#mtu).

``--instance-types m6i.large c6in.xlarge`` switches ``gatewayInstanceType`` through the Pulumi
Automation API for each (``pulumi up``), measures, and puts the original back at the end; the
report compares them.
"""

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect (and analyse).
from rehearse.commands.gateway_throughput.collect import TITLE, add_arguments, check_inputs, collect, analyse

__all__ = ["TITLE", "add_arguments", "check_inputs", "collect", "analyse"]
