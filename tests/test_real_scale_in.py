"""Demo 2's scale-ins by the real ReplicaSet controller (kube-controller-manager v1.35.4), each
forecast first by ``python -m rehearse predict --json`` from the pods as they are
(tests/real_scale_in.py). Where the two disagree the controller is right, and predict is fixed.

What is compared, for every scale-in (``real_scale_in.judge``):

- every pod predict calls decided is one the controller deleted; every pod the controller
  deleted is one predict named or called possible (random: a tie; or undecided by the
  controller's clock, whose bucket edges fall in predict's window); a wholly decided forecast
  is the controller's choice exactly;
- "random" is claimed only where the engine's inputs are really equal (``false_ties``: every
  input of a tied victim and of the pod it ties with, raw), and never hidden: no victim called
  decided has the same inputs as a pod kept (``hidden_ties``);
- predict's window is honest: the controller sorted within it (``Step.elapsed``, from predict's
  snapshot to the moment the victims were seen marked for deletion, an upper bound).

The cases that straddle the rules set what a pod's status says through the pods/status
subresource (Ready times, restarts, Ready false) — kwok's stages select only Pending pods, so a
Running pod keeps what is written — and creation times by timing; each case's expected victims
come from the rules as the source states them (pkg/controller/controller_utils.go
``ActivePodsWithRanks.Less``), worked out here by hand from the UIDs the API server gave.

The module runs a control plane of its own (each xdist worker that runs one of its tests starts
one): it creates nodes, and the demo's pods must not share them with other tests' pods.
"""

from __future__ import annotations

import datetime
import itertools
import time
from collections import Counter

import pytest

from tests import real_scale_in
from tests.real_cluster import started
from tests.real_scale_in import COST, Scene, false_ties, hidden_ties, judge, verdicts

_serial = itertools.count()


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory):
    yield from started(tmp_path_factory, "scale-in-control-plane")


@pytest.fixture(scope="module")
def sort_oracle(tmp_path_factory, control_plane):
    """tests/scale_in_oracle: kube-controller-manager's own sort (k8s.io/kubernetes
    pkg/controller ActivePodsWithRanks, the pinned v1.35.4) over random list orders. Built once
    per worker from the module cache (~3 min cold on this machine, seconds with Go's build
    cache warm)."""
    binary = real_scale_in.build_oracle(tmp_path_factory.mktemp("oracle"))
    if binary is None:
        pytest.skip("tests/scale_in_oracle does not build here (go build, module cache only)")
    return binary


@pytest.fixture
def scene(control_plane):
    """A scene of this test's own: the lab-shaped nodes, their other pods, and ``burst``."""
    made = Scene(control_plane, f"si{next(_serial)}")
    try:
        yield made
    finally:
        made.delete()


#: Every step's verdicts and what the controller's sort made of them, for the report at the end.
TALLY: Counter = Counter()


def check(step: real_scale_in.Step, oracle) -> Counter:
    assert judge(step) == [], (step.forecast, sorted(step.victims))
    assert false_ties(step) == []
    assert hidden_ties(step) == []
    counts = real_scale_in.oracle(oracle, step)
    assert real_scale_in.oracle_problems(step, counts) == [], (step.forecast, counts)
    found = verdicts(step.forecast)
    TALLY.update(found)
    TALLY["steps"] += 1
    TALLY["longest ms from predict's snapshot to the victims marked"] = max(
        TALLY["longest ms from predict's snapshot to the victims marked"], int(step.elapsed * 1000))
    TALLY["random but certain in the controller's sort"] += len(real_scale_in.overcautious(step, counts))
    TALLY["open in the controller's sort"] += sum(1 for d, r in counts.values() if 0 < d < r)
    return found


def on_hybrid(scene: Scene, step: real_scale_in.Step) -> set[str]:
    hybrid = scene.hybrid_nodes()
    return {p["metadata"]["name"] for p in step.before if p["spec"]["nodeName"] in hybrid}


def demo(scene: Scene, scenario: str, before_step=None) -> list[real_scale_in.Step]:
    """3 -> 15 -> 12 -> 10 -> 3, a few seconds between the steps as a presenter's talk would
    leave (so the later pods' times are not all one second's)."""
    scene.build(3)
    time.sleep(2)
    peak = scene.scale_out_past_hybrid(15)
    hybrid = scene.hybrid_nodes()
    placed = Counter(p["spec"]["nodeName"] in hybrid for p in peak)
    # The demo's premise (tests/test_real_placement.py): 8 on the two hybrid nodes, 7 cloud.
    assert placed == Counter({True: 8, False: 7}), placed
    steps = []
    for replicas in (12, 10, 3):
        time.sleep(3)
        if scenario == "B":
            scene.cost_on_hybrid("1")
        if before_step:
            before_step(replicas)
        steps.append(scene.scale_in(replicas))
    return steps


def test_scenario_a_scale_ins_match_the_forecast(scene, sort_oracle):
    """No pod-deletion-cost: rule 5 (pods of the Deployment on the node) and the times decide,
    and where the pods' times are the same second, nothing does."""
    counts = Counter()
    for step in demo(scene, "A"):
        counts += check(step, sort_oracle)
        assert not any(COST in (p["metadata"].get("annotations") or {}) for p in step.before)
    # 3 + 2 + 7 victims in all; the talk's pauses make some of them decided.
    assert sum(counts.values()) == 12, counts
    print(f"scenario A verdicts: {dict(counts)}")


def test_scenario_b_every_cost_0_cloud_pod_goes_before_any_cost_1_hybrid_pod(scene, sort_oracle):
    """Kyverno's "1" on the hybrid pods (written here as its policy writes it): the cloud pods
    go first, by rule 4, whatever the pods' times. Before 12 -> 10 one hybrid pod turns not
    Ready: rule 3 comes before the cost, so it goes first and only one cloud pod with it. So:
    3 cloud pods at 15 -> 12; the not-Ready hybrid pod and 1 cloud pod at 12 -> 10; the last
    3 cloud pods and 4 hybrid pods at 10 -> 3."""
    counts = Counter()
    unready: list[str] = []

    def one_not_ready(replicas):
        if replicas == 10:
            pod = sorted(p["metadata"]["name"] for p in scene.active()
                         if p["spec"]["nodeName"] in scene.hybrid_nodes())[0]
            scene.patch_status(pod, {"conditions": [{"type": "Ready", "status": "False",
                                                     "reason": "ReadinessProbeFailed"}]})
            unready.append(pod)

    steps = demo(scene, "B", one_not_ready)
    for step, cloud in zip(steps, (3, 1, 3)):
        counts += check(step, sort_oracle)
        hybrid = on_hybrid(scene, step)
        assert len(step.victims - hybrid) == cloud, (step.victims, hybrid)
        for pod in step.before:
            want = "1" if pod["metadata"]["name"] in hybrid else None
            assert (pod["metadata"].get("annotations") or {}).get(COST) == want
    # kwok left the written status alone until the controller deleted the pod: the first
    # victim of 12 -> 10, for sure, by rule 3.
    first = steps[1].forecast["delete"][0]
    assert (first["name"], first["rule_number"], first["tie"], first["clock"]) == \
        (unready[0], 3, False, False)
    assert unready[0] in steps[1].victims
    # At 10 -> 3 the last cloud pods go before any hybrid pod: rule 4 against every pod kept.
    last = steps[-1]
    cloud_victims = [v for v in last.forecast["delete"] if v["name"] not in on_hybrid(scene, last)]
    assert [(v["tie"], v["clock"], v["rule_number"]) for v in cloud_victims] == \
        [(False, False, 4)] * 3, cloud_victims
    print(f"scenario B verdicts: {dict(counts)}")


def _ready_at(ns_ago: float, base: datetime.datetime) -> str:
    moment = base - datetime.timedelta(seconds=ns_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_ready_times_either_side_of_a_bucket_edge(scene, sort_oracle):
    """Rule 6 on eight pods that tie on rules 1-5 (four on each hybrid node: same rank). By
    UID, u1 < ... < u8. Ready times written: u1, u2 100 s ago (log2 bucket 36: 68.7-137 s);
    u3 ... u8 55, 52, 49, 46, 43, 40 s ago (bucket 35: 34.4-68.7 s), u3 the longest Ready: each
    farther from an edge than predict's window (the default sync lag) plus the time it takes to
    write them and start predict, so no pod's bucket is left to the clock.
    Scale 8 -> 4: the more recently Ready bucket goes first and, within it, the lower UID —
    u3, u4, u5, u6; by Ready time alone it would be u8, u7, u6, u5, and by UID alone u1-u4."""
    scene.build(8)
    pods = scene.active()
    assert Counter(p["spec"]["nodeName"] in scene.hybrid_nodes() for p in pods) == {True: 8}
    by_uid = sorted(pods, key=lambda p: p["metadata"]["uid"])
    base = real_scale_in.utc_now().replace(microsecond=0)
    for pod, age in zip(by_uid, (100, 100, 55, 52, 49, 46, 43, 40)):
        scene.patch_status(pod["metadata"]["name"], {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": _ready_at(age, base)}]})
    step = scene.scale_in(4)
    counts = check(step, sort_oracle)
    expected = {p["metadata"]["name"] for p in by_uid[2:6]}
    assert step.victims == expected
    assert step.forecast["decided"] and counts == Counter({"decided": 4, "random": 0, "clock": 0})
    # Both sides of the edge were judged: the kept u1, u2 by bucket, the kept u7, u8 by UID.
    assert all(v["rule_number"] == 6 for v in step.forecast["delete"])
    assert step.forecast["split"] == {"6": 16}

    # Then an edge inside predict's window. The four left (u1, u2, u7, u8) are wherever the
    # scheduler put them: two on each node, or three and one — then rule 5 (more of the
    # ReplicaSet's pods on its node goes first) takes the victim from the three, and the lone pod
    # is never a candidate. Of the candidates (the highest rank) by UID, the first is Ready 100 s
    # ago and the last just under 2^36 ns (68.7 s) ago, so that its age reaches the edge inside
    # predict's window; the others 90 and 80 s ago (bucket 36). Before the edge the last goes
    # (bucket 35), after it the first (the lowest UID in bucket 36): predict must leave both to
    # the controller's clock.
    # How long predict takes to start (a Python process) varies with the machine's load, and a
    # Ready time is whole seconds: the edge pod's age is chosen from the delay the attempt before
    # measured, and the attempt is repeated until predict's window holds the edge, so the case
    # under test is the one predict was given.
    left = scene.active()
    on_node = Counter(p["spec"]["nodeName"] for p in left)
    top = max(on_node.values())
    candidates = sorted((p for p in left if on_node[p["spec"]["nodeName"]] == top),
                        key=lambda p: p["metadata"]["uid"])
    first, last = candidates[0]["metadata"]["name"], candidates[-1]["metadata"]["name"]
    others = [p for p in left if p["metadata"]["name"] not in (first, last)]
    edge = 2 ** 36 / 1e9
    lag, delay, early, late = 4.0, 1.0, 0.0, 4.0
    for _attempt in range(5):
        base = real_scale_in.utc_now().replace(microsecond=0)
        edge_age = round(edge - delay - (early + late) / 2)
        ages = {first: 100, last: edge_age, **{p["metadata"]["name"]: age
                                                for p, age in zip(others, (90, 80))}}
        for name, age in ages.items():
            scene.patch_status(name, {"conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": _ready_at(age, base)}]})
        forecast = scene.predict(3, lag)
        snapshot = real_scale_in.parse_rfc3339(forecast["now"])
        early, late = (float(x.split()[0]) for x in forecast["window"].split(" to "))
        delay = (snapshot - base).total_seconds()
        # Seconds after predict's snapshot at which the edge pod's age reaches the edge.
        crossing = edge - edge_age - delay
        if early <= crossing <= late:
            break
    else:
        pytest.fail(f"predict's window never held the edge pod's bucket edge: last "
                    f"{crossing:+.2f} s against {early:+.2f} to {late:+.2f} s, {delay:.2f} s "
                    "after the write")
    step = scene.scale_in(3, lag=lag, forecast=forecast)
    counts = check(step, sort_oracle)
    assert not step.forecast["decided"] and counts["clock"] == 1, \
        f"candidates {[p['metadata']['name'] for p in candidates]} of {dict(on_node)}"
    assert {first, last} <= set(step.forecast["clock_undecided"])
    assert step.victims <= {first, last}


def _created(pod: dict) -> float:
    return real_scale_in.parse_rfc3339(pod["metadata"]["creationTimestamp"]).timestamp()


def test_restarts_then_creation_either_side_of_a_bucket_edge(scene, sort_oracle):
    """Rules 7 and 8 on eight pods of one rank (four a hybrid node) whose Ready times are all
    written equal (so rule 6 is skipped): W1, four pods created together; ~10 s later W2, four
    pods created one a second. W1's pod with the highest UID gets 2 restarts. At the scale-in,
    W1 is 20-26 s old (log2 bucket 34: 17.2-34.4 s), W2 10-13 s (bucket 33: 8.6-17.2 s), with
    margins wider than predict's window. Scale 8 -> 4: the restarted W1 pod first (rule 7 beats
    age), then W2's three lowest UIDs (rule 8: the younger bucket before W1, the lower UID
    within it); W2's highest UID is kept although it is younger than every W1 pod."""
    scene.build(4)
    w1 = scene.active()
    start = max(_created(p) for p in w1)
    time.sleep(max(0.0, start + 10 - time.time()))
    for size in (5, 6, 7, 8):
        real_scale_in.settle_time()
        scene.scale(size)
        scene.wait_settled(size)
    pods = scene.active()
    w2 = [p for p in pods if p["metadata"]["name"] not in {q["metadata"]["name"] for q in w1}]
    assert len({_created(p) for p in w2}) == 4, "W2's pods must be created in four seconds"
    base = real_scale_in.utc_now().replace(microsecond=0)
    for pod in pods:
        scene.patch_status(pod["metadata"]["name"], {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": _ready_at(100, base)}]})
    restarted = max(w1, key=lambda p: p["metadata"]["uid"])["metadata"]["name"]
    scene.patch_status(restarted, {"containerStatuses": [
        {"name": "web", "restartCount": 2, "ready": True, "image": "x", "imageID": "",
         "started": True, "state": {"running": {"startedAt": _ready_at(100, base)}}}]})
    # The scale-in 10.2 s after W2's last creation second.
    time.sleep(max(0.0, max(_created(p) for p in w2) + 10.2 - time.time()))
    step = scene.scale_in(4, lag=2.0)
    counts = check(step, sort_oracle)
    w2_low = sorted(w2, key=lambda p: p["metadata"]["uid"])[:3]
    assert step.victims == {restarted} | {p["metadata"]["name"] for p in w2_low}
    assert step.forecast["decided"] and counts["decided"] == 4
    rules = {v["name"]: v["rule_number"] for v in step.forecast["delete"]}
    assert rules[restarted] == 7 and sorted(rules.values()) == [7, 8, 8, 8]
    assert step.forecast["split"] == {"7": 4, "8": 12}


def test_a_rollout_in_progress_splits_the_scale_in_across_its_replicasets(scene, sort_oracle):
    """Pods of an older ReplicaSet: a new revision stuck mid-rollout (its pods Ready but not
    available for minReadySeconds), so the old ReplicaSet keeps 6 pods and the new one holds 4
    (8 + maxSurge 2). Scaling the Deployment 8 -> 6, the Deployment controller shares the cut
    in proportion (sync.go ``scale``: allowed 6 + 2, to remove 2; each ReplicaSet's
    size x 8 / its max-replicas 10, rounded: 6 -> 5 and 4 -> 3), and each ReplicaSet's
    controller deletes its own victim, ranked by the pods of both. predict used to forecast
    the new ReplicaSet alone and refused: "--replicas 6 is above the 4 active pods"."""
    scene.build(8)
    scene.scenario.add_nodes(scene.cloud)
    scene.start_stuck_rollout()
    sizes = {rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: rs["spec"]["replicas"]
             for rs in scene.replica_sets()}
    assert sizes == {"1": 6, "2": 4}
    time.sleep(1)
    step = scene.scale_in(6, lag=2.0, remain=8)
    after = {rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: rs["spec"]["replicas"]
             for rs in scene.replica_sets()}
    assert after == {"1": 5, "2": 3}
    parts = {part["source"].rsplit("ReplicaSet ", 1)[-1].rstrip(")"): part["replicas_after"]
             for part in step.forecast["replica_sets"]}
    assert parts == {rs["metadata"]["name"]: rs["spec"]["replicas"] for rs in scene.replica_sets()}
    check(step, sort_oracle)
    owners = Counter(next(r["name"] for r in p["metadata"]["ownerReferences"])
                     for p in step.before if p["metadata"]["name"] in step.victims)
    assert sorted(owners.values()) == [1, 1]


def test_verdicts_tally():
    """Not a check: how many victims, over the steps this worker ran, predict called decided,
    random or clock-undecided, and how many pods the controller's own sort left open."""
    print(f"scale-in verdicts: {dict(TALLY)}")
