"""Demo 2's scenarios A, B and C end to end with the real Kyverno (v1.19.0) and the real
Karpenter (v1.15.0, kwok provider) together, one real control plane per scenario, the three side
by side (tests/real_scenarios.py runs each in a private network namespace). At each scale-in
``python -m rehearse predict --json`` forecasts first, against the API server; then the real
ReplicaSet controller chooses. Where they disagree the controller is right.

Expected values come from the rules, never from a previous run:

- the ReplicaSet controller's ranking (kubernetes/kubernetes pkg/controller/controller_utils.go
  ``ActivePodsWithRanks.Less``; docs/scale-in.md): with every pod Running and Ready (rules 1-3
  tie), a lower pod-deletion-cost goes first (rule 4), then more of the Deployment's pods on the
  pod's node (rule 5);
- Kyverno's policy as the program registers it (components/kyverno.py): its patch's value on a
  pod bound to a node labelled hybrid, nothing on any other;
- Karpenter's deletion-cost controller (sigs.k8s.io/karpenter v1.15.0
  pkg/controllers/pod/deletioncost): only with the gate on (pkg/controllers/controllers.go),
  only the ReplicaSet pods of nodes with a NodeClaim (``RankNodes``: ``Managed()``), the same
  value on every pod of a node, ``RankForBC(i, n) = -n + i`` over its n ranked nodes (distinct,
  -n ... -1); it never touches a pod on a node it does not manage, so Kyverno's value on the
  hybrid pods stays;
- who wrote a value: the API server names an Update's field manager after its client's user
  agent up to the first "/" (k8s.io/apiserver pkg/endpoints/handlers/create.go
  ``prefixFromUserAgent``). Kyverno's background controller updates the pod
  (pkg/background/mutate/mutate.go) with client-go's default agent, whose name is the binary's
  (client-go rest/config.go ``DefaultKubernetesUserAgent``: ``filepath.Base(os.Args[0])``) —
  Kyverno's own ``Kyverno/<version>`` is set only when building the config failed
  (pkg/config/client.go ``withUserAgent`` tests ``err != nil``) — so here the name the binary
  is built under; Karpenter's queue merge-patches it (deletioncost/annotation.go) as
  ``karpenter`` (pkg/operator/operator.go sets ``AppName``/version).

One run serves every test here (under xdist one worker runs it, the other waits for its
result: tests/worker_share.py). Alone: ``pytest -n 0 -q tests/test_real_scenarios.py``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections import Counter
from typing import Optional

import pytest

from tests import real_kyverno, real_scale_in, real_scenarios, worker_share
from tests.helm_engine import needs_helm
from tests.real_cluster import engines_folder
from tests.real_scale_in import COST, false_ties, hidden_ties, judge, step_from_json, verdicts

pytestmark = needs_helm

#: The field managers of the two writers (module docstring): Kyverno's background controller's
#: binary as engines/build.py names it, and Karpenter's AppName.
KYVERNO_MANAGER = real_kyverno.CONTROLLERS["background"][0]
KARPENTER_MANAGER = "karpenter"


def _skip_reason() -> str:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        return ("Karpenter and Kyverno listen on every interface: these runs need a private "
                "network namespace (root, unshare and ip)")
    missing = [tool for tool in ("go", "openssl", "ss") if not shutil.which(tool)]
    return f"the real-engine tier needs {' and '.join(missing)} on PATH" if missing else ""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict:
    why = _skip_reason()
    if why:
        pytest.skip(why)
    folder, why = engines_folder("karpenter", "kyverno")
    if folder is None:
        pytest.skip(f"the scenarios need the Karpenter and Kyverno engines: {why}")

    def compute() -> dict:
        started = time.monotonic()
        plans = {}
        for name in real_scenarios.SCENARIOS:  # one at a time: the program runs under mocks
            work = tmp_path_factory.mktemp(f"scenario-{name.lower()}")
            plans[name] = (work, real_scenarios.plan(name, folder, work))
        planned = time.monotonic()
        found = real_scenarios.run_all(folder, plans)
        for name, (_, the_plan) in plans.items():
            found[name]["plan"] = {k: the_plan[k] for k in ("hybrid", "feature_gates", "policy_rule")}
        found["wall_s"] = {"plans": round(planned - started, 1),
                           "runs": round(time.monotonic() - planned, 1)}
        return found

    shared = worker_share.directory("real-scenarios")
    found = compute() if shared is None else worker_share.once(shared, "scenarios", compute,
                                                               wait_s=700)
    for name in real_scenarios.SCENARIOS:
        result = found[name]
        assert "error" not in result, (f"scenario {name}: {result['error']}\n"
                                       + "\n".join(f"--- {k}\n{v}" for k, v in
                                                   (result.get("logs") or {}).items()))
    return found


# --- reading a run ------------------------------------------------------------------------------

def _steps(result: dict) -> list[real_scale_in.Step]:
    return [step_from_json(s) for s in result["steps"]]


def _hybrid(result: dict, pod: dict) -> bool:
    return pod["spec"].get("nodeName") in set(result["plan"]["hybrid"])


def _cost(pod: dict) -> Optional[str]:
    return (pod["metadata"].get("annotations") or {}).get(COST)


def _writers(pod: dict) -> list[str]:
    """The field managers owning the pod's cost annotation (its managedFields)."""
    return sorted(e["manager"] for e in pod["metadata"].get("managedFields") or []
                  if f"f:{COST}" in (((e.get("fieldsV1") or {}).get("f:metadata") or {})
                                     .get("f:annotations") or {}))


def _policy_value(result: dict) -> Optional[str]:
    rule = result["plan"]["policy_rule"]
    return None if rule is None else rule["patch"]["metadata"]["annotations"][COST]


def _removed_places(result: dict, step: real_scale_in.Step) -> Counter:
    return Counter("hybrid" if _hybrid(result, p) else "cloud" for p in step.before
                   if p["metadata"]["name"] in step.victims)


# --- the premise: the overflow on Karpenter's nodes ----------------------------------------------

@pytest.mark.parametrize("scenario", real_scenarios.SCENARIOS)
def test_the_overflow_runs_on_nodes_karpenter_launched(outcomes, scenario):
    """At 15: four pods on each hybrid node, the seven over on nodes of NodeClaims Karpenter
    created for them (the demo's premise, tests/test_real_karpenter.py)."""
    result = outcomes[scenario]
    after = result["scale_up"]["after"]
    assert Counter(e["place"] for e in after) == {"hybrid": 8, "cloud": 7}, after
    assert Counter(e["node"] for e in after if e["place"] == "hybrid") == {
        node: 4 for node in result["plan"]["hybrid"]}
    claimed = {c["node"] for c in result["nodeclaims"]}
    assert {e["node"] for e in after if e["place"] == "cloud"} <= claimed


# --- the costs, and who wrote them -----------------------------------------------------------------

@pytest.mark.parametrize("scenario", real_scenarios.SCENARIOS)
def test_the_costs_each_controller_wrote(outcomes, scenario):
    """Before each scale-in (the pods as listed right after predict ran): on hybrid pods the
    policy's value written by Kyverno (A: no policy, nothing); on cloud pods nothing in A and B,
    and in C Karpenter's rank — one value per node, distinct across nodes, within -n ... -1,
    written by Karpenter. Nobody else writes the annotation."""
    result = outcomes[scenario]
    value = _policy_value(result)
    assert (value is None) == (scenario == "A")
    assert result["plan"]["feature_gates"] == \
        f"PodDeletionCostManagement={'true' if scenario == 'C' else 'false'}"
    nodes = len(result["nodeclaims"])
    for step in _steps(result):
        per_node: dict[str, set] = {}
        for pod in step.before:
            name, cost = pod["metadata"]["name"], _cost(pod)
            if _hybrid(result, pod):
                assert cost == value, (step.replicas, name, cost)
                assert _writers(pod) == ([KYVERNO_MANAGER] if value else []), _writers(pod)
            elif scenario != "C":
                assert cost is None and _writers(pod) == [], (step.replicas, name, cost)
            else:
                assert cost is not None and -nodes <= int(cost) <= -1, (step.replicas, name, cost)
                assert _writers(pod) == [KARPENTER_MANAGER], _writers(pod)
                per_node.setdefault(pod["spec"]["nodeName"], set()).add(cost)
        assert all(len(v) == 1 for v in per_node.values()), per_node
        ranks = [v.pop() for v in per_node.values()]
        assert len(set(ranks)) == len(ranks), per_node


def test_kyverno_wrote_before_the_scale_in_and_karpenter_within_its_passes(outcomes):
    """Timing, from the pod watch: in B and C every hybrid pod carried Kyverno's value before
    the first scale-in; in C Karpenter's ranks came after its start within two of its one-minute
    passes (RANK_TIMEOUT's reasoning), and every value a cloud pod carried was one of its ranks."""
    for scenario in ("B", "C"):
        result = outcomes[scenario]
        assert result["costs_wait"]["settled"], (scenario, result["costs_wait"])
        first = result["steps"][0]["started"]
        hybrid = set(result["plan"]["hybrid"])
        for name, entry in result["costs"].items():
            if entry["node"] in hybrid and entry["bound"] < first:
                [written] = [c for c in entry["costs"] if c["value"] is not None]
                assert written["at"] <= first, (scenario, name, entry)
    c = outcomes["C"]
    ranked = [next(x["at"] for x in e["costs"] if x["value"] is not None)
              for e in c["costs"].values() if e["node"] not in set(c["plan"]["hybrid"])
              and any(x["value"] is not None for x in e["costs"])]
    assert ranked and max(ranked) - c["timings"]["karpenter_up"] < real_scenarios.RANK_TIMEOUT
    nodes = len(c["nodeclaims"])
    for entry in c["costs"].values():
        if entry["node"] not in set(c["plan"]["hybrid"]):
            assert all(-nodes <= int(x["value"]) <= -1 for x in entry["costs"]
                       if x["value"] is not None), entry


# --- the scale-ins against the rules ---------------------------------------------------------------

def _key(pod: dict, related: list[dict]) -> tuple[int, int]:
    """Rules 4 and 5 of ActivePodsWithRanks.Less as a sort key (lower goes first): the cost
    (absent: 0), then more of the Deployment's pods on the pod's node."""
    inputs = real_scale_in.rule_inputs(pod, related)
    return (int(inputs[3] or 0), -inputs[4])


@pytest.mark.parametrize("scenario", real_scenarios.SCENARIOS)
def test_the_scale_ins_follow_the_replicaset_rules(outcomes, scenario):
    """Every pod Running and Ready (rules 1-3 tie), so no pod kept may sort before a victim on
    rules 4-5. In B and C that puts every cloud pod before every hybrid pod: 3 cloud pods at
    15 -> 12, 2 at 12 -> 10, the last 2 and 5 hybrid pods at 10 -> 3 — and C removes from the
    same places as B (Karpenter's negative ranks only reorder the cloud pods among themselves)."""
    result = outcomes[scenario]
    for step in _steps(result):
        assert all(p["status"].get("phase") == "Running" and real_scale_in.rule_inputs(
            p, step.related)[2] for p in step.before), step.replicas
        kept = [p for p in step.before if p["metadata"]["name"] not in step.victims]
        worst_kept = min(_key(p, step.related) for p in kept)
        for pod in step.before:
            if pod["metadata"]["name"] in step.victims:
                assert _key(pod, step.related) <= worst_kept, (step.replicas, pod["metadata"]["name"])
    if scenario in ("B", "C"):
        assert [_removed_places(result, s) for s in _steps(result)] == [
            {"cloud": 3}, {"cloud": 2}, {"cloud": 2, "hybrid": 5}]


def test_c_removes_from_the_same_places_as_b(outcomes):
    b, c = outcomes["B"], outcomes["C"]
    assert [_removed_places(c, s) for s in _steps(c)] == [_removed_places(b, s) for s in _steps(b)]


# --- predict against the controllers ----------------------------------------------------------------

@pytest.mark.parametrize("scenario", real_scenarios.SCENARIOS)
def test_predict_forecast_what_the_controllers_did(outcomes, scenario):
    """tests/test_real_scale_in.py's judgement at each scale-in: every pod predict calls decided
    was deleted, every pod deleted was named or called open, a random call is a real tie, no tie
    hides behind a decided call, and the controller sorted within predict's window."""
    for step in _steps(outcomes[scenario]):
        assert judge(step) == [], (step.replicas, step.forecast, sorted(step.victims))
        assert false_ties(step) == []
        assert hidden_ties(step) == []


@pytest.fixture(scope="module")
def sort_oracle(tmp_path_factory, outcomes):
    """tests/scale_in_oracle: the pinned kube-controller-manager's own sort (built from the
    module cache; seconds with Go's build cache warm from tests/test_real_scale_in.py)."""
    binary = real_scale_in.build_oracle(tmp_path_factory.mktemp("oracle"))
    if binary is None:
        pytest.skip("tests/scale_in_oracle does not build here (go build, module cache only)")
    return binary


@pytest.mark.parametrize("scenario", real_scenarios.SCENARIOS)
def test_the_controllers_own_sort_agrees_with_predict(outcomes, sort_oracle, scenario):
    for step in _steps(outcomes[scenario]):
        counts = real_scale_in.oracle(sort_oracle, step)
        assert real_scale_in.oracle_problems(step, counts) == [], (step.replicas, step.forecast)


# --- what it took -------------------------------------------------------------------------------------

def test_timings(outcomes):
    """Not a check of behaviour: the runs' timings, the victims per step and predict's verdicts,
    in the test's output (-rP); the wall clock bounded loosely."""
    for scenario in real_scenarios.SCENARIOS:
        result = outcomes[scenario]
        steps = _steps(result)
        print(f"{scenario}: timings {result['timings']}; removed "
              f"{[dict(_removed_places(result, s)) for s in steps]}; verdicts "
              f"{[dict(verdicts(s.forecast)) for s in steps]}; snapshot -> victims marked (s) "
              f"{[round(s.elapsed, 2) for s in steps]}; windows {[s.window for s in steps]}")
    print(f"wall (s): {outcomes['wall_s']}")
    assert outcomes["wall_s"]["runs"] < 400
