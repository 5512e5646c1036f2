"""Every Helm release the program registers, rendered by Helm's own engine (helm-python-sdk) from
the chart sources in ../shared/charts: it renders, its workloads are valid Kubernetes objects,
every value the lab sets is one the chart reads, the lab's Cilium operator tolerations keep the
chart's own, and the render recorded for machines without Helm is current — each check shown
able to fail."""

from __future__ import annotations

import copy
import io
import json

import pytest

from components.cilium import CHART_OPERATOR_TOLERATIONS
from offline import chart_render, plan, scheduling
from components.capacity import HYBRID_DAEMONSET_CPU_M
from tests.conftest import run_lab
from tests.helm_engine import needs_helm, release, with_registration
from tests.kube_checks import core_problems

pytestmark = needs_helm

#: The configs whose releases are checked: between them every release and every value path the
#: lab sets (the GPU plugin, the Karpenter gate on, one operator replica).
CONFIGS = [{}, {"gpuEnabled": True, "burstScenario": "C"}, {"hybridNodeCount": 1}]
#: The inert-value check renders once per value: the configs that between them set every value
#: path (one operator replica sets the same paths as two).
INERT_CONFIGS = CONFIGS[:2]


def _ids(overrides):
    return ",".join(f"{k}={v}" for k, v in overrides.items()) or "dev"


@pytest.mark.parametrize("overrides", CONFIGS, ids=_ids)
def test_every_release_renders_from_its_chart_source_and_validates(lab, overrides):
    run = lab(**overrides)
    version = run.config["eks-hybrid-lab:kubernetesVersion"]
    releases = chart_render.registered_releases(run)
    assert {r.name for r in releases} >= {"cilium", "karpenter", "karpenter-crd", "kyverno",
                                          "eks-hybrid-nodes-gateway"}
    problems = {}
    for r in releases:
        assert r.source is not None, f"{r.label}: no chart source in CHART_SOURCES"
        for obj in chart_render.render_workloads(r):
            found = core_problems(obj, version)
            if found:
                problems[f"{r.name}: {obj['kind']}/{obj['metadata']['name']}"] = found
    assert problems == {}


def test_kubernetes_validate_catches_a_bad_rendered_object(dev_run):
    [agent] = [o for o in chart_render.render_workloads(release(dev_run, "cilium"))
               if o["kind"] == "DaemonSet"]
    broken = copy.deepcopy(agent)
    broken["spec"]["template"]["spec"]["tolerations"] = [{"operator": "Exists", "efect": "NoSchedule"}]
    assert core_problems(broken, "1.35")


def test_registered_values_arrive_as_helm_gets_them(dev_run):
    """Numbers come back from protobuf as floats; Helm is handed integers (a chart's schema
    wants an integer MTU), and secrets are unwrapped."""
    cilium = release(dev_run, "cilium")
    assert isinstance(dev_run.named("hybrid-cilium-release").inputs["values"]["MTU"], float)
    assert isinstance(cilium.values["MTU"], int)
    assert chart_render.plain_values({"a": chart_render.Secret({"b": 2.0})}) == {"a": {"b": 2}}


# --- the Cilium operator keeps the chart's tolerations -------------------------------------------

def _operator_tolerations(cilium: chart_render.Release, values: dict) -> list[dict]:
    [deployment] = [o for o in chart_render.render_workloads(cilium, values)
                    if o["metadata"]["name"] == "cilium-operator"]
    return deployment["spec"]["template"]["spec"]["tolerations"]


def test_the_lab_keeps_every_operator_toleration_the_chart_renders(dev_run):
    """Helm replaces the list: the lab's operator tolerations must repeat the chart's defaults
    (components/cilium.py CHART_OPERATOR_TOLERATIONS). Rendered without the lab's list, the
    chart gives its defaults; with it, none of them may be gone."""
    cilium = release(dev_run, "cilium")
    chart_own = _operator_tolerations(cilium, chart_render.without(cilium.values,
                                                                   ("operator", "tolerations")))
    labs = _operator_tolerations(cilium, cilium.values)
    assert [t for t in chart_own if t not in labs] == []
    # The constant is the chart's values.yaml list (the template appends agent-not-ready itself).
    assert all(t in chart_own for t in CHART_OPERATOR_TOLERATIONS)
    assert {"key": "node.kubernetes.io/not-ready", "operator": "Exists"} in labs


def test_an_operator_list_without_the_charts_defaults_is_caught(dev_run):
    cilium = release(dev_run, "cilium")
    chart_own = _operator_tolerations(cilium, chart_render.without(cilium.values,
                                                                   ("operator", "tolerations")))
    values = copy.deepcopy(cilium.values)
    values["operator"]["tolerations"] = values["operator"]["tolerations"][-1:]
    lost = [t for t in chart_own if t not in _operator_tolerations(cilium, values)]
    assert {"key": "node.kubernetes.io/not-ready", "operator": "Exists"} in lost


# --- every value the lab sets is read -------------------------------------------------------------

#: The releases each inert-value config registers, checked one test per release so that the
#: renders (Cilium's ~15 values at ~0.17 s each, Kyverno's at ~0.13 s) spread over the xdist
#: workers instead of one test rendering them all; Cilium's values are split in two halves (every
#: ``CILIUM_PARTS``-th leaf path) for the same reason. The list is checked against what the
#: program registers (test_the_inert_value_check_covers_every_registered_release).
INERT_RELEASES = {
    "dev": ["karpenter-crd", "kyverno", "karpenter", "cilium", "eks-hybrid-nodes-gateway"],
    "gpuEnabled=True,burstScenario=C": ["karpenter-crd", "kyverno", "karpenter", "cilium",
                                        "eks-hybrid-nodes-gateway", "nvidia-device-plugin"],
}
#: Parts a release's values are checked in (every part-th leaf path), by release name.
VALUE_PARTS = {"cilium": 2}
INERT_CASES = [pytest.param(overrides, name, part, id=f"{_ids(overrides)}-{name}"
                            + (f"-{part + 1}of{VALUE_PARTS[name]}" if name in VALUE_PARTS else ""))
               for overrides in INERT_CONFIGS
               for name in INERT_RELEASES[_ids(overrides)]
               for part in range(VALUE_PARTS.get(name, 1))]


@pytest.mark.parametrize("overrides", INERT_CONFIGS, ids=_ids)
def test_the_inert_value_check_covers_every_registered_release(lab, overrides):
    assert sorted(r.name for r in chart_render.registered_releases(lab(**overrides))) == \
        sorted(INERT_RELEASES[_ids(overrides)])


@pytest.mark.parametrize("overrides,name,part", INERT_CASES)
def test_every_value_the_lab_sets_changes_what_the_chart_renders(lab, overrides, name, part):
    """A value whose removal (or, when it equals the chart's default, whose change) renders
    nothing different is a key the chart does not read: a typo, a renamed key, a gate this
    chart version lacks. Only chart_render.NOT_READ's documented values may be so, and each of
    those must still be unread (else the note is stale). One release (one part of its values)
    per test."""
    r = release(lab(**overrides), name)
    parts = VALUE_PARTS.get(name, 1)
    if parts == 1:
        unread = set(chart_render.values_not_read(r))
        documented = set(chart_render.documented_not_read(r))
    else:  # values_not_read's check, on this part's leaf paths
        # Sorted: the registered values' key order may differ between the two workers' runs,
        # and each part is taken by one of them; every path must fall in exactly one part.
        paths = sorted(chart_render.leaf_paths(r.values))[part::parts]
        unread = {".".join(p) for p in paths if not chart_render.value_read(r, p)}
        documented = set(chart_render.documented_not_read(r)) & {".".join(p) for p in paths}
    assert unread - documented == set(), f"{r.label}: values the chart does not read"
    assert documented - unread == set(), f"{r.label}: documented as unread, but read"


def test_the_inert_value_check_catches_a_typo(dev_run):
    cilium = release(dev_run, "cilium")
    assert chart_render.value_read(cilium, ("vtep", "enabled"))
    # Misspelt beside the key the lab means: without the typo, the values are the lab's own.
    typo = chart_render.Release(cilium.chart, cilium.version, cilium.name, cilium.namespace,
                                {**cilium.values, "vtep": {**cilium.values["vtep"], "enabeld": True}})
    assert not chart_render.value_read(typo, ("vtep", "enabeld"))


def test_a_value_equal_to_the_charts_default_is_still_read(dev_run):
    # routingMode tunnel is Cilium's default: removing it renders the same, changing it does not.
    cilium = release(dev_run, "cilium")
    full = chart_render.render_texts(cilium)
    assert chart_render.render_texts(cilium, chart_render.without(cilium.values, ("routingMode",))) == full
    assert chart_render.value_read(cilium, ("routingMode",))


# --- the capacity model's constant is the rendered request ---------------------------------------

def test_the_burst_sizing_counts_the_daemonsets_the_charts_render_on_hybrid_nodes(dev_run):
    """components/capacity.py sizes ``burst`` at program time (no Helm) from HYBRID_DAEMONSET_CPU_M;
    the DaemonSets the model places on a hybrid node, Cilium's as Helm renders it, ask that."""
    model = scheduling.evaluate(dev_run)
    [hybrid, *_] = [n for n in model.nodes if n.role == "hybrid"]
    on_it = {p.workload.name: p.workload.request.cpu_m for p in model.result.placements
             if p.workload.kind == "DaemonSet" and p.nodes[hybrid.name]}
    assert on_it == {"kube-proxy": HYBRID_DAEMONSET_CPU_M["kube-proxy"],
                     "cilium": HYBRID_DAEMONSET_CPU_M["cilium"]}


# --- the recorded render and the fallback --------------------------------------------------------

def test_the_recorded_renders_are_current():
    """offline/recorded_renders.json is what Helm renders now for the recorded configs: rewrite
    it with `python -m offline.chart_render --write` when values or charts change."""
    assert chart_render.RECORDED.exists()
    current = chart_render.dumps(chart_render.record(run_for=run_lab))
    assert chart_render.RECORDED.read_text() == current, (
        "stale: run python -m offline.chart_render --write")


def test_without_helm_the_model_reads_the_recorded_render(dev_run, monkeypatch):
    live = scheduling.evaluate(dev_run)
    monkeypatch.setattr(chart_render, "engine_problem", lambda: "no Helm (test)")
    recorded = scheduling.evaluate(dev_run)
    assert {r.origin for r in recorded.renders} == {"recorded"}
    assert recorded.workloads == live.workloads
    assert recorded.problems == [] and recorded.unmodelled == []


def test_without_helm_or_a_recording_the_release_is_said_not_modelled(dev_run, monkeypatch):
    def unrecorded(inputs):  # the values another cluster name gives Karpenter
        inputs["values"]["settings"]["clusterName"] = "unrecorded-lab"

    run = with_registration(dev_run, "karpenter-karpenter-controller-release", unrecorded)
    monkeypatch.setattr(chart_render, "engine_problem", lambda: "no Helm (test)")
    model = scheduling.evaluate(run)
    [missing] = model.unmodelled
    assert missing.startswith("pods of release karpenter (karpenter 1.15.0) not modelled: "
                              "no Helm (test)")
    assert "karpenter" not in {w.name for w in model.workloads}
    out = io.StringIO()
    plan.render(run, out)
    text = out.getvalue()
    assert "1 NOT MODELLED" in text and f"not checked: {missing}" in text


def test_the_plan_lists_the_values_the_chart_source_does_not_read(dev_run):
    out = io.StringIO()
    plan.render(dev_run, out, details=True)
    section = out.getvalue().split("Chart values not read by the chart source here", 1)[1]
    section = section.split("\n\n", 1)[0]
    for r in chart_render.registered_releases(dev_run):
        for path, why in chart_render.documented_not_read(r).items():
            assert f"{r.name}: {path} " in section and why in section


def test_the_recorded_file_is_keyed_by_exact_values(dev_run):
    cilium = release(dev_run, "cilium")
    assert chart_render.recorded_workloads(cilium.key) is not None
    changed = chart_render.Release(cilium.chart, cilium.version, cilium.name, cilium.namespace,
                                   {**cilium.values, "MTU": 8400})
    assert chart_render.recorded_workloads(changed.key) is None
    key = json.loads(chart_render.RECORDED.read_text())["renders"][0]["key"]
    assert set(key) == {"chart", "version", "name", "namespace", "valuesSha256"}
