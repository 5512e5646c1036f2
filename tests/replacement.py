"""A replacement model: which resources `pulumi up` would replace going from one offline run to
another, by the engine's and the providers' rules, ported.

- **replaceOnChanges**: a changed property named there replaces the resource (the engine).
- **Provider-forced replacement**, for the types on the hybrid hosts' input path: the
  Terraform schema's ForceNew properties that pulumi-aws inherits (pulumi/terraform-provider-aws
  internal/service/ec2/ec2_instance.go, ssm/activation.go). ``aws_instance``'s ``user_data`` is
  ForceNew only with ``user_data_replace_on_change`` (its CustomizeDiff ``ForceNewIf``).
- **Dynamic providers** (the lab's cleanups, the expiry): the engine asks the provider, so the
  model calls the real provider's ``diff`` — unpickled from the new registration's
  ``__provider``, as the dynamic provider host does — with the old *outputs* as ``olds`` and the
  new inputs as ``news``.
- **ignoreChanges**: the engine copies the old value over the new before diffing.
- **Unknowns**: in a preview a replaced resource's outputs are unknown, so an input whose
  property dependencies include a replaced resource is unknown, hence changed — and replaces the
  dependent if that property forces replacement. Only custom resources are diffed.

A type with changed inputs and no rule here is reported in ``unmodelled`` rather than guessed.

``fresh_ids_run`` re-runs the new config against a cloud that gives the replaced resources new
ids (a real replacement does): the values that flow from them — the activation id in a host's
labels, a cleanup's token — are then what the new generation really gets.

``steps`` orders an update the way the engine does (pulumi/pulumi
pkg/resource/deploy/step_generator.go):

- resources are stepped in registration order; a created one is created;
- a replaced resource is replaced **create-before-delete** by default — its new copy is
  created in its turn and the old one is marked pending delete — or **delete-before-create**
  when its ``deleteBeforeReplace`` option (or, without one, its provider's diff) says so: then
  the dependents that a new copy of it would replace are deleted first, dependents first
  (``calculateDependentReplacements``), then the old copy, and the new one is created
  (``continueStepsFromDiff``);
- after every registration the resources the program no longer registers and the pending
  deletes are deleted, dependents first (``GenerateDeletes``, ``ScheduleDeletes``). A pending
  delete left by an update that failed is deleted at the end of the next one, whatever that
  one registers.

``State`` is what the engine's snapshot holds after an update — all of it, or the part done
before a step failed — so the next update can be planned and stepped against it.
"""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass, field
from typing import Any, Mapping

import dill
from pulumi.runtime import rpc

from offline.fake_cloud import FakeCloud
from offline.runner import ProgramRun, Registration, Secret, run_program

UNKNOWN = rpc.UNKNOWN
DYNAMIC_PREFIX = "pulumi-python:dynamic"

#: ForceNew top-level properties (camelCase) per type, from the Terraform schemas pulumi-aws
#: wraps. Only what the lab sets and the hybrid hosts' inputs flow through; a changed property
#: not listed is an in-place update (e.g. ``instanceType``: resized by stop/modify/start).
FORCE_NEW: dict[str, frozenset[str]] = {
    # internal/service/ec2/ec2_instance.go: ami, associate_public_ip_address, subnet_id,
    # availability_zone, private_ip, key_name, root_block_device.encrypted ... are ForceNew;
    # instance_type, vpc_security_group_ids, metadata_options, tags are not.
    "aws:ec2/instance:Instance": frozenset({
        "ami", "associatePublicIpAddress", "availabilityZone", "subnetId", "privateIp",
        "keyName", "tenancy", "placementGroup", "hostId", "launchTemplate", "hibernation",
        "ebsOptimized", "cpuCoreCount", "cpuThreadsPerCore", "ephemeralBlockDevices",
        "ipv6AddressCount", "ipv6Addresses", "securityGroups"}),
    # internal/service/ssm/activation.go: every argument is ForceNew (tags too).
    "aws:ssm/activation:Activation": frozenset({
        "name", "description", "expirationDate", "iamRole", "registrationLimit", "tags"}),
}
FORCE_NEW["aws:eks/cluster:Cluster"] = frozenset({
    # internal/service/eks/cluster.go: name, bootstrap_self_managed_addons are ForceNew.
    "name", "bootstrapSelfManagedAddons"})
#: Nested ForceNew fields: (property, field).
FORCE_NEW_NESTED: dict[str, frozenset[tuple[str, str]]] = {
    "aws:ec2/instance:Instance": frozenset({("rootBlockDevice", "encrypted"),
                                            ("rootBlockDevice", "kmsKeyId")}),
    "aws:eks/cluster:Cluster": frozenset({("accessConfig",
                                           "bootstrapClusterCreatorAdminPermissions")}),
}
#: Properties the same schemas update in place (no ForceNew). A changed property of a type
#: above that is in neither set is reported as unmodelled, not guessed.
UPDATABLE: dict[str, frozenset[str]] = {
    # instance_type: stop, modify, start; root_block_device volume_size/volume_type: modified.
    "aws:ec2/instance:Instance": frozenset({
        "instanceType", "vpcSecurityGroupIds", "metadataOptions", "tags", "rootBlockDevice",
        "userData", "userDataReplaceOnChange"}),
    "aws:ssm/activation:Activation": frozenset(),
    # version: an in-place upgrade (UpdateClusterVersion).
    "aws:eks/cluster:Cluster": frozenset({"version", "tags", "accessConfig"}),
}


@dataclass
class Plan:
    #: URN -> the properties that force its replacement.
    replaced: dict[str, list[str]] = field(default_factory=dict)
    updated: set[str] = field(default_factory=set)
    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    #: URN -> changed properties of a type the model has no replacement rule for.
    unmodelled: dict[str, list[str]] = field(default_factory=dict)

    @property
    def noop(self) -> bool:
        return not (self.replaced or self.updated or self.created or self.deleted)


def plain(value: Any) -> Any:
    if isinstance(value, Secret):
        return plain(value.value)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _dynamic_diff(old: Registration, news: dict[str, Any]) -> list[str]:
    """The replacing keys the real dynamic provider's diff() answers."""
    blob = news.get("__provider")
    if blob == UNKNOWN:
        blob = old.outputs["__provider"]
    provider = dill.loads(base64.b64decode(plain(blob)))
    return list(provider.diff(old.id, plain(old.outputs), news).replaces or [])


def _changed(olds: Mapping[str, Any], news: Mapping[str, Any]) -> set[str]:
    return {k for k in set(olds) | set(news) if olds.get(k) != news.get(k)}


def plan(old: "ProgramRun | State", new: ProgramRun,
         replace: frozenset[str] = frozenset()) -> Plan:
    """What ``pulumi up`` of ``new`` does to ``old`` (a run, or a ``State``: its current
    resources, not its pending deletes); ``replace``: the URNs given to ``--replace``, which
    the engine replaces whatever their diff (step_generator.go isTargetedReplace)."""
    result = Plan()
    olds = {r.urn: r for r in old.resources()}
    news = {r.urn: r for r in new.resources()}
    result.created = set(news) - set(olds)
    result.deleted = set(olds) - set(news)
    # Registration order is a topological order: a resource registers after what it uses.
    for reg in new.resources():
        before = olds.get(reg.urn)
        if before is None:
            continue
        inputs = plain(reg.inputs)
        for prop, sources in reg.property_dependencies.items():
            if prop in inputs and any(s in result.replaced for s in sources):
                inputs[prop] = UNKNOWN
        previous = plain(before.inputs)
        for prop in reg.options.get("ignoreChanges") or []:
            if prop in previous:
                inputs[prop] = previous[prop]
            else:
                inputs.pop(prop, None)
        changed = _changed(previous, inputs) - {"__provider"}
        provider_changed = previous.get("__provider") != inputs.get("__provider")
        if reg.urn in replace:
            result.replaced[reg.urn] = ["--replace"]
            continue
        if not changed and not provider_changed:
            continue
        replace_on = set(reg.options.get("replaceOnChanges") or [])
        forcing = sorted(p for p in changed if p in replace_on or "*" in replace_on)
        if reg.type.startswith(DYNAMIC_PREFIX):
            forcing += [p for p in _dynamic_diff(before, inputs) if p not in forcing]
        elif reg.type in FORCE_NEW:
            forcing += sorted(p for p in changed if p in FORCE_NEW[reg.type])
            unknown = sorted(changed - FORCE_NEW[reg.type] - UPDATABLE[reg.type])
            if unknown:
                result.unmodelled[reg.urn] = unknown
            for prop, sub in FORCE_NEW_NESTED.get(reg.type, ()):
                if prop in changed and (inputs.get(prop) == UNKNOWN or
                                        (previous.get(prop) or {}).get(sub) !=
                                        (inputs.get(prop) or {}).get(sub)):
                    forcing.append(f"{prop}.{sub}")
            # ec2_instance.go CustomizeDiff: ForceNewIf("user_data", user_data_replace_on_change).
            if reg.type == "aws:ec2/instance:Instance" and "userData" in changed \
                    and inputs.get("userDataReplaceOnChange"):
                forcing.append("userData")
        elif changed:
            result.unmodelled[reg.urn] = sorted(changed)
        if forcing:
            result.replaced[reg.urn] = sorted(set(forcing))
        else:
            result.updated.add(reg.urn)
    return result


def _type_and_name(urn: str) -> tuple[str, str]:
    # urn:pulumi:<stack>::<project>::<parent types $ ...>$<type>::<name>
    types, name = urn.rsplit("::", 1)
    return types.rsplit("::", 1)[-1].rsplit("$", 1)[-1], name


class FreshIdsCloud(FakeCloud):
    """The fake cloud, but the resources named in ``replaced`` (URNs) come back with new ids and
    computed outputs, as a re-created resource does."""

    def __init__(self, replaced: set[str], epoch: int = 1, **kwargs: Any):
        super().__init__(**kwargs)
        self._replaced_names = {_type_and_name(urn) for urn in replaced}
        self.epoch = epoch

    def new_resource(self, args):
        if (args.typ, args.name) in self._replaced_names:
            args = copy.copy(args)
            args.name = f"{args.name}-replacement-{self.epoch}"
        return super().new_resource(args)


def fresh_ids_run(config: Mapping[str, str], replaced: set[str], epoch: int = 1) -> ProgramRun:
    """``config`` run against a cloud that gives the resources in ``replaced`` new ids and
    outputs; ``epoch`` tells one later creation of a resource from another."""
    return run_program(dict(config), cloud=FreshIdsCloud(
        replaced, epoch=epoch, region=config.get("aws:region") or "us-east-1"))


def input_path(run: ProgramRun, urns: set[str]) -> set[str]:
    """``urns`` and every resource whose outputs flow into them (property dependencies)."""
    seen: set[str] = set()
    todo = list(urns)
    while todo:
        urn = todo.pop()
        if urn in seen or urn not in run.by_urn:
            continue
        seen.add(urn)
        todo += [s for sources in run.by_urn[urn].property_dependencies.values() for s in sources]
    return seen


# --- the order of an update, and the state it leaves ---------------------------------------------


@dataclass
class Step:
    #: "create", "update" or "delete".
    op: str
    urn: str
    #: The registration the step acts on: the new one for a create or update, the deleted
    #: copy's for a delete.
    reg: Registration
    #: Why: "new", "replace (delete first)", "replace (create first)", "pending delete",
    #: "dependent of a delete-first replacement", "removed", "changed".
    why: str


@dataclass
class State:
    """The engine's snapshot: current resources by URN, and the copies pending delete."""

    current: dict[str, Registration] = field(default_factory=dict)
    pending: list[Registration] = field(default_factory=list)

    @classmethod
    def of(cls, run: ProgramRun) -> "State":
        return cls(current={r.urn: r for r in run.resources()})

    def resources(self) -> list[Registration]:
        return list(self.current.values())


def _delete_first(reg: Registration, before: Registration, news: dict[str, Any]) -> bool:
    """The engine's choice for a replacement: the resource's deleteBeforeReplace option when
    set, else its provider's diff (only dynamic providers are asked here; pulumi-aws asks for
    delete-first only for resources whose names must be unique, none of which the hosts'
    path holds)."""
    option = reg.options.get("deleteBeforeReplace")
    if option:
        return True
    if reg.type.startswith(DYNAMIC_PREFIX):
        blob = news.get("__provider")
        if blob == UNKNOWN:
            blob = before.outputs["__provider"]
        provider = dill.loads(base64.b64decode(plain(blob)))
        return bool(provider.diff(before.id, plain(before.outputs), news).delete_before_replace)
    return False


def _dependents_first(urns: set[str], graph: Mapping[str, Registration]) -> list[str]:
    """``urns`` ordered so that each comes before everything it depends on (ScheduleDeletes:
    a resource is deleted after everything that depends on it)."""
    ordered: list[str] = []
    seen: set[str] = set()

    def visit(urn: str) -> None:
        if urn in seen:
            return
        seen.add(urn)
        for other in sorted(urns):
            if other != urn and urn in graph[other].dependencies:
                visit(other)
        ordered.append(urn)

    for urn in sorted(urns):
        visit(urn)
    return ordered


def steps(state: State, new: ProgramRun, fresh: ProgramRun,
          replace: frozenset[str] = frozenset()) -> list[Step]:
    """The engine's steps for ``pulumi up`` of ``new`` from ``state`` (``--replace`` of the
    URNs in ``replace``), in an order the engine may run them in; created and updated copies
    are ``fresh``'s registrations (their new ids and outputs)."""
    result = plan(state, new, replace)
    out: list[Step] = []
    deleted: set[int] = set()
    pending_now: list[Registration] = []
    graph = dict(state.current)

    def delete(reg: Registration, why: str) -> None:
        if id(reg) not in deleted:
            deleted.add(id(reg))
            out.append(Step("delete", reg.urn, reg, why))

    for reg in new.resources():
        urn = reg.urn
        created = fresh.by_urn[urn]
        if urn in result.created:
            out.append(Step("create", urn, created, "new"))
        elif urn in result.replaced:
            before = state.current[urn]
            if _delete_first(reg, before, plain(reg.inputs)):
                # calculateDependentReplacements: the transitive dependents a new copy would
                # replace go first, dependents before what they depend on.
                dependents = {d for d in result.replaced
                              if d != urn and d in graph and _depends_on(graph, d, urn)}
                for d in _dependents_first(dependents, graph):
                    delete(state.current[d], "dependent of a delete-first replacement")
                delete(before, "replace (delete first)")
                out.append(Step("create", urn, created, "replace (delete first)"))
            else:
                out.append(Step("create", urn, created, "replace (create first)"))
                pending_now.append(before)
        elif urn in result.updated:
            out.append(Step("update", urn, created, "changed"))
    # GenerateDeletes: pending deletes of earlier updates, this update's, and what is no longer
    # registered, dependents first.
    at_end = {**{r.urn: r for r in state.pending}}
    ends = list(state.pending) + pending_now + [state.current[u] for u in result.deleted]
    order = _dependents_first({r.urn for r in ends}, {**graph, **at_end})
    for urn in order:
        for reg in ends:
            if reg.urn == urn:
                delete(reg, "removed" if urn in result.deleted and reg is state.current.get(urn)
                       else "pending delete")
    return out


def _depends_on(graph: Mapping[str, Registration], urn: str, target: str) -> bool:
    todo, seen = list(graph[urn].dependencies), set()
    while todo:
        d = todo.pop()
        if d == target:
            return True
        if d in seen or d not in graph:
            continue
        seen.add(d)
        todo += graph[d].dependencies
    return False


def apply(state: State, done: list[Step]) -> State:
    """The snapshot after ``done``, the steps that ran (all of an update's, or those before
    the one that failed): a copy replaced create-first stays, pending delete, until its
    delete runs."""
    current = dict(state.current)
    pending = list(state.pending)
    for step in done:
        if step.op == "delete":
            if current.get(step.urn) is step.reg:
                del current[step.urn]
            pending = [r for r in pending if r is not step.reg]
        else:
            before = current.get(step.urn)
            if step.why == "replace (create first)" and before is not None:
                pending.append(before)
            current[step.urn] = step.reg
    return State(current=current, pending=pending)
