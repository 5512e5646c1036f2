"""Placement on the real scheduler: the lab's nodes as kwok Nodes (the scheduling model's own node
facts: the system and gateway node groups, the hybrid hosts from their user data, the GPU host;
labels, taints, allocatable CPU, memory, pods and GPUs as components/capacity.py computes them)
and the lab's workloads (its Deployments, the charts' DaemonSets and Deployments as Helm renders
them, the EKS add-ons' pods), placed by kube-scheduler and the DaemonSet controller
(tests/real_placement.py), compared pod by pod with offline/scheduling.py for the dev and GPU
stacks, and for the dev stack with system nodes that have room for burst pods. Where they
disagree the engine is right, and the model is fixed.

The comparison rule (``real_placement.disagreements``), and why it is sound: the model chooses
among the nodes that admit and fit a pod by preference, then the most free CPU; the real
scheduler by its score plugins (balanced allocation, default spreading, image locality...),
which the model does not claim to reproduce. So the test compares only what does not depend on
that choice:

- a DaemonSet's exact node set (the controller creates one pod per admitting node; no score);
- for a Deployment, how many pods stay Pending, how many land on each node role (system,
  gateway, hybrid, gpu, burst), and that none lands on a node the model says cannot take it
  (labels, affinity, taints) — where a role has one admitting node, the node is exact.

Counts per role and Pending counts do not depend on the choice among equally admitting nodes
here: the one contested room is the hybrid nodes', and the model's ``burst_capacity`` finds the
same number of burst pods (8) for every placement of their other pods; the system nodes keep
room for every arrangement of theirs (asserted below, so a lab change that makes the choice
matter fails loudly instead of comparing noise).

Scenarios run in the model's order: the fixed nodes Ready, every workload but ``burst``
settled, ``burst`` at its demo peak (15) — with no Karpenter node, so the pods the model hands
Karpenter must stay Pending — then one kwok node of each instance type the burst NodePool may
launch, where those pods, and only those, must go. The module runs its own control plane (no
other test's objects in it), and each scenario's nodes and pods are kept apart from the other
scenarios' by a label and taint of its own (tests/real_placement.py).
"""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from offline import scheduling
from tests import real_placement, worker_share
from tests.conftest import run_lab
from tests.helm_engine import needs_helm, with_registration
from tests.real_cluster import started
from tests.test_scheduling import HYBRID_TOLERATION, MEANT_FOR

pytestmark = needs_helm

#: "roomy-system": system nodes (m6i.xlarge) with room for burst pods beside their own, which
#: only burst's required node affinity keeps them off (demo 2: hybrid first, then Karpenter).
STACKS = {"dev": {}, "gpu": {"gpuEnabled": True},
          "roomy-system": {"systemNodeInstanceType": "m6i.xlarge"}}
_serial = itertools.count()


# --- the planted defects -------------------------------------------------------------------------

def _drop_hybrid_toleration(inputs):
    """Defect: echo-hybrid loses its toleration of the hybrid taint."""
    pod = inputs["spec"]["template"]["spec"]
    pod["tolerations"] = [t for t in pod["tolerations"] if t != HYBRID_TOLERATION]


def _selector_typo(inputs):
    """Defect: prober-hybrid's required node affinity asks for compute-type 'hybird'."""
    term = inputs["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    term["matchExpressions"][0]["values"] = ["hybird"]


def _request_past_the_hybrid_room(inputs):
    """Defect: burst asks 1000m: (3920m - 200m of daemons - demo 1's 60m) / 1000m = 3 a node."""
    inputs["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1000m"


def planted_run():
    run = run_lab()
    run = with_registration(run, "demo-echo-hybrid", _drop_hybrid_toleration)
    run = with_registration(run, "demo-prober-hybrid", _selector_typo)
    return with_registration(run, "demo-burst", _request_past_the_hybrid_room)


# --- scenarios -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def control_plane(tmp_path_factory):
    """A control plane of this module's own (skipped as tests/real_cluster.py's is): the
    scenarios must own the node set, and the worker's shared one keeps other tests' objects —
    the admission tier's Cilium DaemonSet, which tolerates every taint, would put its pods on
    these hybrid nodes and take 100m of the room demo 2 counts on."""
    yield from started(tmp_path_factory, "placement-control-plane")


@pytest.fixture(scope="module")
def scenario(request):
    """``scenario(key)``: (model, real placement without Karpenter nodes, with them, and with
    ``burst`` made again while they are there — ``real_placement.Run``) for the
    stack ``key`` (or "planted": the dev stack with the three defects above). One worker runs each scenario on its control plane and leaves the observations for
    the other (tests/worker_share.py); the model is evaluated here."""
    cache: dict = {}

    def get(key: str):
        if key not in cache:
            run = planted_run() if key == "planted" else run_lab(**STACKS[key])
            model = scheduling.evaluate(run)

            def observe():
                plane = request.getfixturevalue("control_plane")
                found = real_placement.run_scenario(plane, model, f"{key}-{next(_serial)}")
                return found.fixed, found.burst, found.warm

            folder = worker_share.directory("real-placement")
            cache[key] = (model, *(observe() if folder is None else
                                   worker_share.once(folder, key, observe)))
        return cache[key]

    return get


# --- the checks ----------------------------------------------------------------------------------

def placement_problems(model: scheduling.SchedulingModel, seen: real_placement.Observed, *,
                       karpenter_nodes: bool) -> list[str]:
    """What the real scheduler did that the lab does not mean: a pod on a node role it is not
    meant for (tests/test_scheduling.py MEANT_FOR), a DaemonSet missing from a node it is meant
    for, a pod left Pending (but ``burst``'s overflow while Karpenter has launched nothing)."""
    found = []
    roles = {n.name: n.role for n in model.nodes}
    present = {n.role for n in model.nodes if karpenter_nodes or not n.elastic}
    for w in model.workloads:
        meant = MEANT_FOR[w.name] & present
        on = seen.on(w.name)
        wrong = sorted({roles[n] for n in on} - meant)
        if wrong:
            found.append(f"{w.name} runs on {wrong} nodes, meant for {sorted(meant)}")
        if w.kind == "DaemonSet":
            missing = sorted(n.name for n in model.nodes if n.role in meant
                             and (karpenter_nodes or not n.elastic) and not on[n.name])
            if missing:
                found.append(f"{w.name} (DaemonSet) is missing from {missing}")
        elif w.name != scheduling.BURST or karpenter_nodes:
            if seen.pending(w.name):
                found.append(f"{w.name}: {seen.pending(w.name)} of {w.replicas} pods Pending: "
                             + "; ".join(sorted(seen.messages.get(w.name, ()))))
    return found


def demo_two_problems(model: scheduling.SchedulingModel, fixed: real_placement.Observed,
                      burst: real_placement.Observed | None) -> list[str]:
    """Demo 2's sizing on the real scheduler: at the peak, 4 burst pods on each of the two
    hybrid nodes and the rest Pending for Karpenter; once Karpenter's nodes are there, the rest
    on them and nowhere else."""
    found = []
    hybrid = sorted(n.name for n in model.nodes if n.role == "hybrid")
    on = fixed.on(scheduling.BURST)
    per_node = {n: on[n] for n in hybrid}
    if set(per_node.values()) != {4} or len(hybrid) != 2:
        found.append(f"burst pods on the hybrid nodes: {per_node}, demo 2 wants 4 on each of 2")
    rest = scheduling.BURST_PEAK - 8
    if fixed.pending(scheduling.BURST) != rest or sum(on.values()) != 8:
        found.append(f"{sum(on.values())} burst pods placed and {fixed.pending(scheduling.BURST)}"
                     f" Pending without Karpenter nodes; demo 2 wants 8 and {rest}")
    if burst is not None:
        roles = Counter({n.role: 0 for n in model.nodes})
        by_name = {n.name: n for n in model.nodes}
        for node, count in burst.on(scheduling.BURST).items():
            roles[by_name[node].role] += count
        if (roles["hybrid"], roles["burst"], burst.pending(scheduling.BURST)) != (8, rest, 0) \
                or sum(roles.values()) != scheduling.BURST_PEAK:
            found.append(f"with Karpenter's nodes, burst pods by role {dict(+roles)}, "
                         f"{burst.pending(scheduling.BURST)} Pending; demo 2 wants 8 hybrid, "
                         f"{rest} burst")
    return found


# --- the lab on the real scheduler ---------------------------------------------------------------

@pytest.mark.parametrize("stack", STACKS)
def test_the_real_scheduler_places_every_pod_as_the_model_predicts(scenario, stack):
    model, fixed, burst, warm = scenario(stack)
    assert fixed.strangers == burst.strangers == warm.strangers == []
    assert real_placement.disagreements(model, fixed, with_karpenter_nodes=False) == []
    assert real_placement.disagreements(model, burst, with_karpenter_nodes=True) == []
    # The model sends a pod to Karpenter only when no fixed node fits it; with Karpenter's
    # nodes already there, burst's preference for hybrid must still fill the hybrid nodes first.
    assert real_placement.disagreements(model, warm, with_karpenter_nodes=True) == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_pod_runs_where_it_is_meant_to_on_the_real_scheduler(scenario, stack):
    model, fixed, burst, warm = scenario(stack)
    assert placement_problems(model, fixed, karpenter_nodes=False) == []
    assert placement_problems(model, burst, karpenter_nodes=True) == []
    assert placement_problems(model, warm, karpenter_nodes=True) == []


@pytest.mark.parametrize("stack", STACKS)
def test_demo_two_holds_on_the_real_scheduler(scenario, stack):
    """8 burst pods on the two hybrid nodes at the peak of 15, the other 7 Pending until
    Karpenter's nodes come, then on those nodes only; and the same 8 and 7 when the demo runs
    again while Karpenter's nodes are still there (its preference for hybrid, not the
    absence of other nodes, keeps the hybrid nodes first)."""
    model, fixed, burst, warm = scenario(stack)
    assert demo_two_problems(model, fixed, burst) == []
    assert demo_two_problems(model, fixed, warm) == []


def burst_roles(model: scheduling.SchedulingModel, seen: real_placement.Observed) -> Counter:
    """Burst pods the real scheduler placed, by node role (every role of the lab counted)."""
    roles = {n.name: n.role for n in model.nodes}
    found = Counter({role: 0 for role in roles.values()})
    for node, count in seen.on(scheduling.BURST).items():
        found[roles[node]] += count
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_burst_runs_only_on_hybrid_and_burst_nodes_on_the_real_scheduler(scenario, stack):
    """Demo 2's required affinity (components/demos.py ``burst_affinity``) on the real
    scheduler: no burst pod on a system or gateway node — in "roomy-system" the system nodes
    have room for one (asserted) — and as many on the hybrid nodes as the model computes, at
    the peak, with Karpenter's nodes there, and when burst is made again beside them."""
    model, fixed, burst, warm = scenario(stack)
    placement = model.result.of(scheduling.BURST)
    roles = {n.name: n.role for n in model.nodes}
    on_hybrid = sum(c for n, c in placement.nodes.items() if roles[n] == "hybrid")
    assert on_hybrid == 8
    if stack == "roomy-system":
        # Room for a burst pod beside everything else the model puts there (burst's own aside).
        request = placement.workload.request
        assert any(request.fits(n.allocatable - model.result.used[n.name]
                                + scheduling.Request(request.cpu_m * placement.nodes[n.name],
                                                     request.memory_mib * placement.nodes[n.name]))
                   for n in model.nodes if n.role == "system")
    for seen in (fixed, burst, warm):
        by_role = burst_roles(model, seen)
        assert {role for role, count in by_role.items() if count} <= {"hybrid", "burst"}, \
            dict(+by_role)
        assert (by_role["system"], by_role["gateway"], by_role["hybrid"]) == (0, 0, on_hybrid)


def choice_dependence(model: scheduling.SchedulingModel) -> list[str]:
    """Where the compared counts could depend on the scheduler's choice among admitting nodes
    (empty: the comparison rule is sound for this lab). The hybrid room for burst must be the
    same for every placement of the hybrid nodes' other pods, and each system and gateway node
    must hold every pod that may land on it at once (one a node for host anti-affinity) beside
    its DaemonSets."""
    found = []
    if model.burst is not None and model.burst.fewest != model.burst.most:
        found.append(f"burst pods on the hybrid nodes: {model.burst.fewest} to "
                     f"{model.burst.most}, by where the other hybrid pods land")
    for node in (n for n in model.nodes if n.role in ("system", "gateway")):
        daemons = sum(p.workload.request.cpu_m for p in model.result.placements
                      if p.workload.kind == "DaemonSet" and p.nodes[node.name])
        worst = sum((1 if p.workload.spreads_by_host else p.workload.replicas)
                    * p.workload.request.cpu_m
                    for p in model.result.placements
                    if p.workload.kind == "Deployment" and p.workload.name != scheduling.BURST
                    and scheduling.placement_problem(p.workload, node) is None)
        if daemons + worst > node.allocatable.cpu_m:
            found.append(f"{node.name}: {daemons}m of DaemonSets and up to {worst}m of other "
                         f"pods over {node.allocatable.cpu_m}m allocatable")
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_the_compared_counts_do_not_depend_on_the_schedulers_choice(scenario, stack):
    """The soundness condition of the comparison rule (module docstring)."""
    model, *_ = scenario(stack)
    assert model.burst.fewest == model.burst.most == 8
    assert choice_dependence(model) == []


def test_the_soundness_check_catches_a_system_node_that_cannot_hold_every_arrangement():
    """Planted: Karpenter's controller asks 1500m, so which system node each small pod picks
    decides whether the second controller fits."""
    def bigger(inputs):
        inputs["values"]["controller"]["resources"]["requests"]["cpu"] = "1500m"

    run = with_registration(run_lab(), "karpenter-karpenter-controller-release", bigger)
    found = choice_dependence(scheduling.evaluate(run))
    assert any(f.startswith("cluster-system-ng-0:") for f in found), found


# --- each check fails on its defect --------------------------------------------------------------

def test_the_comparison_catches_a_model_that_gets_notin_wrong(scenario, monkeypatch):
    """A planted model defect — NotIn refusing a node without the label (Kubernetes admits it)
    — and the real scheduler's placement of the dev stack shows it."""
    model, fixed, *_ = scenario("dev")
    holds = scheduling._expression_holds

    def notin_needs_the_label(labels, e):
        if e["operator"] == "NotIn" and e["key"] not in labels:
            return False
        return holds(labels, e)

    monkeypatch.setattr(scheduling, "_expression_holds", notin_needs_the_label)
    broken = scheduling.evaluate(run_lab())
    found = real_placement.disagreements(broken, fixed, with_karpenter_nodes=False)
    assert any(f.startswith("echo-cloud: 0 Pending, model 2") for f in found), found
    assert any(f.startswith("aws-node: DaemonSet on") for f in found), found


def test_a_hybrid_workload_without_its_toleration_stays_pending_on_the_real_scheduler(scenario):
    model, fixed, *_ = scenario("planted")
    problems = placement_problems(model, fixed, karpenter_nodes=False)
    assert any(p.startswith("echo-hybrid: 2 of 2 pods Pending") and "untolerated taint" in p
               for p in problems), problems
    # The model foresaw it, and agrees with the engine.
    assert any(u.startswith("echo-hybrid (lab): 2 of 2") for u in model.unschedulable)
    assert real_placement.disagreements(model, fixed, with_karpenter_nodes=False) == []


def test_a_node_affinity_typo_stays_pending_on_the_real_scheduler(scenario):
    model, fixed, *_ = scenario("planted")
    problems = placement_problems(model, fixed, karpenter_nodes=False)
    assert any(p.startswith("prober-hybrid: 1 of 1 pods Pending") and "affinity" in p
               for p in problems), problems
    assert any(u.startswith("prober-hybrid (lab): 1 of 1") for u in model.unschedulable)


def test_a_burst_request_past_the_hybrid_room_breaks_demo_two_on_the_real_scheduler(scenario):
    model, fixed, burst, warm = scenario("planted")
    for with_karpenter in (burst, warm):
        problems = demo_two_problems(model, fixed, with_karpenter)
        starts = ("burst pods on the hybrid nodes: {'hybrid-hosts-node-0': 3, "
                  "'hybrid-hosts-node-1': 3}",
                  "6 burst pods placed and 9 Pending without Karpenter nodes",
                  "with Karpenter's nodes, burst pods by role {'hybrid': 6, 'burst': 9}")
        assert len(problems) == 3 and all(p.startswith(s) for p, s in zip(problems, starts)), \
            problems
    assert fixed.on(scheduling.BURST) == Counter({"hybrid-hosts-node-0": 3,
                                                  "hybrid-hosts-node-1": 3})
    assert model.burst.fewest == model.burst.most == 6
    # The model foresaw all of it.
    for seen, karpenter in ((fixed, False), (burst, True), (warm, True)):
        assert real_placement.disagreements(model, seen, with_karpenter_nodes=karpenter) == []


# --- what the engine taught the model ------------------------------------------------------------

def test_a_zone_the_pod_cannot_tolerate_still_counts_for_its_spread(control_plane):
    """Found by this comparison: the model counted only the zones of nodes a pod tolerates as
    its spread domains; kube-scheduler counts every node its selector and affinity admit
    (nodeTaintsPolicy defaults to Ignore), so an untolerated zone holds the skew at 0 and two of
    four replicas stay Pending. The model had placed all four."""
    nodes, workload = real_placement.spread_case()
    seen = _probe(control_plane, "spread", nodes, [workload])
    assert (sorted(seen.on("spread").items()), seen.pending("spread")) == \
        ([("a", 1), ("b", 1)], 2)
    assert any("topology spread" in m for m in seen.messages["spread"])
    placed = scheduling.schedule(nodes, [workload]).of("spread")
    assert (sorted(placed.nodes.items()), placed.pending) == ([("a", 1), ("b", 1)], 2)


def test_an_empty_node_selector_term_selects_no_node(control_plane):
    """Found by reading the scheduler's rule for burst's ORed terms: the model took a term with
    no expressions as one every node passes (``all`` of nothing), so ORed with another it
    admitted any node, and alone every node. kube-scheduler skips an empty term — it selects
    no node (component-helpers nodeaffinity ``isEmptyNodeSelectorTerm``): one ``ored`` replica
    runs on ``a`` and the other stays Pending, as does ``empty``."""
    nodes, workloads = real_placement.empty_term_case()
    seen = _probe(control_plane, "terms", nodes, workloads)
    real = {w: (dict(seen.on(w)), seen.pending(w)) for w in ("ored", "empty")}
    assert real == {"ored": ({"a": 1}, 1), "empty": ({}, 1)}
    assert any("affinity" in m for m in seen.messages["empty"]), seen.messages
    model = scheduling.schedule(nodes, workloads)
    assert {w: (dict(+model.of(w).nodes), model.of(w).pending) for w in real} == real


def _probe(plane, name, nodes, *batches) -> real_placement.Observed:
    """What the real scheduler made of the workload ``batches`` (one after another) on
    ``nodes``, in a scenario of its own that is removed after."""
    scenario = real_placement.Scenario(plane, f"{name}-{next(_serial)}")
    try:
        scenario.add_nodes(nodes)
        for workloads in batches:
            scenario.add_workloads(workloads)
        return scenario.observe()
    finally:
        scenario.delete()


def test_sidecars_and_pod_level_requests_count_as_the_scheduler_counts_them(control_plane):
    """Found by this comparison: the model took a pod's request as the larger of its
    containers' sum and its largest init container, so a sidecar (an init container with
    restartPolicy Always, which keeps running) counted only as an init container, and
    pod-level requests not at all. The scheduler adds the sidecars to the containers, counts
    each later init container with the sidecars before it, and lets pod-level requests replace
    the containers' CPU and memory: one replica of each probe fits where the model had put
    two."""
    nodes, workloads = real_placement.requests_case()
    seen = _probe(control_plane, "requests", nodes, workloads)
    model = scheduling.schedule(nodes, workloads)
    for w in workloads:
        assert (sum(seen.on(w.name).values()), seen.pending(w.name)) == (1, 1), w.name
        assert any("Insufficient cpu" in m for m in seen.messages[w.name]), w.name
        placed = model.of(w.name)
        assert (sum(placed.nodes.values()), placed.pending) == (1, 1), w.name
    assert [w.request.cpu_m for w in workloads] == [900, 600]


def test_pod_anti_affinity_follows_its_selector_both_ways(control_plane):
    """Found by this comparison: the model read a required hostname anti-affinity term as
    "one replica of this workload a node", whatever its selector; the scheduler keeps the pod
    off any node holding a pod the term selects (in the term's namespaces), and keeps any pod
    the term selects off the node holding it. (The chart pods' labels, which the selectors
    match, were missing from the model's view of the charts until this comparison needed
    them: without them the real scheduler honoured no chart's anti-affinity.)"""
    nodes, steps = real_placement.anti_affinity_case()
    seen = _probe(control_plane, "anti", nodes, *steps)
    real = {w: (dict(seen.on(w)), seen.pending(w)) for w in ("y", "x", "v")}
    assert real == {"y": ({"a": 1}, 0), "x": ({"b": 1}, 1), "v": ({}, 1)}
    model = scheduling.schedule(nodes, [w for step in steps for w in step])
    assert {w: (dict(+model.of(w).nodes), model.of(w).pending) for w in real} == real


def test_host_ports_keep_a_second_pod_off_the_node(control_plane):
    """Found by this comparison: the model did not know host ports. The scheduler refuses a
    pod a host port (and protocol) that a pod on the node binds — a host-network pod binds its
    container ports."""
    nodes, steps = real_placement.host_port_case()
    seen = _probe(control_plane, "ports", nodes, *steps)
    names = ("host-network", "tcp", "udp")
    real = {w: (dict(seen.on(w)), seen.pending(w)) for w in names}
    assert real == {"host-network": ({"a": 1}, 0), "tcp": ({}, 1), "udp": ({"a": 1}, 0)}
    assert any("free ports" in m for m in seen.messages["tcp"]), seen.messages
    model = scheduling.schedule(nodes, [w for step in steps for w in step])
    assert {w: (dict(+model.of(w).nodes), model.of(w).pending) for w in names} == real
