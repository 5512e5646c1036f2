"""The failover's analysis (pure: events -> report): the baseline's health, the deletion's
moment in the cluster's clock, the longest gap each way on each path, and when the Lease, the
VPC routes and the VTEP config followed the new leader. The collector is collect.py; the parts
are baseline (the probers' health), moments (the clocks), follow (Lease, routes, VTEP config)
and gaps (traffic, the timeline); observed reads the recorded run once."""

from __future__ import annotations

from typing import Any

from rehearse.lab import probes as probe_logs
from rehearse.run.outcome import ending, not_read
from rehearse.run.record import every, first, parse_time
from rehearse.run.report import FAIL, NOT_READ, PASS, Check, Report
from rehearse.commands.failover.follow import check_leadership, check_routes, check_vtep
from rehearse.commands.failover.gaps import check_gaps, timeline
from rehearse.commands.failover.kinds import (
    AFTER_DELETION, CHECK_BASELINE, CHECK_DELETED, CHECK_LEADER, CONVERGED, FAILOVER_ENDED,
    OBSERVE_ENDED, OBSERVE_ERROR, PATHS, WAIT_TIMEOUT)
from rehearse.commands.failover.moments import clock
from rehearse.commands.failover.observed import Run, commands_for

NOT_A_MEASUREMENT = "Gateway leader failover — not a measurement"


def analyse(events: list[dict[str, Any]]) -> Report:
    run = Run(events)
    report = Report(command="failover", stack=run.started.get("stack", "?"),
                    started=run.started.get("at", events[0]["at"] if events else ""),
                    title="Gateway leader failover")
    commands = commands_for(run)
    # Baseline and leader: without both, nothing was deleted and nothing is measured.
    _check_baseline(run, report, commands)
    _check_leader(run, report, commands)
    if run.deleted is None and not run.refused:
        _ended_before_deletion(run, report, commands)
    elif run.refused:
        _refused(run, report, commands)
    else:
        _measured(run, report, commands)
    return report


def _check_baseline(run: Run, report: Report, commands: dict[str, str]) -> None:
    problems, baseline, since, until = run.baseline()
    if problems is None:
        report.checks.append(not_read(CHECK_BASELINE, "both probers' logs", run.events,
                                      commands["baseline"]))
    elif problems:
        report.checks.append(Check(
            CHECK_BASELINE, FAIL, "; ".join(problems),
            fix="Run `python -m rehearse verify gateway` and fix what it reports; wait until both "
                "probers log `ok` on both paths, then run the failover again.",
            command=commands["baseline"]))
    else:
        counts = ", ".join(
            f"{direction} via {name} {sum(1 for p in baseline[direction] if p.ok and p.path == path and p.at >= since)}"
            for direction in (prober.arrow for prober in probe_logs.PROBERS) for path, name in PATHS)
        window = (until - since).total_seconds() if since and until else 0
        report.checks.append(Check(
            CHECK_BASELINE, PASS,
            f"successful probes in the {window:g} s before acting: {counts}; the latest of each "
            "succeeded", command=commands["baseline"]))


def _check_leader(run: Run, report: Report, commands: dict[str, str]) -> None:
    if run.old:
        leader = run.old
        eni = (run.old_eni or {}).get("eni")
        if run.old_eni is None and ending(run.events):
            report.checks.append(not_read(CHECK_LEADER, f"the EC2 instance of {leader['node']}",
                                          run.events, commands["leader"]))
        else:
            report.checks.append(Check(
                CHECK_LEADER, PASS if eni else FAIL,
                f"Lease {run.lease_name} holder {leader['holder']} -> node {leader['node']} -> pod "
                f"{leader['pod']}" + (f" -> primary ENI {eni} ({run.old_eni.get('instance_id')})"
                                      if eni else f"; but {(run.old_eni or {}).get('error', 'its ENI was not looked up')}"),
                fix="" if eni else "The node's instance must be found in EC2 in the stack's region "
                                   "(by its providerID, InternalIP or private DNS name).",
                command=commands["leader"]))
    elif run.resolved is not None:
        report.checks.append(Check(
            CHECK_LEADER, FAIL, run.resolved.get("reason") or "not resolved",
            fix="The Lease holder is `<node name>_<uuid>`: it must name a node that runs exactly "
                "one Running gateway pod. Check the gateway pods and the Lease; `python -m "
                "rehearse verify gateway` checks the same.",
            command=commands["leader"]))
    else:
        report.checks.append(not_read(CHECK_LEADER, "the Lease", run.events, commands["leader"]))


def _ended_before_deletion(run: Run, report: Report, commands: dict[str, str]) -> None:
    """The run ended before the deletion: what the failover would have measured was never read."""
    report.checks.append(not_read(CHECK_DELETED, "the leader before deleting its pod",
                                  run.events, commands["pods"]))
    for name in AFTER_DELETION:
        report.checks.append(not_read(name, "anything after a deletion", run.events))
    report.title = NOT_A_MEASUREMENT
    report.notes.append("Not a measurement: nothing was deleted, because the run ended "
                        "before the leader's pod was deleted.")


def _refused(run: Run, report: Report, commands: dict[str, str]) -> None:
    """The collector refused to delete anything (an unhealthy baseline, an unresolved leader)."""
    reasons = (run.refused or {}).get("reasons") or ["the run ended before the leader's pod "
                                                      "was deleted"]
    if not any(c.status == FAIL for c in report.checks):
        report.checks.append(Check(CHECK_DELETED, FAIL, "; ".join(reasons),
                                   command=commands["leader"]))
    # What a deletion would have measured was never read: the refusal above is the verdict.
    report.checks += [Check(name, NOT_READ, "not read: nothing was deleted (see above)")
                      for name in AFTER_DELETION]
    report.title = NOT_A_MEASUREMENT
    report.notes.append("Not a measurement: nothing was deleted, because "
                        + "; ".join(reasons) + ".")


def _measured(run: Run, report: Report, commands: dict[str, str]) -> None:
    """The leader's pod was deleted: what followed, the gaps, the timeline and the notes."""
    deletion = run.deletion
    assert deletion is not None
    report.checks.append(Check(
        CHECK_DELETED, PASS,
        f"deleted {run.namespace}/{run.deleted['pod']} on {run.deleted['node']} at "
        f"{clock(deletion.cluster)} UTC", command=commands["pods"]))
    end_event = first(run.events, OBSERVE_ENDED) or first(run.events, FAILOVER_ENDED) or run.events[-1]
    end = parse_time(end_event["at"]) + deletion.offset

    check_leadership(run, report, commands, deletion)
    check_routes(run, report, commands, deletion.local)
    check_vtep(run, report, commands, deletion.local)
    if ending(run.events) and not (first(run.events, CONVERGED) or first(run.events, WAIT_TIMEOUT)):
        # The run ended while the polls were still waiting for the new leader, route and VTEP
        # config: what they had not seen yet was not read, not missed.
        report.checks[-3:] = [c if c.status != FAIL else
                              not_read(c.name, "the Lease, routes and VTEP config until the "
                                       "failover completed", run.events, c.command)
                              for c in report.checks[-3:]]
    rows = check_gaps(run, report, commands, deletion.cluster, end)
    report.charts.append(timeline(report, rows, run.threshold, (end - deletion.cluster).total_seconds()))
    report.notes.append(
        f"Deletion time: {deletion.source}. Probe gaps come from the probers' kubelet timestamps, "
        "the Lease times from the gateway nodes' clocks; the route and VTEP times are when a poll "
        f"first saw the change (every {run.interval:g} s), so each is late by up to one poll.")
    timeout = first(run.events, WAIT_TIMEOUT)
    if timeout:
        report.notes.append(f"Gave up waiting after {timeout['after']:g} s; still missing: "
                            + "; ".join(timeout["missing"]) + ".")
    errors = list(every(run.events, OBSERVE_ERROR))
    if errors:
        report.notes.append(f"{len(errors)} poll(s) failed and were retried, first: "
                            f"{errors[0]['what']}: {errors[0]['error']}")
