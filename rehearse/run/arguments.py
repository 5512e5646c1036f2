"""Option types the commands share."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable, Optional

#: The project's folder (Pulumi.yaml's), two folders above this module (rehearse/run/).
PROJECT_DIR = Path(__file__).resolve().parents[2]


def seconds(low: float, high: Optional[float] = None) -> Callable[[str], float]:
    """An argparse type: a number of seconds, at least ``low`` (and at most ``high``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{text} s: must be {bound} seconds")
        return value

    return parse


def whole(low: int, high: Optional[int] = None, why: str = "") -> Callable[[str], int]:
    """An argparse type: a whole number, at least ``low`` (and at most ``high``); ``why`` says
    where the bound comes from."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"{text}: must be {bound}" + (f" ({why})" if why else ""))
        return value

    return parse


def stack_arguments(group: Any, kubeconfig_help: str) -> None:
    """Where a command reads the stack's outputs and the cluster from (--stack, --outputs,
    --work-dir, --kubeconfig): one wording for every command (rehearse.cli's and predict's)."""
    group.add_argument("--stack", metavar="NAME",
                       help="read this stack's outputs with the Pulumi Automation API "
                            "(default: the selected stack)")
    group.add_argument("--outputs", type=Path, metavar="FILE",
                       help="read the outputs from FILE, written by "
                            "`pulumi stack output --json --show-secrets > FILE`, instead")
    group.add_argument("--work-dir", type=Path, default=PROJECT_DIR, metavar="DIR",
                       help="the Pulumi project folder (default: this project)")
    group.add_argument("--kubeconfig", type=Path, metavar="PATH", help=kubeconfig_help)
