"""The analysis of `python -m rehearse preflight` (pure: events -> report): each of
ops.preflight's checks as the report's."""

from __future__ import annotations

from rehearse.commands.preflight.kinds import CHECKED
from rehearse.run.outcome import not_read
from rehearse.run.record import RUN_STARTED, every, first
from rehearse.run.report import FAIL, PASS, SKIP, WARN, Check, Report

#: ops.preflight's statuses as a report's: a warning passes, under its own verdict.
STATUS = {"PASS": PASS, "WARN": WARN, "FAIL": FAIL, "SKIP": SKIP}


def analyse(events: list[dict]) -> Report:
    started = first(events, RUN_STARTED) or {}
    report = Report(command="preflight", stack=started.get("stack", "?"),
                    started=started.get("at", "?"), title="Pre-check: the account and this "
                    "machine can hold the lab")
    for event in every(events, CHECKED):
        status = STATUS.get(event.get("status"), FAIL)
        report.checks.append(Check(event.get("name", "?"), status, event.get("detail", ""),
                                   event.get("fix", ""),
                                   "python -m ops.preflight --stack " + str(report.stack)))
    if not report.checks:
        report.checks.append(not_read("preflight", "ops.preflight's checks", events,
                                      "python -m ops.preflight --stack " + str(report.stack)))
    return report
