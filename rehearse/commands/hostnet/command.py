"""Which path do host-network pods take between hybrid and cloud nodes
(docs/demo-guide.md#open-questions)?

Three probes, each judged from what the server saw, never from what was meant:

- a host-network pod on a hybrid node requests an ``echo-cloud`` pod by its pod IP, and
- the ``echo-cloud`` ClusterIP Service by its cluster IP (a host-network pod resolves no Service
  names): echo-cloud's nginx logs the address each request came from;
- a short-lived cloud pod requests a host-network busybox ``httpd -f -vv`` on the same hybrid
  node by the node's IP: with ``-v`` httpd names each request's peer (``<ip>:<port>:
  response:200``; ``-vv`` adds ``<ip>:<port>: url:<path>``).

A source address that is the hybrid node's own IP means node to node across the Transit Gateway
(the VPC routes the remote node CIDR to it); one in the hybrid pod CIDR means through the
gateway (Cilium's VTEP, VXLAN to the leader, whose ENI the VPC routes the pod CIDR to). The
route each reply or request followed in the cloud route tables (longest prefix) is read with
DescribeRouteTables and shown beside it. The expectation is the lab's reachability model
(``offline/reachability.py``) and docs/networking.md#where-a-hybrid-pods-packets-come-from: a host-network pod has the node's address, so
both ways go node to node across the Transit Gateway; only pod-CIDR addresses use the gateway.

Host-network pods cannot meet Pod Security "baseline", let alone "restricted": they run in their
own namespace ``rehearse-hostnet``, labelled ``enforce: privileged`` and annotated why, with the
least privilege that works (non-root, every capability dropped, no privilege escalation,
read-only root, RuntimeDefault seccomp, a port above 1024). The port defaults to 9443: the
hybrid hosts' security group admits from the cloud VPC only the kubelet's 10250 and the webhook
port 9443 (``components/hybrid_hosts.py``), so any other port is dropped before the server sees
it (``--port`` changes it; a FAIL then says so). The namespace and the pods are deleted when the
run ends, also when it fails or is interrupted.

A run that is killed (SIGKILL, a closed laptop) deletes nothing, so the cluster bounds the pods'
life too: each has ``activeDeadlineSeconds`` (``deadline_seconds``), and at that deadline the
kubelet stops its containers and marks it Failed, reason ``DeadlineExceeded`` (kubernetes
``pkg/kubelet/active_deadline.go``, counted from the pod's ``status.startTime``). The host-network
server's port is then free; the Failed pod objects and the namespace stay (nothing expires a
namespace). So the namespace and every pod carry labels only this tool sets — ``REHEARSE_LABEL:
hostnet`` and ``STACK_LABEL: <the stack's cluster>`` — and the next run removes such a
namespace (``sweep_leftovers``) when none of its pods is still active. A namespace of that name
without both labels, or with a pod still running (another run going on), is never touched.
"""

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect (and analyse).

from __future__ import annotations

import argparse
from typing import Any

from rehearse.run.arguments import seconds, whole
from rehearse.run.errors import RunError
from rehearse.commands.hostnet.collect import analyse, collect
from rehearse.commands.hostnet.kinds import ATTEMPTS, PORT, TIMEOUT

__all__ = ["TITLE", "LAYERS", "OUTPUTS", "add_arguments", "check_inputs", "collect", "analyse"]

TITLE = "which path host-network pods take between hybrid and cloud nodes"
#: What collect reads from the stack, checked before a run starts (rehearse.run.inputs).
LAYERS = (("demo", "echo-cloud, the cloud pod the host-network pod requests"),)
OUTPUTS = ("demo1", "hybridPodCidr")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the probes")
    group.add_argument("--node", metavar="NAME", help="the hybrid node to probe (default: the "
                       "first Ready one)")
    group.add_argument("--port", type=int, default=PORT, metavar="PORT",
                       help=f"the host-network server's port, above 1024 (default {PORT}: the "
                            "hybrid hosts' security group admits it from the cloud VPC)")
    group.add_argument("--attempts", type=whole(1), default=ATTEMPTS, metavar="N",
                       help=f"requests per probe (default {ATTEMPTS})")
    group.add_argument("--timeout", type=seconds(1.0), default=TIMEOUT, metavar="SECONDS",
                       help=f"how long to wait for the pods to run and finish (default {TIMEOUT:g})")


def check_inputs(given: Any) -> None:
    port = int(given.options.get("port") or PORT)
    if not 1024 < port < 65536:
        raise RunError(f"--port {port}: choose a port above 1024 (no NET_BIND_SERVICE is given) "
                       "and below 65536")
    demo1 = given.outputs.get("demo1")
    if not isinstance(demo1, dict) or not demo1.get("namespace"):
        raise RunError(f"{given.outputs.origin}: the output demo1 names no namespace: run "
                       f"`pulumi up` with this version of the lab{given.outputs.rewrite()}")
