"""`python -m rehearse`: verify gateway|gpu|burst, preflight, failover, burst, gateway-throughput,
hostnet, predict, all, summary, report.

Exit codes: 0 every check passed; 1 a check failed or the run was interrupted; 2 the run could
not be made (one line, no traceback). Once a run has started, its folder is kept whatever
happens, with a report of what was done (rehearse.run.outcome).

This module is the registry of commands and the parser built from it: ``REGISTRY`` has one
entry per command, in the order a rehearsal runs them, each naming its face (the module whose
docstring is the command's --help and whose members are its kind's, rehearse.run.command).
The parser, the bare command's list, ``main``'s dispatch (by kind) and ``all`` all read it; how
one command runs is rehearse.run.execute, a replay rehearse.run.replay."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from rehearse.run import execute as one_run
from rehearse.run import replay
from rehearse.run.arguments import stack_arguments
from rehearse.run.command import FolderCommand, Rehearsal, RunCommand, ToolCommand
from rehearse.run.execute import RunResult


@dataclass(frozen=True)
class Command:
    """One command: its name as typed, its face (the module whose docstring is its --help
    description and whose ``TITLE`` is its help line), and its kind (the Protocol its face
    provides, which says how ``main`` runs it and whether it takes the stack's options)."""
    name: str
    module: str
    kind: type
    #: Its place in ``python -m rehearse --help`` (and ``verify --help``), which lists the
    #: commands as they were added to the parser, not in a rehearsal's order: kept so every
    #: --help reads as it did.
    listed: int
    #: Whether --help shows the description as written (its paragraphs and lists), or rewraps
    #: it; each command's help has always been shown one way or the other.
    as_written: bool

    def face(self) -> Any:
        return importlib.import_module(self.module)


#: Every command, in the order a rehearsal runs them (the README's "Rehearse"): what a bare
#: `python -m rehearse` lists; ``all`` runs its steps in this order (tests/test_layout.py).
REGISTRY = (
    Command("all", "rehearse.pages.all", Rehearsal, 9, True),
    Command("preflight", "rehearse.commands.preflight.command", RunCommand, 3, True),
    Command("verify gateway", "rehearse.commands.verify_gateway.command", RunCommand, 0, False),
    Command("failover", "rehearse.commands.failover.command", RunCommand, 4, True),
    Command("verify burst", "rehearse.commands.burst.verify", RunCommand, 2, False),
    Command("burst", "rehearse.commands.burst.command", RunCommand, 5, True),
    Command("predict", "rehearse.commands.predict.command", ToolCommand, 8, False),
    Command("verify gpu", "rehearse.commands.verify_gpu.command", RunCommand, 1, False),
    Command("gateway-throughput", "rehearse.commands.gateway_throughput.command", RunCommand, 6, True),
    Command("hostnet", "rehearse.commands.hostnet.command", RunCommand, 7, True),
    Command("report", "rehearse.run.replay", FolderCommand, 11, False),
    Command("summary", "rehearse.pages.summary_command", FolderCommand, 10, True),
)
BY_NAME = {entry.name: entry for entry in REGISTRY}
REHEARSAL_ORDER = tuple(entry.name for entry in REGISTRY)
#: The run commands (what a run folder can be a recording of) -> their face's module.
COMMANDS = {entry.name: entry.module for entry in REGISTRY if entry.kind is RunCommand}


@dataclass(frozen=True)
class Group:
    """A word that groups commands (``verify gateway``): the group's own help, which is the
    parser's, not a command's."""
    dest: str
    metavar: str
    help: str
    description: str


GROUPS = {"verify": Group("target", "DEMO", "check that a demo is ready", "Check that a demo is ready.")}


class _Parser(argparse.ArgumentParser):
    """No option prefixes (`--out` must not stand for `--outputs`); subcommands' parsers are
    made through this class too, since ``allow_abbrev`` is not passed down to them."""

    def __init__(self, *args: Any, allow_abbrev: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        # argparse lists every choice of a misspelt command or demo; name the one meant.
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            kind = (action.metavar or action.dest).lower()
            names = list(action.choices)
            close = difflib.get_close_matches(value, names, n=1)
            hint = f"did you mean {close[0]}?" if close else f"the {kind}s: {', '.join(names)}"
            raise argparse.ArgumentError(None, f"no {kind} {value!r}; {hint}")
        super()._check_value(action, value)

    def error(self, message: str) -> None:
        # A command's option with a value it cannot take is one line, as every other input
        # the tool cannot use; --help shows the usage.
        if isinstance(self, _RootParser):
            super().error(message)
        see = "" if "--help" in message or "did you mean" in message else f" (see {self.prog} --help)"
        self.exit(2, f"{self.prog}: error: {message}{see}\n")


class _RootParser(_Parser):
    def error(self, message: str) -> None:
        # argparse's own words for a bare `python -m rehearse` name no command at all.
        if message.startswith("the following arguments are required: COMMAND"):
            message = "name a command; in the order of a rehearsal:\n" + _command_lines()
        super().error(message)

    def parse_args(self, args: Optional[Sequence[str]] = None,  # type: ignore[override]
                   namespace: Optional[argparse.Namespace] = None) -> argparse.Namespace:
        # argparse reports a subcommand's unknown option from the root parser, with the root's
        # usage: the user sees every command and not the option they meant. The subcommand
        # they typed says it instead, with its own usage. argparse also checks required options
        # before it gives the unknown ones back, so `predict --out X` would only say --replicas
        # is required: the first pass holds nothing required, and a mistyped option is named
        # first; the second is argparse's own, required options and all.
        with _nothing_required(self):
            parsed, extras = self.parse_known_args(args, None)
        if extras:
            typed = _typed_subcommand(self, parsed)
            typed.error(_unknown_arguments(typed, extras))
        return super().parse_args(args, namespace)


@contextlib.contextmanager
def _nothing_required(parser: argparse.ArgumentParser) -> Iterator[None]:
    """``parser`` and its subcommands' parsers with no required option, group or command, for
    as long as the block runs."""
    held: list[Any] = []

    def hold(p: argparse.ArgumentParser) -> None:
        for thing in [*p._actions, *p._mutually_exclusive_groups]:
            if thing.required:
                held.append(thing)
                thing.required = False
            if isinstance(thing, argparse._SubParsersAction):
                for sub in thing.choices.values():
                    hold(sub)

    hold(parser)
    try:
        yield
    finally:
        for thing in held:
            thing.required = True


def _typed_subcommand(parser: argparse.ArgumentParser,
                      parsed: argparse.Namespace) -> argparse.ArgumentParser:
    """The innermost parser of the command the user typed (``verify gateway``'s, not the root's)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(parsed, action.dest, None)
            if chosen in action.choices:
                return _typed_subcommand(action.choices[chosen], parsed)
    return parser


def _unknown_arguments(parser: argparse.ArgumentParser, extras: Sequence[str]) -> str:
    known = [o for action in parser._actions for o in action.option_strings]
    for extra in extras:
        if extra.startswith("-"):
            option = extra.split("=", 1)[0]
            close = difflib.get_close_matches(option, known, n=1)
            hint = f"did you mean {close[0]}?" if close else "--help lists its options"
            return f"no option {option}; {hint}"
    return f"unrecognized arguments: {' '.join(extras)} ({parser.prog} --help lists what it takes)"


def _command_lines() -> str:
    width = max(len(entry.name) for entry in REGISTRY)
    return "".join(f"  {entry.name:<{width}}  {entry.face().TITLE}\n" for entry in REGISTRY) + \
        "each takes --help, e.g. python -m rehearse verify gateway --help"


def _module(command: str) -> Any:
    """The face of ``command`` (a registry name)."""
    return BY_NAME[command].face()


def run_faces() -> dict[str, RunCommand]:
    """The run commands' faces by name: what ``report`` finds a recording's analysis in."""
    return {command: _module(command) for command in COMMANDS}


def _common(parser: argparse.ArgumentParser) -> None:
    stack_arguments(parser.add_argument_group("the stack"),
                    "use this kubeconfig instead of the stack's (whose token is minted here with "
                    "your AWS credentials)")
    parser.add_argument("--out", type=Path, default=Path("rehearsals"), metavar="DIR",
                        help="the rehearsals folder: the run's folder <time>-<stack>-<command> "
                             "goes in it (default: ./rehearsals)")


def build_parser() -> argparse.ArgumentParser:
    parser = _RootParser(
        prog="python -m rehearse",
        description="Rehearse the EKS Hybrid Nodes demos against a deployed lab: check, "
                    "measure, and keep a report (report.md, report.json, events.jsonl).",
        epilog="Exit codes: 0 every check passed, 1 a check failed or the run was interrupted, "
               "2 the run could not be made.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND",
                                     parser_class=_Parser)
    groups: dict[str, Any] = {}
    for entry in sorted(REGISTRY, key=lambda e: e.listed):
        group, _, word = entry.name.rpartition(" ")
        where = commands
        if group:
            if group not in groups:
                g = GROUPS[group]
                made = commands.add_parser(group, help=g.help, description=g.description)
                groups[group] = made.add_subparsers(dest=g.dest, required=True, metavar=g.metavar)
            where = groups[group]
        face = entry.face()
        layout = argparse.RawDescriptionHelpFormatter if entry.as_written else argparse.HelpFormatter
        sub = where.add_parser(word, help=face.TITLE, description=face.__doc__,
                               formatter_class=layout)
        if entry.kind in (RunCommand, Rehearsal):
            _common(sub)
        face.add_arguments(sub)
    return parser


def _typed(args: argparse.Namespace) -> Command:
    """The registry entry of the command ``args`` were parsed for."""
    if args.command in GROUPS:
        return BY_NAME[f"{args.command} {getattr(args, GROUPS[args.command].dest)}"]
    return BY_NAME[args.command]


def execute(command: str, args: argparse.Namespace) -> RunResult:
    """A run command's run into its folder (rehearse.run.execute), its face from the registry."""
    return one_run.execute(command, _module(command), args)


def check_inputs(command: str, args: argparse.Namespace, stack_outputs: Any) -> None:
    """Input a run command cannot use, as one line, before anything runs (rehearse.run.execute)."""
    one_run.check_inputs(command, _module(command), args, stack_outputs)


def run_report(folder: Path, out: Optional[Path] = None) -> int:
    """``rehearse report FOLDER [--out DIR]`` (rehearse.run.replay), with the registry's run
    commands."""
    return replay.run_report(folder, out, run_faces())


def replay_folder(folder: Path, out: Optional[Path]) -> Path:
    """Where ``rehearse report FOLDER [--out DIR]`` writes (rehearse.run.replay)."""
    return replay.replay_folder(folder, out, run_faces())


def _run(entry: Command, args: argparse.Namespace) -> int:
    return execute(entry.name, args).code


def _tool(entry: Command, args: argparse.Namespace) -> int:
    # The readers are looked up when it runs (tests replace rehearse.run.execute's _connect).
    return entry.face().main(args, one_run._outputs, one_run._connect)


def _rehearse(entry: Command, args: argparse.Namespace) -> int:
    return entry.face().main(
        args, runner=execute, read_outputs=one_run._outputs, parse=build_parser().parse_args,
        as_run_error=one_run._as_run_error, check_inputs=check_inputs,
        reach=lambda options, stack_outputs: one_run._connect(options, stack_outputs).close())


def _folder(entry: Command, args: argparse.Namespace) -> int:
    return entry.face().run(args, run_faces())


#: How ``main`` runs each kind of command.
RUNS: Mapping[type, Callable[[Command, argparse.Namespace], int]] = {
    RunCommand: _run, ToolCommand: _tool, Rehearsal: _rehearse, FolderCommand: _folder}


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        entry = _typed(args)
        return RUNS[entry.kind](entry, args)
    except KeyboardInterrupt:
        # Before a run folder exists (reading the stack, connecting): nothing was done.
        print("interrupted before anything was recorded", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 sorted into "could not run" or a real bug
        run_error = one_run._as_run_error(error)
        if run_error is None:
            raise
        print(f"error: {run_error}", file=sys.stderr)
        return 2
