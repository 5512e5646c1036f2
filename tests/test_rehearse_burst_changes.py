"""The consolidation watch's changes between two readings (rehearse/commands/burst/changes.py):
what each change is called, and their order — the first reading's names first (gone or changed,
as they were listed), then the names that appeared; Karpenter's events in the order they last
happened, a repeated one in its place among the new ones."""

from __future__ import annotations

from rehearse.commands.burst.changes import (diff, event_change, node_change, nodeclaim_change,
                                             pod_change)


def _pod(name: str, node: str, deleting: bool = False) -> dict:
    return {"name": name, "node": node, "place": "cloud", "phase": "Running",
            "deleting": deleting, "disruption_target": None}


def _by_name(items: list[dict], key: str = "name") -> dict[str, dict]:
    return {i[key]: i for i in items}


def test_pods_gone_and_terminating_keep_the_first_readings_order_then_the_new_ones():
    before = _by_name([_pod("a", "n1"), _pod("b", "n1"), _pod("c", "n2"), _pod("d", "n2")])
    now = _by_name([_pod("e", "n3"), _pod("b", "n1", deleting=True), _pod("d", "n3")])
    changes = diff(before, now, "T", pod_change)
    assert [(c["what"], c["name"]) for c in changes] == [
        ("pod gone", "a"), ("pod terminating", "b"), ("pod gone", "c"), ("pod bound", "d"),
        ("pod created", "e")]
    assert all(c["at"] == "T" for c in changes)


def test_a_pod_seen_terminating_is_not_gone_again():
    before = _by_name([_pod("a", "n1", deleting=True)])
    assert diff(before, {}, "T", pod_change) == []


def test_nodeclaims_and_nodes():
    claims = diff(_by_name([{"name": "c1", "node": "n1", "deleting": False},
                            {"name": "c2", "node": "n2", "deleting": False}]),
                  _by_name([{"name": "c3", "node": None, "deleting": False},
                            {"name": "c2", "node": "n2", "deleting": True}]), "T", nodeclaim_change)
    assert [(c["what"], c["name"], c["node"]) for c in claims] == [
        ("nodeclaim deleted", "c1", "n1"), ("nodeclaim deleting", "c2", "n2"),
        ("nodeclaim created", "c3", None)]
    nodes = diff(_by_name([{"name": "n1", "place": "cloud"}]),
                 _by_name([{"name": "n2", "place": "cloud"}]), "T", node_change)
    assert [(c["what"], c["name"]) for c in nodes] == [("node gone", "n1"), ("node appeared", "n2")]


def test_events_in_the_order_they_last_happened_a_repeat_among_the_new():
    seen = _by_name([{"key": "e1", "count": 1, "last": "t1"},
                     {"key": "e2", "count": 1, "last": "t1"}], "key")
    now = _by_name([{"key": "e3", "count": 1, "last": "t2"},
                    {"key": "e1", "count": 2, "last": "t3"},
                    {"key": "e4", "count": 1, "last": "t4"}], "key")
    changes = diff({key: seen.get(key) for key in now}, now, "T", event_change)
    assert [(c["what"], c["key"], c["count"]) for c in changes] == [
        ("event", "e3", 1), ("event", "e1", 2), ("event", "e4", 1)]
