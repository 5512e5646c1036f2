"""What a command provides, for rehearse.cli's registry (one entry per command, in the order a
rehearsal runs them). Four kinds, one Protocol each:

- ``RunCommand``: collects into a run folder of events and writes a report, replayable
  (rehearse.run.execute runs it);
- ``ToolCommand``: answers on the terminal and keeps nothing (predict);
- ``Rehearsal``: runs the run commands in turn and writes the summary page (``all``);
- ``FolderCommand``: reads run folders and never a cluster (``report``, ``summary``).

Where each kind lives (the rooms): a run command or a tool is a folder under
rehearse/commands/ whose ``command.py`` is its face, importing only rehearse.run, rehearse.lab,
rehearse.models and its own folder; ``all`` and ``summary`` are faces in rehearse/pages/
(which never read a cluster, so never import rehearse.lab nor a command); ``report`` is
rehearse/run/replay.py. rehearse/lab/ is the only code that talks to Kubernetes, EC2 and
Pulumi; rehearse/models/ is pure. A face's docstring is its ``--help`` description and it has
exactly its kind's members below (tests/test_layout.py checks each registered face against
them). A command's face is a module of its own, not the package's ``__init__``, so that
``collect`` and ``analyse`` (the face's functions) never shadow the modules collect.py and
analyse.py beside it."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence, runtime_checkable

from rehearse.run.errors import RunError
from rehearse.run.inputs import Given
from rehearse.run.report import Report


@runtime_checkable
class RunCommand(Protocol):
    """A command that collects into a run folder (rehearse.run.execute) and whose analysis is
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
        """Run; ``read_outputs`` and ``connect`` are rehearse.run.execute's, handed in by
        rehearse.cli (a test replaces them there). Returns the exit code."""


#: RunCommand's members a face may leave out: rehearse.run.inputs reads none for a command
#: that needs no stack layer or output of its own.
OPTIONAL_MEMBERS = frozenset({"LAYERS", "OUTPUTS"})


@runtime_checkable
class Rehearsal(Protocol):
    """``rehearse all``: runs run commands in turn, each into its own run folder, then writes
    the summary page. It never imports rehearse.cli (the CLI imports it): the CLI hands it how
    to run a step, read the stack and reach the cluster."""

    TITLE: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """The rehearsal's own options, beside the stack's and --out (rehearse.cli)."""

    def main(self, args: argparse.Namespace, *, runner: Callable[[str, argparse.Namespace], Any],
             read_outputs: Callable[[argparse.Namespace], Any],
             parse: Callable[[list[str]], argparse.Namespace],
             as_run_error: Callable[[BaseException], Optional[RunError]],
             check_inputs: Callable[[str, argparse.Namespace, Any], None],
             reach: Callable[[argparse.Namespace, Any], None]) -> int:
        """Run the steps (``runner(command, options)``, options parsed by ``parse``), write the
        summary page; returns the exit code."""


@runtime_checkable
class FolderCommand(Protocol):
    """A command that reads run folders and never a cluster (``report``, ``summary``)."""

    TITLE: str

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """All of the command's options."""

    def run(self, args: argparse.Namespace, faces: Mapping[str, RunCommand]) -> int:
        """Run; ``faces`` are the registry's run commands by name (a recording names its
        command), handed in by rehearse.cli. Returns the exit code."""
