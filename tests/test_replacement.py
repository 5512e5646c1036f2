"""What `pulumi up` replaces when a setting changes, and that a replaced hybrid host never
leaves its old Node (billed) and registration behind, nor takes a live host's Node with it.

The model (tests/replacement.py) ports the engine's and the providers' replacement rules, and
the order of an update's steps. A host is replaced delete-first (its deleteBeforeReplace
option): the old host is deleted, then the new one created — one host's worth of quota. Its
Node cleanup is replaced create-first (its diff asks for it): the new cleanup is created before
the new host (which depends on it), and the old one is deleted at the end of the update, or of
the next update if this one fails (pulumi/pulumi pkg/resource/deploy/step_generator.go
continueStepsFromDiff, GenerateDeletes; deployment_executor.go performPostSteps). So when an
old cleanup's delete runs, the new host exists and may have joined: each cleanup selects by
the token it minted, which only its own host's Node carries.

The Kubernetes side is modelled as the worst case: a created host joins at once; a deleted
host's Node stays, NotReady and billed, until a cleanup that selects it is deleted.
"""

from __future__ import annotations

import shutil
from pathlib import Path
import pytest

from components.instance_types import architecture, vcpus

from pulumi.runtime import MockCallArgs

import components.hybrid_user_data as hybrid_user_data
from components.hybrid_hosts import UBUNTU_AMI_PARAMETER
from components.hybrid_user_data import NODEADM_ARCH
from offline.fake_cloud import FakeCloud
from components.cleanup.node_objects import NodeObjectCleanupProvider
from offline.runner import ProgramRun, run_program
from offline.scheduling import node_config_of
from tests.conftest import independent_run, lab_config, run_lab
from ops.preflight.checks import vcpu_quota_class
from ops.preflight.cli import lab_needs
from tests.replacement import (Plan, State, Step, apply, fresh_ids_run, input_path, plain, plan,
                               steps)

INSTANCE = "aws:ec2/instance:Instance"
#: The image the stand-in cloud answers for each architecture's Ubuntu parameter.
AMIS = {arch: FakeCloud("ap-northeast-2").call(MockCallArgs(
    "aws:ssm/getParameter:getParameter",
    {"name": UBUNTU_AMI_PARAMETER.format(arch=NODEADM_ARCH[arch])}, ""))["value"]
    for arch in NODEADM_ARCH}
NODE_CLEANUP = "pulumi-python:dynamic/cleanup:HybridNodeObjects"
STALE_NODES = "pulumi-python:dynamic/cleanup:HybridStaleNodes"


def hosts(run: ProgramRun) -> dict[str, str]:
    """Host resource name -> URN."""
    return {r.name: r.urn for r in run.of_type(INSTANCE) if r.name.startswith("hybrid-hosts-")}


def node_labels(run: ProgramRun, host_urn: str) -> dict[str, str]:
    """The labels the host's Node registers with: its kubelet flags, plus nodeadm's."""
    return labels_of(run.by_urn[host_urn])


def labels_of(host) -> dict[str, str]:
    config = node_config_of(str(plain(host.inputs["userData"])))
    flags = config["spec"]["kubelet"]["flags"]
    [labels] = [f.split("=", 1)[1] for f in flags if f.startswith("--node-labels=")]
    return {**dict(item.split("=", 1) for item in labels.split(",")),
            "eks.amazonaws.com/compute-type": "hybrid"}


def selects(selector: str, labels: dict[str, str]) -> bool:
    """The cleanup's own rule (it re-checks what the API server answers)."""
    return NodeObjectCleanupProvider()._selected(labels, selector)


def cleanup_of(run: ProgramRun, host: str):
    return run.one(NODE_CLEANUP, f"{host}-node")


def selector_of(cleanup) -> str:
    """What the cleanup's delete selects, as its delete decides from its outputs."""
    return NodeObjectCleanupProvider().node_selector(plain(cleanup.outputs))


class Transition:
    """Two runs of the lab, the plan between them, and the new run with fresh ids."""

    def __init__(self, old: ProgramRun, new: ProgramRun):
        self.old, self.new = old, new
        self.plan: Plan = plan(old, new)
        self.fresh = (fresh_ids_run(new.config, set(self.plan.replaced)) if self.plan.replaced
                      else new)


def _join_script_changed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A real edit of the join script: a copy of the templates with one more `nodeadm init`
    attempt, which is what a maintainer changing the script would ship."""
    copy = tmp_path / "templates"
    shutil.copytree(hybrid_user_data.TEMPLATES, copy)
    script = copy / "hybrid-host.sh"
    text = script.read_text()
    assert 'retry 8 nodeadm init' in text
    script.write_text(text.replace('retry 8 nodeadm init', 'retry 9 nodeadm init'))
    monkeypatch.setattr(hybrid_user_data, "TEMPLATES", copy)


# (id, old settings, new settings, edits the join script, the node hosts are replaced) — the
# last column from the spec: what changes a host's user data (or its ForceNew inputs).
MATRIX = [
    # 1.35 -> 1.36: an upgrade, and both stay in standard support (tests/test_eks_support.py).
    # In burst scenario C, which reaches no host: both runs are other tests' too (test_demo's,
    # test_awaits'), where a run of the dev stack at 1.36 would be this test's alone.
    ("kubernetes-version", {"burstScenario": "C"}, {"burstScenario": "C", "kubernetesVersion": "1.36"},
     False, True),
    ("activation-generation", {}, {"activationGeneration": 2}, False, True),
    ("gpu-on", {}, {"gpuEnabled": True}, False, False),
    ("instance-type-same-arch", {}, {"hybridNodeInstanceType": "m5.2xlarge"}, False, False),
    # Another architecture changes the user data (nodeadm's build): replaced, delete-first.
    ("instance-type-arm", {}, {"hybridNodeInstanceType": "m7g.xlarge"}, False, True),
    ("join-script", {}, {}, True, True),
    ("kubernetes-version-with-gpu", {"gpuEnabled": True},
     {"gpuEnabled": True, "kubernetesVersion": "1.36"}, False, True),
]


_TRANSITIONS: dict[str, Transition] = {}


def _transition(key: str, tmp_path_factory) -> Transition:
    [(_, old_settings, new_settings, script_edit, _)] = [m for m in MATRIX if m[0] == key]
    if key not in _TRANSITIONS:
        old = run_lab(**old_settings)
        if script_edit:
            with pytest.MonkeyPatch.context() as monkeypatch:
                _join_script_changed(monkeypatch, tmp_path_factory.mktemp("templates"))
                new = run_program(lab_config(**new_settings))
                _TRANSITIONS[key] = Transition(old, new)
        else:
            _TRANSITIONS[key] = Transition(old, run_lab(**new_settings))
    return _TRANSITIONS[key]


@pytest.fixture(params=MATRIX, ids=[m[0] for m in MATRIX])
def transition(request, tmp_path_factory) -> tuple[Transition, bool]:
    return _transition(request.param[0], tmp_path_factory), request.param[4]


def test_replaced_hosts_are_the_ones_the_spec_says(transition):
    t, replaces = transition
    node_hosts = {n: u for n, u in hosts(t.old).items() if n.startswith("hybrid-hosts-node-")}
    assert {n: u in t.plan.replaced for n, u in node_hosts.items()} == \
        {n: replaces for n in node_hosts}
    if replaces:
        for urn in node_hosts.values():
            assert "userData" in t.plan.replaced[urn]
    # The model decided every change on the way into the hosts and their cleanups.
    path = input_path(t.new, {*hosts(t.new).values(),
                              *(c.urn for c in t.new.of_type(NODE_CLEANUP))})
    assert {u: p for u, p in t.plan.unmodelled.items() if u in path} == {}


def test_a_host_and_its_node_cleanup_are_replaced_together(transition):
    t, _ = transition
    for name, urn in hosts(t.old).items():
        cleanup = cleanup_of(t.old, name).urn
        if urn in t.new.by_urn:
            assert (urn in t.plan.replaced) == (cleanup in t.plan.replaced), name
        else:
            assert cleanup in t.plan.deleted, name
    for name, urn in hosts(t.new).items():
        if urn in t.plan.created:
            assert cleanup_of(t.new, name).urn in t.plan.created, name


def test_no_deleted_cleanup_selects_a_node_of_the_new_generation(transition):
    t, _ = transition
    new_nodes = {name: node_labels(t.fresh, urn) for name, urn in hosts(t.fresh).items()}
    for name, urn in hosts(t.old).items():
        cleanup = cleanup_of(t.old, name)
        selector = selector_of(cleanup)
        # Not vacuous: the old cleanup selects its own host's Node.
        assert selects(selector, node_labels(t.old, urn)), name
        if cleanup.urn in t.plan.replaced or cleanup.urn in t.plan.deleted:
            # Its delete runs after the new hosts exist: it must leave their Nodes alone.
            assert [n for n, labels in new_nodes.items() if selects(selector, labels)] == [], name
        else:
            # It stays, and still selects the Node of the host it stays with.
            assert selects(selector, new_nodes[name]), name


def test_a_replaced_host_boots_the_image_of_its_architecture(transition):
    """The host ignores changes to its image ("ami" in ignoreChanges) so that a new Ubuntu
    image does not replace it; a replacement is created from the program's inputs — the
    engine checks it against goal.Properties, not the ignored old value (step_generator.go
    continueStepsFromDiff) — so a host replaced by one of another architecture gets the
    image the program looks up for that architecture."""
    t, _ = transition
    for step in steps(State.of(t.old), t.new, t.fresh):
        if step.op != "create" or step.urn not in set(hosts(t.new).values()):
            continue
        image = step.reg.inputs["ami"]
        assert "ami" in step.reg.options["ignoreChanges"]
        assert image == AMIS[architecture(step.reg.inputs["instanceType"])], step.reg.name


def test_fresh_ids_do_not_change_what_is_replaced(transition):
    t, _ = transition
    assert set(plan(t.old, t.fresh).replaced) == set(t.plan.replaced)


@pytest.mark.parametrize("settings", [{}, {"gpuEnabled": True}], ids=["dev", "gpu"])
def test_an_unchanged_config_replaces_nothing(settings):
    # A second, independent run of the same config: nothing in a host's identity may come
    # from the clock or the process (a preview of an unchanged stack is a no-op).
    again = independent_run(**settings)
    assert again is not run_lab(**settings)
    result = plan(run_lab(**settings), again)
    assert result.noop, result


# --- the update's order, on the Kubernetes side --------------------------------------------------


class Cluster:
    """The hybrid Nodes as the worst case sees them: a created host joins at once; a deleted
    host's Node stays, NotReady and billed, until a deleted cleanup selects it. Records a
    cleanup that selects a live host's Node (the demo would lose it)."""

    def __init__(self, state: State):
        #: Node name -> (the host's registration, its labels).
        self.nodes: dict[str, tuple[object, dict[str, str]]] = {}
        self.live: set[int] = set()
        self.wrongly_deleted: list[str] = []
        for reg in state.current.values():
            if reg.type == INSTANCE and reg.name.startswith("hybrid-hosts-"):
                self._join(reg)

    def _join(self, host) -> None:
        self.live.add(id(host))
        self.nodes[f"mi-{len(self.nodes):017x}"] = (host, labels_of(host))

    def run(self, done: list[Step]) -> None:
        for step in done:
            if step.reg.type == INSTANCE and step.reg.name.startswith("hybrid-hosts-"):
                if step.op == "create":
                    self._join(step.reg)
                elif step.op == "delete":
                    self.live.discard(id(step.reg))
            elif step.reg.type == NODE_CLEANUP and step.op == "delete":
                selector = selector_of(step.reg)
                for name, (host, labels) in list(self.nodes.items()):
                    if selects(selector, labels):
                        if id(host) in self.live:
                            self.wrongly_deleted.append(
                                f"{step.reg.name} ({step.why}) deleted {name}, the Node of the "
                                f"live {host.name}")
                        del self.nodes[name]
            elif step.reg.type == STALE_NODES and step.op == "update":
                # Its update to a new instance removes the selected Nodes registered before
                # that instance's launch: those of hosts gone before it was created.
                selector = plain(step.reg.inputs["labelSelector"])
                for name, (host, labels) in list(self.nodes.items()):
                    if selects(selector, labels) and id(host) not in self.live:
                        del self.nodes[name]

    def billed_without_a_host(self) -> list[str]:
        return sorted(f"{name} of {host.name}" for name, (host, _) in self.nodes.items()
                      if id(host) not in self.live)


def test_a_host_is_deleted_before_its_replacement_is_created(transition):
    t, replaces = transition
    order = steps(State.of(t.old), t.new, t.fresh)
    for urn in set(hosts(t.old).values()) & set(t.plan.replaced):
        ops = [(s.op, s.why) for s in order if s.urn == urn]
        assert ops == [("delete", "replace (delete first)"), ("create", "replace (delete first)")]
    # The cleanups are replaced create-first: the new one before its host, the old one last.
    for name, urn in hosts(t.new).items():
        cleanup = cleanup_of(t.new, name).urn
        if cleanup in t.plan.replaced:
            ops = [(s.op, s.why) for s in order if s.urn == cleanup]
            assert ops == [("create", "replace (create first)"), ("delete", "pending delete")]
            index = {(s.op, s.urn): i for i, s in enumerate(order)}
            assert index[("create", cleanup)] < index[("create", urn)] < index[("delete", cleanup)]


def test_no_update_runs_more_host_vcpus_than_preflight_counts(transition):
    """Preflight asks for the vCPU quota of the hosts the stack runs (ops/preflight/cli.py
    lab_needs, against the quota class each type counts in), not twice that: at no moment of
    an update may the hosts need more of a quota than the larger of the two stacks does."""
    t, _ = transition

    def need(cfg) -> dict[str, int]:
        total: dict[str, int] = {}
        for item in lab_needs(cfg).instances:
            if item.role in ("hybrid hosts", "GPU host"):
                cls = vcpu_quota_class(item.instance_type)
                total[cls] = total.get(cls, 0) + item.count * vcpus(item.instance_type)
        return total

    before, after = need(t.old.lab_config), need(t.new.lab_config)
    counted = {c: max(before.get(c, 0), after.get(c, 0)) for c in {*before, *after}}
    running = {id(r): r.inputs["instanceType"] for r in State.of(t.old).resources()
               if r.type == INSTANCE and r.name.startswith("hybrid-hosts-")}
    for step in steps(State.of(t.old), t.new, t.fresh):
        if step.reg.type != INSTANCE or not step.reg.name.startswith("hybrid-hosts-"):
            continue
        if step.op == "delete":
            running.pop(id(step.reg))
        elif step.op == "create":
            running[id(step.reg)] = step.reg.inputs["instanceType"]
            for cls in counted:
                now = sum(vcpus(i) for i in running.values() if vcpu_quota_class(i) == cls)
                assert now <= counted[cls], (
                    f"{now} {cls} vCPUs of hosts run while {step.reg.name} is created; "
                    f"preflight counts {counted[cls]}")


def test_an_update_deletes_no_live_hosts_node_and_leaves_none_billed(transition):
    t, _ = transition
    state = State.of(t.old)
    cluster = Cluster(state)
    cluster.run(steps(state, t.new, t.fresh))
    assert cluster.wrongly_deleted == []
    assert cluster.billed_without_a_host() == []


#: Transitions to interrupt, and whether reverting brings the hosts' generation back (not for
#: a new activation: reverting its setting makes a third activation, with an id of its own).
INTERRUPTED = [("kubernetes-version-with-gpu", True), ("join-script", True),
               ("activation-generation", False)]


@pytest.mark.parametrize("key,generation_returns", INTERRUPTED, ids=[k for k, _ in INTERRUPTED])
def test_an_interrupted_update_then_a_revert_keeps_every_live_hosts_node(key, generation_returns,
                                                                        tmp_path_factory):
    """A -> B fails at the create of the last host (no capacity, the quota, Ctrl-C), after
    the cleanups were replaced and the old hosts deleted; then A again. The old cleanups wait,
    pending delete, for the end of the revert; by then the revert's hosts run again with A's
    generation. None of those cleanups may select them, and once the revert is done no Node
    of a deleted host is left."""
    t = _transition(key, tmp_path_factory)
    state = State.of(t.old)
    cluster = Cluster(state)
    update = steps(state, t.new, t.fresh)
    last = [i for i, s in enumerate(update) if s.op == "create" and s.reg.type == INSTANCE
            and s.urn in set(hosts(t.new).values())][-1]
    cluster.run(update[:last])
    state = apply(state, update[:last])
    assert [r.name for r in state.pending if r.type == NODE_CLEANUP], "nothing left pending"
    assert cluster.wrongly_deleted == []

    revert_plan = plan(state, t.old)
    again = fresh_ids_run(t.old.config, set(revert_plan.replaced), epoch=2)
    revert = steps(state, t.old, again)
    cluster.run(revert)
    state = apply(state, revert)
    assert state.pending == []
    assert cluster.wrongly_deleted == []
    assert cluster.billed_without_a_host() == []
    # Not vacuous: the revert's hosts are A's generation again, and old cleanups of A ran.
    for name, urn in hosts(t.old).items():
        assert (state.current[cleanup_of(t.old, name).urn].inputs["generation"] ==
                cleanup_of(t.old, name).inputs["generation"]) == generation_returns
    assert any(s.op == "delete" and s.why == "pending delete" and s.reg is cleanup_of(t.old, n)
               for s in revert for n in hosts(t.old))


def test_a_host_re_created_alone_leaves_no_node_billed():
    """`pulumi up --replace <host>` re-creates the host with the same user data, so the same
    token, and replaces no cleanup; the host's stale-node sweep, updated to the new instance,
    removes the old host's Node (components/cleanup/stale_nodes.py)."""
    old = run_lab()
    host = hosts(old)["hybrid-hosts-node-0"]
    state = State.of(old)
    cluster = Cluster(state)
    fresh = fresh_ids_run(old.config, {host}, epoch=3)
    order = steps(state, old, fresh, replace=frozenset({host}))
    assert [(s.op, s.why) for s in order if s.urn == host] == [
        ("delete", "replace (delete first)"), ("create", "replace (delete first)")]
    assert not any(s.reg.type == NODE_CLEANUP for s in order)
    cluster.run(order)
    assert cluster.wrongly_deleted == []
    assert cluster.billed_without_a_host() == []
