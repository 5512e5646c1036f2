"""Analyse a run folder's events.jsonl again and write report.md, report.json and the
report's charts (SVG and PNG), into the folder or with --out DIR into a run folder of the
rehearsals folder DIR, named as a live run's (a recorded run replays through the same analysis;
`summary --out DIR` then reads it)."""

# The face of `rehearse report` (a folder command, rehearse.run.command): its docstring is its
# --help description. It reads run folders and never a cluster.

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Mapping, Optional

from rehearse.run import outcome
from rehearse.run import record
from rehearse.run.command import RunCommand
from rehearse.run.errors import RunError

TITLE = "analyse a run's folder again and rewrite its report"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", type=Path, help="a run folder (rehearsals/<time>-<stack>-<command>)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="the rehearsals folder: write the report (report.md, report.json, "
                             "charts, and a copy of events.jsonl) into DIR/<time>-<stack>-<command>, "
                             "the run's start, stack and command, and leave FOLDER as it is "
                             "(default: rewrite them in FOLDER)")


def run(args: argparse.Namespace, faces: Mapping[str, RunCommand]) -> int:
    if not args.folder.is_dir():
        what = "is a file, not a run folder" if args.folder.exists() else "does not exist"
        raise RunError(f"the run folder {args.folder} {what}: name a folder under "
                       "rehearsals/ (`ls rehearsals`) or a recorded one")
    return run_report(args.folder, args.out, faces)


def _recorded(folder: Path, faces: Mapping[str, RunCommand]) -> tuple[list[dict], dict]:
    """A run folder's events and its run.started event, or one line saying why it is not one."""
    try:
        events = record.read_events(folder)
    except FileNotFoundError:
        raise RunError(f"{folder} holds no {record.EVENTS}: is it a rehearsal run folder?") from None
    except ValueError as error:
        raise RunError(f"{folder / record.EVENTS} is not JSON lines: {error}") from None
    started = record.first(events, record.RUN_STARTED)
    if started is None or started.get("command") not in faces:
        raise RunError(f"{folder / record.EVENTS} does not say which command it recorded")
    return events, started


def _replay_target(folder: Path, out: Optional[Path], started: dict) -> Path:
    if out is None:
        return folder
    stack = started.get("stack")
    if not isinstance(stack, str) or not stack or not all(c.isalnum() or c in "-_." for c in stack) \
            or stack.strip(".") == "":
        raise RunError(f"{folder / record.EVENTS}: its run.started event names no usable stack "
                       f"({stack!r}): the run folder under --out is named after it")
    try:
        moment = record.parse_time(str(started.get("at")))
    except ValueError:
        raise RunError(f"{folder / record.EVENTS}: its run.started event has no time ({started.get('at')!r}): "
                       "the run folder under --out is named after it") from None
    return record.folder_for(out, stack, started["command"], moment)


def replay_folder(folder: Path, out: Optional[Path], faces: Mapping[str, RunCommand]) -> Path:
    """Where ``rehearse report FOLDER [--out DIR]`` writes: FOLDER itself, or the run folder a
    live run of the same start, stack and command would have made in the rehearsals folder DIR
    (record.folder_for), so ``rehearse summary --out DIR`` reads it. The same recording
    replayed twice into DIR lands in the same folder. ``faces``: the run commands a recording
    may be of, by name (rehearse.cli's registry)."""
    return _replay_target(folder, out, _recorded(folder, faces)[1])


def run_report(folder: Path, out: Optional[Path], faces: Mapping[str, RunCommand]) -> int:
    """Analyse ``folder`` again with its command's analysis (``faces``, by command name); with
    ``out`` (a rehearsals folder) the report goes to a run folder of its own there
    (replay_folder), with the events beside it, so a recorded run (a test fixture, a
    colleague's folder) is read and never written."""
    events, started = _recorded(folder, faces)
    target = _replay_target(folder, out, started)
    report = outcome.analyse_run(faces[started["command"]].analyse, events)
    target.mkdir(parents=True, exist_ok=True)
    if target.resolve() != folder.resolve():
        # A run folder as a live run leaves it: it can be replayed again from there.
        shutil.copyfile(folder / record.EVENTS, target / record.EVENTS)
    report.write(target)
    print(report.summary())
    if target != folder:
        print(f"replayed into {target}")
    print(f"report: {target / 'report.html'} (and report.md)")
    if outcome.ending(events) is not None:
        return 1 if outcome.ending(events)["kind"] == outcome.RUN_INTERRUPTED else 2
    return 0 if report.passed else 1
