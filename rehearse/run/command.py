"""What a command provides, for rehearse.cli's registry: a run command (a run folder of events
and a report, replayable) or a tool (predict: prints, keeps nothing). A command is a folder
under rehearse/commands/ whose ``command.py`` is its face: its docstring is its ``--help``
description, and it has exactly the members below (tests/test_layout.py checks each
registered command against them). The face is a module of its own, not the package's
``__init__``, so that ``collect`` and ``analyse`` (the face's functions) never shadow the
modules collect.py and analyse.py beside it."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from rehearse.run.inputs import Given
from rehearse.run.report import Report


@runtime_checkable
class RunCommand(Protocol):
    """A command that collects into a run folder (rehearse.cli.execute) and whose analysis is
    pure over the recorded events, so ``rehearse report FOLDER`` gives the same report again."""

    #: The help line: the registry's list and ``python -m rehearse --help``.
    TITLE: str
    #: (layer, why it is needed), ...: the stack layers the collector needs (rehearse.run.inputs).
    LAYERS: Sequence[tuple[str, str]]
    #: The stack outputs the collector reads, checked before the run folder exists.
    OUTPUTS: Sequence[str]

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The command's own options, beside the stack's and --out (rehearse.cli)."""

    def check_inputs(self, given: Given) -> None:
        """Raise RunError (one line) for input the collector cannot use, before anything runs."""

    def collect(self, ctx: Any, record: Callable[..., None]) -> None:
        """Read (and, for a changing command, change) the lab, recording each fact as an event."""

    def analyse(self, events: list[dict[str, Any]]) -> Report:
        """The report, from the events alone (no I/O)."""


@runtime_checkable
class ToolCommand(Protocol):
    """A command that answers on the terminal and keeps no run folder (predict)."""

    TITLE: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """All of the command's options (it takes the stack's own, if it reads one)."""

    def main(self, args: argparse.Namespace, read_outputs: Callable[[argparse.Namespace], Any],
             connect: Callable[[argparse.Namespace, Any], Any]) -> int:
        """Run; ``read_outputs`` and ``connect`` are rehearse.cli's, handed in so the command
        never imports the CLI back. Returns the exit code."""
