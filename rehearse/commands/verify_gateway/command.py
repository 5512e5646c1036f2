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
Status that refused them); the analysis is pure over them, so
``python -m rehearse report <folder>`` gives the same report again.
"""

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect (and analyse).

from __future__ import annotations

import argparse
from typing import Any

from rehearse.run.arguments import seconds, whole
from rehearse.run.errors import RunError
from rehearse.commands.verify_gateway.collect import analyse, collect
from rehearse.commands.verify_gateway.kinds import (MAX_FAILURES, MAX_LOG_AGE_SECONDS, MIN_SUCCESSES,
                                                    WINDOW_SECONDS)

__all__ = ["TITLE", "LAYERS", "OUTPUTS", "add_arguments", "check_inputs", "collect", "analyse"]

TITLE = "demo 1: check that the hybrid nodes gateway is ready"
#: What collect reads from the stack, checked before a run starts (rehearse.run.inputs).
LAYERS = (("gateway", "the gateway it verifies"),
          ("demo", "the demo 1 probers that show traffic both ways"))
OUTPUTS = ("gatewayNamespace", "gatewayLeaseName", "gatewayRouteTableIds", "hybridPodCidr", "demo1")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    traffic = parser.add_argument_group("the traffic check (the demo probers' logs)")
    traffic.add_argument("--window", type=seconds(1.0), default=WINDOW_SECONDS, metavar="SECONDS",
                         help=f"how much recent log to judge (default {WINDOW_SECONDS:g})")
    traffic.add_argument("--min-successes", type=whole(1), default=MIN_SUCCESSES, metavar="N",
                         help="successful probes each prober needs on each path in the window "
                              f"(default {MIN_SUCCESSES}, as AWS's e2e baseline)")
    traffic.add_argument("--max-failures", type=whole(0), default=MAX_FAILURES, metavar="N",
                         help=f"failed probes tolerated per path in the window (default {MAX_FAILURES})")
    traffic.add_argument("--max-log-age", type=seconds(0.0), default=MAX_LOG_AGE_SECONDS, metavar="SECONDS",
                         help="how old a prober's newest line may be when read "
                              f"(default {MAX_LOG_AGE_SECONDS:g})")


def check_inputs(given: Any) -> None:
    demo1 = given.outputs.get("demo1")
    if not isinstance(demo1, dict) or not demo1.get("namespace"):
        raise RunError(f"{given.outputs.origin}: the output demo1 names no namespace: run "
                       f"`pulumi up` with this version of the lab{given.outputs.rewrite()}")
