"""The analysis of `python -m rehearse preflight` (pure: events -> report): each of
ops.preflight's checks as the report's."""

from __future__ import annotations

from rehearse.commands.preflight.kinds import CHECKED
from rehearse.run.outcome import not_read
from rehearse.run.record import RUN_STARTED, every, first
from rehearse.run.report import FAIL, PASS, SKIP, Check, Report

#: ops.preflight's statuses as a report's: a warning passes and says so.
STATUS = {"PASS": PASS, "WARN": PASS, "FAIL": FAIL, "SKIP": SKIP}


def analyse(events: list[dict]) -> Report:
    started = first(events, RUN_STARTED) or {}
    report = Report(command="preflight", stack=started.get("stack", "?"),
                    started=started.get("at", "?"), title="Pre-check: the account and this "
                    "machine can hold the lab")
    for event in every(events, CHECKED):
        status = STATUS.get(event.get("status"), FAIL)
        seen = event.get("detail", "")
        if event.get("status") == "WARN":
            seen = f"WARN: {seen}" + (f" ({event['fix']})" if event.get("fix") else "")
        report.checks.append(Check(event.get("name", "?"), status, seen, event.get("fix", ""),
                                   "python -m ops.preflight --stack " + str(report.stack)))
    if not report.checks:
        report.checks.append(not_read("preflight", "ops.preflight's checks", events,
                                      "python -m ops.preflight --stack " + str(report.stack)))
    return report
