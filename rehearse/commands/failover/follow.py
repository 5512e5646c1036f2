"""What followed the deleted leader (pure: recorded polls -> checks and figures): a new Lease
holder, the VPC routes on its primary ENI, and the VTEP config naming its IP."""

from __future__ import annotations

import datetime
from typing import Any, Iterable, Optional

from rehearse.lab import leader as leaders
from rehearse.lab.gateway import LEASE_DURATION_SECONDS, RETRY_PERIOD_SECONDS
from rehearse.run.record import every, parse_time
from rehearse.run.report import FAIL, PASS, Check, Measurement, Report
from rehearse.commands.failover.kinds import (
    CHECK_NEW_LEADER, CHECK_ROUTE, CHECK_VTEP, LEADER_ENI, LEADER_NEW, LEASE_OBSERVED,
    ROUTES_OBSERVED, VTEP_OBSERVED)
from rehearse.commands.failover.moments import Deletion, clock, deletion_bound, rounded, time_or_none
from rehearse.commands.failover.observed import Run


#: Seconds AWS documents for a failover, beside which every figure is shown.
DOCUMENTED = "AWS documents 3–5 s"


#: How long the Lease can stay unowned after the leader's last renewal, by client-go's leader
#: election with the gateway's flags (lease 3 s, retry 1 s; tools/leaderelection's acquire loop
#: retries every retry·[1, 1 + JitterFactor 1.2), i.e. 1-2.2 s): a standby first sees the last
#: renewal at its next try (up to 2.2 s later), counts the lease duration from then (its own
#: observedTime, not renewTime), and takes the Lease at its first try after that (up to 2.2 s
#: more). More than 3 s, at most 7.4 s (docs/gateway.md#the-lease).
JITTER_FACTOR = 1.2


UNOWNED_MAX_SECONDS = LEASE_DURATION_SECONDS + 2 * RETRY_PERIOD_SECONDS * (1 + JITTER_FACTOR)


def after(events: Iterable[dict[str, Any]], kind: str, moment: datetime.datetime):
    return [e for e in events if e["kind"] == kind and e.get("phase") != "before"
            and parse_time(e["at"]) >= moment]


def new_leader(run: Run) -> tuple[Optional[dict], Optional[str]]:
    """The first different holder resolved after the deletion, and its ENI."""
    for event in every(run.events, LEADER_NEW):
        if event.get("leader"):
            holder = event["leader"]["holder"]
            eni = next((e for e in every(run.events, LEADER_ENI)
                        if e.get("role") == "new" and e.get("holder") == holder and e.get("eni")),
                       None)
            return event["leader"], (eni or {}).get("eni")
    return None, None


def check_leadership(run: Run, report: Report, commands: dict[str, str],
                deletion: Deletion) -> None:
    old = run.old
    deleted = deletion.cluster
    leases = after(run.events, LEASE_OBSERVED, deletion.local)
    holders = [e.get("holder") for e in leases]
    changed = next((e for e in leases if e.get("holder") and e["holder"] != old["holder"]), None)
    new, _ = new_leader(run)
    before = next((e for e in every(run.events, LEASE_OBSERVED) if e.get("phase") == "before"),
                  None)
    handover = unowned = None
    if changed is None:
        report.checks.append(Check(
            CHECK_NEW_LEADER, FAIL,
            f"the Lease still named {old['holder']} at the last of {len(leases)} polls",
            fix="The standby gateway pod did not take the Lease: check it is Running on the other "
                "gateway node and read its logs (leader election errors, RBAC on leases).",
            command=commands["lease"]))
    else:
        acquired = time_or_none(changed.get("acquire_time"))
        handover = (acquired - deleted).total_seconds() if acquired else None
        renews = [time_or_none(e.get("renew_time")) for e in every(run.events, LEASE_OBSERVED)
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
            CHECK_NEW_LEADER, status, seen + transitions,
            fix="" if status == PASS else
            "Only the standby on the other gateway node should take over. Check both gateway "
            "pods are Running on two gateway nodes and read their logs.",
            command=commands["lease"]))
    report.measurements.append(Measurement(
        "Lease handover (new acquireTime − deletion)", rounded(handover), "s",
        f"{DOCUMENTED}; lease 3 s, then the standby's next try (every 1–2.2 s)",
        note="; ".join(filter(None, [
            (f"new holder acquired at {clock(time_or_none(changed.get('acquire_time')))} UTC"
             if changed and changed.get("acquire_time") else "no new holder seen"),
            deletion_bound(deletion)]))))
    report.measurements.append(Measurement(
        "Lease unowned (old holder's last renewTime → new acquireTime)", rounded(unowned), "s",
        f"> {LEASE_DURATION_SECONDS:g} s and ≤ {UNOWNED_MAX_SECONDS:g} s (lease 3 s counted from when the "
        "standby saw the last renewal, tries every 1–2.2 s; the leader does not release it on "
        "shutdown)",
        note="both times from the gateway nodes' own clocks"))


def check_routes(run: Run, report: Report, commands: dict[str, str],
            deleted: datetime.datetime) -> None:
    new, eni = new_leader(run)
    polls = after(run.events, ROUTES_OBSERVED, deleted)
    before = next((e for e in every(run.events, ROUTES_OBSERVED) if e.get("phase") == "before"),
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
        CHECK_ROUTE, status, seen,
        fix="" if status == PASS else
        "The new leader writes the route once, when it wins (DescribeRouteTables then "
        "ReplaceRoute): read its logs for 'Failed to update route tables' and check its Pod "
        "Identity role may call ec2:ReplaceRoute on every table in gatewayRouteTableIds.",
        command=commands["route"]))
    note = (f"switched between {lows:.1f} and {switch:.1f} s after the deletion (the slowest of "
            f"{len(run.tables)} table(s); polled every {run.interval:g} s)"
            if switch is not None else "not seen on the new leader's ENI in every table")
    report.measurements.append(Measurement("route switch (first poll seeing the new ENI)",
                                           rounded(switch), "s", DOCUMENTED, note))


def check_vtep(run: Run, report: Report, commands: dict[str, str],
          deleted: datetime.datetime) -> None:
    new, _ = new_leader(run)
    ip = new.get("internal_ip") if new else None
    polls = after(run.events, VTEP_OBSERVED, deleted)
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
        CHECK_VTEP, status, seen,
        fix="" if status == PASS else
        "The new leader upserts CiliumVTEPConfig/hybrid-gateway when it wins: read its logs for "
        "'Failed to upsert CiliumVTEPConfig' (its ClusterRole must allow updating "
        "ciliumvtepconfigs).",
        command=commands["vtep"]))
    report.measurements.append(Measurement(
        "VTEP follow (first poll naming the new leader)", rounded(seen_at), "s", DOCUMENTED,
        note=(f"followed between {low:.1f} and {seen_at:.1f} s after the deletion (polled every "
              f"{run.interval:g} s)" if seen_at is not None else "not seen")))
