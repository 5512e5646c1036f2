"""The scheduling and capacity model (offline/scheduling.py): every pod the lab causes lands where
it is meant to, every node can become Ready, nothing but burst lands on burst nodes, and demo 2's
arithmetic holds — each check proven to fail on the defect it exists for."""

from __future__ import annotations

from dataclasses import replace

import pytest

from offline import chart_render, karpenter_affinity, plan, scheduling
from components.capacity import (allocatable, burst_cpu_request_m, hybrid_allocatable,
                             kube_reserved_cpu_m)
from tests.helm_engine import needs_helm, release, with_registration

HYBRID_TOLERATION = {"key": "eks.amazonaws.com/compute-type", "operator": "Equal",
                     "value": "hybrid", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}

#: Where each pod is meant to run (docs/networking.md, docs/gateway.md,
#: docs/karpenter.md, docs/scale-in.md, the demos): node roles.
ALL = {"system", "gateway", "hybrid", "gpu", "burst"}
CLOUD = {"system", "gateway", "burst"}
MEANT_FOR = {
    "aws-node": CLOUD,                       # the VPC CNI serves cloud nodes (mixed mode)
    "kube-proxy": ALL,
    "eks-pod-identity-agent": CLOUD,
    "cilium": {"hybrid", "gpu"},             # the agent: the CNI of every hybrid node
    "nvidia-device-plugin": {"gpu"},
    # The chart's MPS daemon wants nodes labelled nvidia.com/mps.capable=true, which only a
    # device plugin configured for MPS sharing labels; the lab shares no GPU that way.
    "nvidia-device-plugin-mps-control-daemon": set(),
    "coredns": {"system"},
    "cilium-operator": {"hybrid"},
    "karpenter": {"system"},                 # never on the nodes it manages, nor on hybrid
    "kyverno-admission-controller": {"system"},   # kept on cloud nodes (docs/scale-in.md)
    "kyverno-background-controller": {"system"},
    "kyverno-cleanup-controller": {"system"},
    "kyverno-reports-controller": {"system"},
    "eks-hybrid-nodes-gateway": {"gateway"},
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
    # System nodes with room for burst pods: burst's required affinity keeps it off them.
    {"systemNodeInstanceType": "m6i.xlarge"},
]


# --- the charts' own pods, as Helm renders them --------------------------------------------------

@needs_helm
def test_the_models_chart_pods_are_helms_render_of_the_registered_values(dev_run):
    """The scheduling model reads each chart's pods from Helm's render (the chart's defaults,
    the registered values, the templates' own additions), not from copied defaults."""
    model = scheduling.evaluate(dev_run)
    assert {r.origin for r in model.renders} == {"helm"}
    operator = next(w for w in model.workloads if w.name == "cilium-operator")
    rendered = chart_render.render_workloads(release(dev_run, "cilium"))
    [deployment] = [o for o in rendered if o["metadata"]["name"] == "cilium-operator"]
    pod = deployment["spec"]["template"]["spec"]
    assert list(operator.tolerations) == pod["tolerations"]
    assert operator.replicas == deployment["spec"]["replicas"]
    # The values say 2 replicas and the hybrid node affinity; the chart adds its anti-affinity.
    values = release(dev_run, "cilium").values["operator"]
    assert operator.replicas == values["replicas"]
    assert operator.affinity["nodeAffinity"] == values["affinity"]["nodeAffinity"]


@needs_helm
def test_helm_checks_the_cilium_values_against_the_charts_schema(dev_run):
    """Helm validates values against the chart's values.schema.json as it renders: the lab's
    values pass, and a value of the wrong type is refused."""
    cilium = release(dev_run, "cilium")
    assert (chart_render.charts_dir() / "cilium" / "1.18.8" / "values.schema.json").exists()
    assert chart_render.render_texts(cilium)
    with pytest.raises(chart_render.RenderError, match="MTU"):
        chart_render.render_texts(cilium, {**cilium.values, "MTU": "8450 bytes"})


@needs_helm
def test_values_helm_refuses_are_a_problem_of_the_model_not_a_crash(dev_run):
    """The plan reports a release Helm would not install (its chart's schema refuses a value)
    instead of failing with a traceback."""
    cilium = release(dev_run, "cilium")
    bad = replace(cilium, values={**cilium.values, "MTU": "8450 bytes"})
    rendered = chart_render.release_workloads(bad)
    assert rendered.refused and "MTU" in rendered.refused and not rendered.workloads
    model = scheduling.evaluate(dev_run, [rendered if r.release == cilium else r
                                          for r in scheduling.release_renders(dev_run)])
    assert any("Helm refuses the values of release cilium" in p for p in model.problems)


# --- capacity arithmetic -------------------------------------------------------------------------

def test_kube_reserved_and_allocatable_follow_the_eks_formula():
    # docs/capacity.md#kube-reserved: 6% of the first core, 1% of the second, 0.5% of cores 3-4, 0.25% beyond.
    assert kube_reserved_cpu_m(1) == 60
    assert kube_reserved_cpu_m(2) == 70
    assert kube_reserved_cpu_m(4) == 80
    assert kube_reserved_cpu_m(8) == 90
    assert hybrid_allocatable("m5.xlarge").cpu_m == 3920
    assert allocatable("m6i.large", 29).cpu_m == 1930


def test_the_seeds_930m_is_the_arithmetic_for_nodes_running_nothing_else():
    # (3920m - kube-proxy 100m - Cilium 100m) / 4 = 930m: the demo guide's number.
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
@needs_helm
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


@needs_helm
def test_the_charts_anti_affinity_survives_the_merge(dev_run):
    # `affinity` is a map: Helm merges the node affinity the lab gives into the chart's pod
    # anti-affinity, so the operator still runs one replica per node.
    model = scheduling.evaluate(dev_run)
    operator = next(w for w in model.workloads if w.name == "cilium-operator")
    assert operator.spreads_by_host and "nodeAffinity" in operator.affinity
    assert set(model.result.of("cilium-operator").nodes.values()) == {1}


@needs_helm
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


@needs_helm
def test_burst_stays_off_system_and_gateway_nodes_that_have_room(lab):
    """Demo 2 is "hybrid first, then Karpenter's burst nodes": with system nodes that could
    hold burst pods (m6i.xlarge, about 2.4 cores free each), the required affinity still keeps
    every burst pod off them (and off the gateway nodes): 8 on hybrid, 7 for Karpenter."""
    model = scheduling.evaluate(lab(systemNodeInstanceType="m6i.xlarge"))
    burst = model.result.of("burst")
    roles = {n.name: n.role for n in model.nodes}
    by_role = {role: sum(c for n, c in burst.nodes.items() if roles[n] == role)
               for role in ("hybrid", "system", "gateway")}
    assert (by_role, burst.karpenter, burst.pending) == (
        {"hybrid": 8, "system": 0, "gateway": 0}, 7, 0)
    system = next(n for n in model.nodes if n.role == "system")
    assert burst.workload.request.fits(system.allocatable - model.result.used[system.name])
    for node in model.nodes:
        problem = scheduling.placement_problem(burst.workload, node)
        if node.role in ("system", "gateway"):
            assert problem == "required node affinity", node.name
        elif node.role in ("hybrid", "burst"):
            assert problem is None, node.name


def test_karpenter_tries_bursts_required_terms_one_at_a_time_in_order():
    """offline/karpenter_affinity.py, after Karpenter v1.15.0's newPodRequirements and Relax:
    the first term with the heaviest preference, the next term with it, then the last term
    alone."""
    from components import demos

    hybrid = [demos.ON_HYBRID]
    pool = [{"key": "karpenter.sh/nodepool", "operator": "In", "values": ["cloud-burst"]}]
    assert karpenter_affinity.requirement_steps(demos.burst_affinity("cloud-burst")) == [
        hybrid + hybrid, pool + hybrid, pool]
    # No required terms: the preferences, heaviest first, then nothing.
    light = {"matchExpressions": [{"key": "a", "operator": "Exists"}]}
    heavy = {"matchExpressions": [{"key": "b", "operator": "Exists"}]}
    assert karpenter_affinity.requirement_steps({"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1, "preference": light}, {"weight": 9, "preference": heavy}]}}) == [
        heavy["matchExpressions"], light["matchExpressions"], []]
    assert karpenter_affinity.requirement_steps({"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}}) \
        is None


@needs_helm
def test_the_model_catches_bursts_pool_term_put_first(dev_run):
    """Planted: burst's terms reversed, [pool, hybrid]. The kube-scheduler ORs them (the
    overflow could still run on a pool node), but Karpenter first asks for the pool and the
    hybrid preference at once, which no node has, drops the pool's term, and never tries it
    again: no node is launched and the 7 stay Pending."""
    def reversed_terms(inputs):
        required = inputs["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]
        required["nodeSelectorTerms"].reverse()

    model = scheduling.evaluate(with_registration(dev_run, "demo-burst", reversed_terms))
    burst = model.result.of("burst")
    assert (burst.karpenter, burst.pending) == (0, 7)
    assert "never tries this pool's term" in burst.reasons["burst"]
    pool_node = next(n for n in model.nodes if n.elastic)
    assert scheduling.placement_problem(burst.workload, pool_node) is None
    assert any(u.startswith("burst (lab): 7 of 15") for u in model.unschedulable)


@needs_helm
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

@needs_helm
def test_bootstrap_check_catches_cilium_values_that_replace_the_tolerations(dev_run):
    """Defect 1: the agent's and operator's tolerations replaced by the hybrid and GPU taints."""
    def old_values(inputs):
        inputs["values"]["tolerations"] = [HYBRID_TOLERATION, GPU_TOLERATION]
        inputs["values"]["operator"]["tolerations"] = [HYBRID_TOLERATION, GPU_TOLERATION]

    broken = scheduling.evaluate(with_registration(dev_run, "hybrid-cilium-release", old_values))
    assert any(": cilium (" in p and "node.kubernetes.io/not-ready" in p for p in broken.bootstrap)
    assert any("cilium-operator" in p and "not-ready" in p for p in broken.bootstrap)
    assert all("hybrid-hosts-node" in p for p in broken.bootstrap)
    # Once Ready the same pods would schedule: only the bootstrap check sees it.
    assert broken.unschedulable == []


@needs_helm
def test_capacity_check_catches_the_seeds_request_next_to_demo_one(dev_run):
    """Defect 6: 930m with demo 1's pods on the same hybrid nodes."""
    def seeds_request(inputs):
        inputs["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "930m"

    broken = scheduling.evaluate(with_registration(dev_run, "demo-burst", seeds_request))
    assert broken.burst.fewest < 8
    assert (broken.burst.fewest, broken.burst.most) == (6, 7)


@needs_helm
def test_intruder_check_catches_an_untainted_burst_pool(dev_run):
    """Defect 10: a NodePool without a taint lets any cloud pod keep a burst node alive."""
    def untainted(inputs):
        inputs["spec"]["template"]["spec"].pop("taints")

    broken = scheduling.evaluate(with_registration(dev_run, "karpenter-node-pool", untainted))
    assert any(p.startswith("echo-cloud") for p in broken.intruders)
    assert any(p.startswith("coredns") for p in broken.intruders)


@needs_helm
def test_unschedulable_check_catches_the_gateway_in_auto_mode(dev_run):
    def auto_mode(inputs):
        inputs["values"]["autoMode"]["enabled"] = True

    broken = scheduling.evaluate(with_registration(dev_run, "gateway-gateway-release", auto_mode))
    assert any(p.startswith("eks-hybrid-nodes-gateway") and "compute-type=auto" in p
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


def _affinity_node(name: str, **labels: str) -> scheduling.Node:
    return scheduling.Node(name, "system", "m6i.large", {scheduling.HOSTNAME: name, **labels},
                           (), scheduling.Request(1000, 1000))


def _required(*terms: dict) -> scheduling.Workload:
    return scheduling.Workload("w", "Deployment", 1, scheduling.Request(), {}, {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}},
        (), False, "test")


def test_required_node_affinity_terms_are_ored_and_an_empty_term_selects_nothing():
    """k8s.io/component-helpers scheduling/corev1/nodeaffinity: a node passes when any term
    selects it; a term's expressions are ANDed; a term with no expressions and no fields
    selects no node; matchFields reads metadata.name."""
    hybrid = _affinity_node("h", **{"eks.amazonaws.com/compute-type": "hybrid"})
    pooled = _affinity_node("p", **{"karpenter.sh/nodepool": "cloud-burst"})
    system = _affinity_node("s", role="system")
    on_hybrid = {"matchExpressions": [{"key": "eks.amazonaws.com/compute-type",
                                       "operator": "In", "values": ["hybrid"]}]}
    on_pool = {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "In",
                                     "values": ["cloud-burst"]}]}
    either = _required(on_hybrid, on_pool)
    assert [scheduling.placement_problem(either, n) for n in (hybrid, pooled, system)] == \
        [None, None, "required node affinity"]
    both = _required({"matchExpressions": on_hybrid["matchExpressions"] + on_pool["matchExpressions"]})
    assert scheduling.placement_problem(both, hybrid) == "required node affinity"
    # An empty term ORed with another adds no node; alone, it admits none.
    assert scheduling.placement_problem(_required(on_hybrid, {}), system) == "required node affinity"
    assert scheduling.placement_problem(_required({"matchExpressions": []}), system) == \
        "required node affinity"
    by_name = _required({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["s"]}]})
    assert [scheduling.placement_problem(by_name, n) for n in (hybrid, system)] == \
        ["required node affinity", None]


def test_an_empty_preferred_term_scores_nothing():
    node = _affinity_node("n", role="system")
    w = scheduling.Workload("w", "Deployment", 1, scheduling.Request(), {}, {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {}},
            {"weight": 7, "preference": {"matchExpressions": [
                {"key": "role", "operator": "In", "values": ["system"]}]}}]}}, (), False, "test")
    assert scheduling._preference(w, node) == 7


def test_a_pods_request_is_the_larger_of_its_containers_and_init_containers():
    request = scheduling.pod_request([{"resources": {}}],
                                     [{"resources": {"requests": {"cpu": "100m", "memory": "10Mi"}}}])
    assert request == scheduling.Request(100, 10, 0)
    assert scheduling.pod_request([{"resources": {"requests": {"cpu": "1"}}}]).cpu_m == 1000


@needs_helm
def test_the_plan_prints_where_each_workload_runs_and_the_hybrid_capacity(dev_run):
    import io
    out = io.StringIO()
    plan.render_scheduling(scheduling.evaluate(dev_run), out)
    text = out.getvalue()
    assert "burst" in text and "8 on hybrid, 7 on Karpenter burst nodes" in text
    assert "hybrid capacity for burst (900m each)" in text and ": 8 fit" in text
    assert "problems: none" in text


@needs_helm
def test_a_node_size_the_model_does_not_know_is_placed_and_said_unchecked(lab):
    model = scheduling.evaluate(lab(systemNodeInstanceType="t3.large"))
    assert model.problems == []
    assert model.unchecked == [
        "capacity of t3.large nodes (system): size unknown to components/capacity.py"]
    assert scheduling.evaluate(lab()).unchecked == []


def test_burst_nodes_bootstrap_with_karpenters_own_taint(dev_run):
    burst = next(n for n in scheduling.lab_nodes(dev_run) if n.elastic)
    assert scheduling.KARPENTER_UNREGISTERED in burst.bootstrap_taints()
    aws_node = scheduling.EKS_ADDONS["vpc-cni"]
    assert scheduling.placement_problem(aws_node, burst, bootstrapping=True) is None


def test_a_spread_domain_is_every_zone_the_selector_admits_whatever_its_taints():
    """kube-scheduler's nodeTaintsPolicy defaults to Ignore (tests/test_real_placement.py shows
    it on the real scheduler): a zone whose only node the pod does not tolerate is a domain
    with no pods, so four replicas with maxSkew 1 over three zones place two; with
    nodeTaintsPolicy Honor, the zone drops out and all four place."""
    from tests.real_placement import spread_case

    nodes, workload = spread_case()
    placed = scheduling.schedule(nodes, [workload]).of("spread")
    assert (sum(placed.nodes.values()), placed.pending) == (2, 2)
    [constraint] = workload.topology_spread
    honoring = replace(workload, topology_spread=({**constraint, "nodeTaintsPolicy": "Honor"},))
    placed = scheduling.schedule(nodes, [honoring]).of("spread")
    assert (dict(placed.nodes), placed.pending) == ({"a": 2, "b": 2}, 0)


def test_sidecars_add_to_a_pods_request_and_pod_level_requests_replace_it():
    """kube-scheduler's count (tests/test_real_placement.py shows it on the real scheduler):
    sidecars (init containers with restartPolicy Always) run beside the containers; a later
    init container runs beside the sidecars started before it; pod-level requests win."""
    def c(cpu, **extra):
        return {"resources": {"requests": {"cpu": cpu}}, **extra}

    assert scheduling.pod_request([c("400m")], [c("400m", restartPolicy="Always"),
                                                c("500m")]).cpu_m == 900
    assert scheduling.pod_request([c("400m")], [c("500m"),
                                                c("400m", restartPolicy="Always")]).cpu_m == 800
    assert scheduling.pod_request([c("100m")], [], {"requests": {"cpu": "600m"}}).cpu_m == 600
    # Plain init containers still only set a floor.
    assert scheduling.pod_request([c("400m")], [c("300m")]).cpu_m == 400


def test_pod_anti_affinity_reads_its_selector_both_ways():
    """The scheduler's InterPodAffinity filter (tests/test_real_placement.py shows it on the
    real scheduler): a term keeps its pod off nodes with any pod it selects, and keeps the pods
    it selects off its pod's node."""
    from tests.real_placement import anti_affinity_case

    nodes, steps = anti_affinity_case()
    model = scheduling.schedule(nodes, [w for step in steps for w in step])
    assert {w: (dict(+model.of(w).nodes), model.of(w).pending) for w in ("y", "x", "v")} == \
        {"y": ({"a": 1}, 0), "x": ({"b": 1}, 1), "v": ({}, 1)}


@needs_helm
def test_the_models_chart_pods_carry_their_labels(dev_run):
    """The charts' pod labels are in the model's view (their anti-affinity selectors match
    them), and the chart's own anti-affinity keeps one operator a node by them."""
    operator = next(w for w in scheduling.evaluate(dev_run).workloads
                    if w.name == "cilium-operator")
    assert operator.pod_facts.labels.get("io.cilium/app") == "operator"


def test_a_host_port_is_one_pods_on_a_node():
    from tests.real_placement import host_port_case

    nodes, steps = host_port_case()
    model = scheduling.schedule(nodes, [w for step in steps for w in step])
    assert [(w, model.of(w).pending) for w in ("host-network", "tcp", "udp")] == \
        [("host-network", 0), ("tcp", 1), ("udp", 0)]
