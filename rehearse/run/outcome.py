"""How a run ended, and the report of a run that did not finish.

A run that is interrupted (Ctrl-C) or fails part-way keeps its folder: what it measured, and
the record of what it changed (a leader pod deleted, a stack switched and restored), is in
``events.jsonl`` as it happened. The run's end is an event too (``run.interrupted`` or
``run.failed`` with the one-line reason), and the progress lines the collector printed are
recorded as ``run.step`` events, so the report can say what was done and what was not, and
``python -m rehearse report`` gives the same report again from the folder alone."""

from __future__ import annotations

import collections
import sys
from typing import Any, Callable, Mapping

from rehearse.run.errors import first_line
from rehearse.run.record import RUN_STARTED, every, first
from rehearse.run.report import FAIL, NOT_READ, SKIP, Check, Report

RUN_STEP = "run.step"
RUN_INTERRUPTED = "run.interrupted"
RUN_FAILED = "run.failed"
CHECK_COMPLETED = "run completed"

#: Events that record a change this run made to the cluster or the stack, and what each says,
#: so an interrupted run's report lists them (the commands' own event kinds).
CHANGES = {
    "pod.deleted": ("deleted the leader's pod", ("pod", "node")),
    "scenario.switched": ("switched the stack's scenario", ("scenario",)),
    "scenario.restored": ("restored the stack's scenario", ("scenario",)),
    "scale.requested": ("scaled the burst Deployment", ("replicas",)),
    "deployment.replicas_restored": ("put the burst Deployment's replicas back", ("replicas",)),
    "deployment.restarted": ("restarted the burst Deployment", ()),
    "throughput.switched": ("switched the gateway instance type", ("instanceType",)),
    "throughput.restored": ("restored the gateway instance type", ("instanceType",)),
    "throughput.pod_created": ("created a measurement pod", ("name", "pod")),
    "throughput.pod_deleted": ("deleted a measurement pod", ("name", "pod")),
    "hostnet.created": ("created the probe namespace and pods", ()),
    "hostnet.cleanup": ("removed the probe namespace and pods", ()),
    "hostnet.leftovers_removed": ("removed an earlier run's probe namespace and pods", ()),
}
#: A change and the event that undoes it: a run that ended between the two left it changed.
UNDONE_BY = {"scenario.switched": "scenario.restored", "throughput.switched": "throughput.restored",
             "scale.requested": "deployment.replicas_restored", "hostnet.created": "hostnet.cleanup",
             "throughput.pod_created": "throughput.pod_deleted"}


def ending(events: list[dict]) -> dict | None:
    """The ``run.interrupted`` or ``run.failed`` event, or None for a run that finished."""
    return first(events, RUN_INTERRUPTED) or first(events, RUN_FAILED)


def not_read(name: str, what: str, events: list[dict], command: str = "") -> Check:
    """The check ``name`` whose input (``what``, e.g. "the Lease") was never read: the run
    ended before it, or stopped at an earlier read. Not a verdict on the cluster, so no fix."""
    return Check(name, NOT_READ, "not read: " + why_not_read(what, events), command=command)


def why_not_read(what: str, events: list[dict]) -> str:
    ended = ending(events)
    if ended is None:
        return f"the run recorded no {what.removeprefix('the ')}"
    if ended["kind"] == RUN_INTERRUPTED:
        return f"the run was interrupted before reading {what}"
    return f"the run failed before reading {what} (see '{CHECK_COMPLETED}')"


def mark_unread(report: Report, events: list[dict],
                reads: "Mapping[str, tuple[str, tuple[str, ...]]] | Callable[[str], Any]") -> None:
    """In a run that ended early, the checks whose input the collector had not finished reading
    become NOT READ: ``reads`` gives, by check name, (what it reads, the event kinds any one of
    which the collector records once that read is done). A PASS stays (what was read passed);
    a FAIL or SKIP that only says its input is missing does not stand, and a NOT READ says
    how the run ended."""
    if ending(events) is None:
        return
    lookup = reads.get if isinstance(reads, Mapping) else reads
    present = {e["kind"] for e in events}
    for index, check in enumerate(report.checks):
        entry = lookup(check.name)
        if entry is None or check.status not in (FAIL, SKIP, NOT_READ):
            continue
        what, done = entry
        if not present & set(done):
            report.checks[index] = not_read(check.name, what, events, check.command)


def analyse_run(analyse: Callable[[list[dict]], Report], events: list[dict]) -> Report:
    """The command's analysis, with the run's end in front when it did not finish. The
    command's analyser is pure but was written for complete runs: if it cannot make sense of
    a partial one, the report still says what was recorded."""
    ended = ending(events)
    if ended is None:
        return analyse(events)
    started = first(events, RUN_STARTED) or {}
    try:
        report = analyse(events)
    except Exception as error:  # noqa: BLE001 a partial run the analyser did not foresee
        report = Report(command=started.get("command", "?"), stack=started.get("stack", "?"),
                        started=started.get("at", "?"), title=f"python -m rehearse "
                        f"{started.get('command', '?')}", checks=[])
        report.notes.append(f"The checks could not be worked out from this partial run "
                            f"({first_line(error)}); what was recorded is below and in "
                            "events.jsonl.")
    _fail_the_read_that_failed(report, ended, analyse)
    report.checks.insert(0, _completed(ended, events))
    report.notes[:0] = _what_was_done(events)
    return report


def _fail_the_read_that_failed(report: Report, ended: dict, analyse: Callable) -> None:
    """A run that failed (not a defect of this tool, not an interrupt) failed at a read: the
    first check, in the order the collector reads, whose input was not read is the one whose
    read failed — a FAIL with the error. The checks after it stay NOT READ. The order is the
    analysis module's ``READ_ORDER`` (check names) where its report's order differs."""
    if ended["kind"] != RUN_FAILED or ended.get("details"):
        return
    order = getattr(sys.modules.get(getattr(analyse, "__module__", ""), None), "READ_ORDER", ())
    rank = {name: index for index, name in enumerate(order)}
    unread = [(rank.get(c.name, len(rank) + i), i) for i, c in enumerate(report.checks)
              if c.status == NOT_READ]
    if not unread:
        return
    index = min(unread)[1]
    check = report.checks[index]
    report.checks[index] = Check(check.name, FAIL, f"its read failed: {ended.get('reason', '?')}",
                                 f"fix the cause and run again (see '{CHECK_COMPLETED}')",
                                 check.command)


def _completed(ended: dict, events: list[dict]) -> Check:
    steps = [e["message"] for e in every(events, RUN_STEP)]
    during = f", during “{steps[-1]}”" if steps else ""
    if ended["kind"] == RUN_INTERRUPTED:
        seen = f"interrupted ({ended.get('reason', 'Ctrl-C')}) at {ended['at']}{during}"
        fix = ("run it again; this folder keeps what was recorded before the interrupt "
               "(events.jsonl), and the checks below that say 'not read' were not reached")
    else:
        seen = f"failed at {ended['at']}{during}: {ended.get('reason', '?')}"
        fix = ("fix the cause above and run again; this folder keeps what was recorded before "
               "the failure (events.jsonl)")
    if ended.get("details"):
        fix += f"; the traceback is in {ended['details']}"
    return Check(CHECK_COMPLETED, FAIL, seen, fix)


def _what_was_done(events: list[dict]) -> list[str]:
    steps = [e["message"] for e in every(events, RUN_STEP)]
    notes = []
    if steps:
        done, last = steps[:-1], steps[-1]
        notes.append("Done: " + ("; ".join(done) if done else "nothing before the last step") +
                     f". Not finished: {last} (and whatever came after it).")
    kinds: "collections.OrderedDict[str, int]" = collections.OrderedDict()
    for event in events:
        if event["kind"] not in (RUN_STARTED, RUN_STEP, RUN_INTERRUPTED, RUN_FAILED):
            kinds[event["kind"]] = kinds.get(event["kind"], 0) + 1
    recorded = ", ".join(f"{kind}" + (f" ×{count}" if count > 1 else "")
                         for kind, count in kinds.items())
    notes.append(f"Recorded before the end: {recorded or 'nothing but the start'}.")
    changes = [e for e in events if e["kind"] in CHANGES]
    if changes:
        shown = []
        for event in changes:
            what, keys = CHANGES[event["kind"]]
            detail = ", ".join(f"{k} {event[k]}" for k in keys if event.get(k) is not None)
            shown.append(f"{event['at']} {what}" + (f" ({detail})" if detail else ""))
        notes.append("Changes this run made before it ended: " + "; ".join(shown) + ".")
    last_of = {e["kind"]: i for i, e in enumerate(events)}
    left = [kind for kind, undo in UNDONE_BY.items()
            if kind in last_of and last_of.get(undo, -1) < last_of[kind]]
    if left:
        notes.append("Not undone before the end, by what was recorded: " + "; ".join(
            CHANGES[kind][0] for kind in left) + " — check the stack and the cluster "
            "(`pulumi config`, `kubectl get pods -A`) before the talk.")
    return notes


def reason_of(error: BaseException, as_run_error: Callable[[BaseException], Any]) -> tuple[str, bool]:
    """(the one-line reason, whether it is a defect of this tool rather than of the run)."""
    run_error = as_run_error(error)
    if run_error is not None:
        return str(run_error), False
    return f"{first_line(error)} (a defect in python -m rehearse)", True
