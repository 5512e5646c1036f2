"""What changed between two readings of the cluster (pure): the consolidation watch reads the
NodeClaims, the nodes, the burst pods and Karpenter's events every few seconds and records each
difference as a change, in the words the analysis reads (watch.py: "nodeclaim deleted", "pod
gone", "event"...)."""

from __future__ import annotations

from typing import Callable, Mapping, Optional, TypeVar

from rehearse.commands.burst.reading import active

T = TypeVar("T")
#: (name, as read before or None, as read now or None) -> the change, or None for no change.
Describe = Callable[[str, Optional[T], Optional[T]], Optional[dict]]


def diff(before: Mapping[str, Optional[T]], now: Mapping[str, T], at: str,
         describe: Describe) -> list[dict]:
    """The changes between two readings keyed by name, each stamped ``at``: every name read
    before (now None when it has gone), in the first reading's order, then every name that
    appeared (before None), in the second's."""
    names = [*before, *(name for name in now if name not in before)]
    found = (describe(name, before.get(name), now.get(name)) for name in names)
    return [{"at": at, **change} for change in found if change]


def nodeclaim_change(name: str, before: Optional[dict], now: Optional[dict]) -> Optional[dict]:
    if now is None:
        return {"what": "nodeclaim deleted", "name": name, "node": before.get("node")}
    if before is None:
        return {"what": "nodeclaim created", "name": name, "node": now.get("node")}
    if now["deleting"] and not before["deleting"]:
        return {"what": "nodeclaim deleting", "name": name, "node": now.get("node")}
    return None


def node_change(name: str, before: Optional[dict], now: Optional[dict]) -> Optional[dict]:
    if now is None:
        return {"what": "node gone", "name": name, "place": before["place"]}
    if before is None:
        return {"what": "node appeared", "name": name, "place": now["place"]}
    return None


def pod_change(name: str, before: Optional[dict], now: Optional[dict]) -> Optional[dict]:
    """A burst pod gone or terminating (who took it: its DisruptionTarget), bound to another
    node, or created."""
    if before is None:
        return {"what": "pod created", "name": name, "node": now["node"], "place": now["place"]}
    if now is None:
        if not active(before):
            return None  # seen terminating already
        return {"what": "pod gone", "name": name, "node": before["node"],
                "place": before["place"], "disruption_target": before["disruption_target"]}
    if active(before) and not active(now):
        return {"what": "pod terminating", "name": name, "node": now["node"],
                "place": now["place"], "disruption_target": now["disruption_target"]}
    if now["node"] and now["node"] != before["node"]:
        return {"what": "pod bound", "name": name, "node": now["node"], "place": now["place"]}
    return None


def event_change(key: str, before: Optional[dict], now: Optional[dict]) -> Optional[dict]:
    """An event of Karpenter's new, or repeated (its count or last time moved). Events expire
    by themselves: one missing from a reading is no change."""
    if now is None:
        return None
    if before is None or (before["count"], before["last"]) != (now["count"], now["last"]):
        return {"what": "event", **now}
    return None
