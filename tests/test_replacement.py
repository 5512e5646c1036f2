"""What `pulumi up` replaces when a setting changes, and that a replaced hybrid host never
leaves its old Node (billed) and registration behind, nor takes the new host's Node with it.

The model (tests/replacement.py) ports the engine's and the providers' replacement rules. With
create-before-delete (the default, and what the Node cleanup's diff asks for) the engine creates
the new cleanup, then the new host (it depends on the cleanup), and deletes replaced resources
only after every create, dependents first: the old host, then the old cleanup (pulumi/pulumi
pkg/resource/deploy/deployment_executor.go performPostSteps; step_generator.go GenerateDeletes
marks replaced olds for deletion and ScheduleDeletes orders them in reverse dependency order).
So when the old cleanup's delete runs the new host exists and may have joined: its selector must
not match the new generation's Node.
"""

from __future__ import annotations

import shutil
from pathlib import Path
import pytest

from components.instance_types import architecture

import components.hybrid_user_data as hybrid_user_data
from components.cleanup.node_objects import NodeObjectCleanupProvider
from offline.runner import ProgramRun, run_program
from offline.scheduling import node_config_of
from tests.conftest import independent_run, lab_config, run_lab
from tests.replacement import Plan, fresh_ids_run, input_path, plain, plan

INSTANCE = "aws:ec2/instance:Instance"
NODE_CLEANUP = "pulumi-python:dynamic/cleanup:HybridNodeObjects"


def hosts(run: ProgramRun) -> dict[str, str]:
    """Host resource name -> URN."""
    return {r.name: r.urn for r in run.of_type(INSTANCE) if r.name.startswith("hybrid-hosts-")}


def node_labels(run: ProgramRun, host_urn: str) -> dict[str, str]:
    """The labels the host's Node registers with: its kubelet flags, plus nodeadm's."""
    config = node_config_of(str(plain(run.by_urn[host_urn].inputs["userData"])))
    flags = config["spec"]["kubelet"]["flags"]
    [labels] = [f.split("=", 1)[1] for f in flags if f.startswith("--node-labels=")]
    return {**dict(item.split("=", 1) for item in labels.split(",")),
            "eks.amazonaws.com/compute-type": "hybrid"}


def selects(selector: str, labels: dict[str, str]) -> bool:
    """The cleanup's own rule (it re-checks what the API server answers)."""
    return NodeObjectCleanupProvider()._selected(labels, selector)


def cleanup_of(run: ProgramRun, host: str):
    return run.one(NODE_CLEANUP, f"{host}-node")


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
    # Another architecture is another resource (components/hybrid_hosts.py): not replaced but
    # deleted and created anew, so the ignored "ami" input is not carried over.
    ("instance-type-arm", {}, {"hybridNodeInstanceType": "m7g.xlarge"}, False, "recreated"),
    ("join-script", {}, {}, True, True),
    ("kubernetes-version-with-gpu", {"gpuEnabled": True},
     {"gpuEnabled": True, "kubernetesVersion": "1.36"}, False, True),
]


_TRANSITIONS: dict[str, Transition] = {}


@pytest.fixture(params=MATRIX, ids=[m[0] for m in MATRIX])
def transition(request, tmp_path_factory) -> tuple[Transition, bool]:
    key, old_settings, new_settings, script_edit, replaces = request.param
    if key not in _TRANSITIONS:
        old = run_lab(**old_settings)
        if script_edit:
            with pytest.MonkeyPatch.context() as monkeypatch:
                _join_script_changed(monkeypatch, tmp_path_factory.mktemp("templates"))
                new = run_program(lab_config(**new_settings))
                _TRANSITIONS[key] = Transition(old, new)
        else:
            _TRANSITIONS[key] = Transition(old, run_lab(**new_settings))
    return _TRANSITIONS[key], replaces


def test_replaced_hosts_are_the_ones_the_spec_says(transition):
    t, replaces = transition
    node_hosts = {n: u for n, u in hosts(t.old).items() if n.startswith("hybrid-hosts-node-")}
    if replaces == "recreated":
        assert set(node_hosts.values()) <= t.plan.deleted
        assert {u for n, u in hosts(t.new).items() if n.startswith("hybrid-hosts-node-")} <= t.plan.created
        return
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
        selector = cleanup.inputs["labelSelector"]
        # Not vacuous: the old cleanup selects its own host's Node.
        assert selects(selector, node_labels(t.old, urn)), name
        if cleanup.urn in t.plan.replaced or cleanup.urn in t.plan.deleted:
            # Its delete runs after the new hosts exist: it must leave their Nodes alone.
            assert [n for n, labels in new_nodes.items() if selects(selector, labels)] == [], name
        else:
            # It stays, and still selects the Node of the host it stays with.
            assert selects(selector, new_nodes[name]), name


def test_a_replaced_host_keeps_its_architecture(transition):
    """The host ignores changes to its image ("ami" in ignoreChanges), and Pulumi replaces a
    resource with the ignored input's old value: a replacement may not change the
    architecture the image was chosen for."""
    t, _ = transition
    for urn in set(hosts(t.old).values()) & set(t.plan.replaced):
        old, new = t.old.by_urn[urn], t.new.by_urn[urn]
        assert "ami" in new.options["ignoreChanges"]
        assert architecture(old.inputs["instanceType"]) == architecture(new.inputs["instanceType"]), (
            f"{new.name} would be replaced as a {new.inputs['instanceType']} with the image of a "
            f"{old.inputs['instanceType']}")


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
