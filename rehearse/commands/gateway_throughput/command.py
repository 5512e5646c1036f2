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

from __future__ import annotations

import argparse
from typing import Any

from rehearse.commands.gateway_throughput.analyse import analyse
from rehearse.commands.gateway_throughput.collect import DEFAULT_SECONDS, DEFAULT_STREAMS, collect
from rehearse.commands.gateway_throughput.kinds import TITLE
from rehearse.commands.gateway_throughput.pods import IMAGE
from rehearse.lab.switch import require_confirmation, require_stack
from rehearse.run.errors import RunError

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect.py and analyse.py.
__all__ = ["TITLE", "add_arguments", "check_inputs", "collect", "analyse"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("throughput")
    group.add_argument("-t", "--seconds", type=_at_least_one, default=DEFAULT_SECONDS, metavar="S",
                       help=f"each direction's iperf3 test length (default {DEFAULT_SECONDS})")
    group.add_argument("-P", "--streams", type=_at_least_one, default=DEFAULT_STREAMS, metavar="N",
                       help=f"parallel TCP streams (default {DEFAULT_STREAMS})")
    group.add_argument("--image", default=IMAGE, metavar="REF",
                       help=f"the iperf3 image, pinned (default {IMAGE})")
    group.add_argument("--instance-types", nargs="+", metavar="TYPE", default=None,
                       help="switch gatewayInstanceType to each (pulumi up), measure, and put "
                            "the original back; the report compares them. Each type REPLACES "
                            "the gateway node group's nodes, so the gateway's leader fails over "
                            "at every switch and at the restore. Each switch prints `pulumi "
                            "preview`'s plan, refuses one that changes more than the gateway "
                            "node group, and asks before applying; needs --stack")
    group.add_argument("--yes", action="store_true",
                       help="apply each previewed switch without asking (a run whose stdin is "
                            "not a terminal needs it)")


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not 1 or more")
    return value


def check_inputs(given: Any) -> None:
    """Before a run starts (rehearse.run.inputs): the lab's demo namespace, and with
    --instance-types a stack named and someone to confirm each switch."""
    demo1 = given.outputs.optional("demo1")
    if not demo1 or not demo1.get("namespace"):
        raise RunError(f"{given.outputs.origin} has no output demo1 (the lab's demo-gateway "
                       f"namespace): set upToLayer to demo and run `pulumi up`{given.outputs.rewrite()}")
    if given.options.get("instance_types"):
        require_stack(given, "gateway-throughput --instance-types")
        require_confirmation(given, "gateway-throughput --instance-types")
