"""Who leads: the Lease holder resolved to a node running a gateway pod, renewed within its
duration, and the holder's own metrics saying it leads (pure: observations -> checks)."""

from __future__ import annotations

import datetime
from typing import Optional

from rehearse.lab.gateway import (LEADER_GAUGE, LEASE_DURATION_SECONDS, LEASE_NAME, METRICS_PORT,
                                  RENEW_DEADLINE_SECONDS, RETRY_PERIOD_SECONDS)
from rehearse.lab.leader import holder_host
from rehearse.run.outcome import not_read
from rehearse.run.record import parse_time
from rehearse.run.report import FAIL, PASS, SKIP, Check
from rehearse.commands.verify_gateway.kinds import CHECK_LEADERSHIP, CHECK_LEASE
from rehearse.commands.verify_gateway.observed import Lab


def leader(lab: Lab) -> tuple[Optional[str], Optional[dict], Check]:
    """(leader node, leader pod, the lease check)."""
    lease_name = lab.inputs.get("lease", LEASE_NAME)
    command = f"kubectl -n {lab.ns} get lease {lease_name} -o jsonpath='{{.spec.holderIdentity}}'"
    lease = lab.lease
    if lease is None:
        return None, None, not_read(CHECK_LEASE, "the Lease", lab.events, command)
    if not lease.get("found"):
        return None, None, Check(
            CHECK_LEASE, FAIL, f"no Lease {lease_name} in {lab.ns}: no gateway replica has been elected",
            f"the gateway pods elect a leader with this Lease as they start: see `kubectl -n {lab.ns} "
            f"logs -l {lab.selector}` (RBAC on leases, or pods not running)", command)
    holder = lease.get("holderIdentity") or ""
    if not holder:
        return None, None, Check(
            CHECK_LEASE, FAIL, f"Lease {lease_name} has no holder: no leader right now",
            "a holder appears within a few seconds of a gateway pod starting (lease 3 s); if it "
            f"stays empty, read `kubectl -n {lab.ns} logs -l {lab.selector}`", command)
    node = holder_host(holder)
    transitions = lease.get("leaseTransitions")
    detail = f"holder {holder!r} → node {node}" + (
        f", acquired {lease['acquireTime']}" if lease.get("acquireTime") else "") + (
        f", {transitions} transition{'s' if transitions != 1 else ''}" if transitions is not None else "")
    stale = lease_age(lab, lease)
    if stale["text"]:
        detail += ", " + stale["text"]
    fix = (f"a holder names the gateway pod's node (`<node name>_<uuid>`: the pods use the host "
           f"network). Delete the gateway pods so they elect again: `kubectl -n {lab.ns} delete pods "
           f"-l {lab.selector}`, then check `kubectl -n {lab.ns} get pods -o wide`")
    if "_" not in holder:
        return None, None, Check(CHECK_LEASE, FAIL, f"{detail}: not of the form <node name>_<uuid>",
                                 fix, command)
    if node not in lab.nodes:
        return None, None, Check(CHECK_LEASE, FAIL, f"{detail}, but the cluster has no node {node} "
                                 "(a stale holder from a node that is gone)", fix, command)
    on_node = lab.live_pods_on(node)
    if not on_node:
        return None, None, Check(CHECK_LEASE, FAIL, f"{detail}, but no gateway pod runs on {node}",
                                 fix, command)
    if stale["expired"]:
        pods = f"kubectl -n {lab.ns} get pods -l {lab.selector} -o wide"
        return None, None, Check(
            CHECK_LEASE, FAIL, f"{detail}: longer than the Lease's {stale['duration']:g} s, so it "
            "has expired and no gateway replica is leading (the leader renews it about every "
            f"{RETRY_PERIOD_SECONDS} s and gives up after {RENEW_DEADLINE_SECONDS} s without a renewal)",
            f"the holder's gateway has stopped renewing and the standby has not taken over: see "
            f"`{pods}` and read both pods' logs (`kubectl -n {lab.ns} logs <pod>`: lost access "
            "to the API server, RBAC on leases, a crash loop); deleting the gateway pods makes "
            f"them elect again: `kubectl -n {lab.ns} delete pods -l {lab.selector}`", command)
    pod = on_node[0]
    return node, pod, Check(CHECK_LEASE, PASS, f"{detail}, which runs gateway pod {pod['name']}",
                            command=command)


def lease_age(lab: Lab, lease: dict) -> dict:
    """How long before it was read the Lease was last renewed, judged by the API server's clock
    (the Date header of the answer that carried it, whole seconds: the server's time then was
    at least that, so the age is at least Date - renewTime and this never fails a fresh Lease);
    by this machine's clock only when the answer had no Date, and then it says so. The leader's
    own clock wrote renewTime; the API server's and the nodes' are both kept by AWS."""
    duration = float(lease.get("leaseDurationSeconds") or LEASE_DURATION_SECONDS)
    found = {"expired": False, "duration": duration, "text": ""}
    if not lease.get("renewTime"):
        return found
    renewed = parse_time(lease["renewTime"])
    local = parse_time(lease["at"])
    server = http_date(lease.get("serverDate"))
    if server is None:
        age = (local - renewed).total_seconds()
        found["text"] = (f"renewed {age:.1f} s before it was read (by this machine's clock: the "
                         "API server's answer carried no Date)")
    else:
        age = (server - renewed).total_seconds()
        skew = (local - server).total_seconds()
        found["text"] = (f"renewed at least {max(age, 0):.0f} s before it was read (by the API "
                         f"server's clock, its Date header {lease['serverDate']}; this machine's "
                         f"clock read {skew:+.1f} s from it)")
    found["expired"] = age > duration
    return found


def http_date(text: Optional[str]) -> Optional[datetime.datetime]:
    if not text:
        return None
    import email.utils

    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def check_leadership(lab: Lab, node: Optional[str], pod: Optional[dict]) -> Check:
    """The Lease holder's pod says it leads (``hybrid_gateway_leader_is_active 1``) and every
    other replica says it stands by (0): the gateway sets the gauge when its leader-only setup
    (routes, VTEP config) starts and clears it when leadership ends."""
    path = f"/api/v1/namespaces/{lab.ns}/pods/<pod>:{METRICS_PORT}/proxy/metrics"
    names = [p["name"] for p in lab.pods] or ["<gateway pod>"]
    command = " && ".join(f"kubectl get --raw \"{path.replace('<pod>', n)}\" | grep {LEADER_GAUGE}"
                          for n in names)
    if lab.lease is None:
        return not_read(CHECK_LEADERSHIP, "the Lease", lab.events, command)
    if pod is None:
        return Check(CHECK_LEADERSHIP, SKIP, f"no leader resolved (see '{CHECK_LEASE}')", command=command)
    unread = [p["name"] for p in lab.pods if p["name"] not in lab.metrics]
    if unread:
        return not_read(CHECK_LEADERSHIP, f"the metrics of {', '.join(unread)}", lab.events, command)
    seen, problems = [], []
    for other in lab.pods:
        name = other["name"]
        answer = lab.metrics.get(name)
        role = "the holder" if name == pod["name"] else "standby"
        if answer is None:
            seen.append(f"{name} ({role}): not read")
            problems.append("unread")
            continue
        if answer.get("status") != 200:
            seen.append(f"{name} ({role}): :{METRICS_PORT}/metrics answered HTTP {answer.get('status')}"
                        + (f" {answer.get('body', '')[:80]!r}" if answer.get("body") else ""))
            problems.append("unread")
            continue
        value = answer.get("gauge")
        if value is None:
            seen.append(f"{name} ({role}): no {LEADER_GAUGE} in its metrics")
            problems.append("no gauge")
            continue
        seen.append(f"{name} ({role}): {LEADER_GAUGE} {value:g}")
        if name == pod["name"] and value != 1:
            problems.append("holder not leading")
        elif name != pod["name"] and value != 0:
            problems.append("two leaders")
    text = "; ".join(seen)
    if "two leaders" in problems:
        both = "holder not leading" not in problems
        return Check(CHECK_LEADERSHIP, FAIL, text + f" — a replica other than the Lease holder {pod['name']} "
                     "says it leads" + (": two gateways may write routes and the VTEP config" if both
                                       else ", and the holder does not"),
                     f"delete the replica that is not the holder so it restarts as a standby: `kubectl -n "
                     f"{lab.ns} delete pod <that pod>`, then run again", command)
    if "holder not leading" in problems:
        return Check(CHECK_LEADERSHIP, FAIL, text + f" — the Lease names {node}, but its gateway "
                     "is not running the leader's setup (routes, VTEP config)",
                     f"read its log (`kubectl -n {lab.ns} logs {pod['name']}`: a failed route "
                     f"update ends the setup); hand over: `kubectl -n {lab.ns} delete pod {pod['name']}`",
                     command)
    if problems:
        return Check(CHECK_LEADERSHIP, FAIL, text + " — leadership cannot be confirmed from the "
                     "gateway's own metrics",
                     f"the gateway serves them on :{METRICS_PORT} (its --metrics-bind-address); the "
                     "API server's pod proxy must reach that port on the gateway node (the cluster "
                     "security group admits the control plane to the nodes); a gateway without "
                     f"{LEADER_GAUGE} predates the chart this lab pins", command)
    return Check(CHECK_LEADERSHIP, PASS, text + f" — only the Lease holder on {node} says it leads",
                 command=command)
