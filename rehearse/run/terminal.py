"""The presenter at the terminal: a yes/no question, asked only where someone can answer."""

from __future__ import annotations

import sys
from typing import Optional


def ask(question: str) -> Optional[bool]:
    """The presenter's answer; None when stdin is not a terminal (nobody to ask)."""
    if not sys.stdin or not sys.stdin.isatty():
        return None
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False
