"""Why a run could not be made (exit 2), as opposed to a check that failed (exit 1)."""

from __future__ import annotations


class RunError(Exception):
    """The run could not be made: an unreachable cluster or AWS, a missing stack output, a layer
    not built. Its message is the one line the command prints."""
