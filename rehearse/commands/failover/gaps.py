"""The traffic gaps around the failover (pure: the probers' logs -> checks, figures and the
timeline chart): the longest interval between two successful probes each way on each path."""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass
from typing import Optional

from rehearse.lab import probes
from rehearse.run.outcome import not_read
from rehearse.run.record import every, iso
from rehearse.run.report import FAIL, NOT_READ, PASS, Chart, Check, Measurement, Report
from rehearse.commands.failover.follow import DOCUMENTED
from rehearse.commands.failover.kinds import PATHS, PROBES_READ
from rehearse.commands.failover.moments import clock, rounded
from rehearse.commands.failover.observed import Run


#: The logs must reach this close to the end of the observation (the probers turn every 1-3 s).
FRESH_SECONDS = 5.0


#: What that figure times (the EKS user guide's gateway operations page: the standby is ready
#: to forward within 3–5 s because its tunnel entries are in place; what it waits for is the
#: Lease): the timeline says so, so that a probe gap, which also holds the probes' own spacing,
#: is not read against it.
DOCUMENTED_MEASURES = "the standby taking over the Lease (leader election), not a gap in traffic"


#: A gap's reference: its pass limit first, and AWS's figure said for what it is, so a healthy
#: 5–7 s gap beside "3–5 s" does not read as a miss.
GAP_AGAINST_DOCUMENTED = ("AWS's 3–5 s is the Lease handover (above); a gap also holds the "
                          "probes' own spacing")


@dataclass(frozen=True)
class Gap:
    seconds: Optional[float]
    start: Optional[datetime.datetime]
    end: Optional[datetime.datetime]
    #: The series' latest probe failed: the outage had not ended (the gap is a lower bound).
    ongoing: bool
    failed: int
    last_probe: Optional[datetime.datetime]


def failover_gap(found: list[probes.Probe], path: str, start: datetime.datetime,
                 end: datetime.datetime) -> Gap:
    """The longest interval between two consecutive successful probes of ``path`` overlapping
    [start, end] (``probes.longest_gap``), and an outage still open at the last probe."""
    series = [p for p in found if p.path == path]
    oks = [p.at for p in series if p.ok]
    seconds = probes.longest_gap(found, path, start, end)
    gap_start = gap_end = None
    if seconds is not None:
        for a, b in zip(oks, oks[1:]):
            if (b - a).total_seconds() == seconds and a <= end and b >= start:
                gap_start, gap_end = a, b
                break
    last = series[-1].at if series else None
    ongoing = bool(series) and not series[-1].ok
    if ongoing and oks:
        tail = (last - oks[-1]).total_seconds()
        if seconds is None or tail > seconds:
            seconds, gap_start, gap_end = tail, oks[-1], last
    return Gap(seconds, gap_start, gap_end, ongoing,
               probes.failures(found, path, start, end), last)


def spacing_before(found: list[probes.Probe], path: str, before: datetime.datetime) -> Optional[float]:
    times = [p.at for p in found if p.path == path and p.at < before]
    steps = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    return statistics.median(steps) if steps else None


def check_gaps(run: Run, report: Report, commands: dict[str, str], deleted: datetime.datetime,
          end: datetime.datetime) -> list[dict]:
    """The gap checks and measurements; returns each path's probes and longest gap, in seconds
    from the deletion, for the timeline."""
    rows = []

    def since(moment: Optional[datetime.datetime]) -> Optional[float]:
        return None if moment is None else round((moment - deleted).total_seconds(), 3)

    reads = {e["direction"]: e for e in every(run.events, PROBES_READ)}
    for prober, direction in ((p.name, p.arrow) for p in probes.PROBERS):
        event = reads.get(direction)
        found = probes.parse(event.get("lines", [])) if event else []
        for path, name in PATHS:
            label = f"{direction} via {name}"
            gap = failover_gap(found, path, deleted, end)
            cadence = spacing_before(found, path, deleted)
            covered = gap.last_probe is not None and (
                end - gap.last_probe).total_seconds() <= FRESH_SECONDS
            command = (f"kubectl -n {run.demo_ns} logs deploy/{prober} --timestamps "
                       f"--since-time={iso(deleted - datetime.timedelta(seconds=10))[:19]}Z")
            if event is None:
                report.checks.append(not_read(f"gap {label}", f"the {prober} logs after the failover",
                                              run.events, command))
                status = NOT_READ
            elif gap.seconds is None:
                status, seen = FAIL, ("fewer than two successful probes: no gap can be measured"
                                      + (f" ({event['error']})" if event.get("error") else ""))
            elif not covered:
                status, seen = FAIL, (f"the {prober} log stops at {clock(gap.last_probe)}, before "
                                      f"the observation ended at {clock(end)}: the gap is not "
                                      "measured to the end")
            elif gap.ongoing:
                status, seen = FAIL, (f"still failing when the observation ended: the last probe "
                                      f"({clock(gap.last_probe)}) failed, no success since "
                                      f"{clock(gap.start)} ({gap.seconds:.1f} s and counting)")
            elif gap.seconds > run.threshold:
                status, seen = FAIL, (f"{gap.seconds:.3f} s without a successful probe, from "
                                      f"{clock(gap.start)} to {clock(gap.end)} UTC: over "
                                      f"{run.threshold:g} s")
            else:
                status, seen = PASS, (f"longest gap {gap.seconds:.3f} s (from {clock(gap.start)} "
                                      f"to {clock(gap.end)} UTC) ≤ {run.threshold:g} s")
            if event is not None:
                report.checks.append(Check(
                    f"gap {label}", status, seen,
                    fix="" if status == PASS else
                    "Compare with the route and VTEP times above: if they switched in time, look at "
                    "the data path (security groups for VXLAN UDP 8472 between the gateway nodes and "
                    "the hybrid nodes, the source/dest check on the new leader's ENI); if they did "
                    "not, at the gateway. Run it again to see whether it repeats.",
                    command=command))
            note = [f"{gap.failed} failed probe(s) after the deletion"]
            if cadence is not None:
                note.append(f"probes {cadence:.1f} s apart before it")
            if gap.start and gap.end:
                note.append(f"{clock(gap.start)} → {clock(gap.end)}")
            if gap.ongoing:
                note.append("still failing at the end: at least this long")
            report.measurements.append(Measurement(
                f"longest gap {label}", rounded(gap.seconds), "s",
                f"PASS ≤ {run.threshold:g} s (e2e: ≤ 30 s); {GAP_AGAINST_DOCUMENTED}",
                "; ".join(note)))
            rows.append({"label": label, "status": status, "measured": event is not None,
                         "probes": [[since(p.at), p.ok] for p in found if p.path == path],
                         "gap": None if gap.seconds is None else {
                             "seconds": rounded(gap.seconds), "start": since(gap.start),
                             "end": since(gap.end), "ongoing": gap.ongoing}})
    return rows


#: The timeline's vertical markers: the measurement each is drawn from, and its label.
MARKERS = (("Lease handover (new acquireTime − deletion)", "Lease handed over"),
           ("route switch (first poll seeing the new ENI)", "route replaced"),
           ("VTEP follow (first poll naming the new leader)", "VTEP config updated"))


def timeline(report: Report, rows: list[dict], threshold: float, end: float) -> Chart:
    """Demo 1's failover timeline, from the figures the report's table shows."""
    values = {m.name: m.value for m in report.measurements}
    return Chart("failover-timeline", "Demo 1: gateway leader failover, probes around the deletion",
                 {"rows": rows, "end": round(end, 3), "threshold": threshold, "documented": DOCUMENTED,
                  "documented_measures": DOCUMENTED_MEASURES,
                  "markers": [{"label": label, "at": values.get(name)} for name, label in MARKERS]})
