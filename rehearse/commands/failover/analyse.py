"""The failover's analysis (pure: events -> report): the baseline's health, the deletion's
moment in the cluster's clock, the longest gap each way on each path, and when the Lease, the
VPC routes and the VTEP config followed the new leader. The collector is rehearse.failover."""

from __future__ import annotations

import datetime
import statistics
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from rehearse.lab import leader as leaders
from rehearse.lab import probes as probe_logs
from rehearse.lab.gateway import LEASE_DURATION_SECONDS, RETRY_PERIOD_SECONDS
from rehearse.run.record import every, first, iso, parse_time
from rehearse.run.outcome import ending, not_read
from rehearse.run.report import FAIL, NOT_READ, PASS, Chart, Check, Measurement, Report


#: The demo 1 probers (components/demos.py) and the direction each measures.
PROBERS = (("prober-cloud", "cloud→hybrid"), ("prober-hybrid", "hybrid→cloud"))
PATHS = (("svc", "Service"), ("pod", "pod"))
#: As the gateway's e2e test: at least this many good probes each way before acting.
MIN_BASELINE_SUCCESSES = 5
#: The logs must reach this close to the end of the observation (the probers turn every 1-3 s).
FRESH_SECONDS = 5.0
#: The baseline's latest probe must be this recent on this machine's clock (looser: the
#: offset between this machine's clock and the cluster's is not known before the deletion).
BASELINE_FRESH_SECONDS = 10.0
#: Seconds AWS documents for a failover, beside which every figure is shown.
DOCUMENTED = "AWS documents 3–5 s"
#: What that figure times (the EKS user guide's gateway operations page: the standby is ready
#: to forward within 3–5 s because its tunnel entries are in place; what it waits for is the
#: Lease): the timeline says so, so that a probe gap, which also holds the probes' own spacing,
#: is not read against it.
DOCUMENTED_MEASURES = "the standby taking over the Lease (leader election), not a gap in traffic"
#: A gap's reference: its pass limit first, and AWS's figure said for what it is, so a healthy
#: 5–7 s gap beside "3–5 s" does not read as a miss.
GAP_AGAINST_DOCUMENTED = ("AWS's 3–5 s is the Lease handover (above); a gap also holds the "
                          "probes' own spacing")
#: How far this machine's DELETE time may lie from the API server's deletionTimestamp (less
#: the grace, whole seconds) and still stand for the cluster's clock: the slack either side of
#: that second, and so the bound on the deletion moment in the cluster's clock (docs/gateway.md#the-lease).
AGREEMENT_SLACK = 0.5
AGREEMENT_BOUND = 1.0 + AGREEMENT_SLACK
#: The deletionTimestamp's resolution, when it is the moment used.
WHOLE_SECOND = 1.0
#: How long the Lease can stay unowned after the leader's last renewal, by client-go's leader
#: election with the gateway's flags (lease 3 s, retry 1 s; tools/leaderelection's acquire loop
#: retries every retry·[1, 1 + JitterFactor 1.2), i.e. 1-2.2 s): a standby first sees the last
#: renewal at its next try (up to 2.2 s later), counts the lease duration from then (its own
#: observedTime, not renewTime), and takes the Lease at its first try after that (up to 2.2 s
#: more). More than 3 s, at most 7.4 s (docs/gateway.md#the-lease).
JITTER_FACTOR = 1.2
UNOWNED_MAX_SECONDS = LEASE_DURATION_SECONDS + 2 * RETRY_PERIOD_SECONDS * (1 + JITTER_FACTOR)

#: The checks a run makes only once the leader's pod is deleted.
AFTER_DELETION = ("new leader elected", "route switched to the new leader's ENI",
                  "VTEP config follows the new leader") + tuple(
    f"gap {direction} via {name}" for _, direction in PROBERS for path, name in PATHS)

DEFAULTS = {"interval": 0.5, "observe": 30.0, "timeout": 60.0, "threshold": 10.0, "baseline": 20.0}

# --- analysing (pure: events -> report) -----------------------------------------------------

def baseline_problems(baseline: dict[str, tuple[list[probe_logs.Probe], str]],
                      since: datetime.datetime, until: datetime.datetime) -> list[str]:
    """Why the probers' baseline is not healthy (empty: healthy): on each path each way, at least
    MIN_BASELINE_SUCCESSES successes since ``since``, the latest probe a success, and recent."""
    problems = []
    for _, direction in PROBERS:
        found, error = baseline.get(direction, ([], "not read"))
        if error and not found:
            problems.append(f"{direction}: {error}")
            continue
        for path, name in PATHS:
            series = [p for p in found if p.path == path and p.at >= since]
            ok = sum(1 for p in series if p.ok)
            if ok < MIN_BASELINE_SUCCESSES:
                problems.append(f"{direction} via {name}: {ok} successful probe(s) in the "
                                f"{(until - since).total_seconds():g} s before acting (needs "
                                f"{MIN_BASELINE_SUCCESSES})")
                continue
            latest = series[-1]
            if not latest.ok:
                problems.append(f"{direction} via {name}: the latest probe "
                                f"({_clock(latest.at)}) failed")
            elif (until - latest.at).total_seconds() > BASELINE_FRESH_SECONDS:
                problems.append(f"{direction} via {name}: the latest probe is "
                                f"{(until - latest.at).total_seconds():.1f} s old "
                                "(is the prober still running?)")
    return problems


def _clock(moment: Optional[datetime.datetime]) -> str:
    return "—" if moment is None else moment.strftime("%H:%M:%S.%f")[:-3]


def _t(value: Optional[str]) -> Optional[datetime.datetime]:
    return parse_time(value) if value else None


def _round(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class Deletion:
    """When the leader's pod was deleted, on both clocks a figure is measured with: this
    machine's (the polls of the Lease, routes and VTEP config) and the cluster's (the Lease's
    times, the kubelet's log timestamps)."""

    local: datetime.datetime
    cluster: datetime.datetime
    #: Which clock the cluster-side moment comes from, for the report.
    source: str
    #: How far ``cluster`` may be from the API server's own moment, in seconds (None: not known,
    #: the API server's clock was never read back). A figure measured between ``cluster`` and a
    #: gateway node's clock (the Lease handover) is good to this much at best.
    bound: Optional[float] = None

    @property
    def offset(self) -> datetime.timedelta:
        """The cluster's clock less this machine's (zero when they agree)."""
        return self.cluster - self.local


def deletion_moment(event: dict[str, Any]) -> Deletion:
    """When the leader's pod was deleted. This machine's clock when the DELETE was sent is finer
    than the API server's answer (its deletionTimestamp, less the grace period, has whole
    seconds): it stands for both clocks when the two agree. When they do not, the cluster-side
    moment is the API server's and this machine's clock is taken to be off by the difference."""
    requested = parse_time(event["requested_at"])
    answered = _t(event.get("answered_at")) or requested
    if event.get("deletion_timestamp") is None or event.get("grace_seconds") is None:
        return Deletion(requested, requested,
                        "this machine's clock when the DELETE was sent (the pod was gone before "
                        "the API server's deletionTimestamp could be read back: how far it is from "
                        "the cluster's clock is not known)")
    server = parse_time(event["deletion_timestamp"]) - datetime.timedelta(
        seconds=float(event["grace_seconds"]))
    # The server's moment lies in [server, server + 1 s); ours in [requested, answered].
    slack = datetime.timedelta(seconds=AGREEMENT_SLACK)
    if requested <= server + datetime.timedelta(seconds=1) + slack and answered >= server - slack:
        # Accepted as agreeing when ours is at most 1 s + slack after the server's whole second
        # or at most the slack before it: against the server's true moment (within that second)
        # that is AGREEMENT_BOUND either way.
        return Deletion(requested, requested,
                        "this machine's clock when the DELETE was sent, which agrees with the "
                        f"API server's deletionTimestamp ({_clock(server)} + grace) within "
                        f"±{AGREEMENT_BOUND:g} s", AGREEMENT_BOUND)
    offset = (server - requested).total_seconds()
    return Deletion(requested, server,
                    "the API server's deletionTimestamp less the grace period (whole seconds): "
                    f"this machine's clock is about {abs(offset):.0f} s "
                    f"{'behind' if offset > 0 else 'ahead of'} the cluster's, so the poll times "
                    "are measured on this machine's clock and the rest on the cluster's "
                    f"(the deletionTimestamp has whole seconds: good to {WHOLE_SECOND:g} s)",
                    WHOLE_SECOND)


def deletion_bound(deletion: Deletion) -> str:
    """What the deletion moment's clock does to a figure measured from it, for the report."""
    if deletion.bound is None:
        return ("± unknown: the deletion moment is this machine's clock, never compared with the "
                "API server's")
    if deletion.cluster == deletion.local:
        return (f"± {deletion.bound:g} s: the deletion moment is this machine's clock, which "
                f"agrees with the API server's within ±{deletion.bound:g} s")
    return (f"up to {deletion.bound:g} s long: the deletion moment is the API server's "
            "deletionTimestamp, whole seconds, so the true moment is up to that much later")


@dataclass(frozen=True)
class Gap:
    seconds: Optional[float]
    start: Optional[datetime.datetime]
    end: Optional[datetime.datetime]
    #: The series' latest probe failed: the outage had not ended (the gap is a lower bound).
    ongoing: bool
    failed: int
    last_probe: Optional[datetime.datetime]


def failover_gap(found: list[probe_logs.Probe], path: str, start: datetime.datetime,
                 end: datetime.datetime) -> Gap:
    """The longest interval between two consecutive successful probes of ``path`` overlapping
    [start, end] (``probes.longest_gap``), and an outage still open at the last probe."""
    series = [p for p in found if p.path == path]
    oks = [p.at for p in series if p.ok]
    seconds = probe_logs.longest_gap(found, path, start, end)
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
               probe_logs.failures(found, path, start, end), last)


def _cadence(found: list[probe_logs.Probe], path: str, before: datetime.datetime) -> Optional[float]:
    times = [p.at for p in found if p.path == path and p.at < before]
    steps = [(b - a).total_seconds() for a, b in zip(times, times[1:])]
    return statistics.median(steps) if steps else None


class _Run:
    """The recorded run, read once."""

    def __init__(self, events: list[dict[str, Any]]):
        self.events = events
        self.started = first(events, "run.started") or {}
        self.settings = first(events, "failover.settings") or {}
        self.threshold = float(self.settings.get("threshold", DEFAULTS["threshold"]))
        self.interval = float(self.settings.get("interval", DEFAULTS["interval"]))
        self.namespace = self.settings.get("namespace", leaders.GATEWAY_NAME)
        self.lease_name = self.settings.get("lease", "hybrid-gateway-leader")
        self.demo_ns = self.settings.get("demo_namespace", "demo-gateway")
        self.tables = list(self.settings.get("route_tables", []))
        self.cidr = self.settings.get("pod_cidr", "")
        self.region = self.settings.get("region", "")
        self.resolved = first(events, "leader.resolved")
        self.old = (self.resolved or {}).get("leader")
        self.old_eni = next((e for e in every(events, "leader.eni") if e.get("role") == "old"),
                            None)
        self.refused = first(events, "failover.refused")
        self.deleted = first(events, "pod.deleted")
        self.deletion = deletion_moment(self.deleted) if self.deleted else None

    def baseline(self) -> tuple[Optional[list[str]], dict[str, list[probe_logs.Probe]], Any, Any]:
        """(why the baseline is not healthy, or None when the probers' logs were not all read;
        the probes each way; the baseline's window)."""
        found, raw = {}, {}
        since = until = None
        for event in every(self.events, "probes.baseline"):
            since, until = parse_time(event["since"]), parse_time(event["until"])
            found[event["direction"]] = probe_logs.parse(event.get("lines", []))
            raw[event["direction"]] = (found[event["direction"]], event.get("error", ""))
        if since is None or (ending(self.events) and len(found) < len(PROBERS)):
            return None, found, since, until
        return baseline_problems(raw, since, until), found, since, until


def _commands(run: _Run) -> dict[str, str]:
    ns, lease, demo = run.namespace, run.lease_name, run.demo_ns
    tables = " ".join(run.tables) or "<route table ids>"
    return {
        "baseline": f"kubectl -n {demo} logs deploy/prober-cloud --timestamps --since=1m; "
                    f"kubectl -n {demo} logs deploy/prober-hybrid --timestamps --since=1m",
        "leader": f"kubectl -n {ns} get lease {lease} -o jsonpath='{{.spec.holderIdentity}}'; "
                  f"kubectl -n {ns} get pods -o wide",
        "lease": f"kubectl -n {ns} get lease {lease} -o yaml",
        "pods": f"kubectl -n {ns} get pods -o wide --watch",
        "route": f"aws ec2 describe-route-tables --region {run.region} --route-table-ids {tables} "
                 f"--query \"RouteTables[].[RouteTableId,Routes[?DestinationCidrBlock=='{run.cidr}']]\"",
        "vtep": "kubectl get ciliumvtepconfig hybrid-gateway -o yaml",
    }


def analyse(events: list[dict[str, Any]]) -> Report:
    run = _Run(events)
    report = Report(command="failover", stack=run.started.get("stack", "?"),
                    started=run.started.get("at", events[0]["at"] if events else ""),
                    title="Gateway leader failover")
    commands = _commands(run)

    # Baseline and leader: without both, nothing was deleted and nothing is measured.
    problems, baseline, since, until = run.baseline()
    if problems is None:
        report.checks.append(not_read("baseline healthy", "both probers' logs", events,
                                      commands["baseline"]))
    elif problems:
        report.checks.append(Check(
            "baseline healthy", FAIL, "; ".join(problems),
            fix="Run `python -m rehearse verify gateway` and fix what it reports; wait until both "
                "probers log `ok` on both paths, then run the failover again.",
            command=commands["baseline"]))
    else:
        counts = ", ".join(
            f"{direction} via {name} {sum(1 for p in baseline[direction] if p.ok and p.path == path and p.at >= since)}"
            for _, direction in PROBERS for path, name in PATHS)
        window = (until - since).total_seconds() if since and until else 0
        report.checks.append(Check(
            "baseline healthy", PASS,
            f"successful probes in the {window:g} s before acting: {counts}; the latest of each "
            "succeeded", command=commands["baseline"]))
    if run.old:
        leader = run.old
        eni = (run.old_eni or {}).get("eni")
        if run.old_eni is None and ending(events):
            report.checks.append(not_read("leader resolved", f"the EC2 instance of {leader['node']}",
                                          events, commands["leader"]))
        else:
            report.checks.append(Check(
                "leader resolved", PASS if eni else FAIL,
                f"Lease {run.lease_name} holder {leader['holder']} -> node {leader['node']} -> pod "
                f"{leader['pod']}" + (f" -> primary ENI {eni} ({run.old_eni.get('instance_id')})"
                                      if eni else f"; but {(run.old_eni or {}).get('error', 'its ENI was not looked up')}"),
                fix="" if eni else "The node's instance must be found in EC2 in the stack's region "
                                   "(by its providerID, InternalIP or private DNS name).",
                command=commands["leader"]))
    elif run.resolved is not None:
        report.checks.append(Check(
            "leader resolved", FAIL, run.resolved.get("reason") or "not resolved",
            fix="The Lease holder is `<node name>_<uuid>`: it must name a node that runs exactly "
                "one Running gateway pod. Check the gateway pods and the Lease; `python -m "
                "rehearse verify gateway` checks the same.",
            command=commands["leader"]))
    else:
        report.checks.append(not_read("leader resolved", "the Lease", events, commands["leader"]))

    if run.deleted is None and not run.refused:
        # Ended before the deletion: what the failover would have measured was never read.
        report.checks.append(not_read("leader pod deleted", "the leader before deleting its pod",
                                      events, commands["pods"]))
        for name in AFTER_DELETION:
            report.checks.append(not_read(name, "anything after a deletion", events))
        report.title = "Gateway leader failover — not a measurement"
        report.notes.append("Not a measurement: nothing was deleted, because the run ended "
                            "before the leader's pod was deleted.")
        return report
    if run.refused:
        reasons = (run.refused or {}).get("reasons") or ["the run ended before the leader's pod "
                                                          "was deleted"]
        if not any(c.status == FAIL for c in report.checks):
            report.checks.append(Check("leader pod deleted", FAIL, "; ".join(reasons),
                                       command=commands["leader"]))
        # What a deletion would have measured was never read: the refusal above is the verdict.
        report.checks += [Check(name, NOT_READ, "not read: nothing was deleted (see above)")
                          for name in AFTER_DELETION]
        report.title = "Gateway leader failover — not a measurement"
        report.notes.append("Not a measurement: nothing was deleted, because "
                            + "; ".join(reasons) + ".")
        return report

    deletion = run.deletion
    assert deletion is not None
    report.checks.append(Check(
        "leader pod deleted", PASS,
        f"deleted {run.namespace}/{run.deleted['pod']} on {run.deleted['node']} at "
        f"{_clock(deletion.cluster)} UTC", command=commands["pods"]))
    end_event = first(events, "observe.ended") or first(events, "failover.ended") or events[-1]
    end = parse_time(end_event["at"]) + deletion.offset

    _leadership(run, report, commands, deletion)
    _routes(run, report, commands, deletion.local)
    _vtep(run, report, commands, deletion.local)
    if ending(events) and not (first(events, "failover.converged") or first(events, "wait.timeout")):
        # The run ended while the polls were still waiting for the new leader, route and VTEP
        # config: what they had not seen yet was not read, not missed.
        report.checks[-3:] = [c if c.status != FAIL else
                              not_read(c.name, "the Lease, routes and VTEP config until the "
                                       "failover completed", events, c.command)
                              for c in report.checks[-3:]]
    rows = _gaps(run, report, commands, deletion.cluster, end)
    report.charts.append(_timeline(report, rows, run.threshold, (end - deletion.cluster).total_seconds()))
    report.notes.append(
        f"Deletion time: {deletion.source}. Probe gaps come from the probers' kubelet timestamps, "
        "the Lease times from the gateway nodes' clocks; the route and VTEP times are when a poll "
        f"first saw the change (every {run.interval:g} s), so each is late by up to one poll.")
    timeout = first(events, "wait.timeout")
    if timeout:
        report.notes.append(f"Gave up waiting after {timeout['after']:g} s; still missing: "
                            + "; ".join(timeout["missing"]) + ".")
    errors = list(every(events, "observe.error"))
    if errors:
        report.notes.append(f"{len(errors)} poll(s) failed and were retried, first: "
                            f"{errors[0]['what']}: {errors[0]['error']}")
    return report


def _after(events: Iterable[dict[str, Any]], kind: str, moment: datetime.datetime):
    return [e for e in events if e["kind"] == kind and e.get("phase") != "before"
            and parse_time(e["at"]) >= moment]


def _new_leader(run: _Run) -> tuple[Optional[dict], Optional[str]]:
    """The first different holder resolved after the deletion, and its ENI."""
    for event in every(run.events, "leader.new"):
        if event.get("leader"):
            holder = event["leader"]["holder"]
            eni = next((e for e in every(run.events, "leader.eni")
                        if e.get("role") == "new" and e.get("holder") == holder and e.get("eni")),
                       None)
            return event["leader"], (eni or {}).get("eni")
    return None, None


def _leadership(run: _Run, report: Report, commands: dict[str, str],
                deletion: Deletion) -> None:
    old = run.old
    deleted = deletion.cluster
    leases = _after(run.events, "lease.observed", deletion.local)
    holders = [e.get("holder") for e in leases]
    changed = next((e for e in leases if e.get("holder") and e["holder"] != old["holder"]), None)
    new, _ = _new_leader(run)
    before = next((e for e in every(run.events, "lease.observed") if e.get("phase") == "before"),
                  None)
    handover = unowned = None
    if changed is None:
        report.checks.append(Check(
            "new leader elected", FAIL,
            f"the Lease still named {old['holder']} at the last of {len(leases)} polls",
            fix="The standby gateway pod did not take the Lease: check it is Running on the other "
                "gateway node and read its logs (leader election errors, RBAC on leases).",
            command=commands["lease"]))
    else:
        acquired = _t(changed.get("acquire_time"))
        handover = (acquired - deleted).total_seconds() if acquired else None
        renews = [_t(e.get("renew_time")) for e in every(run.events, "lease.observed")
                  if e.get("holder") == old["holder"] and e.get("renew_time")]
        if acquired and renews:
            unowned = (acquired - max(renews)).total_seconds()
        moved = []
        for holder in holders:
            if holder and holder not in (old["holder"], changed["holder"]) and holder not in moved:
                moved.append(holder)
        new_node = new["node"] if new else leaders.holder_host(changed["holder"])
        transitions = (f"; leaseTransitions {before.get('transitions')} -> "
                       f"{changed.get('transitions')}" if before else "")
        if new is None:
            status, seen = FAIL, (f"the Lease moved to {changed['holder']}, which did not resolve "
                                  "to a node running one gateway pod")
        elif new["node"] == old["node"]:
            status, seen = FAIL, (f"the Lease went back to node {old['node']} ({changed['holder']}:"
                                  " the deleted leader's replacement), not to the standby")
        elif moved:
            status, seen = FAIL, (f"{new_node} took the Lease, then it moved again to "
                                  f"{', '.join(moved)}")
        else:
            status, seen = PASS, f"{changed['holder']} (node {new_node}, pod {new['pod']}) leads"
        report.checks.append(Check(
            "new leader elected", status, seen + transitions,
            fix="" if status == PASS else
            "Only the standby on the other gateway node should take over. Check both gateway "
            "pods are Running on two gateway nodes and read their logs.",
            command=commands["lease"]))
    report.measurements.append(Measurement(
        "Lease handover (new acquireTime − deletion)", _round(handover), "s",
        f"{DOCUMENTED}; lease 3 s, then the standby's next try (every 1–2.2 s)",
        note="; ".join(filter(None, [
            (f"new holder acquired at {_clock(_t(changed.get('acquire_time')))} UTC"
             if changed and changed.get("acquire_time") else "no new holder seen"),
            deletion_bound(deletion)]))))
    report.measurements.append(Measurement(
        "Lease unowned (old holder's last renewTime → new acquireTime)", _round(unowned), "s",
        f"> {LEASE_DURATION_SECONDS:g} s and ≤ {UNOWNED_MAX_SECONDS:g} s (lease 3 s counted from when the "
        "standby saw the last renewal, tries every 1–2.2 s; the leader does not release it on "
        "shutdown)",
        note="both times from the gateway nodes' own clocks"))


def _routes(run: _Run, report: Report, commands: dict[str, str],
            deleted: datetime.datetime) -> None:
    new, eni = _new_leader(run)
    polls = _after(run.events, "routes.observed", deleted)
    before = next((e for e in every(run.events, "routes.observed") if e.get("phase") == "before"),
                  None)
    old_eni = (run.old_eni or {}).get("eni")
    per_table, bad, previous_sent = {}, [], {}
    for poll in polls:
        for route in poll["routes"]:
            table = route["table"]
            if table not in per_table and eni and route["eni"] == eni and route["state"] == "active":
                low = previous_sent.get(table, deleted)
                per_table[table] = ((low - deleted).total_seconds(),
                                    (parse_time(poll["at"]) - deleted).total_seconds())
            previous_sent[table] = parse_time(poll["sent"])
    last = {r["table"]: r for r in (polls[-1]["routes"] if polls else [])}
    for table in run.tables:
        route = last.get(table)
        if route is None:
            bad.append(f"{table}: never read after the deletion")
        elif route["eni"] != eni or route["state"] != "active":
            target = route["eni"] or route.get("other_target") or "no route"
            whose = (" (the deleted leader's)" if target == old_eni else
                     "" if route["eni"] is None else " (not the new leader's)")
            bad.append(f"{table}: {run.cidr} → {target}{whose}, {route['state']}"
                       + (f" (it had switched at {per_table[table][1]:.1f} s)"
                          if table in per_table else ""))
    if before and old_eni:
        stale = [r["table"] for r in before["routes"] if r["eni"] != old_eni]
        if stale:
            report.notes.append(f"Before the failover, {', '.join(stale)} did not route "
                                f"{run.cidr} to the leader's ENI {old_eni}: `python -m rehearse "
                                "verify gateway` would have failed.")
    switch = lows = None
    if run.tables and len(per_table) == len(run.tables):
        lows, switch = max(per_table.values(), key=lambda bounds: bounds[1])
    if eni is None:
        status, seen = FAIL, ("no new leader's ENI to compare with: "
                              + ("no new leader" if new is None else "its ENI was not found"))
    elif bad:
        status, seen = FAIL, (f"the new leader's primary ENI is {eni}; at the end: "
                              + "; ".join(bad))
    else:
        status, seen = PASS, (f"{run.cidr} → {eni} (primary ENI of {new['node']}), active in "
                              f"{', '.join(run.tables)}, first seen "
                              + ", ".join(f"{t} {hi:.1f} s" for t, (_, hi) in per_table.items())
                              + " after the deletion")
    report.checks.append(Check(
        "route switched to the new leader's ENI", status, seen,
        fix="" if status == PASS else
        "The new leader writes the route once, when it wins (DescribeRouteTables then "
        "ReplaceRoute): read its logs for 'Failed to update route tables' and check its Pod "
        "Identity role may call ec2:ReplaceRoute on every table in gatewayRouteTableIds.",
        command=commands["route"]))
    note = (f"switched between {lows:.1f} and {switch:.1f} s after the deletion (the slowest of "
            f"{len(run.tables)} table(s); polled every {run.interval:g} s)"
            if switch is not None else "not seen on the new leader's ENI in every table")
    report.measurements.append(Measurement("route switch (first poll seeing the new ENI)",
                                           _round(switch), "s", DOCUMENTED, note))


def _vtep(run: _Run, report: Report, commands: dict[str, str],
          deleted: datetime.datetime) -> None:
    new, _ = _new_leader(run)
    ip = new.get("internal_ip") if new else None
    polls = _after(run.events, "vtep.observed", deleted)
    seen_at = low = None
    previous = deleted
    for poll in polls:
        if ip and leaders.vtep_names(poll.get("endpoints"), ip):
            seen_at = (parse_time(poll["at"]) - deleted).total_seconds()
            low = (previous - deleted).total_seconds()
            break
        previous = parse_time(poll["sent"])
    final = polls[-1] if polls else None
    if new is None or not ip:
        status, seen = FAIL, "no new leader (with an InternalIP) to compare with"
    elif final is None or not final.get("exists"):
        status, seen = FAIL, "CiliumVTEPConfig/hybrid-gateway did not exist at the end"
    elif not leaders.vtep_names(final.get("endpoints"), ip):
        ends = ", ".join(str(e.get("tunnelEndpoint")) for e in final.get("endpoints", [])) or "none"
        status, seen = FAIL, (f"its tunnelEndpoint is {ends} at the end, not the new leader's "
                              f"IP {ip}")
    else:
        status, seen = PASS, (f"tunnelEndpoint {ip} ({new['node']}), first seen "
                              f"{seen_at:.1f} s after the deletion")
    report.checks.append(Check(
        "VTEP config follows the new leader", status, seen,
        fix="" if status == PASS else
        "The new leader upserts CiliumVTEPConfig/hybrid-gateway when it wins: read its logs for "
        "'Failed to upsert CiliumVTEPConfig' (its ClusterRole must allow updating "
        "ciliumvtepconfigs).",
        command=commands["vtep"]))
    report.measurements.append(Measurement(
        "VTEP follow (first poll naming the new leader)", _round(seen_at), "s", DOCUMENTED,
        note=(f"followed between {low:.1f} and {seen_at:.1f} s after the deletion (polled every "
              f"{run.interval:g} s)" if seen_at is not None else "not seen")))


#: The timeline's vertical markers: the measurement each is drawn from, and its label.
MARKERS = (("Lease handover (new acquireTime − deletion)", "Lease handed over"),
           ("route switch (first poll seeing the new ENI)", "route replaced"),
           ("VTEP follow (first poll naming the new leader)", "VTEP config updated"))


def _timeline(report: Report, rows: list[dict], threshold: float, end: float) -> Chart:
    """Demo 1's failover timeline, from the figures the report's table shows."""
    values = {m.name: m.value for m in report.measurements}
    return Chart("failover-timeline", "Demo 1: gateway leader failover, probes around the deletion",
                 {"rows": rows, "end": round(end, 3), "threshold": threshold, "documented": DOCUMENTED,
                  "documented_measures": DOCUMENTED_MEASURES,
                  "markers": [{"label": label, "at": values.get(name)} for name, label in MARKERS]})


def _gaps(run: _Run, report: Report, commands: dict[str, str], deleted: datetime.datetime,
          end: datetime.datetime) -> list[dict]:
    """The gap checks and measurements; returns each path's probes and longest gap, in seconds
    from the deletion, for the timeline."""
    rows = []

    def since(moment: Optional[datetime.datetime]) -> Optional[float]:
        return None if moment is None else round((moment - deleted).total_seconds(), 3)

    reads = {e["direction"]: e for e in every(run.events, "probes.read")}
    for prober, direction in PROBERS:
        event = reads.get(direction)
        found = probe_logs.parse(event.get("lines", [])) if event else []
        for path, name in PATHS:
            label = f"{direction} via {name}"
            gap = failover_gap(found, path, deleted, end)
            cadence = _cadence(found, path, deleted)
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
                status, seen = FAIL, (f"the {prober} log stops at {_clock(gap.last_probe)}, before "
                                      f"the observation ended at {_clock(end)}: the gap is not "
                                      "measured to the end")
            elif gap.ongoing:
                status, seen = FAIL, (f"still failing when the observation ended: the last probe "
                                      f"({_clock(gap.last_probe)}) failed, no success since "
                                      f"{_clock(gap.start)} ({gap.seconds:.1f} s and counting)")
            elif gap.seconds > run.threshold:
                status, seen = FAIL, (f"{gap.seconds:.3f} s without a successful probe, from "
                                      f"{_clock(gap.start)} to {_clock(gap.end)} UTC: over "
                                      f"{run.threshold:g} s")
            else:
                status, seen = PASS, (f"longest gap {gap.seconds:.3f} s (from {_clock(gap.start)} "
                                      f"to {_clock(gap.end)} UTC) ≤ {run.threshold:g} s")
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
                note.append(f"{_clock(gap.start)} → {_clock(gap.end)}")
            if gap.ongoing:
                note.append("still failing at the end: at least this long")
            report.measurements.append(Measurement(
                f"longest gap {label}", _round(gap.seconds), "s",
                f"PASS ≤ {run.threshold:g} s (e2e: ≤ 30 s); {GAP_AGAINST_DOCUMENTED}",
                "; ".join(note)))
            rows.append({"label": label, "status": status, "measured": event is not None,
                         "probes": [[since(p.at), p.ok] for p in found if p.path == path],
                         "gap": None if gap.seconds is None else {
                             "seconds": _round(gap.seconds), "start": since(gap.start),
                             "end": since(gap.end), "ongoing": gap.ongoing}})
    return rows
