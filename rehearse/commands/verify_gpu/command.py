"""Demo 3, vLLM on the hybrid GPU host called from the cloud: what the demo
guide's demo3-gpu/verify.sh checked (docs/demo-guide.md#demo-3-gpu-inference-on-a-hybrid-node), made exact and measured.

Checks: nvidia.com/gpu allocatable on the hybrid GPU host; the vLLM pod Ready there, with no
istio-proxy container and hostNetwork off; the cloud client's calls succeeding over a window of
its log; one completion through the Service, asked through the API server's service proxy.
Numbers: the client's success rate and p50/p95 latency (nearest rank), the image pull time from
the kubelet's Pulled event beside the demo guide's 4m28s, the completion's time.

The collector records what it saw (events.jsonl); the analysis is pure over those events, so
`python -m rehearse report <folder>` replays a run.
"""

from __future__ import annotations

import argparse
from typing import Any

from rehearse.commands.verify_gpu.analyse import analyse
from rehearse.commands.verify_gpu.collect import collect, names_from_outputs
from rehearse.commands.verify_gpu.demo import (CLIENT_PERIOD_SECONDS, DEFAULT_MIN_CALLS, DEFAULT_MIN_SUCCESS_RATE,
                                               DEFAULT_WINDOW_MINUTES)
from rehearse.commands.verify_gpu.kinds import TITLE

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect.py and analyse.py.
__all__ = ["TITLE", "add_arguments", "check_inputs", "collect", "analyse"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("demo 3")
    group.add_argument("--window", type=_positive, default=DEFAULT_WINDOW_MINUTES,
                       metavar="MINUTES",
                       help="read the cloud client's log over the last MINUTES (default "
                            f"{DEFAULT_WINDOW_MINUTES:g}: about 20 calls, one every "
                            f"{CLIENT_PERIOD_SECONDS} s)")
    group.add_argument("--min-success-rate", type=_percent, default=DEFAULT_MIN_SUCCESS_RATE,
                       metavar="PERCENT",
                       help="the client's calls pass at this success rate or more, and only if "
                            f"the latest call succeeded (default {DEFAULT_MIN_SUCCESS_RATE:g}: "
                            "one failure in 20 calls)")
    group.add_argument("--min-calls", type=_at_least_one, default=DEFAULT_MIN_CALLS, metavar="N",
                       help=f"fewer calls in the window fail the check (default {DEFAULT_MIN_CALLS})")


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return value


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not 1 or more")
    return value


def _percent(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text} is not a percentage (0-100)")
    return value


def check_inputs(given: Any) -> None:
    """Before a run starts: the stack has demo 3's names (rehearse.run.inputs)."""
    names_from_outputs(given.outputs)
