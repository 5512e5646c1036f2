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
  snapshot to the moment the victims were seen gone, an upper bound).

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
from tests.real_scale_in import COST, Scene, false_ties, judge, verdicts

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


def hidden_ties(step: real_scale_in.Step) -> list[str]:
    """Victims predict calls decided that have every input equal to a pod the controller kept
    (a tie it won by chance, which predict must call random)."""
    kept = [p for p in step.before if p["metadata"]["name"] not in step.victims]
    by_name = {p["metadata"]["name"]: p for p in step.before}
    found = []
    for victim in step.forecast["delete"]:
        if victim["tie"] or victim["clock"] or victim["name"] not in step.victims:
            continue
        mine = real_scale_in.rule_inputs(by_name[victim["name"]], step.related)
        for pod in kept:
            if real_scale_in.rule_inputs(pod, step.related) == mine:
                found.append(f"{victim['name']} called decided, ties with kept {pod['metadata']['name']}")
    return found


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
    TALLY["random but certain in the controller's sort"] += len(real_scale_in.overcautious(step, counts))
    TALLY["open in the controller's sort"] += sum(1 for d, r in counts.values() if 0 < d < r)
    return found


def on_hybrid(scene: Scene, step: real_scale_in.Step) -> set[str]:
    hybrid = scene.hybrid_nodes()
    return {p["metadata"]["name"] for p in step.before if p["spec"]["nodeName"] in hybrid}


def demo(scene: Scene, scenario: str) -> list[real_scale_in.Step]:
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
    go first — 3 at 15 -> 12, 2 at 12 -> 10, the last 2 and then 5 hybrid pods at 10 -> 3 —
    and that part of the choice is decided by rule 4 whatever the pods' times."""
    counts = Counter()
    steps = demo(scene, "B")
    for step, cloud in zip(steps, (3, 2, 2)):
        counts += check(step, sort_oracle)
        hybrid = on_hybrid(scene, step)
        assert len(step.victims - hybrid) == cloud, (step.victims, hybrid)
        for pod in step.before:
            want = "1" if pod["metadata"]["name"] in hybrid else None
            assert (pod["metadata"].get("annotations") or {}).get(COST) == want
    # At 10 -> 3 the last two cloud pods go before any hybrid pod: rule 4 against every pod
    # kept, so predict must call both decided.
    last = steps[-1]
    cloud_victims = [v for v in last.forecast["delete"] if v["name"] not in on_hybrid(scene, last)]
    assert [(v["tie"], v["clock"], v["rule_number"]) for v in cloud_victims] == \
        [(False, False, 4)] * 2, cloud_victims
    print(f"scenario B verdicts: {dict(counts)}")


def _ready_at(ns_ago: float, base: datetime.datetime) -> str:
    moment = base - datetime.timedelta(seconds=ns_ago)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_ready_times_either_side_of_a_bucket_edge(scene, sort_oracle):
    """Rule 6 on eight pods that tie on rules 1-5 (four on each hybrid node: same rank). By
    UID, u1 < ... < u8. Ready times written: u1, u2 100 s ago (log2 bucket 36: 68.7-137 s);
    u3 ... u8 60, 57, 54, 51, 48, 45 s ago (bucket 35: 34.4-68.7 s), u3 the longest Ready.
    Scale 8 -> 4: the more recently Ready bucket goes first and, within it, the lower UID —
    u3, u4, u5, u6; by Ready time alone it would be u8, u7, u6, u5, and by UID alone u1-u4."""
    scene.build(8)
    pods = scene.active()
    assert Counter(p["spec"]["nodeName"] in scene.hybrid_nodes() for p in pods) == {True: 8}
    by_uid = sorted(pods, key=lambda p: p["metadata"]["uid"])
    base = real_scale_in.utc_now().replace(microsecond=0)
    for pod, age in zip(by_uid, (100, 100, 60, 57, 54, 51, 48, 45)):
        scene.patch_status(pod["metadata"]["name"], {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": _ready_at(age, base)}]})
    step = scene.scale_in(4, lag=2.0)
    counts = check(step, sort_oracle)
    expected = {p["metadata"]["name"] for p in by_uid[2:6]}
    assert step.victims == expected
    assert step.forecast["decided"] and counts == Counter({"decided": 4, "random": 0, "clock": 0})
    # Both sides of the edge were judged: the kept u1, u2 by bucket, the kept u7, u8 by UID.
    assert all(v["rule_number"] == 6 for v in step.forecast["delete"])
    assert step.forecast["split"] == {"6": 16}
