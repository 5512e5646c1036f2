"""The scheduling and capacity model (stacks/scheduling.py): every pod the lab causes lands where
it is meant to, every node can become Ready, nothing but burst lands on burst nodes, and demo 2's
arithmetic holds — each check proven to fail on the defect it exists for."""

from __future__ import annotations

import copy
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from components.chart_defaults import DEFAULTS, SOURCES, helm_merge
from stacks import scheduling
from stacks.capacity import (allocatable, burst_cpu_request_m, hybrid_allocatable,
                             kube_reserved_cpu_m)
from stacks.offline import ProgramRun

CHARTS_DIR = Path(__file__).resolve().parents[2] / "shared" / "charts"
HYBRID_TOLERATION = {"key": "eks.amazonaws.com/compute-type", "operator": "Equal",
                     "value": "hybrid", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}

#: Where each pod is meant to run (DESIGN.md, REFERENCE §1-§5, the demos): node roles.
ALL = {"system", "gateway", "hybrid", "gpu", "burst"}
CLOUD = {"system", "gateway", "burst"}
MEANT_FOR = {
    "aws-node": CLOUD,                       # the VPC CNI serves cloud nodes (mixed mode)
    "kube-proxy": ALL,
    "eks-pod-identity-agent": CLOUD,
    "cilium-agent": {"hybrid", "gpu"},       # the CNI of every hybrid node
    "nvidia-device-plugin": {"gpu"},
    "coredns": {"system"},
    "cilium-operator": {"hybrid"},
    "karpenter": {"system"},                 # never on the nodes it manages, nor on hybrid
    "kyverno-admission": {"system"},         # kept on cloud nodes (REFERENCE §5)
    "kyverno-background": {"system"},
    "kyverno-cleanup": {"system"},
    "kyverno-reports": {"system"},
    "hybrid-nodes-gateway": {"gateway"},
    "echo-cloud": {"system"},
    "prober-cloud": {"system"},
    "vllm-client": {"system"},
    "echo-hybrid": {"hybrid"},
    "prober-hybrid": {"hybrid"},
    "vllm": {"gpu"},
    "burst": {"hybrid", "burst"},            # hybrid first, the overflow to Karpenter
}

CONFIGS = [
    {},
    {"gpuEnabled": True},
    {"burstScenario": "B"},
    {"burstScenario": "C", "gpuEnabled": True},
    {"hybridNodeCount": 3},
    {"hybridNodeCount": 1, "gpuEnabled": True},
    {"upToLayer": "hybrid"},
    {"upToLayer": "gateway"},
    {"upToLayer": "karpenter"},
]


def with_registration(run: ProgramRun, name: str, change) -> ProgramRun:
    """A copy of ``run`` whose registration ``name`` has its inputs changed by ``change``."""
    regs = []
    for reg in run.registrations:
        if reg.name == name:
            inputs = copy.deepcopy(reg.inputs)
            change(inputs)
            reg = replace(reg, inputs=inputs)
        regs.append(reg)
    return ProgramRun(stack=run.stack, config=run.config, registrations=regs,
                      outputs=run.outputs, warnings=run.warnings)


# --- the chart defaults and Helm's merge --------------------------------------------------------

def _assert_subset(ours, theirs, path):
    if isinstance(ours, dict):
        assert isinstance(theirs, dict), path
        for key, value in ours.items():
            assert key in theirs, f"{path}.{key} is not in the chart's values.yaml"
            _assert_subset(value, theirs[key], f"{path}.{key}")
    else:
        assert ours == theirs, f"{path}: {ours!r} here, {theirs!r} in the chart"


@pytest.mark.parametrize("chart", sorted(DEFAULTS))
def test_chart_defaults_are_the_charts_own(chart):
    version = SOURCES[chart][0]
    values_file = CHARTS_DIR / chart / version / "values.yaml"
    if not values_file.exists():
        pytest.skip(f"{values_file} is absent (../shared/charts is not on this machine)")
    theirs = yaml.safe_load(values_file.read_text())
    _assert_subset(DEFAULTS[chart], theirs, chart)


def test_helm_merges_maps_and_replaces_lists():
    defaults = {"tolerations": [{"operator": "Exists"}],
                "affinity": {"podAntiAffinity": {"x": 1}},
                "gone": {"a": 1}, "kept": 1}
    merged = helm_merge(defaults, {"tolerations": [{"key": "k", "operator": "Exists"}],
                                   "affinity": {"nodeAffinity": {"y": 2}}, "gone": None})
    assert merged == {"tolerations": [{"key": "k", "operator": "Exists"}],
                      "affinity": {"podAntiAffinity": {"x": 1}, "nodeAffinity": {"y": 2}},
                      "kept": 1}
    assert defaults["tolerations"] == [{"operator": "Exists"}], "the defaults are not modified"


def test_cilium_values_validate_against_the_charts_schema(dev_run):
    schema_file = CHARTS_DIR / "cilium" / "1.18.8" / "values.schema.json"
    if not schema_file.exists():
        pytest.skip(f"{schema_file} is absent (../shared/charts is not on this machine)")
    import json

    import jsonschema

    from tests.kube_checks import _integral
    values = _integral(dev_run.named("hybrid-cilium-release").inputs["values"])
    merged = helm_merge(yaml.safe_load((schema_file.parent / "values.yaml").read_text()), values)
    jsonschema.validate(merged, json.loads(schema_file.read_text()))


# --- capacity arithmetic -------------------------------------------------------------------------

def test_kube_reserved_and_allocatable_follow_the_eks_formula():
    # REFERENCE §9: 6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% beyond.
    assert kube_reserved_cpu_m(1) == 60
    assert kube_reserved_cpu_m(2) == 70
    assert kube_reserved_cpu_m(4) == 80
    assert kube_reserved_cpu_m(8) == 90
    assert hybrid_allocatable("m5.xlarge").cpu_m == 3920
    assert allocatable("m6i.large", 29).cpu_m == 1930


def test_the_seeds_930m_is_the_arithmetic_for_nodes_running_nothing_else():
    # (3920m - kube-proxy 100m - Cilium 100m) / 4 = 930m: the seed's number.
    assert burst_cpu_request_m("m5.xlarge", co_tenant_cpu_m=0) == 930
    # Demo 1's two echo pods (50m) and prober (10m) on the same nodes leave 900m.
    assert burst_cpu_request_m("m5.xlarge", co_tenant_cpu_m=110) == 900


@pytest.mark.parametrize("host", ["m5.large", "m5.xlarge", "m5.2xlarge", "m6i.4xlarge"])
def test_the_burst_request_gives_four_per_node_whatever_the_host_size(host):
    request = burst_cpu_request_m(host, co_tenant_cpu_m=110)
    free = hybrid_allocatable(host).cpu_m - 200
    assert 4 * request <= free - 110 and 5 * request > free


# --- the model over the lab ---------------------------------------------------------------------

@pytest.mark.parametrize("overrides", CONFIGS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "dev")
def test_every_pod_lands_where_it_is_meant_to(lab, overrides):
    model = scheduling.evaluate(lab(**overrides))
    assert model.problems == []
    roles_present = {n.role for n in model.nodes}
    for placement in model.result.placements:
        name = placement.workload.name
        meant = MEANT_FOR[name] & roles_present
        assert model.result.roles_of(name) <= meant, name
        if placement.workload.kind == "DaemonSet":
            # On every node of the roles it is meant for, and nowhere else.
            expected = {n.name for n in model.nodes if n.role in meant}
            assert {n for n, c in placement.nodes.items() if c} == expected, name
        else:
            assert placement.total == placement.workload.replicas, name


def test_the_charts_anti_affinity_survives_the_merge(dev_run):
    # `affinity` is a map: Helm merges the node affinity the lab gives into the chart's pod
    # anti-affinity, so the operator still runs one replica per node.
    model = scheduling.evaluate(dev_run)
    operator = next(w for w in model.workloads if w.name == "cilium-operator")
    assert operator.spreads_by_host and "nodeAffinity" in operator.affinity
    assert set(model.result.of("cilium-operator").nodes.values()) == {1}


def test_demo_two_has_its_shape_eight_on_hybrid_seven_bursting(dev_run):
    model = scheduling.evaluate(dev_run)
    assert model.burst.fewest == model.burst.most == 8
    burst = model.result.of("burst")
    by_name = {n.name: n for n in model.nodes}
    on_hybrid = sum(c for n, c in burst.nodes.items() if by_name[n].role == "hybrid")
    assert (on_hybrid, burst.karpenter) == (8, 7)
    # The request the Deployment registered is the one the model checked.
    spec = dev_run.named("demo-burst").inputs["spec"]
    assert spec["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == \
        f"{model.burst.request_m}m"


def test_the_karpenter_burst_within_its_cpu_cap(dev_run):
    cfg = dev_run.lab_config
    model = scheduling.evaluate(dev_run)
    burst = model.result.of("burst").workload
    # The seven overflow pods fit on one of the pool's 2xlarge nodes, well under the cap.
    biggest = max((n for n in model.nodes if n.elastic), key=lambda n: n.allocatable.cpu_m)
    daemons = sum(p.workload.request.cpu_m for p in model.result.placements
                  if p.workload.kind == "DaemonSet" and p.nodes[biggest.name])
    assert 7 * burst.request.cpu_m <= biggest.allocatable.cpu_m - daemons
    assert biggest.allocatable.cpu_m // 1000 + 1 <= cfg.burst_cpu_limit


# --- each check fails on its defect -------------------------------------------------------------

def test_bootstrap_check_catches_cilium_values_that_replace_the_tolerations(dev_run):
    """Defect 1: the agent's and operator's tolerations replaced by the hybrid and GPU taints."""
    def old_values(inputs):
        inputs["values"]["tolerations"] = [HYBRID_TOLERATION, GPU_TOLERATION]
        inputs["values"]["operator"]["tolerations"] = [HYBRID_TOLERATION, GPU_TOLERATION]

    broken = scheduling.evaluate(with_registration(dev_run, "hybrid-cilium-release", old_values))
    assert any("cilium-agent" in p and "node.kubernetes.io/not-ready" in p for p in broken.bootstrap)
    assert any("cilium-operator" in p and "not-ready" in p for p in broken.bootstrap)
    assert all("hybrid-hosts-node" in p for p in broken.bootstrap)
    # Once Ready the same pods would schedule: only the bootstrap check sees it.
    assert broken.unschedulable == []


def test_capacity_check_catches_the_seeds_request_next_to_demo_one(dev_run):
    """Defect 6: 930m with demo 1's pods on the same hybrid nodes."""
    def seeds_request(inputs):
        inputs["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "930m"

    broken = scheduling.evaluate(with_registration(dev_run, "demo-burst", seeds_request))
    assert broken.burst.fewest < 8
    assert (broken.burst.fewest, broken.burst.most) == (6, 7)


def test_intruder_check_catches_an_untainted_burst_pool(dev_run):
    """Defect 10: a NodePool without a taint lets any cloud pod keep a burst node alive."""
    def untainted(inputs):
        inputs["spec"]["template"]["spec"].pop("taints")

    broken = scheduling.evaluate(with_registration(dev_run, "karpenter-node-pool", untainted))
    assert any(p.startswith("echo-cloud") for p in broken.intruders)
    assert any(p.startswith("coredns") for p in broken.intruders)


def test_unschedulable_check_catches_the_gateway_in_auto_mode(dev_run):
    def auto_mode(inputs):
        inputs["values"]["autoMode"]["enabled"] = True

    broken = scheduling.evaluate(with_registration(dev_run, "gateway-gateway-release", auto_mode))
    assert any(p.startswith("hybrid-nodes-gateway") and "compute-type=auto" in p
               for p in broken.unschedulable)


# --- the rules themselves -----------------------------------------------------------------------

def test_tolerations_match_the_way_kubernetes_matches_them():
    taint = scheduling.Taint("eks.amazonaws.com/compute-type", "hybrid", "NoSchedule")
    assert scheduling.tolerates([{"operator": "Exists"}], taint)
    assert scheduling.tolerates([HYBRID_TOLERATION], taint)
    assert scheduling.tolerates([{"key": taint.key, "operator": "Exists"}], taint)
    assert not scheduling.tolerates([{**HYBRID_TOLERATION, "value": "cloud"}], taint)
    assert not scheduling.tolerates([{**HYBRID_TOLERATION, "effect": "NoExecute"}], taint)
    assert not scheduling.tolerates([{"key": "other", "operator": "Exists"}], taint)


def test_the_daemonset_controller_does_not_tolerate_not_ready_noschedule():
    ds = scheduling.Workload("x", "DaemonSet", 1, scheduling.Request(), {}, {}, (), True, "test")
    not_ready = scheduling.NOT_READY[0]
    assert not_ready.effect == "NoSchedule"
    assert not scheduling.tolerates(scheduling.effective_tolerations(ds), not_ready)
    assert scheduling.tolerates(scheduling.effective_tolerations(ds), scheduling.NOT_READY[1])


def test_notin_admits_nodes_without_the_label():
    labels = {"kubernetes.io/os": "linux"}
    assert scheduling._expression_holds(labels, {"key": "eks.amazonaws.com/compute-type",
                                                 "operator": "NotIn", "values": ["hybrid"]})
    assert not scheduling._expression_holds(labels, {"key": "eks.amazonaws.com/compute-type",
                                                     "operator": "In", "values": ["hybrid"]})


def test_a_pods_request_is_the_larger_of_its_containers_and_init_containers():
    request = scheduling.pod_request([{"resources": {}}],
                                     [{"resources": {"requests": {"cpu": "100m", "memory": "10Mi"}}}])
    assert request == scheduling.Request(100, 10, 0)
    assert scheduling.pod_request([{"resources": {"requests": {"cpu": "1"}}}]).cpu_m == 1000


def test_the_plan_prints_where_each_workload_runs_and_the_hybrid_capacity(dev_run):
    import io
    out = io.StringIO()
    scheduling.render(scheduling.evaluate(dev_run), out)
    text = out.getvalue()
    assert "burst" in text and "8 on hybrid, 7 on Karpenter burst nodes" in text
    assert "hybrid capacity for burst (900m each)" in text and ": 8 fit" in text
    assert "problems: none" in text


def test_a_node_size_the_model_does_not_know_is_placed_and_said_unchecked(lab):
    model = scheduling.evaluate(lab(systemNodeInstanceType="t3.large"))
    assert model.problems == []
    assert model.unchecked == [
        "capacity of t3.large nodes (system): size unknown to stacks/capacity.py"]
    assert scheduling.evaluate(lab()).unchecked == []


def test_burst_nodes_bootstrap_with_karpenters_own_taint(dev_run):
    burst = next(n for n in scheduling.lab_nodes(dev_run) if n.elastic)
    assert scheduling.KARPENTER_UNREGISTERED in burst.bootstrap_taints()
    aws_node = scheduling.EKS_ADDONS["vpc-cni"]
    assert scheduling.placement_problem(aws_node, burst, bootstrapping=True) is None
