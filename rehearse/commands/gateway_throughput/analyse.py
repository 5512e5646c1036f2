"""The analysis of `python -m rehearse gateway-throughput` (pure: events -> report): iperf3's
JSON read, each direction of each instance type judged, the instance types compared, and the
pods and the stack setting checked put back."""

from __future__ import annotations

import json
from typing import Any, Optional

from rehearse.commands.gateway_throughput.gateway import (BASELINE_GBPS, GATEWAY_SETTLE_SECONDS, TGW_MAX_PACKET,
                                                          settled)
from rehearse.commands.gateway_throughput.kinds import (CHECK_PODS_REMOVED, CHECK_RESTORED, DIRECTIONS, GATEWAY,
                                                        LABEL, LABEL_VALUE, MTU, ORIGINAL, POD_CREATED,
                                                        POD_DELETED, RESTORED, RESULT, SETTINGS, SWITCHED,
                                                        TITLE, check_name)
from rehearse.lab import flows
from rehearse.run import record as rec
from rehearse.run.outcome import ending, not_read
from rehearse.run.report import FAIL, PASS, Chart, Check, Measurement, Report


def parse_iperf(text: Optional[str], seconds_asked: Optional[int] = None) -> dict[str, Any]:
    """iperf3 ``--json`` output -> {"status": ok|failed|partial|unreadable, ...}. A failed run
    (its ``error`` key) or a partial one (fewer intervals than seconds asked, or no end sums)
    carries no throughput figure."""
    if not text or not text.strip():
        return {"status": "unreadable", "why": "empty log"}
    start = text.find("{")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:]) if start >= 0 else (None, 0)
    except ValueError as error:
        return {"status": "unreadable", "why": f"not iperf3 JSON: {error}"}
    if not isinstance(doc, dict):
        return {"status": "unreadable", "why": "not iperf3 JSON"}
    test_start = (doc.get("start") or {}).get("test_start") or {}
    asked = seconds_asked or test_start.get("duration")
    intervals = len(doc.get("intervals") or [])
    # What the path's MTU looked like to TCP: the MSS iperf3 saw, and the path MTU the kernel
    # reported per stream (``pmtu``, Linux, iperf3 3.11 and later).
    pmtus = {s.get("pmtu") for i in doc.get("intervals") or [] for s in i.get("streams") or []
             if s.get("pmtu")}
    base = {"intervals": intervals, "seconds_asked": asked,
            "streams": test_start.get("num_streams"),
            "version": (doc.get("start") or {}).get("version"),
            "tcp_mss": (doc.get("start") or {}).get("tcp_mss_default"),
            "pmtu": max(pmtus) if pmtus else None}
    if doc.get("error"):
        return {**base, "status": "failed", "why": str(doc["error"])}
    end = doc.get("end") or {}
    sent, received = end.get("sum_sent"), end.get("sum_received")
    if not sent or not received or (asked and intervals < int(asked)):
        return {**base, "status": "partial",
                "why": f"{intervals} of {asked} one-second intervals" if asked else "no end sums"}
    return {**base, "status": "ok",
            "sender_gbps": round(sent["bits_per_second"] / 1e9, 3),
            "receiver_gbps": round(received["bits_per_second"] / 1e9, 3),
            "retransmits": sent.get("retransmits"),
            "seconds": round(float(sent.get("seconds") or 0), 2)}


class ThroughputReport(Report):
    """A Report with a comparison table, when more than one instance type was measured."""

    table: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {**super().to_json(), "comparison": getattr(self, "table", [])}

    def to_markdown(self) -> str:
        text = super().to_markdown()
        rows = getattr(self, "table", [])
        if not rows:
            return text
        lines = ["", "## Instance types compared", "",
                 "| gateway instance type | cloud → hybrid Gbit/s (receiver) | retransmits | "
                 "hybrid → cloud Gbit/s (receiver) | retransmits |", "|---|---|---|---|---|"]
        for row in rows:
            cells = [row["instance_type"]]
            for direction, _ in DIRECTIONS:
                r = row.get(direction) or {}
                cells += ([f"{r['receiver_gbps']:g}", str(r.get("retransmits"))]
                          if r.get("status") == "ok" else [r.get("status", "not measured"), "—"])
            lines.append("| " + " | ".join(cells) + " |")
        return text + "\n".join(lines) + "\n"


#: iperf3's words when its TCP connection to the server is not made (iperf_api.c / net.c).
_NOT_CONNECTED = ("unable to connect to server", "connection timed out", "connection refused",
                  "no route to host")


def _failure_fix(direction: str, parsed: dict[str, Any]) -> str:
    """A connection never made is a flow the lab blocks (or a server that stopped): name that
    flow and what opens it. ``verify gateway`` passing says nothing about iperf3's port."""
    why = str(parsed.get("why") or "").lower()
    if parsed.get("status") == "failed" and any(words in why for words in _NOT_CONNECTED):
        return (f"iperf3 could not connect to the server pod, which was Running: the flow is "
                f"BLOCKED somewhere — {flows.blocked_text('gateway-throughput', direction)}")
    if parsed.get("status") == "failed":
        return ("a failed run: is the server pod Running and reachable through the gateway "
                "(`python -m rehearse verify gateway`)?")
    return "the client stopped early (deadline, eviction): run again"


def analyse(events: list[dict[str, Any]]) -> Report:
    started = rec.first(events, rec.RUN_STARTED) or {}
    settings = rec.first(events, SETTINGS) or {}
    report = ThroughputReport(command="gateway-throughput", stack=started.get("stack", ""),
                              started=started.get("at", ""), title=TITLE)
    report.table = []
    ns = settings.get("namespace", "demo-gateway")
    mtu = rec.first(events, MTU)
    if mtu:
        report.notes.append(
            f"MTU in force: {mtu['mtu']} ({mtu['source']}" + (f": {mtu['why']}" if mtu.get("why") else "")
            + f"); a Transit Gateway carries at most {TGW_MAX_PACKET}-byte packets (docs/networking.md#mtu).")
    gateways = list(rec.every(events, GATEWAY))
    report.notes += _gateway_notes(gateways)
    switched = {e["instance_type"]: e for e in rec.every(events, SWITCHED)}
    bars = []
    for instance_type in list(settings.get("instance_types") or []) or [None]:
        row: dict[str, Any] = {"instance_type": instance_type}
        for direction, _ in DIRECTIONS:
            _direction_result(report, events, settings, row, direction,
                              switched.get(instance_type) if instance_type else None)
        bars.append(_bar(row, gateways))
        if instance_type:
            report.table.append(row)
            gw = next((g for g in gateways if g.get("when") == "before"
                       and g.get("instance_type") == instance_type), None)
            if gw is not None:
                report.checks.append(_gateway_check(gw, instance_type))

    report.charts.append(Chart("gateway-throughput", "Gateway throughput per instance type, pod to pod",
                               {"rows": bars, "mtu": mtu and {"mtu": mtu["mtu"], "source": mtu["source"]}}))
    report.checks.append(_pods_removed_check(events, ns))
    if settings.get("instance_types"):
        report.notes.append(
            "each instance type replaced the gateway node group's nodes (`pulumi up` of "
            "gatewayInstanceType), so the gateway's leader failed over at every switch and at "
            "the restore: each type's figures are measured after that failover, on new nodes")
        report.checks.append(_restored_check(events, switched))
    return report


def _gateway_notes(gateways: list[dict]) -> list[str]:
    """Each round's gateway nodes and leader, and a leader that changed during a measurement."""
    notes = []
    for gw in gateways:
        if gw.get("when") == "after":
            before = next((g for g in gateways if g.get("when") == "before"
                           and g.get("instance_type") == gw.get("instance_type")), {})
            if before.get("leader") != gw.get("leader"):
                notes.append(
                    (f"[{gw['instance_type']}] " if gw.get("instance_type") else "")
                    + f"the leader changed during the measurement: {before.get('leader')} → "
                    f"{gw.get('leader')} (a failover: the figures span it)")
            continue
        types = sorted({n.get("instance_type") or "unknown" for n in gw.get("nodes") or []})
        notes.append(
            (f"[{gw['instance_type']}] " if gw.get("instance_type") else "")
            + f"gateway nodes: {', '.join(n['name'] for n in gw.get('nodes') or []) or 'none found'}"
            f" (instance type {', '.join(types) or 'unknown'}); leader: "
            + (f"{gw['leader']} ({gw.get('leader_instance_type') or 'type unknown'})" if gw.get("leader")
               else f"unknown ({gw.get('leader_why', '')})"))
    return notes


def _direction_result(report: Report, events: list[dict[str, Any]], settings: dict, row: dict[str, Any],
                      direction: str, switch: Optional[dict]) -> None:
    """One direction of one round: its check and measurements, and its figures in ``row``."""
    instance_type = row["instance_type"]
    ns = settings.get("namespace", "demo-gateway")
    name = check_name(direction, instance_type)
    command = f"kubectl -n {ns} get pods -l {LABEL}={LABEL_VALUE} -o wide"
    if instance_type and switch is None:
        report.checks.append(not_read(name, f"the {direction} measurement on "
                                      f"{instance_type}", events, command))
        return
    if instance_type and not switch.get("ok"):
        report.checks.append(Check(name, FAIL, f"not measured: switching to {instance_type} "
                                   f"failed ({switch.get('error')})", "see the pulumi output",
                                   command))
        return
    found = [r for r in rec.every(events, RESULT) if r.get("direction") == direction
             and r.get("instance_type") == instance_type]
    if not found:
        report.checks.append(not_read(name, f"the {direction} measurement", events, command))
        return
    r = found[-1]
    parsed = ({"status": "failed", "why": r["error"]} if r.get("error") else
              parse_iperf(r.get("log"), r.get("seconds_asked") or settings.get("seconds")))
    if parsed["status"] == "unreadable" and r.get("client_phase") not in ("Succeeded", "Failed"):
        # iperf3 --json writes its JSON at the end: a client still running has none.
        parsed = {**parsed, "status": "partial",
                  "why": f"the client pod did not finish (phase {r.get('client_phase')})"}
    row[direction] = parsed
    prefix = f"{instance_type}: " if instance_type else ""
    if parsed["status"] != "ok":
        report.checks.append(Check(
            name, FAIL, f"{parsed['status']}: {parsed.get('why', '')}",
            _failure_fix(direction, parsed), command))
        report.measurements.append(Measurement(f"{prefix}{direction} (receiver)", None,
                                               "Gbit/s", note=parsed["status"]))
        return
    report.checks.append(Check(
        name, PASS, f"{parsed['receiver_gbps']:g} Gbit/s received, "
        f"{parsed['sender_gbps']:g} sent, {parsed['retransmits']} retransmits over "
        f"{parsed['seconds']:g} s, {parsed['streams']} streams ({r.get('client_node')} → "
        f"{r.get('server_node')}, server pod IP {r.get('server_ip')}; TCP MSS "
        f"{parsed.get('tcp_mss') or '?'}, path MTU {parsed.get('pmtu') or '?'})", "",
        # The pods are gone: the client's JSON is kept in events.jsonl.
        f"jq -r 'select(.kind==\"{RESULT}\" and .client_pod==\"{r['client_pod']}\")"
        f" | .log' events.jsonl"))
    report.measurements += [
        Measurement(f"{prefix}{direction} (sender)", parsed["sender_gbps"], "Gbit/s",
                    "never measured before (docs/demo-guide.md#open-questions)"),
        Measurement(f"{prefix}{direction} (receiver)", parsed["receiver_gbps"], "Gbit/s",
                    "never measured before (docs/demo-guide.md#open-questions)"),
        Measurement(f"{prefix}{direction} retransmits", parsed["retransmits"], "segments",
                    note=f"{parsed['streams']} streams, {parsed['seconds']:g} s")]


def _gateway_check(gw: dict, instance_type: str) -> Check:
    """Whether the gateway was on ``instance_type`` (every node and the leader) when measured."""
    types = sorted({n.get("instance_type") or "unknown" for n in gw.get("nodes") or []})
    on_type = settled(gw, instance_type)
    return Check(
        f"gateway on {instance_type}", PASS if on_type else FAIL,
        f"gateway nodes {', '.join(types) or 'none'}, leader "
        f"{gw.get('leader') or 'unknown'} ({gw.get('leader_instance_type') or '?'})",
        f"the node group did not finish replacing its nodes in "
        f"{GATEWAY_SETTLE_SECONDS} s: the figures for {instance_type} are not its own",
        "kubectl get nodes -l hybrid-gateway-node=true -L node.kubernetes.io/instance-type")


def _pods_removed_check(events: list[dict[str, Any]], ns: str) -> Check:
    created = [e["name"] for e in rec.every(events, POD_CREATED)]
    deleted = {e["name"] for e in rec.every(events, POD_DELETED) if e.get("ok")}
    left = [n for n in created if n not in deleted]
    if not created and ending(events) is not None:
        return not_read(CHECK_PODS_REMOVED, "the measurement pods (none was created)",
                        events, f"kubectl -n {ns} get pods -l {LABEL}={LABEL_VALUE}")
    return Check(
        CHECK_PODS_REMOVED, FAIL if left else PASS,
        f"left behind: {', '.join(left)}" if left else
        f"{len(created)} pods created, {len(created)} deleted by name",
        f"kubectl -n {ns} delete pod -l {LABEL}={LABEL_VALUE}",
        f"kubectl -n {ns} get pods -l {LABEL}={LABEL_VALUE}")


def _restored_check(events: list[dict[str, Any]], switched: dict[str, dict]) -> Check:
    restored = rec.first(events, RESTORED)
    original = (rec.first(events, ORIGINAL) or {}).get("value")
    ok = bool(restored and restored.get("ok"))
    if not switched and restored is None and ending(events) is not None:
        # Nothing was switched, so nothing was left to put back.
        return not_read(CHECK_RESTORED, "gatewayInstanceType (it was never "
                        "switched)", events, "pulumi config get gatewayInstanceType")
    return Check(
        CHECK_RESTORED, PASS if ok else FAIL,
        f"back to {original or 'the default'}" if ok else
        f"not put back to {original or 'the default'}: {(restored or {}).get('error', 'no restore recorded')}",
        f"`pulumi config set gatewayInstanceType {original}` and `pulumi up`",
        "pulumi config get gatewayInstanceType")


def _bar(row: dict[str, Any], gateways: list[dict]) -> dict[str, Any]:
    """One instance type's figures for the chart: the table's row, named by the type measured
    (the leader's, when the run switched nothing), with its baseline where known."""
    named = row["instance_type"] or next((g.get("leader_instance_type") for g in gateways
                                          if g.get("when") != "after" and g.get("leader_instance_type")), None)
    directions = {}
    for direction, _ in DIRECTIONS:
        r = row.get(direction) or {}
        directions[direction] = {"status": r.get("status", "not measured"), "receiver_gbps": r.get("receiver_gbps"),
                                 "retransmits": r.get("retransmits"), "pmtu": r.get("pmtu"),
                                 "tcp_mss": r.get("tcp_mss")}
    return {"instance_type": named or "the current gateway type", "baseline_gbps": BASELINE_GBPS.get(named or ""),
            "directions": directions}
