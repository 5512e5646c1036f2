"""The consolidation watch (pure): does Karpenter disrupt a cloud node whose burst pods would fit
in the hybrid nodes' free room, answered from what the collector recorded after the last
scale-in."""

from __future__ import annotations

from typing import Optional

from rehearse.run.report import FAIL, NOT_READ, PASS, SKIP, Check
from rehearse.commands.burst.kinds import C_CONSOLIDATION, check_name
from rehearse.commands.burst.reading import active
from rehearse.commands.burst.capacity import capacity


# --- the consolidation watch (pure) ---------------------------------------------------------------

EXPECTATION = ("Karpenter disrupts no cloud node whose burst pods would fit in the hybrid "
               "nodes' free room: the lab's NodePool consolidates only empty nodes "
               "(consolidationPolicy WhenEmpty). Karpenter does not manage hybrid nodes (no "
               "NodeClaim), but its consolidation counts their room: under "
               "WhenEmptyOrUnderutilized it deletes such a node and its pods land on the hybrid "
               "nodes (measured on the real Karpenter: docs/karpenter.md#consolidation-and-the-hybrid-nodes)")


#: Under WhenEmpty, Karpenter's consolidation skips a non-empty node and says so once:
#: sigs.k8s.io/karpenter v1.15.0 pkg/controllers/disruption/consolidation.go ShouldDisrupt
#: publishes Unconsolidatable "NodePool %q has consolidation policy WhenEmpty, but node is not
#: empty" on the Node and its NodeClaim, deduplicated per object for 15 minutes — so it is
#: usually written long before the watch, when the node first becomes a candidate (seen on the
#: real engine 8 s after the NodeClaim was Ready, while it held 7 pods).
WHEN_EMPTY_NOTE = ("with consolidationPolicy WhenEmpty Karpenter considers only empty nodes and "
                   "says so once per node (Unconsolidatable: \"has consolidation policy WhenEmpty, "
                   "but node is not empty\", repeated at most every 15 minutes), so this shows the "
                   "policy at work; under WhenEmptyOrUnderutilized the real Karpenter does move "
                   "such pods onto hybrid room (docs/karpenter.md#consolidation-and-the-hybrid-nodes)")
UNCONSOLIDATABLE = "Unconsolidatable"


def hybrid_room(situation: dict) -> dict:
    """From the watch's starting situation: the free burst-pod slots on each hybrid node (what
    fits by allocatable less the other pods' requests, as ``capacity``, less the burst pods
    already there), and for each cloud node whether its burst pods would all fit in them (the
    burst pods are alike, so counting slots is the bin packing)."""
    found = capacity(situation)
    pods = [p for p in situation.get("pods") or [] if active(p)]
    request = found["request_cpu_m"] or 0
    hybrid, room = [], 0
    for row in found["nodes"]:
        on = len([p for p in pods if p.get("node") == row["node"]])
        free = max(row["fit"] - on, 0) if row["eligible"] else 0
        hybrid.append({"node": row["node"], "eligible": row["eligible"], "fit": row["fit"],
                       "burst_pods": on, "free_slots": free,
                       "free_cpu_m": row["free_cpu_m"] - on * request})
        room += free
    claims = {c.get("node"): c["name"] for c in situation.get("nodeclaims") or [] if c.get("node")}
    cloud = []
    for node in situation.get("nodes") or []:
        if node["place"] != "cloud":
            continue
        mine = sorted(p["name"] for p in pods if p.get("node") == node["name"])
        cloud.append({"node": node["name"], "nodeclaim": claims.get(node["name"]), "pods": mine,
                      "fits": bool(mine) and len(mine) <= room})
    return {"request_cpu_m": found["request_cpu_m"], "hybrid": hybrid, "room": room,
            "cloud": cloud}


def consolidation_answer(started: Optional[dict], done: Optional[dict],
                         skipped: Optional[dict]) -> Optional[dict]:
    """The answer to the question for one scenario, with its evidence (a dict: the report's
    section, its JSON and the check read it)."""
    if skipped is not None:
        return {"status": SKIP, "answer": f"not watched ({skipped.get('reason') or '--watch 0'})"}
    if started is None:
        return None
    room = hybrid_room(started)
    policy = started.get("nodepool") or {}
    base = {"expectation": EXPECTATION, "room": room, "seconds": started.get("seconds"),
            "consolidation_policy": policy.get("consolidation_policy"),
            "consolidate_after": policy.get("consolidate_after"),
            "note": WHEN_EMPTY_NOTE if policy.get("consolidation_policy") == "WhenEmpty" else None}
    if done is None:
        return {**base, "status": NOT_READ, "answer": "not read: the run ended before the watch "
                "finished",
                "disrupted": [], "events": [], "moved": [], "created": []}
    changes = done.get("changes") or []
    gone = [c for c in changes if c["what"] in ("pod gone", "pod terminating")]
    gone = list({c["name"]: c for c in reversed(gone)}.values())[::-1]
    final = {p["name"]: p for p in done.get("pods") or []}
    created = [{**c, "node": (final.get(c["name"]) or {}).get("node") or c.get("node"),
                "place": (final.get(c["name"]) or {}).get("place") or c.get("place")}
               for c in changes if c["what"] == "pod created"]
    cloud = {c["node"]: c for c in room["cloud"]}
    rows = []
    for node, entry in sorted(_disrupted(started, changes).items()):
        info = cloud.get(node) or {"node": node, "pods": [], "fits": False, "nodeclaim": None}
        left = [c for c in gone if c.get("node") == node]
        rows.append({**entry, "nodeclaim": info.get("nodeclaim"), "pods": info["pods"],
                     "fits": info["fits"], "pods_gone": left,
                     "evicted": [c["name"] for c in left if c.get("disruption_target")]})
    answer = {**base, "disrupted": rows, "events": [c for c in changes if c["what"] == "event"],
              "moved": gone, "created": created, "changes": len(changes),
              "said": _said(started, changes, room)}
    return {**answer, **_verdict(answer, room, created, done),
            "seen": _watch_evidence(answer),
            "moved_to": sorted({c["node"] for c in created if c.get("node")})}


def _disrupted(started: dict, changes: list[dict]) -> dict[str, dict]:
    """The nodes disrupted during the watch, with the evidence: a NodeClaim deleted (or
    deleting), a cloud node gone, or Karpenter saying DisruptionTerminating about either."""
    by_claim = {c["name"]: c.get("node") for c in started.get("nodeclaims") or []}
    by_claim.update({c["name"]: c.get("node") for c in changes
                     if c["what"].startswith("nodeclaim") and c.get("node")})
    disrupted: dict[str, dict] = {}

    def mark(node: Optional[str], why: str, at: str, reason: Optional[str] = None) -> None:
        if node:
            entry = disrupted.setdefault(node, {"node": node, "evidence": [], "reasons": [],
                                                "at": at})
            if why not in entry["evidence"]:
                entry["evidence"].append(why)
            if reason and reason not in entry["reasons"]:
                entry["reasons"].append(reason)

    for c in changes:
        if c["what"] in ("nodeclaim deleted", "nodeclaim deleting"):
            mark(c.get("node") or by_claim.get(c["name"]), f"NodeClaim {c['name']} "
                 f"{c['what'].split()[1]} at {c['at']}", c["at"])
        elif c["what"] == "node gone" and c.get("place") == "cloud":
            mark(c["name"], f"node gone at {c['at']}", c["at"])
        elif c["what"] == "event" and c.get("reason") == "DisruptionTerminating":
            node = c["object"] if c.get("kind") == "Node" else by_claim.get(c.get("object"))
            message = str(c.get("message") or "")
            why = (message.split(": ", 1)[1] if message.startswith("Disrupting ") and ": " in message
                   else message)
            mark(node, f"{c['kind']} {c['object']}: {c['reason']} \"{message}\"", c["at"],
                 f"{c['reason']} ({why})")
    return disrupted


def _verdict(answer: dict, room: dict, created: list[dict], done: dict) -> dict:
    """The status and the answer's words: FAIL when a cloud node whose pods fit on the hybrid
    room was disrupted, SKIP when no cloud node's pods fit (the question did not arise), else
    PASS."""
    offending = [r for r in answer["disrupted"] if r["fits"]]
    candidates = [c for c in room["cloud"] if c["fits"]]
    if offending:
        parts = []
        for r in offending:
            to = sorted({c["node"] for c in created if c.get("node") and c.get("place") == "hybrid"})
            parts.append(f"Karpenter disrupted {r['node']}"
                         + (f" (NodeClaim {r['nodeclaim']})" if r.get("nodeclaim") else "")
                         + (f", {'; '.join(r['reasons'])}" if r["reasons"] else "")
                         + f", which held {', '.join(r['pods'])} — they fit in the hybrid nodes' "
                         f"{room['room']} free slot(s) — and its pods moved to "
                         + (", ".join(to) or "no node yet"))
        return {"status": FAIL, "answer": "; ".join(parts)}
    if not candidates:
        held = [c for c in room["cloud"] if c["pods"]]
        why = ("no cloud node held burst pods after the last scale-in" if not held else
               "no cloud node's burst pods fit in the hybrid nodes' free room ("
               + ", ".join(f"{c['node']}: {len(c['pods'])}" for c in held)
               + f" against {room['room']} free slot(s))")
        return {"status": SKIP, "answer": f"the question did not arise: {why}"}
    names = ", ".join(f"{c['node']} ({len(c['pods'])} burst pod(s): {', '.join(c['pods'])})"
                      for c in candidates)
    return {"status": PASS,
            "answer": f"no disruption of a cloud node whose pods fit on hybrid: {names} could "
                      f"have moved into the hybrid nodes' {room['room']} free slot(s) and stayed "
                      f"for {done.get('watched'):g} s"}


def _said(started: dict, changes: list[dict], room: dict) -> list[dict]:
    """Karpenter's Unconsolidatable events about the cloud nodes that held burst pods (or their
    NodeClaims), from before the watch and during it: written once per node and deduplicated
    for 15 minutes, they are rarely new during the watch."""
    held = {c["node"]: c.get("nodeclaim") for c in room["cloud"] if c["pods"]}
    claims = {claim: node for node, claim in held.items() if claim}
    found: dict[tuple, dict] = {}
    for event in list(started.get("events") or []) + [c for c in changes if c["what"] == "event"]:
        if event.get("reason") != UNCONSOLIDATABLE:
            continue
        node = event.get("object") if event.get("kind") == "Node" else claims.get(event.get("object"))
        if node in held:
            found[(event.get("kind"), event.get("object"))] = {
                "node": node, "kind": event.get("kind"), "object": event.get("object"),
                "message": event.get("message"), "last": event.get("last")}
    return sorted(found.values(), key=lambda e: (e["node"], e["kind"] or ""))


def _watch_evidence(answer: dict) -> str:
    parts = []
    said: dict[tuple, list[str]] = {}
    for e in answer.get("said") or []:
        said.setdefault((e["node"], e["message"], e["last"]), []).append(e["kind"])
    for (node, message, last), kinds in sorted(said.items(), key=str):
        parts.append(f"Karpenter on {node} ({' and '.join(sorted(kinds))}, {last}): "
                     f"{UNCONSOLIDATABLE} \"{message}\"")
    for r in answer["disrupted"]:
        parts.append(f"{r['node']} disrupted ({'held ' + ', '.join(r['pods']) if r['pods'] else 'no burst pod: empty'}; "
                     + "; ".join(r["evidence"]) + ")")
    reasons: dict[str, int] = {}
    for e in answer["events"]:
        reasons[e.get("reason") or "?"] = reasons.get(e.get("reason") or "?", 0) + 1
    parts.append("Karpenter's events: " + (", ".join(f"{k} × {v}" for k, v in sorted(reasons.items()))
                                           or "none"))
    if answer["moved"]:
        parts.append("pods gone: " + ", ".join(f"{c['name']} from {c.get('node')}"
                                               + (" (evicted)" if c.get("disruption_target") else "")
                                               for c in answer["moved"]))
    if answer["created"]:
        parts.append("pods created: " + ", ".join(f"{c['name']} on {c.get('node') or 'no node'}"
                                                  for c in answer["created"]))
    if not answer["moved"] and not answer["created"]:
        parts.append("no burst pod moved")
    policy = answer.get("consolidation_policy")
    if policy:
        parts.append(f"NodePool consolidationPolicy {policy}"
                     + (f", consolidateAfter {answer['consolidate_after']}" if answer.get("consolidate_after") else ""))
    return "; ".join(parts)


def consolidation_check(scenario: str, answer: dict) -> Check:
    command = ("kubectl get events -A --field-selector source=karpenter -o wide; "
               "kubectl get nodeclaims -o wide")
    if answer["status"] == SKIP and "seen" not in answer:
        return Check(check_name(scenario, C_CONSOLIDATION), SKIP, answer["answer"])
    seen = answer["answer"] + (f" — {answer['seen']}" if answer.get("seen") else "")
    if answer["status"] == PASS and answer.get("note"):
        seen += f" (note: {answer['note']})"
    fix = ""
    if answer["status"] == FAIL:
        fix = ("expected: " + EXPECTATION + ". Read the NodePool's disruption settings (the lab "
               "sets consolidationPolicy WhenEmpty) and Karpenter's log "
               "(`kubectl -n kube-system logs deploy/karpenter | grep -i disrupt`)")
    return Check(check_name(scenario, C_CONSOLIDATION), answer["status"], seen, fix, command)
