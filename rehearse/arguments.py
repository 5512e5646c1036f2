"""Option types the commands share."""

from __future__ import annotations

import argparse
from typing import Callable, Optional


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
