"""The pre-check, kept as a run: `python -m ops.preflight`'s read-only checks (Describe, List and
Get calls only) for the stack's ``Pulumi.<stack>.yaml``, recorded in a run folder so the
rehearsal's summary can say when it last passed. The run itself also proves the stack's outputs
and the cluster can be reached, as every rehearse command does first."""

from __future__ import annotations

import argparse
from typing import Any

from rehearse.commands.preflight.analyse import analyse
from rehearse.commands.preflight.collect import collect, stack_config
from rehearse.commands.preflight.kinds import TITLE

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description; the work is in collect.py and analyse.py.
__all__ = ["TITLE", "add_arguments", "check_inputs", "collect", "analyse"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """No options of its own: the stack file is ``Pulumi.<stack>.yaml`` in --work-dir."""


def check_inputs(given: Any) -> None:
    """Before a run starts (rehearse.run.inputs): a stack named, and its stack file readable."""
    stack_config(given)
