"""Measure the EKS Hybrid Nodes gateway's leader failover: delete the leader's pod and measure,
from the cluster's own clocks, how long traffic stopped each way and when the Lease, the VPC
routes and the VTEP config followed the new leader.

Before acting it requires a healthy baseline (at least 5 successful probes on each path each way
in the last --baseline seconds, the latest one successful) and a leader resolved exactly (Lease
holder -> node -> its one gateway pod); otherwise nothing is deleted and the run is reported as
not a measurement. After the deletion it polls the Lease, the route tables and the VTEP config
every --interval seconds until a different holder leads and every route table and the VTEP config
name it (or --timeout passes), keeps watching for --observe seconds, then reads both demo 1
probers' kubelet-timestamped logs. The figure for each direction and path is the longest
interval between two successful probes that overlaps the failover, as the gateway's own e2e test
measures it; it passes at or under --threshold seconds.
"""

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect (and analyse).

from __future__ import annotations

import argparse
from typing import Any

from rehearse.run.arguments import seconds
from rehearse.run.errors import RunError
from rehearse.commands.failover.baseline import MIN_BASELINE_SUCCESSES
from rehearse.commands.failover.collect import analyse, collect
from rehearse.commands.failover.kinds import DEFAULTS

__all__ = ["TITLE", "OUTPUTS", "add_arguments", "check_inputs", "collect", "analyse"]

TITLE = "delete the gateway leader's pod and measure the failover"
#: What the collector reads from the stack, checked before a run starts (rehearse.run.inputs).
OUTPUTS = ("gatewayNamespace", "gatewayLeaseName", "gatewayRouteTableIds", "hybridPodCidr", "demo1")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("failover")
    group.add_argument("--threshold", type=seconds(0.1), default=DEFAULTS["threshold"],
                       metavar="S",
                       help="PASS when every gap between two successful probes is at most S "
                            "seconds (default 10: AWS documents 3-5 s and the probers measure "
                            "to about 3 s during an outage; the gateway's e2e test allows 30)")
    group.add_argument("--interval", type=seconds(0.1, 1.0), default=DEFAULTS["interval"],
                       metavar="S",
                       help="poll the Lease, route tables and VTEP config every S seconds, "
                            "0.1-1 (default 0.5, as the gateway's e2e test probes)")
    group.add_argument("--observe", type=seconds(0.0), default=DEFAULTS["observe"], metavar="S",
                       help="keep watching S seconds after the failover completes "
                            "(default 30, as the gateway's e2e test)")
    group.add_argument("--timeout", type=seconds(1.0), default=DEFAULTS["timeout"], metavar="S",
                       help="stop waiting for the new leader, routes and VTEP config after S "
                            "seconds and record a timeout (default 60)")
    group.add_argument("--baseline", type=seconds(5.0), default=DEFAULTS["baseline"],
                       metavar="S",
                       help="the baseline is the probers' last S seconds of logs (default 20); "
                            f"it needs {MIN_BASELINE_SUCCESSES} successful probes per path each way")


def check_inputs(given: Any) -> None:
    out = given.outputs
    if not list(out.get("gatewayRouteTableIds") or []):
        raise RunError(f"{out.origin} names no gateway route tables (gatewayRouteTableIds is "
                       f"empty): build the gateway layer and run `pulumi up`{out.rewrite()}")
    demo = out.get("demo1")
    if not isinstance(demo, dict) or not demo.get("namespace"):
        raise RunError(f"{out.origin}: the output demo1 names no namespace: run `pulumi up` "
                       f"with this version of the lab{out.rewrite()}")
