"""Demo 2's scale-in scenarios by name: what `burst --scenarios` and `all --scenarios` take
(docs/scale-in.md#what-each-scenario-should-show). Here, apart from the burst command, because
`all` (a page over many runs) takes the same names and must not import a command."""

from __future__ import annotations

import argparse

SCENARIOS = ("A", "B", "C")


def scenario_name(text: str) -> str:
    """An argparse type: A, B or C (`burst --scenarios`, `all --scenarios`)."""
    if text.upper() not in SCENARIOS:
        raise argparse.ArgumentTypeError(f"{text!r}: a scenario is A, B or C")
    return text.upper()
