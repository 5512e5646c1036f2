"""Scenario B on the real Kyverno: the pod-deletion-cost "1" on the pods bound to hybrid nodes is
written by Kyverno v1.19.0's admission controller and background controller (what the lab's
chart 3.9.0 installs), out of cluster against the real control plane, each as its own
ServiceAccount with the RBAC, ConfigMap and CRDs Helm renders for the lab's chart values, and the
lab's own ClusterPolicy (tests/real_kyverno.py runs it all in a private network namespace).

Expected values come from the policy and the chart, not from our code: the policy writes "1" on a
pod whose binding targets a node labelled ``eks.amazonaws.com/compute-type: hybrid`` and nothing
on any other; the chart's default resource filters drop ``[Pod/binding,*,*]`` and
``[Binding,*,*]``, and the controllers' ``get nodes`` comes only from the lab's
``extraResources``. With either setting taken away (as ``helm upgrade`` with those values would
leave the cluster) no pod gets a cost, yet every pod runs and the policy stays Ready — scenario B
silently degraded to A, the failure docs/scale-in.md records — and ``python -m rehearse verify
burst`` against the same server must say B is not in place and name the setting.

One run of the scenario serves every test here (under xdist one worker runs it and leaves the
result for the other, tests/worker_share.py). Run alone: ``pytest tests/test_real_kyverno.py -q
-p no:cacheprovider -n0``.
"""

from __future__ import annotations

import os
import shutil

import pytest

from tests import real_kyverno, worker_share
from tests.conftest import run_lab
from tests.helm_engine import needs_helm
from tests.real_cluster import engines_folder

pytestmark = needs_helm

DEGRADED = {
    # case: the verify burst check that must name the problem
    "no-binding-exclusion": "scenario B: Kyverno sees pod bindings (resource filters)",
    "admission-no-nodes": "scenario B: Kyverno's admission controller may get nodes",
    "background-no-nodes": "scenario B: Kyverno's background controller may get nodes",
}
#: The chart value each case takes away (components/kyverno.py), which the fix must name.
FIX_NAMES = {"no-binding-exclusion": "config.resourceFiltersExclude",
             "admission-no-nodes": "admissionController.rbac.clusterRole.extraResources",
             "background-no-nodes": "backgroundController.rbac.clusterRole.extraResources"}
#: The checks verify burst makes of Kyverno's part of scenario B.
KYVERNO_CHECKS = (*DEGRADED.values(), "scenario B: Kyverno's background controller may update pods",
                  "scenario B: ClusterPolicy hybrid-pod-deletion-cost Ready")
IN_PLACE = "scenario B: in place"
HYBRID_COST = "scenario B: pods on hybrid nodes carry pod-deletion-cost \"1\""


def _skip_reason() -> str:
    if shutil.which("unshare") is None or shutil.which("ip") is None or os.geteuid() != 0:
        return ("Kyverno binds every interface unless told otherwise, so this tier runs it in a "
                "private network namespace: it needs root, unshare and ip")
    missing = [tool for tool in ("go", "openssl", "ss") if shutil.which(tool) is None]
    if missing:
        return f"the real-engine tier needs {' and '.join(missing)} on PATH"
    return ""


@pytest.fixture(scope="module")
def outcome(tmp_path_factory) -> dict:
    why = _skip_reason()
    if why:
        pytest.skip(why)
    folder, why = engines_folder("kyverno")
    if folder is None:
        pytest.skip(f"the Kyverno tier needs the engines: {why}")

    def scenario() -> dict:
        the_plan = real_kyverno.plan(run_lab(burstScenario="B"), tuple(DEGRADED))
        return real_kyverno.run_in_netns(folder, tmp_path_factory.mktemp("kyverno"), the_plan)

    shared = worker_share.directory("real-kyverno")
    # The other worker waits for the whole run (~90-120 s here) instead of starting its own.
    found = scenario() if shared is None else worker_share.once(shared, "scenario", scenario,
                                                                 wait_s=400)
    assert "error" not in found, found["error"] + "\n" + "\n".join(found.get("log", []))
    return found


def _checks(case: dict) -> dict[str, dict]:
    report = case["verify"]["report"]
    assert report is not None, case["verify"]["stderr"]
    return {c["name"]: c for c in report["checks"]}


# --- what Kyverno writes -------------------------------------------------------------------------

def test_lab_settings_kyverno_writes_one_on_hybrid_pods_only(outcome):
    case = outcome["cases"]["lab"]
    pods = case["pods"]
    assert case["settled"], pods
    # The placement must give both kinds of pod, or the assertion below proves nothing.
    assert {p["node"] for p in pods if p["hybrid"]} == set(outcome["hybrid_nodes"]), pods
    assert any(not p["hybrid"] for p in pods), pods
    assert [p for p in pods if p["hybrid"] and p["cost"] != "1"] == []
    assert [p for p in pods if not p["hybrid"] and p["cost"] is not None] == []
    # The delay from the binding seen to the cost seen (0.1 s polls): well inside the window
    # the degraded cases wait, so their "no cost" is not a cost that came late.
    delays = [p["delay_s"] for p in pods if p["hybrid"]]
    assert max(delays) < case["window_s"] / 2, delays


@pytest.mark.parametrize("case", DEGRADED)
def test_a_setting_taken_away_degrades_b_to_a_silently(outcome, case):
    found = outcome["cases"][case]
    pods = found["pods"]
    assert found["settled"], pods
    assert any(p["hybrid"] for p in pods), pods
    # No cost on any pod, while every pod runs and is Ready ...
    assert [p for p in pods if p["cost"] is not None] == []
    assert all(p["phase"] == "Running" and p["ready"] for p in pods), pods
    # ... and the policy still says Ready: nothing on the cluster's objects tells.
    ready = [c for c in found["policy_status"].get("conditions", []) if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True", found["policy_status"]


def test_the_controllers_log_the_denied_node_lookup(outcome):
    """Where ``get nodes`` is missing, the controller that lacks it is the one that logs the
    403 (the admission controller evaluates the precondition before it queues the patch; the
    background controller evaluates it again before patching); with the lab's RBAC none does."""
    denied = {case: outcome["cases"][case]["denied_in_log"] for case in ("lab", *DEGRADED)}
    assert denied["lab"] == {"admission": 0, "background": 0}, denied
    assert denied["admission-no-nodes"]["admission"] > 0, denied
    assert denied["admission-no-nodes"]["background"] == 0, denied
    assert denied["background-no-nodes"]["background"] > 0, denied
    assert denied["no-binding-exclusion"] == {"admission": 0, "background": 0}, denied


def test_a_kyverno_outage_does_not_block_binding(outcome):
    """The policy's ``webhookConfiguration.failurePolicy: Ignore`` (components/kyverno.py): the
    webhook Kyverno registers for pod bindings fails open, so with the admission controller
    killed (its webhooks left behind, pointing at nothing) every pod is still bound and runs —
    without a cost."""
    binding = [h for h in outcome["webhooks"] if "pods/binding" in h["resources"]]
    assert binding, outcome["webhooks"]
    assert {h["failurePolicy"] for h in binding} == {"Ignore"}, binding
    assert all(h["url"].startswith("https://127.0.0.1:") for h in binding), binding
    down = outcome["cases"]["admission-down"]
    assert [h for h in down["webhooks"] if "pods/binding" in h["resources"]] == binding
    assert down["settled"], down["pods"]
    assert all(p["phase"] == "Running" and p["node"] for p in down["pods"]), down["pods"]
    assert [p for p in down["pods"] if p["cost"] is not None] == []


# --- what verify burst says of it ----------------------------------------------------------------

def test_verify_burst_reports_b_in_place_with_the_lab_settings(outcome):
    checks = _checks(outcome["cases"]["lab"])
    assert checks[IN_PLACE]["status"] == "PASS", checks[IN_PLACE]
    for name in (*KYVERNO_CHECKS, HYBRID_COST):
        assert checks[name]["status"] == "PASS", checks[name]


@pytest.mark.parametrize("case", DEGRADED)
def test_verify_burst_names_the_setting_taken_away(outcome, case):
    checks = _checks(outcome["cases"][case])
    assert outcome["cases"][case]["verify"]["exit"] != 0
    assert checks[IN_PLACE]["status"] == "FAIL"
    failing = {n for n in KYVERNO_CHECKS if checks[n]["status"] == "FAIL"}
    assert failing == {DEGRADED[case]}, {n: checks[n]["seen"] for n in KYVERNO_CHECKS}
    # Its fix names the chart value that was taken away.
    assert FIX_NAMES[case] in checks[DEGRADED[case]]["fix"], checks[DEGRADED[case]]
    # The in-place check's reason carries the named check and the missing costs.
    assert DEGRADED[case].split(": ", 1)[1] in checks[IN_PLACE]["seen"]
    assert checks[HYBRID_COST]["status"] == "FAIL", checks[HYBRID_COST]


# --- the run itself ------------------------------------------------------------------------------

def test_kyverno_listened_on_loopback_only(outcome):
    listeners = [line.split() for line in outcome["listeners"]]
    kyverno = [f for f in listeners if "kyverno" in " ".join(f)]
    assert len(kyverno) >= 4, outcome["listeners"]  # webhook, metrics x2, and the background's
    assert all(f[3].startswith("127.0.0.1:") for f in listeners), outcome["listeners"]


def test_timings(outcome):
    """Kyverno's start-up and the whole run, in the test's output (-rP) and bounded loosely."""
    timings = outcome["timings"]
    delays = sorted(p["delay_s"] for p in outcome["cases"]["lab"]["pods"] if p["delay_s"] is not None)
    print(f"timings {timings}; binding -> cost (s, 0.1 s polls): {delays}; per case (s): "
          f"{ {case: found['seconds'] for case, found in outcome['cases'].items()} }")
    assert timings["admission_ready_s"] < 120
    assert timings["total_s"] < 300
