"""What the summary page shows, gathered: the latest run of each command for one stack, from
the run folders (``rehearsals/<time>-<stack>-<command>/report.json``), part by part of the demo
guide's runbook. "Latest" is by the start time the run recorded, not by the folder's
modification time: a ``rehearse report`` replay rewrites a report without making its run any
newer.

What the page says is the `summary` command's help (rehearse.pages.summary_command, its face);
this module gathers; rehearse.pages.summary_page renders and writes the pages."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from rehearse.run.errors import RunError
from rehearse.run.outcome import CHECK_COMPLETED
from rehearse.pages.html import inside
from rehearse.run.record import EVENTS, RUN_STARTED, is_folder_of, parse_time
from rehearse.run.report import REPORT_VERSION


@dataclass(frozen=True)
class Part:
    """One part of the runbook and the commands that rehearse it, in the demo guide's order."""
    title: str
    what: str
    commands: tuple[str, ...]


#: The demo guide's runbook, part by part (docs/demo-guide.md#the-runbook).
PARTS = (
    Part("Pre-check", "the account and this machine can hold the lab (read-only)", ("preflight",)),
    Part("Demo 1: gateway failover", "the gateway is ready, and its leader fails over",
         ("verify gateway", "failover")),
    Part("Demo 2: bursting and scale-in", "the scenarios' scale-in, and the scenario in place",
         ("burst", "verify burst")),
    Part("Demo 3: GPU inference", "the GPU host, vLLM and the client's calls (with gpuEnabled)",
         ("verify gpu",)),
)
#: The questions the demo guide left open: worth a run, but no demo waits for them.
OPEN_QUESTIONS = Part("Open questions", "not part of a demo: run them when there is time",
                      ("gateway-throughput", "hostnet"))

#: How a run ended, beyond PASS and FAIL.
INTERRUPTED, UNFINISHED = "INTERRUPTED", "FAILED TO FINISH"
NEVER_RUN = "NEVER RUN"
#: The report.json versions the page reads (1 had no charts).
READABLE_VERSIONS = tuple(range(1, REPORT_VERSION + 1))
#: Older than this, a run says so: the lab may have changed since.
STALE = datetime.timedelta(hours=24)


@dataclass(frozen=True)
class Chart:
    name: str
    title: str
    #: The SVG's text, ready to inline (rehearse.summary_page checks it), or None.
    svg: Optional[str]
    #: The PNG's path relative to the rehearsals folder, or None when it is not on disk.
    png: Optional[str]
    #: What is wrong with the listed files ("" when both are there).
    problem: str = ""


@dataclass(frozen=True)
class Run:
    folder: Path
    command: str
    stack: str
    started: datetime.datetime
    report: dict[str, Any]
    #: PASS, FAIL, INTERRUPTED or FAILED TO FINISH.
    state: str
    charts: tuple[Chart, ...] = ()

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [c for c in self.report.get("checks") or [] if c.get("status") == "FAIL"]


@dataclass(frozen=True)
class Step:
    """One step of a ``rehearse all`` run, for the page's "this rehearsal" section."""
    command: str
    #: PASS, FAIL, INTERRUPTED, COULD NOT RUN, SKIPPED, NOT RUN.
    state: str
    detail: str = ""


@dataclass
class Summary:
    stack: str
    now: datetime.datetime
    root: Path
    #: command -> its latest run.
    latest: dict[str, Run]
    #: Folders that look like runs of this stack but hold no readable report.
    unreadable: list[str] = field(default_factory=list)
    #: command -> why it was not run this time (a ``rehearse all`` skip).
    skipped: dict[str, str] = field(default_factory=dict)
    #: The steps of the ``rehearse all`` run that wrote this page, when one did.
    rehearsal: Optional[list[Step]] = None

    def parts(self) -> list[Part]:
        extra = sorted(c for c in self.latest if not any(c in p.commands for p in PARTS)
                       and c not in OPEN_QUESTIONS.commands)
        others = [Part("Other runs", "commands outside the runbook", tuple(extra))] if extra else []
        return list(PARTS) + [OPEN_QUESTIONS] + others

    def never_run(self) -> list[str]:
        """The runbook's commands with no run of this stack."""
        return [c for p in PARTS for c in p.commands if c not in self.latest]

    def readiness(self, part: Part) -> str:
        """READY when every command of the part has a latest run that passed."""
        states = [self.latest[c].state if c in self.latest else NEVER_RUN for c in part.commands]
        if all(s == "PASS" for s in states):
            return "READY"
        if any(s not in ("PASS", NEVER_RUN) for s in states):
            return "NOT READY"
        return "NOT RUN" if all(s == NEVER_RUN for s in states) else "INCOMPLETE"

    def age(self, run: Run) -> str:
        return age_text(self.now - run.started)

    def stale(self, run: Run) -> bool:
        return self.now - run.started > STALE


def age_text(delta: datetime.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds < 0:
        return "in the future (is this machine's clock behind?)"
    if seconds < 60:
        return "just now"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours < 1:
        return f"{minutes} min ago"
    if days < 1:
        return f"{hours} h {minutes % 60} min ago"
    return f"{days} d {hours % 24} h ago"


def _state(report: dict[str, Any]) -> str:
    checks = report.get("checks") or []
    completed = next((c for c in checks if c.get("name") == CHECK_COMPLETED), None)
    if completed is not None and completed.get("status") == "FAIL":
        return INTERRUPTED if str(completed.get("seen", "")).startswith("interrupted") else UNFINISHED
    failed = any(c.get("status") == "FAIL" for c in checks)
    return "FAIL" if failed or report.get("passed") is False else "PASS"


def _charts(folder: Path, listed: Any) -> tuple[Chart, ...]:
    """The charts report.json lists (none in runs older than the charts), with what is missing
    said rather than dropped."""
    charts = []
    for entry in listed if isinstance(listed, list) else []:
        if not isinstance(entry, dict):
            continue
        name = str(entry.get("name") or "chart")
        svg_path, png_path = inside(folder, entry.get("svg")), inside(folder, entry.get("png"))
        problems, svg, png = [], None, None
        if svg_path is not None and svg_path.is_file():
            svg = svg_path.read_text(encoding="utf-8", errors="replace")
        else:
            problems.append(f"its SVG {entry.get('svg')!s} is missing from {folder.name}")
        if png_path is not None and png_path.is_file():
            png = f"{folder.name}/{png_path.relative_to(folder.resolve()).as_posix()}"
        else:
            problems.append(f"its PNG {entry.get('png')!s} is missing from {folder.name}")
        charts.append(Chart(name, str(entry.get("title") or name), svg, png, "; ".join(problems)))
    return tuple(charts)


#: The runbook's and the open questions' commands, longest first: a folder's name ends with
#: one, after its stack (which holds dashes too).
_KNOWN = sorted((c for part in (*PARTS, OPEN_QUESTIONS) for c in part.commands), key=len,
                reverse=True)


def _stack_in_name(name: str) -> Optional[str]:
    """The stack a folder's name says (``<time>-<stack>-<command>``, as record.folder_for
    names a run), or None when the name is not one."""
    for command in _KNOWN:
        suffix = f"-{command.replace(' ', '-')}"
        if name.endswith(suffix):
            stamp, _, rest = name.partition("-")
            stack = rest[:-len(suffix)]
            if stack and is_folder_of(name, stack, command):
                return stack
    return None


def _stack_in_events(folder: Path) -> Optional[str]:
    """The stack the run's first event names (record.RUN_STARTED), or None."""
    try:
        with (folder / EVENTS).open(encoding="utf-8") as events:
            first = json.loads(events.readline())
    except (OSError, ValueError):
        return None
    stack = first.get("stack") if isinstance(first, dict) else None
    return stack if isinstance(stack, str) and first.get("kind") == RUN_STARTED else None


def is_run_folder(folder: Path) -> bool:
    """A run's folder: what a run or a replay leaves (its events, its report)."""
    return folder.is_dir() and ((folder / EVENTS).is_file() or (folder / "report.json").is_file())


def run_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if is_run_folder(p)) if root.is_dir() else []


def _check_shape(report: dict[str, Any]) -> None:
    """The parts the page reads, as Report.to_json writes them: a report.json that parses but
    is of another shape (hand-edited, another tool's) is listed as unreadable, not a crash."""
    for key in ("checks", "measurements"):
        items = report.get(key) or []
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise TypeError(f"{key} is not a list of objects")
    if not isinstance(report.get("notes") or [], list):
        raise TypeError("notes is not a list")


def _read_report(path: Path) -> dict[str, Any]:
    """report.json as the page reads it; ValueError (and kin) saying why it cannot be read."""
    report = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(report, dict):
        raise TypeError(f"it holds a JSON {type(report).__name__}, not an object")
    version = report.get("version")
    if version not in READABLE_VERSIONS:
        raise ValueError(f"it is of version {version!r}; this tool reads versions "
                         f"{READABLE_VERSIONS[0]} to {READABLE_VERSIONS[-1]} (rebuild it with "
                         f"`python -m rehearse report {path.parent}`)")
    return report


def gather(root: Path, stack: str, now: datetime.datetime) -> Summary:
    """The latest run of each command of ``stack`` under ``root``. Every run folder the page
    cannot read is listed with the reason, unless it says it is another stack's."""
    latest: dict[str, Run] = {}
    unreadable: list[str] = []
    for folder in run_folders(root):
        path = folder / "report.json"
        if not path.is_file():
            if (_stack_in_events(folder) or _stack_in_name(folder.name)) in (stack, None):
                unreadable.append(f"{folder.name}: no report.json (rebuild it with "
                                  f"`python -m rehearse report {root / folder.name}`)")
            continue
        try:
            report = _read_report(path)
            if report.get("stack") != stack:
                continue
            command, started = str(report["command"]), parse_time(str(report["started"]))
            _check_shape(report)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            if (_stack_in_events(folder) or _stack_in_name(folder.name)) in (stack, None):
                unreadable.append(f"{folder.name}: report.json unreadable "
                                  f"({type(error).__name__}: {error})")
            continue
        run = Run(folder, command, stack, started, report, _state(report),
                  _charts(folder, report.get("charts")))
        kept = latest.get(command)
        # Ties (two runs recorded in the same microsecond) go to the later folder name.
        if kept is None or (started, folder.name) > (kept.started, kept.folder.name):
            latest[command] = run
    return Summary(stack, now, root, latest, unreadable)


def stacks_of(root: Path) -> set[str]:
    """The stacks the run folders under ``root`` say they are of: their report.json, else their
    first event or their name."""
    stacks = set()
    for folder in run_folders(root):
        try:
            stacks.add(str(_read_report(folder / "report.json")["stack"]))
        except (OSError, ValueError, KeyError, TypeError):
            found = _stack_in_events(folder) or _stack_in_name(folder.name)
            if found:
                stacks.add(found)
    return stacks


def only_stack(root: Path) -> str:
    """The one stack the runs under ``root`` are of (for a summary without --stack); ``root``
    is a folder (rehearse.pages.summary_command says when it is not)."""
    folders = run_folders(root)
    if not folders:
        raise RunError(f"{root} holds no rehearsal runs (no folder with events.jsonl or "
                       "report.json): run a command first, or pass --out DIR, the folder the "
                       "runs are in")
    stacks = stacks_of(root)
    if len(stacks) == 1:
        return stacks.pop()
    if not stacks:
        raise RunError(f"{root} holds {len(folders)} run folder(s) but none says its stack "
                       f"({', '.join(f.name for f in folders)}): pass --stack NAME")
    raise RunError(f"{root} holds runs of several stacks ({', '.join(sorted(stacks))}): pass "
                   "--stack NAME")

