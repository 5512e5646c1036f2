"""What `pulumi up` replaces when a setting changes, and that a replaced hybrid host never
leaves an instance, its Node (billed) or its SSM registration behind, nor has a live host's Node
deleted.

The model (tests/replacement.py) ports the engine's and the providers' replacement rules, and
the order of an update's steps. A host is replaced delete-first (its deleteBeforeReplace
option). Its Node cleanup takes the host's instance id, so the engine's
calculateDependentReplacements — the cleanup's own old inputs with ``instanceId`` unknown,
diffed by its provider — finds it must be replaced: it is deleted before the old host, and
created again after the new one (pulumi/pulumi pkg/resource/deploy/step_generator.go). The
cleanup's delete terminates its host (by id, only if it carries this stack's tag), waits until
it is terminated, then deregisters the host's SSM registration and deletes its Node; Pulumi's own
delete of the host then finds it terminated, which the AWS provider takes as deleted
(terraform-provider-aws internal/service/ec2/ec2_instance.go terminateInstance,
waitInstanceDeleted). The token the host labels its Node with comes from its HostToken, one per
host generation, replaced create-first.

The cloud side is modelled as the worst case: a created host registers with SSM and joins at
once; a terminated host's Node and registration stay until something removes them. The Node
cleanups' deletes, the stale-node sweeps' updates and the activation's registrations cleanup run
their real providers' code against that model.
"""

from __future__ import annotations

import base64
import shutil
from pathlib import Path
from typing import Any, Optional
from urllib.parse import parse_qs, unquote, urlparse

import dill
import pytest
from botocore.exceptions import ClientError

from components.instance_types import architecture, vcpus

from pulumi.runtime import MockCallArgs

import components.hybrid_user_data as hybrid_user_data
from components.hybrid_hosts import UBUNTU_AMI_PARAMETER
from components.hybrid_user_data import NODEADM_ARCH
from offline.fake_cloud import FakeCloud
from components.cleanup.node_objects import NodeObjectCleanupProvider
from offline.runner import ProgramRun, run_program
from tests.conftest import independent_run, lab_config, run_lab
from ops.preflight.checks import vcpu_quota_class
from ops.preflight.cli import lab_needs
from tests.replacement import (DEPENDENT_DELETE, DEPENDENT_RECREATE, Plan, State, Step,
                               activation_of, apply, fresh_ids_run, input_path, labels_of,
                               plain, plan, steps)

INSTANCE = "aws:ec2/instance:Instance"
#: The image the stand-in cloud answers for each architecture's Ubuntu parameter.
AMIS = {arch: FakeCloud("ap-northeast-2").call(MockCallArgs(
    "aws:ssm/getParameter:getParameter",
    {"name": UBUNTU_AMI_PARAMETER.format(arch=NODEADM_ARCH[arch])}, ""))["value"]
    for arch in NODEADM_ARCH}
NODE_CLEANUP = "pulumi-python:dynamic/cleanup:HybridNodeObjects"
STALE_NODES = "pulumi-python:dynamic/cleanup:HybridStaleNodes"
HOST_TOKEN = "pulumi-python:dynamic/cleanup:HybridHostToken"
SSM_CLEANUP = "pulumi-python:dynamic/cleanup:SsmRegistrations"


def hosts(run: ProgramRun) -> dict[str, str]:
    """Host resource name -> URN."""
    return {r.name: r.urn for r in run.of_type(INSTANCE) if r.name.startswith("hybrid-hosts-")}


def node_labels(run: ProgramRun, host_urn: str) -> dict[str, str]:
    """The labels the host's Node registers with: its kubelet flags, plus nodeadm's."""
    return labels_of(run.by_urn[host_urn])


def token_of(run: ProgramRun, host: str):
    return run.one(HOST_TOKEN, f"{host}-token")


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
    """A real edit of the join script: a copy of the templates with one more `apt-get update`
    attempt, which is what a maintainer changing the script would ship."""
    copy = tmp_path / "templates"
    shutil.copytree(hybrid_user_data.TEMPLATES, copy)
    script = copy / "hybrid-host.sh"
    text = script.read_text()
    assert text.count("retry 5 apt-get update") == 1
    script.write_text(text.replace("retry 5 apt-get update", "retry 6 apt-get update"))
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


# --- the update's order, and what each step does to the cloud ------------------------------------


def _client_error(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, operation)


class StepFailed(Exception):
    """A step's provider call raised: the engine stops the update there."""


class Cloud:
    """EC2 instances, SSM registrations and Kubernetes Nodes as an update's steps leave them.

    The worst case: a created host registers with SSM and joins at once; a terminated host's
    Node and registration stay until a cleanup removes them. Pulumi's delete of a host is the
    AWS provider's: an instance already terminated, or gone, counts as deleted; else it is
    terminated. The Node cleanups' delete, the stale-node sweeps' update and the activation's
    registrations cleanup are their real providers' code (unpickled from the state, as the
    dynamic provider host does), calling this cloud's EC2, SSM and API server.

    Records a Node deleted while its instance was not yet terminated (its kubelet registers it
    again, and a live host loses its Node), and an instance terminated by a cleanup although it
    does not carry this stack's tag."""

    def __init__(self, state: State, tag: tuple[str, str]):
        self.tag = tag
        self.clock = 0
        #: Instance id -> {"state", "tags", "name", "launched"}.
        self.instances: dict[str, dict[str, Any]] = {}
        #: mi-… -> {"activation", "instance", "registered"}.
        self.registrations: dict[str, dict[str, Any]] = {}
        #: Node name -> {"labels", "instance"}.
        self.nodes: dict[str, dict[str, Any]] = {}
        #: Outputs of the stale-node sweeps, by URN, as the state holds them.
        self.sweeps: dict[str, dict[str, Any]] = {}
        self.wrongly_deleted: list[str] = []
        self.foreign_terminated: list[str] = []
        for reg in state.current.values():
            self._created(reg)

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _created(self, reg) -> None:
        if reg.type == INSTANCE and reg.name.startswith("hybrid-hosts-"):
            tags = plain(reg.inputs.get("tags") or {})
            self.instances[reg.id] = {"state": "running", "tags": dict(tags),
                                      "name": reg.name, "launched": self._tick()}
            mi = f"mi-{len(self.registrations) + 1:017x}"
            self.registrations[mi] = {"activation": activation_of(reg), "instance": reg.id,
                                      "registered": self._tick()}
            self.nodes[mi] = {"labels": labels_of(reg), "instance": reg.id}
        elif reg.type == STALE_NODES:
            self.sweeps[reg.urn] = plain(reg.outputs)

    # -- what the providers call --------------------------------------------------------------

    def _describe_instances(self, InstanceIds: list[str]) -> dict:
        [instance] = InstanceIds
        if instance not in self.instances:
            raise _client_error("InvalidInstanceID.NotFound", "DescribeInstances")
        found = self.instances[instance]
        answer = {"InstanceId": instance, "State": {"Name": found["state"]},
                  "Tags": [{"Key": k, "Value": v} for k, v in found["tags"].items()],
                  "LaunchTime": found["launched"]}
        if found["state"] == "shutting-down":
            found["state"] = "terminated"  # seen shutting down once: the wait is real
        return {"Reservations": [{"Instances": [answer]}]}

    def _terminate(self, instance: str, by_cleanup: bool) -> None:
        found = self.instances[instance]
        if by_cleanup and found["tags"].get(self.tag[0]) != self.tag[1]:
            self.foreign_terminated.append(f"{instance} ({found['name']}, tags {found['tags']})")
        if found["state"] != "terminated":
            found["state"] = "shutting-down"

    def _terminate_instances(self, InstanceIds: list[str]) -> dict:
        for instance in InstanceIds:
            if instance not in self.instances:
                raise _client_error("InvalidInstanceID.NotFound", "TerminateInstances")
            self._terminate(instance, by_cleanup=True)
        return {}

    def _describe_instance_information(self, Filters: list[dict], **_page: Any) -> dict:
        wanted = {f["Key"]: set(f["Values"]) for f in Filters}
        found = [{"InstanceId": mi, "ActivationId": r["activation"],
                  "RegistrationDate": r["registered"]}
                 for mi, r in self.registrations.items()
                 if mi in wanted.get("InstanceIds", {mi})
                 and r["activation"] in wanted.get("ActivationIds", {r["activation"]})]
        return {"InstanceInformationList": found}

    def _deregister_managed_instance(self, InstanceId: str) -> dict:
        if self.registrations.pop(InstanceId, None) is None:
            raise _client_error("InvalidInstanceId", "DeregisterManagedInstance")
        return {}

    def _api(self, _opener: Any, method: str, url: str, _token: str, allow_404: bool = False,
             **_kwargs: Any) -> Optional[dict]:
        parsed = urlparse(url)
        if method == "GET" and parsed.path == "/api/v1/nodes":
            terms = [t for t in parse_qs(parsed.query)["labelSelector"][0].split(",") if t]
            wanted = dict(t.split("=", 1) for t in terms)
            return {"items": [{"metadata": {"name": name, "labels": dict(node["labels"])}}
                              for name, node in self.nodes.items()
                              if all(node["labels"].get(k) == v for k, v in wanted.items())],
                    "metadata": {}}
        if method == "DELETE" and parsed.path.startswith("/api/v1/nodes/"):
            name = unquote(parsed.path.rsplit("/", 1)[1])
            node = self.nodes.pop(name, None)
            if node is None:
                return None if allow_404 else {}
            host = self.instances.get(node["instance"])
            if host is not None and host["state"] != "terminated":
                self.wrongly_deleted.append(
                    f"{name}, the Node of {host['name']} ({node['instance']}, {host['state']})")
            return {}
        raise AssertionError(f"the model serves no {method} {url}")

    def _provider(self, reg, outputs: dict) -> Any:
        provider = dill.loads(base64.b64decode(plain(outputs["__provider"])))
        clients = {"ec2": type("Ec2", (), {
                       "describe_instances": staticmethod(self._describe_instances),
                       "terminate_instances": staticmethod(self._terminate_instances)})(),
                   "ssm": type("Ssm", (), {
                       "describe_instance_information":
                           staticmethod(self._describe_instance_information),
                       "deregister_managed_instance":
                           staticmethod(self._deregister_managed_instance)})()}
        provider._aws_client = lambda service, _region, **_kw: clients[service]
        provider._bearer_token = lambda *_args: "token"
        provider._opener = lambda _ca: None
        provider._call = self._api
        provider._cluster_is_gone = lambda *_args: False
        for name in ("terminate_interval_seconds", "poll_interval_seconds", "retry_base_seconds"):
            setattr(provider, name, 0)
        return provider

    # -- the steps ----------------------------------------------------------------------------

    def run(self, done: list[Step]) -> None:
        """Runs ``done`` in order; raises StepFailed at the first step whose provider raises."""
        for step in done:
            reg = step.reg
            try:
                if reg.type == INSTANCE and reg.name.startswith("hybrid-hosts-"):
                    if step.op == "create":
                        self._created(reg)
                    elif step.op == "delete" and reg.id in self.instances:
                        # terminateInstance: InvalidInstanceID.NotFound or terminated is done.
                        self._terminate(reg.id, by_cleanup=False)
                        self.instances[reg.id]["state"] = "terminated"
                elif reg.type == NODE_CLEANUP and step.op == "delete":
                    outputs = plain(reg.outputs)
                    self._provider(reg, outputs).delete(reg.id, outputs)
                elif reg.type == STALE_NODES and step.op == "update":
                    news = plain(reg.outputs)
                    self._provider(reg, news).update(reg.id, self.sweeps[reg.urn], news)
                    self.sweeps[reg.urn] = news
                elif reg.type == STALE_NODES and step.op == "create":
                    self.sweeps[reg.urn] = plain(reg.outputs)
                elif reg.type == SSM_CLEANUP and step.op == "delete":
                    outputs = plain(reg.outputs)
                    self._provider(reg, outputs).delete(reg.id, outputs)
            except Exception as error:  # noqa: BLE001 the engine fails the step
                raise StepFailed(f"{step.op} {reg.name} ({step.why}): {error}") from error

    def billed(self, state: State) -> list[str]:
        """What is left running, registered or billed without a host of ``state`` behind it:
        Nodes and registrations of instances that are not running, and running instances the
        state does not hold."""
        live = {i for i, found in self.instances.items() if found["state"] == "running"}
        held = {r.id for r in state.current.values()
                if r.type == INSTANCE and r.name.startswith("hybrid-hosts-")}
        return sorted(
            [f"Node {n} of {self.instances[node['instance']]['name']}"
             for n, node in self.nodes.items() if node["instance"] not in live] +
            [f"registration {mi} of {self.instances[r['instance']]['name']}"
             for mi, r in self.registrations.items() if r["instance"] not in live] +
            [f"instance {i} ({self.instances[i]['name']}), not in the state"
             for i in sorted(live - held)])


def stack_tag(run: ProgramRun) -> tuple[str, str]:
    return next(iter(run.lab_config.lab_tag.items()))


def test_a_host_is_deleted_before_its_replacement_is_created(transition):
    t, replaces = transition
    order = steps(State.of(t.old), t.new, t.fresh)
    index = {(s.op, s.urn): i for i, s in enumerate(order)}
    replaced_hosts = set(hosts(t.old).values()) & set(t.plan.replaced)
    assert bool(replaced_hosts) == replaces
    for urn in replaced_hosts:
        ops = [(s.op, s.why) for s in order if s.urn == urn]
        assert ops == [("delete", "replace (delete first)"), ("create", "replace (delete first)")]
    for name, urn in hosts(t.new).items():
        if urn not in replaced_hosts:
            continue
        # Its cleanup, whose instanceId comes from the host, is deleted before it (and ends
        # it), and created again after the new host, whose id it takes.
        cleanup = cleanup_of(t.new, name).urn
        assert [(s.op, s.why) for s in order if s.urn == cleanup] == [
            ("delete", DEPENDENT_DELETE), ("create", DEPENDENT_RECREATE)]
        assert index[("delete", cleanup)] < index[("delete", urn)] < index[("create", urn)] \
            < index[("create", cleanup)]
        # A new generation, a new token: created first (the new host boots with it), the old
        # one deleted at the end. The sweep is updated to the new instance, never replaced.
        token = token_of(t.new, name).urn
        assert [(s.op, s.why) for s in order if s.urn == token] == [
            ("create", "replace (create first)"), ("delete", "pending delete")]
        assert index[("create", token)] < index[("create", urn)]
        sweep = t.new.one(STALE_NODES, f"{name}-stale-nodes").urn
        assert [s.op for s in order if s.urn == sweep] == ["update"]


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


def _node_cleanup_deletes(order: list[Step]) -> list[Step]:
    return [s for s in order if s.reg.type == NODE_CLEANUP and s.op == "delete"]


def test_an_update_deletes_no_live_hosts_node_and_leaves_none_billed(transition):
    t, replaces = transition
    state = State.of(t.old)
    cloud = Cloud(state, stack_tag(t.old))
    order = steps(state, t.new, t.fresh)
    cloud.run(order)
    assert cloud.wrongly_deleted == []
    assert cloud.foreign_terminated == []
    assert cloud.billed(apply(state, order)) == []
    # Not vacuous: where hosts are replaced, their cleanups' deletes ran and ended them.
    assert bool(_node_cleanup_deletes(order)) == replaces


#: Transitions to interrupt, and whether reverting brings the hosts' generation back (not for
#: a new activation: reverting its setting makes a third activation, with an id of its own).
INTERRUPTED = [("kubernetes-version-with-gpu", True), ("join-script", True),
               ("activation-generation", False)]

_FRESH: dict[tuple, ProgramRun] = {}


def _fresh(config: dict, replaced: set[str], epoch: int) -> ProgramRun:
    key = (tuple(sorted(config.items())), frozenset(replaced), epoch)
    if key not in _FRESH:
        _FRESH[key] = fresh_ids_run(config, replaced, epoch=epoch)
    return _FRESH[key]


@pytest.mark.parametrize("key,generation_returns", INTERRUPTED, ids=[k for k, _ in INTERRUPTED])
def test_an_interrupted_update_then_a_revert_leaves_nothing_billed(key, generation_returns,
                                                                 tmp_path_factory):
    """A -> B stops after any of its steps (no capacity, the quota, Ctrl-C, a failed call);
    then A again. At no point is a live host's Node deleted, and once the revert is done no
    instance, Node or registration is left without a host of the state behind it."""
    t = _transition(key, tmp_path_factory)
    update = steps(State.of(t.old), t.new, t.fresh)
    assert _node_cleanup_deletes(update), "no cleanup ends a host: nothing to interrupt"
    saw_pending_cleanup = saw_generation = False
    for stop in range(1, len(update) + 1):
        state = State.of(t.old)
        cloud = Cloud(state, stack_tag(t.old))
        cloud.run(update[:stop])
        state = apply(state, update[:stop])
        saw_pending_cleanup |= any(r.type == HOST_TOKEN for r in state.pending)
        revert_plan = plan(state, t.old)
        again = _fresh(t.old.config, set(revert_plan.replaced), 2)
        revert = steps(state, t.old, again)
        cloud.run(revert)
        state = apply(state, revert)
        where = f"stopped after step {stop} ({update[stop - 1].op} {update[stop - 1].reg.name})"
        assert state.pending == [], where
        assert cloud.wrongly_deleted == [], where
        assert cloud.foreign_terminated == [], where
        assert cloud.billed(state) == [], where
        if stop == len(update) - 1:
            # The revert's hosts boot A's generation again (not for a new activation).
            saw_generation = all(
                state.current[token_of(t.old, n).urn].inputs["generation"] ==
                token_of(t.old, n).inputs["generation"] for n in hosts(t.old))
    assert saw_pending_cleanup, "no stop left an old token pending delete"
    assert saw_generation == generation_returns


def test_a_host_re_created_alone_leaves_nothing_billed():
    """`pulumi up --replace <host>` re-creates the host with the same user data, so the same
    token. Its cleanup takes the instance id, so it is deleted first (ending the old host and
    removing its Node) and created again; its stale-node sweep, updated to the new instance,
    still exists and finds nothing the old host left."""
    old = run_lab()
    host = hosts(old)["hybrid-hosts-node-0"]
    state = State.of(old)
    cloud = Cloud(state, stack_tag(old))
    fresh = fresh_ids_run(old.config, {host}, epoch=3)
    order = steps(state, old, fresh, replace=frozenset({host}))
    assert [(s.op, s.why) for s in order if s.urn == host] == [
        ("delete", "replace (delete first)"), ("create", "replace (delete first)")]
    cleanup = cleanup_of(old, "hybrid-hosts-node-0").urn
    assert [(s.op, s.why) for s in order if s.urn == cleanup] == [
        ("delete", DEPENDENT_DELETE), ("create", DEPENDENT_RECREATE)]
    assert not any(s.reg.type == HOST_TOKEN for s in order)
    sweep = old.one(STALE_NODES, "hybrid-hosts-node-0-stale-nodes").urn
    assert [s.op for s in order if s.urn == sweep] == ["update"]
    cloud.run(order)
    assert cloud.wrongly_deleted == []
    assert cloud.billed(apply(state, order)) == []
    # The new host's Node is there: the new cleanup's selector finds it.
    new_cleanup = fresh.by_urn[cleanup]
    assert [n for n, node in cloud.nodes.items()
            if selects(selector_of(new_cleanup), node["labels"])] != []


def test_lowering_below_hybrid_leaves_nothing_billed():
    """A staged teardown: upToLayer lowered below hybrid while the cluster stays. Each cleanup
    is deleted before its host (it depends on it) and ends it; the registrations cleanup goes
    with the activation; no instance, Node or registration is left."""
    full, lowered = run_lab(upToLayer="hybrid"), run_lab(upToLayer="cluster")
    state = State.of(full)
    cloud = Cloud(state, stack_tag(full))
    order = steps(state, lowered, lowered)
    index = {(s.op, s.urn): i for i, s in enumerate(order)}
    for name, urn in hosts(full).items():
        cleanup = cleanup_of(full, name).urn
        assert index[("delete", cleanup)] < index[("delete", urn)], name
    cloud.run(order)
    assert cloud.wrongly_deleted == [] and cloud.foreign_terminated == []
    assert cloud.nodes == {} and cloud.registrations == {}
    assert {i: f["state"] for i, f in cloud.instances.items()} == {
        h.id: "terminated" for h in (full.by_urn[u] for u in hosts(full).values())}
    assert cloud.billed(apply(state, order)) == []


def test_a_cleanup_never_terminates_an_instance_without_the_stacks_tag():
    """A host whose instance does not carry this stack's tag (retagged by hand, or an id that
    is not this stack's host): its cleanup's delete refuses to terminate it, keeps its Node,
    and fails the update there — the instance runs on."""
    old = run_lab()
    state = State.of(old)
    cloud = Cloud(state, stack_tag(old))
    host = old.by_urn[hosts(old)["hybrid-hosts-node-0"]]
    key, _ = stack_tag(old)
    cloud.instances[host.id]["tags"][key] = "someone-else/prod"
    order = steps(state, run_lab(upToLayer="cluster"), run_lab(upToLayer="cluster"))
    with pytest.raises(StepFailed, match="does not carry this stack's tag"):
        cloud.run(order)
    assert cloud.foreign_terminated == []
    assert cloud.instances[host.id]["state"] == "running"
    assert [n for n, node in cloud.nodes.items() if node["instance"] == host.id] != []
