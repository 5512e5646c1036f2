"""`python -m rehearse predict`: which pods a ReplicaSet scale-in deletes, and why (docs/scale-in.md).

The model is checked against the controller's own unit tests, ported case by case:
- ``TestSortingActivePodsWithRanks`` from kubernetes ``pkg/controller/controller_utils_test.go``
  as stored at nathangeology/kubernetes@dfa2588ef0a3d3210996aaba66e261a1f70551e3 (a fork whose
  copy of this test is upstream's 1.32+ one, with the sidecar-restart cases; the stored
  kubernetes/kubernetes copy, 5b71aab3, predates the function). The fork adds a
  ConsolidatingScaleDown gate of its own, which is not ported: upstream has no such gate.
- ``TestGetPodsToDelete`` from kubernetes ``pkg/controller/replicaset/replica_set_test.go`` as
  stored at mmorel-35/kubernetes@0b0abd6c11b6103e3f00dfe46975d1494c484a11 (upstream 1.32-1.36:
  LogarithmicScaleDown still gated, sidecar restarts counted).
The rules themselves were read in the same mmorel-35 commit's ``pkg/controller/controller_utils.go``
(``ActivePodsWithRanks.Less``, ``podReadyTime``, ``logarithmicRankDiff``,
``compareMaxContainerRestarts``) and ``pkg/controller/replicaset/replica_set.go``
(``manageReplicas``, ``getPodsToDelete``, ``getPodsRankedByRelatedPodsOnSameNode``,
``getIndirectlyRelatedPods``), and ``GetDeletionCostFromPodAnnotations`` in
``pkg/apis/core/helper/helpers.go``.

Then the lab's own scenarios (docs/scale-in.md#what-each-scenario-should-show): 8 pods on two hybrid nodes, 7 on Karpenter
nodes, scaled 15 -> 12 -> 10 -> 3 under A (no costs), B (Kyverno's "1" on hybrid pods) and C
(Karpenter's negative ranks as well); then the command, offline and live against the emulator.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Optional

import pytest

from rehearse import cli
from rehearse.run import execute as run_execute
from rehearse.commands.predict import command as predict
from rehearse.models import ranking as predict_analysis
from rehearse.lab.connection import Kube
from rehearse.models.ranking import (Forecast, Victim, decide, deletion_cost, forecast, less,
                                       log2_bucket, kube_time_ns as parse_time, pod_facts)
from tests.kube_emulator import DEPLOYMENTS, PODS, REPLICASETS, emulator  # noqa: F401 fixture

PROJECT_DIR = Path(__file__).resolve().parent.parent
NS = 10**9
SECOND, MINUTE, HOUR, DAY = NS, 60 * NS, 3600 * NS, 86400 * NS


def t(ns: Optional[int]) -> Optional[str]:
    """ns since the epoch -> the RFC 3339 text the API server writes (None stays unset)."""
    return None if ns is None else predict_analysis.format_ns(ns)


def at(text: str) -> int:
    return parse_time(text)


def dt(ns: int) -> datetime.datetime:
    seconds, rest = divmod(ns, NS)
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc) + datetime.timedelta(
        microseconds=rest // 1000)


# --- TestSortingActivePodsWithRanks (controller_utils_test.go) -----------------------------------

#: metav1.Now() in the Go test; nanoseconds matter to rule 6/8's buckets, so keep some.
NOW = at("2025-06-15T12:00:00.123456789Z")
THEN_1_MONTH = at("2025-05-15T12:00:00.123456789Z")  # now.AddDate(0, -1, 0)
THEN_2_HOURS, THEN_5_HOURS, THEN_8_HOURS = NOW - 2 * HOUR, NOW - 5 * HOUR, NOW - 8 * HOUR
ZERO = None


def go_pod(name: str, node: str, phase: str, ready: bool, restarts: int, side_restarts: int,
           ready_since: Optional[int], created: Optional[int],
           annotations: Optional[dict] = None) -> dict:
    """The Go test's ``pod`` helper, as the dict the API would serve: a Ready pod has a Ready
    condition since ``ready_since``, one container and one sidecar (an init container with
    restartPolicy Always) with the given restart counts; every pod declares the sidecar."""
    status: dict[str, Any] = {"phase": phase}
    if ready:
        condition = {"type": "Ready", "status": "True"}
        if ready_since is not None:
            condition["lastTransitionTime"] = t(ready_since)
        status.update(conditions=[condition], containerStatuses=[{"name": "c", "restartCount": restarts}],
                      initContainerStatuses=[{"name": "sidecar", "restartCount": side_restarts}])
    metadata: dict[str, Any] = {"name": name}
    if created is not None:
        metadata["creationTimestamp"] = t(created)
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata,
            "spec": {"nodeName": node, "initContainers": [{"name": "sidecar", "restartPolicy": "Always"}]},
            "status": status}


COST = predict_analysis.POD_DELETION_COST
P = {
    "unscheduledPod": go_pod("unscheduled", "", "Pending", False, 0, 0, ZERO, ZERO),
    "scheduledPendingPod": go_pod("pending", "node", "Pending", False, 0, 0, ZERO, ZERO),
    "unknownPhasePod": go_pod("unknown-phase", "node", "Unknown", False, 0, 0, ZERO, ZERO),
    "runningNotReadyPod": go_pod("not-ready", "node", "Running", False, 0, 0, ZERO, ZERO),
    "runningReadyNoLastTransitionTimePod": go_pod("ready-no-last-transition-time", "node", "Running",
                                                  True, 0, 0, ZERO, ZERO),
    "runningReadyNow": go_pod("ready-now", "node", "Running", True, 0, 0, NOW, NOW),
    "runningReadyThen": go_pod("ready-then", "node", "Running", True, 0, 0, THEN_1_MONTH, THEN_1_MONTH),
    "runningReadyNowHighRestarts": go_pod("ready-high-restarts", "node", "Running", True, 9001, 0, NOW, NOW),
    "runningReadyNowHighSideRestarts": go_pod("ready-high-restarts", "node", "Running", True, 9001, 9001,
                                              NOW, NOW),
    "runningReadyNowCreatedThen": go_pod("ready-now-created-then", "node", "Running", True, 0, 0, NOW,
                                         THEN_1_MONTH),
    "lowPodDeletionCost": go_pod("low-deletion-cost", "node", "Running", True, 0, 0, NOW, THEN_1_MONTH,
                                 {COST: "10"}),
    "highPodDeletionCost": go_pod("high-deletion-cost", "node", "Running", True, 0, 0, NOW, THEN_1_MONTH,
                                  {COST: "100"}),
    "unscheduled5Hours": go_pod("unscheduled-5-hours", "", "Pending", False, 0, 0, THEN_5_HOURS, THEN_5_HOURS),
    "unscheduled8Hours": go_pod("unscheduled-10-hours", "", "Pending", False, 0, 0, THEN_8_HOURS, THEN_8_HOURS),
    "ready2Hours": go_pod("ready-2-hours", "", "Running", True, 0, 0, THEN_2_HOURS, THEN_1_MONTH),
    "ready5Hours": go_pod("ready-5-hours", "", "Running", True, 0, 0, THEN_5_HOURS, THEN_1_MONTH),
    "ready10Hours": go_pod("ready-10-hours", "", "Running", True, 0, 0, THEN_8_HOURS, THEN_1_MONTH),
}

#: equalityTests, in the Go test's order: (p1, p2 or None for p1 itself).
EQUALITY = [
    ("unscheduledPod", None), ("scheduledPendingPod", None), ("unknownPhasePod", None),
    ("runningNotReadyPod", None), ("runningReadyNowCreatedThen", None), ("runningReadyNow", None),
    ("runningReadyThen", None), ("runningReadyNowHighRestarts", None),
    ("runningReadyNowCreatedThen", None), ("unscheduled5Hours", "unscheduled8Hours"),
    ("ready5Hours", "ready10Hours"),
]


@pytest.mark.parametrize("p1, p2", EQUALITY, ids=[f"equality-{i}-{a}" for i, (a, _) in enumerate(EQUALITY)])
def test_upstream_sorting_equality(p1, p2):
    a, b = pod_facts(P[p1], 1), pod_facts(P[p2 or p1], 1)
    assert not less(a, b, NOW) and not less(b, a, NOW), f"{p1} and {p2 or p1} are equivalent"


#: inequalityTests, in the Go test's order: (lesser, rank, greater, rank, disablePodDeletioncost).
INEQUALITY = [
    ("unscheduledPod", 1, "scheduledPendingPod", 2, False),
    ("unscheduledPod", 2, "scheduledPendingPod", 1, False),
    ("scheduledPendingPod", 1, "unknownPhasePod", 2, False),
    ("unknownPhasePod", 1, "runningNotReadyPod", 2, False),
    ("runningNotReadyPod", 1, "runningReadyNoLastTransitionTimePod", 1, False),
    ("runningReadyNoLastTransitionTimePod", 1, "runningReadyNow", 1, False),
    ("runningReadyNow", 2, "runningReadyNoLastTransitionTimePod", 1, False),
    ("runningReadyNow", 1, "runningReadyThen", 1, False),
    ("runningReadyNow", 2, "runningReadyThen", 1, False),
    ("runningReadyNowHighRestarts", 1, "runningReadyNow", 1, False),
    ("runningReadyNowHighSideRestarts", 1, "runningReadyNowHighRestarts", 1, False),
    ("runningReadyNow", 2, "runningReadyNowHighRestarts", 1, False),
    ("runningReadyNow", 1, "runningReadyNowCreatedThen", 1, False),
    ("runningReadyNowCreatedThen", 2, "runningReadyNow", 1, False),
    ("lowPodDeletionCost", 2, "highPodDeletionCost", 1, False),
    ("highPodDeletionCost", 2, "lowPodDeletionCost", 1, True),
    ("ready2Hours", 1, "ready5Hours", 1, False),
]


@pytest.mark.parametrize("lesser, lesser_rank, greater, greater_rank, no_cost_gate", INEQUALITY,
                         ids=[f"inequality-{i}-{c[0]}<{c[2]}" for i, c in enumerate(INEQUALITY)])
def test_upstream_sorting_inequality(lesser, lesser_rank, greater, greater_rank, no_cost_gate):
    a, b = pod_facts(P[lesser], lesser_rank), pod_facts(P[greater], greater_rank)
    gates = {"pod_deletion_cost": not no_cost_gate}
    assert less(a, b, NOW, **gates), f"{lesser} (rank {lesser_rank}) goes before {greater}"
    assert not less(b, a, NOW, **gates)


# --- TestGetPodsToDelete (replica_set_test.go) -----------------------------------------------------

def rs_pod(name: str, phase: str, node: str = "", ready: Optional[str] = None, uid: str = "") -> dict:
    """The Go test's ``newPod`` for a properly owned pod: Running pods get a Ready=True condition
    with no lastTransitionTime; the test then overrides conditions and nodeName."""
    conditions = [{"type": "Ready", "status": "True"}] if phase == "Running" else []
    if ready is not None:
        conditions = [{"type": "Ready", "status": ready}]
    return {"metadata": {"name": name, "uid": uid or f"uid-{name}", "namespace": "default",
                         "labels": {"name": "foo"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "foobar", "uid": "rs-uid",
                                              "controller": True}]},
            "spec": {"nodeName": node}, "status": {"phase": phase, "conditions": conditions}}


UNSCHEDULED_PENDING = rs_pod("unscheduled-pending-pod", "Pending")
SCHEDULED_PENDING = rs_pod("scheduled-pending-pod", "Pending", "fake-node")
RUNNING_NOT_READY = rs_pod("scheduled-running-not-ready-pod", "Running", "fake-node", ready="False")
READY_NODE_1 = rs_pod("scheduled-running-ready-pod-on-node-1", "Running", "fake-node-1", ready="True")
READY_NODE_2 = rs_pod("scheduled-running-ready-pod-on-node-2", "Running", "fake-node-2", ready="True")

#: The Go table: (name, pods, related (None: the pods), diff, expected pods to delete, in order).
GET_PODS_TO_DELETE = [
    ("len(pods) = 0 (i.e., diff = 0 too)", [], None, 0, []),
    ("diff = len(pods)", [RUNNING_NOT_READY, READY_NODE_1], None, 2, [RUNNING_NOT_READY, READY_NODE_1]),
    ("diff < len(pods)", [READY_NODE_1, RUNNING_NOT_READY], None, 1, [RUNNING_NOT_READY]),
    ("various pod phases and conditions, diff = len(pods)",
     [READY_NODE_1, READY_NODE_1, READY_NODE_2, RUNNING_NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING],
     None, 6,
     [READY_NODE_1, READY_NODE_1, READY_NODE_2, RUNNING_NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING]),
    ("various pod phases and conditions, diff = len(pods), relatedPods empty",
     [READY_NODE_1, READY_NODE_1, READY_NODE_2, RUNNING_NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING],
     [], 6,
     [READY_NODE_1, READY_NODE_1, READY_NODE_2, RUNNING_NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING]),
    ("scheduled vs unscheduled, diff < len(pods)", [SCHEDULED_PENDING, UNSCHEDULED_PENDING], None, 1,
     [UNSCHEDULED_PENDING]),
    ("ready vs not-ready, diff < len(pods)", [READY_NODE_1, RUNNING_NOT_READY, RUNNING_NOT_READY], None, 2,
     [RUNNING_NOT_READY, RUNNING_NOT_READY]),
    ("ready and colocated with another ready pod vs not colocated, diff < len(pods)",
     [READY_NODE_1, READY_NODE_2], [READY_NODE_1, READY_NODE_2, READY_NODE_2], 1, [READY_NODE_2]),
    ("pending vs running, diff < len(pods)", [SCHEDULED_PENDING, RUNNING_NOT_READY], None, 1,
     [SCHEDULED_PENDING]),
    ("various pod phases and conditions, diff < len(pods)",
     [READY_NODE_1, READY_NODE_2, RUNNING_NOT_READY, SCHEDULED_PENDING, UNSCHEDULED_PENDING], None, 3,
     [UNSCHEDULED_PENDING, SCHEDULED_PENDING, RUNNING_NOT_READY]),
]


@pytest.mark.parametrize("name, pods, related, diff, expected", GET_PODS_TO_DELETE,
                         ids=[case[0] for case in GET_PODS_TO_DELETE])
def test_upstream_get_pods_to_delete(name, pods, related, diff, expected):
    result = forecast(pods, pods if related is None else related, len(pods) - diff, dt(NOW))
    assert result.names == [p["metadata"]["name"] for p in expected]
    assert result.decided, "no case of the Go table is left to chance"
    if diff:
        assert result.sorted == (diff < len(pods)), "no need to sort when every pod goes"


# --- the rules in detail --------------------------------------------------------------------------

@pytest.mark.parametrize("value, cost", [
    (None, 0), ("0", 0), ("1", 1), ("-1", -1), ("100", 100), ("-2147483648", -2147483648),
    ("2147483647", 2147483647), ("2147483648", 0), ("-2147483649", 0), ("+10", 0), ("008", 0),
    ("00", 0), ("", 0), ("-", 0), ("-0", 0), ("-008", -8), ("1.5", 0), (" 1", 0), ("1 ", 0),
    ("1_000", 0), ("١", 0), ("0x10", 0), ("1e3", 0),
])
def test_deletion_cost_is_read_as_the_api_reads_it(value, cost):
    """GetDeletionCostFromPodAnnotations: first character '-' or 1-9 or exactly "0", then
    strconv.ParseInt(value, 10, 32); anything invalid counts as 0 (Python's int() would take
    "1_000", " 1" and Arabic-Indic digits: the controller does not)."""
    assert deletion_cost({} if value is None else {COST: value}) == cost


@pytest.mark.parametrize("age, bucket", [
    (0, -1), (-5 * SECOND, -1), (1, 0), (2, 1), (3, 1),
    (35 * SECOND, 35), (68 * SECOND, 35), (69 * SECOND, 36), (137 * SECOND, 36), (138 * SECOND, 37),
    (4 * MINUTE + 35 * SECOND, 38), (9 * MINUTE + 10 * SECOND, 39), (18 * MINUTE + 20 * SECOND, 40),
    (2**40, 40), (2**40 - 1, 39), (2**48 - 1, 47),
    # Go's math.Log2 rounds to the power of two a nanosecond below 2^49 ns (6.5 days) and up.
    (2**49 - 1, 49), (2**49, 49), (2**53 + 1, 53),
])
def test_log2_buckets_are_gos(age, bucket):
    assert log2_bucket(age) == bucket


def facts(name: str, *, uid: str = "", node: str = "n", ready_since: Optional[int] = None,
          created: Optional[int] = None, restarts: int = 0, rank: int = 1, phase: str = "Running",
          ready: bool = True, cost: Optional[str] = None):
    pod = go_pod(name, node, phase, ready, restarts, 0, ready_since, created,
                 {COST: cost} if cost is not None else None)
    pod["metadata"]["uid"] = uid
    return pod_facts(pod, rank)


def test_same_bucket_lower_uid_goes_first_and_later_rules_are_skipped():
    # 40 s and 50 s ago: bucket 35 both. b restarted more, but rule 7 is never reached.
    a = facts("a", uid="aaa", ready_since=NOW - 40 * SECOND, restarts=0)
    b = facts("b", uid="bbb", ready_since=NOW - 50 * SECOND, restarts=5)
    decision = decide(a, b, NOW)
    assert (decision.rule, decision.first, decision.same_bucket) == (6, 0, True)
    assert predict_analysis.explain(a, b, NOW) == ("Ready 40 s ago vs 50 s ago (same log2 bucket 35: lower UID "
                                          "first, aaa < bbb)")


def test_same_bucket_and_the_same_uid_is_a_tie_even_when_later_rules_differ():
    a = facts("a", ready_since=NOW - 40 * SECOND, restarts=0)
    b = facts("b", ready_since=NOW - 50 * SECOND, restarts=5)
    decision = decide(a, b, NOW)
    assert (decision.rule, decision.first) == (6, None)
    assert "random" in predict_analysis.explain(a, b, NOW)


def test_different_buckets_the_more_recently_ready_goes_first():
    a = facts("a", uid="zzz", ready_since=NOW - 40 * SECOND)
    b = facts("b", uid="aaa", ready_since=NOW - 9 * MINUTE)
    assert less(a, b, NOW) and not less(b, a, NOW)
    assert predict_analysis.explain(b, a, NOW) == "Ready 40 s ago vs 9 min ago (log2 buckets 35 < 38)"


def test_equal_ready_times_fall_through_to_restarts_then_creation():
    a = facts("a", ready_since=NOW - MINUTE, restarts=2, created=NOW - HOUR)
    b = facts("b", ready_since=NOW - MINUTE, restarts=1, created=NOW - MINUTE)
    assert decide(a, b, NOW).rule == 7 and less(a, b, NOW)
    c = facts("c", uid="c", ready_since=NOW - MINUTE, created=NOW - 2 * MINUTE)
    d = facts("d", uid="d", ready_since=NOW - MINUTE, created=NOW - 40 * MINUTE)
    assert decide(c, d, NOW).rule == 8 and less(c, d, NOW)
    assert predict_analysis.explain(c, d, NOW) == "created 2 min ago vs 40 min ago (log2 buckets 36 < 41)"


def test_sidecar_restarts_break_a_tie_in_container_restarts():
    pod = go_pod("s", "n", "Running", True, 3, 7, NOW - MINUTE, NOW - MINUTE)
    plain = go_pod("p", "n", "Running", True, 3, 0, NOW - MINUTE, NOW - MINUTE)
    a, b = pod_facts(pod, 1), pod_facts(plain, 1)
    assert decide(a, b, NOW).rule == 7 and less(a, b, NOW)
    assert predict_analysis.explain(a, b, NOW) == "7 sidecar restarts vs 0 (containers 3 each)"
    # An init container that is not a sidecar (no restartPolicy: Always) is not counted.
    pod["spec"]["initContainers"][0].pop("restartPolicy")
    assert not less(pod_facts(pod, 1), b, NOW) and not less(b, pod_facts(pod, 1), NOW)


def test_zero_times_and_clock_skew_go_first():
    unset = facts("unset", uid="z", ready_since=None)
    recent = facts("recent", uid="a", ready_since=NOW - SECOND)
    assert less(unset, recent, NOW)
    assert predict_analysis.explain(unset, recent, NOW).startswith("Ready with no lastTransitionTime")
    future = facts("future", uid="z", ready_since=NOW + 5 * SECOND)  # bucket -1
    assert less(future, recent, NOW)


def test_a_pod_with_no_phase_counts_as_pending():
    none = facts("none", phase="", ready=False)
    running = facts("running", ready=False)
    pending = facts("pending", phase="Pending", ready=False)
    assert less(none, running, NOW) and not less(none, pending, NOW) and not less(pending, none, NOW)


def test_ranks_count_active_related_pods_on_the_node_including_old_replicasets():
    def on(name, node, **status):
        return {"metadata": {"name": name}, "spec": {"nodeName": node}, "status": {"phase": "Running", **status}}

    pods = [on("a", "n1"), on("b", "n2"), on("c", "")]
    related = pods + [on("old-1", "n2"), on("old-2", "n2"), on("done", "n1", phase="Succeeded"),
                      on("unscheduled", "")]
    gone = on("going", "n1")
    gone["metadata"]["deletionTimestamp"] = t(NOW)
    assert predict_analysis.ranks(pods, related + [gone]) == [1, 3, 2]
    assert predict_analysis.ranks(pods, []) == [0, 0, 0], "a ReplicaSet with no controller ranks every pod 0"


def test_rules_that_contradict_each_other_leave_the_choice_open():
    """a and b became Ready in the same second, c a few seconds later, all in one log2 bucket:
    a vs c and c vs b go by UID (a < c < b), a vs b by restarts (b first). Which one goes then
    depends on the order the controller lists them: not decided."""
    a = go_pod("a", "n", "Running", True, 0, 0, NOW - 100 * SECOND, NOW - HOUR)
    b = go_pod("b", "n", "Running", True, 1, 0, NOW - 100 * SECOND, NOW - HOUR)
    c = go_pod("c", "n", "Running", True, 0, 0, NOW - 90 * SECOND, NOW - HOUR)
    for pod, uid in ((a, "1"), (c, "2"), (b, "3")):
        pod["metadata"]["uid"] = uid
    result = forecast([a, b, c], [a, b, c], 2, dt(NOW))
    [victim] = result.delete
    assert victim.tie and not result.decided and result.undecided
    assert "not transitive" in victim.rule


def test_exact_ties_are_marked_random():
    pods = [go_pod(n, "n", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR) for n in ("x", "y", "z")]
    result = forecast(pods, pods, 2, dt(NOW))
    [victim] = result.delete
    assert victim.tie and victim.rule_number == 0 and victim.rule.startswith("every rule ties with")
    assert sorted(result.undecided) == ["y", "z"] and result.split == {0: 2}
    assert any("random" in note for note in result.notes)


# --- the forecast's interface (what `rehearse burst` calls) -------------------------------------

def test_forecast_interface_and_json():
    pods = [go_pod("keep", "n1", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR),
            go_pod("go", "n2", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR, {COST: "-5"})]
    result = forecast(pods, pods, 1, dt(NOW))
    assert isinstance(result, Forecast) and isinstance(result.delete[0], Victim)
    assert (result.replicas_before, result.replicas_after, result.order) == (2, 1, ["go", "keep"])
    assert result.delete[0] == Victim(name="go", node="n2", rule="pod-deletion-cost -5 < 0", tie=False,
                                      cost=-5, rank=1, versus="keep", rule_number=4)
    document = json.loads(json.dumps(result.to_json()))
    assert document["delete"][0]["name"] == "go" and document["delete"][0]["rule"].startswith("pod-deletion")
    assert {"node", "rule", "tie", "cost", "rank"} <= set(document["delete"][0])
    assert document["now"] == "2025-06-15T12:00:00.123456Z", "a datetime carries microseconds"


def test_everything_goes_unsorted_and_inactive_pods_do_not_count():
    done = go_pod("done", "n", "Succeeded", False, 0, 0, None, NOW - HOUR)
    pods = [go_pod("b", "n", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR),
            go_pod("a", "", "Pending", False, 0, 0, None, NOW - HOUR), done]
    result = forecast(pods, pods, 0, dt(NOW))
    assert result.names == ["b", "a"] and not result.sorted, "in the order listed, not sorted"
    assert result.replicas_before == 2
    assert any("without sorting" in note for note in result.notes)
    assert any("not active" in note for note in result.notes)


def test_no_scale_in_deletes_nothing_and_bad_arguments_are_refused():
    pods = [go_pod("a", "n", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR)]
    assert forecast(pods, pods, 1, dt(NOW)).delete == []
    assert forecast(pods, pods, 3, dt(NOW)).delete == []
    with pytest.raises(ValueError):
        forecast(pods, pods, -1, dt(NOW))
    with pytest.raises(ValueError):
        forecast(["not a pod"], [], 0, dt(NOW))
    broken = go_pod("a", "n", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR)
    broken["metadata"]["creationTimestamp"] = "yesterday"
    with pytest.raises(ValueError, match="pod a: 'yesterday' is not an RFC 3339 time"):
        forecast([broken, broken], [], 1, dt(NOW))
    restarts = go_pod("r", "n", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR)
    restarts["status"]["containerStatuses"] = [{"restartCount": ["many"]}]
    with pytest.raises(ValueError, match="pod r: "):
        forecast([restarts], [], 0, dt(NOW))
    with pytest.raises(ValueError, match="not an object"):
        forecast([{"metadata": {"name": "s"}, "status": "Running"}], [], 0, dt(NOW))


def test_at_most_burst_replicas_go_per_sync():
    pods = [go_pod(f"p{i:03d}", "n", "Running", True, 0, 0, NOW - HOUR - i * SECOND, NOW - HOUR)
            for i in range(505)]
    for i, pod in enumerate(pods):
        pod["metadata"]["uid"] = f"{i:03d}"
    result = forecast(pods, pods, 0, dt(NOW))
    assert len(result.delete) == 500 and result.sorted and result.decided
    assert result.names[:2] == ["p000", "p001"], "same bucket: lower UID first"


# --- the lab's scenarios: 8 pods on two hybrid nodes, 7 on Karpenter nodes --------------------------

HYBRID = ("mi-0aaaaaaaaaaaaaaa1", "mi-0aaaaaaaaaaaaaaa2")
T0 = at("2025-06-15T12:00:00Z")  # the scale to 15
STEPS = ((12, T0 + 3 * MINUTE), (10, T0 + 4 * MINUTE), (3, T0 + 5 * MINUTE))


def burst_pods(cloud_nodes: dict[str, int], scenario: str, karpenter_costs: Optional[dict] = None) -> list[dict]:
    """The Deployment at 15: the 3 original pods (an hour old, on the hybrid nodes), 5 new hybrid
    pods Ready within seconds, 7 cloud pods Ready 35-41 s after the scale (a NodeClaim first),
    each Ready in its own second. B and C: Kyverno wrote "1" on the hybrid pods; C: Karpenter
    wrote its rank on the pods of the nodes it ranks (``karpenter_costs``: node -> value)."""
    pods = []

    def add(name, node, created, ready, uid):
        annotations = {}
        if scenario in "BC" and node in HYBRID:
            annotations[COST] = "1"
        if scenario == "C" and node in (karpenter_costs or {}):
            annotations[COST] = karpenter_costs[node]
        pods.append({
            "metadata": {"name": name, "namespace": "demo-burst", "uid": uid, "creationTimestamp": t(created),
                         "labels": {"app": "burst"}, "annotations": annotations,
                         "ownerReferences": [{"kind": "ReplicaSet", "name": "burst-7d9f", "uid": "rs-1",
                                              "controller": True}]},
            "spec": {"nodeName": node, "containers": [{"name": "web"}]},
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": t(ready)}],
                "containerStatuses": [{"name": "web", "restartCount": 0}]}})

    for i, node in enumerate((HYBRID[0], HYBRID[0], HYBRID[1])):
        add(f"burst-7d9f-orig{i}", node, T0 - HOUR, T0 - HOUR + (10 + i) * SECOND, f"f{i}-orig")
    for i, node in enumerate((HYBRID[0], HYBRID[0], HYBRID[1], HYBRID[1], HYBRID[1])):
        add(f"burst-7d9f-hyb{i}", node, T0 + (i % 2) * SECOND, T0 + (5 + i) * SECOND, f"{(i * 7) % 10}-hyb")
    cloud = [node for node, count in cloud_nodes.items() for _ in range(count)]
    assert len(cloud) == 7 and len(pods) == 8
    for i, node in enumerate(cloud):
        add(f"burst-7d9f-cld{i}", node, T0 + SECOND, T0 + (35 + i) * SECOND, f"{(i * 3) % 10}-cld")
    return pods


def run_steps(pods: list[dict]) -> list[Forecast]:
    """15 -> 12 -> 10 -> 3: each forecast, then its victims gone."""
    results = []
    for replicas, now in STEPS:
        result = forecast(pods, pods, replicas, dt(now))
        results.append(result)
        pods = [p for p in pods if p["metadata"]["name"] not in result.names]
        assert len(pods) == replicas
    return results


def is_hybrid(victim: Victim) -> bool:
    return victim.node in HYBRID


def test_scenario_a_rank_decides_cloud_first_when_karpenter_packed_five_on_a_node():
    results = run_steps(burst_pods({"ip-10-0-1-10": 5, "ip-10-0-2-20": 2}, "A"))
    first, second, third = results
    assert [v.node for v in first.delete] == ["ip-10-0-1-10"] * 3
    assert [v.rank for v in first.delete] == [5, 5, 5]
    # 3 victims x 12 kept: against the 10 pods on other nodes rank decides (5 vs 4 or 2); against
    # the 2 kept siblings on the same node, Ready times in one log2 bucket: the lower UID.
    assert first.split == {5: 30, 6: 6}
    assert first.delete[0].rule.startswith("Ready 2 min 25 s ago vs 2 min ")
    assert "same log2 bucket 37: lower UID first" in first.delete[0].rule
    # 12: hybrid 4 + 4, cloud 2 + 2: the rank-4 hybrid pods go before any cloud pod; among them
    # the new ones (Ready 4 min ago, bucket 37) before the originals (an hour, bucket 41), and
    # between new ones, all in bucket 37, the lower UID.
    assert all(is_hybrid(v) and "orig" not in v.name for v in second.delete)
    assert [v.name for v in second.delete] == ["burst-7d9f-hyb0", "burst-7d9f-hyb3"]
    assert all(r.decided for r in results), "the pods' UIDs decide what the rules do not"
    assert len(third.delete) == 7 and third.split[5] > 0


def test_scenario_a_rank_decides_hybrid_first_when_karpenter_spread_the_seven():
    results = run_steps(burst_pods({"ip-10-0-1-10": 3, "ip-10-0-2-20": 2, "ip-10-0-3-30": 2}, "A"))
    assert all(is_hybrid(v) for v in results[0].delete), "hybrid nodes hold 4, cloud at most 3"
    assert results[0].split[5] == 3 * 7, "rank 4 vs 3 or 2 against each of the 7 cloud pods"


def test_scenario_b_every_cost_0_cloud_pod_goes_before_any_cost_1_hybrid_pod():
    results = run_steps(burst_pods({"ip-10-0-1-10": 5, "ip-10-0-2-20": 2}, "B"))
    victims = [v for r in results for v in r.delete]
    assert [v.cost for v in victims] == [0] * 7 + [1] * 5
    assert [is_hybrid(v) for v in victims] == [False] * 7 + [True] * 5
    last = results[2]
    cloud_victims = [v for v in last.delete if not is_hybrid(v)]
    assert cloud_victims and all(v.rule == "pod-deletion-cost 0 < 1" for v in cloud_victims)
    assert all(r.decided for r in results)


def test_scenario_c_karpenters_negative_ranks_first_then_0_then_1():
    costs = {"ip-10-0-1-10": "-1"}  # the one node the 10% budget lets Karpenter rank
    results = run_steps(burst_pods({"ip-10-0-1-10": 3, "ip-10-0-2-20": 2, "ip-10-0-3-30": 2}, "C", costs))
    victims = [v for r in results for v in r.delete]
    assert [v.cost for v in victims] == [-1] * 3 + [0] * 4 + [1] * 5
    assert [v.node for v in results[0].delete] == ["ip-10-0-1-10"] * 3
    assert results[0].delete[-1].rule == "pod-deletion-cost -1 < 0"
    assert results[0].split == {4: 3 * 12}


def test_pods_ready_and_created_in_the_same_second_are_a_random_choice():
    """Timestamps have one-second resolution: two cloud pods on one node, Ready in the same
    second and created in the same second, tie on every rule. When the scale-in takes one of
    them, which one is random — and the forecast says so instead of guessing. And the tie
    spreads: cld2 (another node, same rank) is Ready 3 s before them, in the same log2 bucket,
    so it goes after cld5 (lower UID) and before cld6 (higher UID), which tie with each other:
    ``Less`` is no strict weak ordering there, and the controller's own sort
    (tests/scale_in_oracle, over 2,000 list orders) deleted cld2 in about a third of them. The
    forecast used to name a twin, for sure on ip-10-0-2-20."""
    pods = burst_pods({"ip-10-0-1-10": 5, "ip-10-0-2-20": 2}, "B")
    twins = [p for p in pods if p["spec"]["nodeName"] == "ip-10-0-2-20"]
    for twin in twins:
        twin["status"]["conditions"][0]["lastTransitionTime"] = t(T0 + 40 * SECOND)
    after_12 = [p for p in pods if p["metadata"]["name"] not in forecast(pods, pods, 12, dt(STEPS[0][1])).names]
    result = forecast(after_12, after_12, 11, dt(STEPS[1][1]))
    [victim] = result.delete
    assert victim.tie and not result.decided
    assert sorted([victim.name] + result.undecided) == ["burst-7d9f-cld2", "burst-7d9f-cld5",
                                                         "burst-7d9f-cld6"]
    assert "not transitive" in victim.rule


def test_an_old_annotation_left_from_a_scenario_changes_the_forecast():
    """Annotations outlive a scenario: hybrid pods still carrying B's "1" in an A run keep their
    place against cloud pods that rank alone would have deleted after them."""
    pods = burst_pods({"ip-10-0-1-10": 3, "ip-10-0-2-20": 2, "ip-10-0-3-30": 2}, "A")
    clean = forecast(pods, pods, 12, dt(STEPS[0][1]))
    for pod in pods:
        if pod["spec"]["nodeName"] in HYBRID:
            pod["metadata"]["annotations"][COST] = "1"
    stale = forecast(pods, pods, 12, dt(STEPS[0][1]))
    assert all(is_hybrid(v) for v in clean.delete) and not any(is_hybrid(v) for v in stale.delete)


# --- the command --------------------------------------------------------------------------------

def write_list(path: Path, pods: list[dict], kind: str = "List") -> Path:
    path.write_text(json.dumps({"apiVersion": "v1", "kind": kind,
                                "items": [{"apiVersion": "v1", "kind": "Pod", **p} for p in pods]}))
    return path


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["predict", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_offline_table(tmp_path, capsys):
    pods = write_list(tmp_path / "pods.json",
                      burst_pods({"ip-10-0-1-10": 5, "ip-10-0-2-20": 2}, "B"))
    code, out, _ = run(capsys, "--pods", str(pods), "--replicas", "12", "--now", "2025-06-15T12:03:00Z")
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"Scale-in 15 -> 12 of {pods}, controller clock 2025-06-15T12:03:00Z"
    assert lines[1] == "Deleted, in order, 3 of 15, each against the first pod kept (burst-7d9f-cld2):"
    assert lines[2].split() == ["#", "POD", "NODE", "COST", "RANK", "DECIDED", "BY"]
    assert lines[3].split()[:5] == ["1", "burst-7d9f-cld0", "ip-10-0-1-10", "0", "5"]
    assert "rule 6: Ready 2 min 25 s ago vs 2 min " in lines[3]
    assert lines[6] == ("What separates deleted from kept (36 pairs): 24 by rule 4 (lower pod-deletion-cost "
                        "first); 6 by rule 5 (more pods of the Deployment on its node first); 6 by rule 6 "
                        "(Ready more recently first, by log2 bucket, then lower UID)")
    assert lines[7].startswith("Kept (12), next to go first: ")


def test_offline_json_lists_the_deleted_pods_in_order(tmp_path, capsys):
    pods = burst_pods({"ip-10-0-1-10": 5, "ip-10-0-2-20": 2}, "B")
    path = write_list(tmp_path / "pods.json", pods, kind="PodList")
    code, out, _ = run(capsys, "--pods", str(path), "--replicas", "3", "--now", "2025-06-15T12:05:00+00:00",
                       "--json")
    document = json.loads(out)
    assert code == 0 and len(document["delete"]) == 12
    assert [d["cost"] for d in document["delete"]] == [0] * 7 + [1] * 5
    assert all({"name", "node", "rule", "tie", "cost", "rank"} <= set(d) for d in document["delete"])
    assert document["source"] == str(path) and document["now"] == "2025-06-15T12:05:00Z"


def test_related_file_sets_the_ranks_and_an_empty_one_ranks_all_zero(tmp_path, capsys):
    pods = [go_pod("a", "n1", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR),
            go_pod("b", "n2", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR - SECOND)]
    for pod, uid in zip(pods, ("1", "2")):
        pod["metadata"]["uid"] = uid
    old = go_pod("old", "n2", "Running", True, 0, 0, NOW - HOUR, NOW - HOUR)
    path = write_list(tmp_path / "pods.json", pods)
    related = write_list(tmp_path / "related.json", pods + [old])
    empty = write_list(tmp_path / "empty.json", [])
    now = ["--now", t(NOW), "--json", "--replicas", "1", "--pods", str(path)]
    assert json.loads(run(capsys, *now, "--related", str(related))[1])["delete"][0]["name"] == "b"
    by_uid = json.loads(run(capsys, *now, "--related", str(empty))[1])["delete"][0]
    assert (by_uid["name"], by_uid["rank"], by_uid["rule_number"]) == ("a", 0, 8)


def test_a_file_with_several_replicasets_asks_which(tmp_path, capsys):
    pods = burst_pods({"ip-10-0-1-10": 5, "ip-10-0-2-20": 2}, "A")
    pods[0]["metadata"]["ownerReferences"][0]["name"] = "burst-old"
    path = write_list(tmp_path / "pods.json", pods)
    code, _, err = run(capsys, "--pods", str(path), "--replicas", "3")
    assert code == 2 and "choose one with --replicaset NAME" in err and len(err.splitlines()) == 1
    code, out, _ = run(capsys, "--pods", str(path), "--replicas", "3", "--replicaset", "burst-7d9f",
                       "--now", t(T0 + 5 * MINUTE))
    assert code == 0 and "Scale-in 14 -> 3" in out


@pytest.mark.parametrize("content, args, message", [
    ("{not json", [], "is not JSON"),
    (json.dumps({"kind": "Deployment"}), [], "is a Deployment, not a List of Pods"),
    (json.dumps([1, 2]), [], "is a JSON list, not a List of Pods"),
    (json.dumps({"kind": "List", "items": [{"kind": "Service", "metadata": {"name": "s"}}]}), [],
     "item 1 is a Service, not a Pod"),
    (json.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {}}]}), [],
     "item 1 is a Pod without a name"),
    (json.dumps({"kind": "List", "items": [{"kind": "Pod", "metadata": {
        "name": "p", "creationTimestamp": "yesterday"}}]}), ["--replicas", "0"],
     "cannot forecast from "),
    (None, ["--replicas", "-1"], "--replicas -1 is negative"),
    (None, ["--replicas", "three"], "--replicas 'three' is not a whole number"),
    (None, ["--replicas", "16"], "--replicas 16 is above the 15 active pods"),
    (None, ["--now", "yesterday"], "--now 'yesterday' is not an RFC 3339 time"),
    (None, ["--now", "2025-06-15T12:00:00"], "is not an RFC 3339 time with a zone"),
    (None, ["--now", "2025-13-15T12:00:00Z"], "is not an RFC 3339 time"),
])
def test_malformed_input_is_one_line_and_exit_2(tmp_path, capsys, content, args, message):
    path = tmp_path / "pods.json"
    if content is None:
        write_list(path, burst_pods({"ip-10-0-1-10": 5, "ip-10-0-2-20": 2}, "A"))
    else:
        path.write_text(content)
    options = {"--replicas": "3", **dict(zip(args[::2], args[1::2]))}
    code, out, err = run(capsys, "--pods", str(path), *[x for kv in options.items() for x in kv])
    assert code == 2 and out == ""
    [line] = err.strip().splitlines()
    assert line.startswith("error: ") and message in line


def test_from_the_real_entry_point_no_traceback(tmp_path):
    missing = tmp_path / "nope.json"
    done = subprocess.run([sys.executable, "-m", "rehearse", "predict", "--pods", str(missing),
                           "--replicas", "1"], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip() == f"error: no file {missing}: write it with `kubectl get pods -o json > {missing}`"
    helped = subprocess.run([sys.executable, "-m", "rehearse", "predict", "--help"], cwd=PROJECT_DIR,
                            capture_output=True, text=True, timeout=60)
    assert helped.returncode == 0 and "usage: python -m rehearse predict" in helped.stdout
    assert "--pods FILE" in helped.stdout and "kubectl -n demo-burst get pods -o json" in helped.stdout


def test_the_defaults_name_demo_2s_deployment():
    from stacks.layers import demo

    assert predict.DEFAULT_NAMESPACE == demo.BURST_NS


# --- live, against the emulator -----------------------------------------------------------------

def test_live_reads_the_current_replicasets_pods_and_ranks_by_all_its_replicasets(
        emulator, tmp_path, monkeypatch, capsys):  # noqa: F811 fixture
    """The Deployment's current ReplicaSet (revision 2) has 3 pods; an old one (revision 1)
    still has an active pod on n2, which makes n2's pod the doubled-up one. A pod of another
    app on n2 and a pod being deleted do not count: the command lists every pod of the
    namespace and matches them to the ReplicaSets' selectors itself."""
    ns = "demo-burst"
    owner = lambda kind, name, uid: [{"kind": kind, "name": name, "uid": uid, "controller": True}]  # noqa: E731
    emulator.put(DEPLOYMENTS, ns, "burst", {"metadata": {
        "uid": "dep-1", "annotations": {"deployment.kubernetes.io/revision": "2"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "burst"}}}})
    for name, uid, revision, hash_ in (("burst-old", "rs-old", "1", "old"), ("burst-new", "rs-new", "2", "new")):
        emulator.put(REPLICASETS, ns, name, {"metadata": {
            "uid": uid, "ownerReferences": owner("Deployment", "burst", "dep-1"),
            "annotations": {"deployment.kubernetes.io/revision": revision}},
            "spec": {"selector": {"matchLabels": {"app": "burst", "pod-template-hash": hash_}}}})
    emulator.put(REPLICASETS, ns, "other", {"metadata": {
        "uid": "rs-other", "ownerReferences": owner("Deployment", "other", "dep-2")},
        "spec": {"selector": {"matchLabels": {"app": "other"}}}})

    def pod(name, node, labels, rs_name, rs_uid, uid, **extra):
        body = go_pod(name, node, "Running", True, 0, 0, NOW - HOUR, NOW - HOUR)
        body["metadata"].update(uid=uid, labels=labels, ownerReferences=owner("ReplicaSet", rs_name, rs_uid),
                                **extra)
        emulator.put(PODS, ns, name, body)

    new, old = {"app": "burst", "pod-template-hash": "new"}, {"app": "burst", "pod-template-hash": "old"}
    pod("burst-new-a", "n1", new, "burst-new", "rs-new", "1")
    pod("burst-new-b", "n2", new, "burst-new", "rs-new", "2")
    pod("burst-new-c", "n3", new, "burst-new", "rs-new", "3")
    pod("burst-old-x", "n2", old, "burst-old", "rs-old", "4")
    pod("burst-old-gone", "n3", old, "burst-old", "rs-old", "5", deletionTimestamp=t(NOW))
    pod("other-1", "n1", {"app": "other"}, "other", "rs-other", "6")
    pod("other-2", "n1", {"app": "other"}, "other", "rs-other", "7")

    outputs = tmp_path / "lab.json"
    outputs.write_text(json.dumps({"region": "ap-northeast-2", "kubeconfig": "{}"}))
    monkeypatch.setattr(run_execute, "_connect", lambda args, stack_outputs: Kube.connect(emulator.endpoint))
    code, out, err = run(capsys, "--outputs", str(outputs), "--replicas", "2", "--now", t(NOW), "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["source"] == "demo-burst/burst (ReplicaSet burst-new)"
    assert document["replicas_before"] == 3 and document["order"][0] == "burst-new-b"
    [victim] = document["delete"]
    assert (victim["name"], victim["rank"], victim["rule_number"]) == ("burst-new-b", 2, 5)

    code, _, err = run(capsys, "--outputs", str(outputs), "--replicas", "1", "--deployment", "nope")
    assert code == 2 and err.strip() == "error: Deployment demo-burst/nope not found"


# --- the controller's clock: sync lag and skew (docs/scale-in.md) --------------------------------

def edge_pods() -> list[dict]:
    """Ready 34 s and 35 s ago: buckets 34 and 35 at the snapshot (2^35 ns ≈ 34.36 s); half a
    second later both are in bucket 35 and the lower UID (b's) decides."""
    a = go_pod("a", "n", "Running", True, 0, 0, NOW - 34 * SECOND, NOW - HOUR)
    b = go_pod("b", "n", "Running", True, 0, 0, NOW - 35 * SECOND, NOW - HOUR)
    a["metadata"]["uid"], b["metadata"]["uid"] = "2", "1"
    return [a, b]


def test_a_choice_that_flips_at_a_bucket_edge_within_the_window_is_undecided():
    pods = edge_pods()
    assert forecast(pods, pods, 1, dt(NOW)).names == ["a"]
    # What the controller does when it sorts half a second after the snapshot.
    assert forecast(pods, pods, 1, dt(NOW + SECOND // 2)).names == ["b"]
    result = forecast(pods, pods, 1, dt(NOW), (0, 2 * SECOND))
    [victim] = result.delete
    assert victim.name == "a" and victim.clock and not victim.tie and not result.decided
    assert result.clock_undecided == ["a", "b"]
    assert any("undecided by the controller's clock: a, b" in n for n in result.notes)
    assert result.to_json()["clock_undecided"] == ["a", "b"] and result.to_json()["decided"] is False
    # Away from an edge the same window decides nothing differently.
    far = [go_pod(n, "n", "Running", True, 0, 0, NOW - s * SECOND, NOW - HOUR) for n, s in (("c", 40), ("d", 300))]
    assert forecast(far, far, 1, dt(NOW), (-SECOND, 3 * SECOND)).clock_undecided == []


def test_a_pod_random_at_another_clock_of_the_window_is_not_decided():
    """Found by the real controller (tests/test_real_scale_in.py, scenario A, 15 -> 12): at the
    snapshot the pods Ready 4.2 s ago (bucket 31) go before those Ready 7.2 s ago (bucket 32);
    0.06 s later all are in bucket 32, where the pods Ready in the same second tie and the
    lower UID decides between the others — so an older pod the forecast at the snapshot keeps
    for sure may go. The kube-controller-manager sorted 0.06-0.72 s after the snapshot and
    deleted "old-b". The window used to gather only each clock's sure victims, and missed the
    pods a later clock called random."""
    def pod(name, uid, ready_s):
        made = go_pod(name, "n", "Running", True, 0, 0, NOW - ready_s * SECOND, NOW - ready_s * SECOND)
        made["metadata"]["uid"] = uid
        return made

    # Ages at NOW - 0.24 s + 4.24 s: "new-*" 4.24 s (just under 2^32 ns = 4.295 s), "old-*" 7.24 s.
    snap = NOW + 240 * NS // 1000
    pods = [pod("new-a", "2206", 4), pod("new-b", "4879", 4), pod("new-c", "4f66", 4),
            pod("new-d", "e314", 4), pod("old-a", "3a26", 7), pod("old-b", "4bbe", 7),
            pod("old-c", "6055", 7)]
    at_snapshot = forecast(pods, pods, 4, dt(snap))
    assert set(at_snapshot.names) <= {"new-a", "new-b", "new-c", "new-d"}
    assert "old-b" not in at_snapshot.undecided
    later = forecast(pods, pods, 4, dt(snap + 720 * NS // 1000))
    assert "old-b" in set(later.names) | set(later.undecided)
    windowed = forecast(pods, pods, 4, dt(snap), (-537 * NS // 1000, 4468 * NS // 1000))
    assert "old-b" in windowed.clock_undecided and not windowed.decided


def test_candidate_clocks_meet_every_bucket_edge_in_the_window():
    from rehearse.models import clock_window

    t = NOW - 34 * SECOND
    clocks = clock_window.candidate_clocks([t], NOW, NOW + SECOND)
    edge = t + 2**35
    assert NOW < edge < NOW + SECOND and edge in clocks and edge - 1 in clocks
    assert {log2_bucket(c - t) for c in clocks} == {34, 35}


def test_the_window_comes_from_the_api_servers_date_header_bounded():
    from rehearse.models import clock_window

    sent = datetime.datetime(2026, 12, 1, 9, 0, 0, 200000, tzinfo=datetime.timezone.utc)
    received = sent + datetime.timedelta(milliseconds=100)
    # The server's clock 3 s ahead: it wrote 09:00:03 (whole seconds).
    low, high = clock_window.offset_from_date("Tue, 01 Dec 2026 09:00:03 GMT", sent, received)
    assert (low, high) == (int(2.7 * NS), int(3.8 * NS))
    early, late = clock_window.window({"low_ns": low, "high_ns": high}, lag_seconds=2)
    assert (early, late) == (0, int(5.8 * NS))
    assert clock_window.window(None, 2, default_skew_seconds=1) == (-NS, 3 * NS)


def test_the_emulator_answers_with_its_own_clocks_date(emulator):  # noqa: F811 fixture
    from rehearse.lab import server_clock

    ours = datetime.datetime(2026, 12, 1, 9, 0, 0, 500000, tzinfo=datetime.timezone.utc)
    emulator.server_clock = lambda: ours + datetime.timedelta(seconds=7)
    kube = Kube.connect(emulator.endpoint)
    try:
        measured = server_clock.measure_offset(kube, lambda: ours)
    finally:
        kube.close()
    assert measured["date"] == "Tue, 01 Dec 2026 09:00:07 GMT"
    assert measured["low_ns"] <= 7 * NS <= measured["high_ns"] and measured["high_ns"] - measured["low_ns"] <= NS


def test_the_command_marks_clock_undecided_choices(tmp_path, capsys):
    path = write_list(tmp_path / "pods.json", edge_pods())
    code, out, _ = run(capsys, "--pods", str(path), "--replicas", "1", "--now", t(NOW), "--sync-lag", "2")
    assert code == 0
    assert "CLOCK: " in out and "Undecided by the controller's clock (+0.000 s to +2.000 s" in out
    code, out, _ = run(capsys, "--pods", str(path), "--replicas", "1", "--now", t(NOW), "--sync-lag", "0")
    assert code == 0 and "CLOCK" not in out and "Undecided by the controller's clock" not in out

