"""A replacement model: which resources `pulumi up` would replace going from one offline run to
another, by the engine's and the providers' rules, ported.

- **replaceOnChanges**: a changed property named there replaces the resource (the engine) —
  on a dynamic resource only when its provider's diff leaves the changes unknown (``_roc_keys``).
- **deletedWith**: a resource deleted with one being replaced is replaced too.
- **Provider-forced replacement**, for the types on the hybrid hosts' input path: the
  Terraform schema's ForceNew properties that pulumi-aws inherits (pulumi/terraform-provider-aws
  internal/service/ec2/ec2_instance.go, ssm/activation.go). ``aws_instance``'s ``user_data`` is
  ForceNew only with ``user_data_replace_on_change`` (its CustomizeDiff ``ForceNewIf``).
- **Dynamic providers** (the lab's cleanups, the expiry): the engine asks the provider, so the
  model calls the real provider's ``diff`` — unpickled from the new registration's
  ``__provider``, as the dynamic provider host does — with the old *outputs* as ``olds`` and the
  new inputs as ``news``.
- **ignoreChanges**: the engine copies the old value over the new before diffing.
- **A replaced resource's outputs**: in an up a dependent registers once the new copy exists,
  and is diffed with what that copy really outputs (``fresh``: the run with the replaced
  resources' new ids, ``fresh_ids_run``); an output the re-creation leaves as it was (an echoed
  input) changes nothing — in a preview neither: a dynamic provider's planned outputs are its
  inputs (provider_plugin.go Create, no preview support). Without ``fresh`` such an input is
  taken as unknown, hence changed — which may replace more than the engine does. Only custom
  resources are diffed. A dynamic provider's ``diff`` answering ``changes=False`` is a same
  step, whatever the inputs (DiffNone). A dynamic provider's ``diff`` gets what the dynamic
  provider host passes it: the wire's unknown sentinel deserialized with ``keep_unknowns=True``, a ``pulumi.output.Unknown`` instance, not the
  sentinel string (pulumi/pulumi sdk/python/lib/pulumi/dynamic/__main__.py ``Diff``,
  runtime/rpc.py ``deserialize_property``).

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
  its dependents that must be replaced are deleted first, dependents first, then the old copy,
  and the new one is created (``continueStepsFromDiff``). Which dependents: those of the old
  snapshot's graph (``DependingOn``: dependencies, property dependencies, deletedWith, the
  provider), not yet registered in this update, for which ``requiresReplacement`` says so —
  the dependent's *own old inputs*, each input whose property dependencies include a resource
  of the replace set made unknown, diffed by its provider (``calculateDependentReplacements``).
  No input from the replace set, no replacement: a bare ``dependsOn`` never forces one. A
  replaced dependent joins the replace set, so it cascades. A dependent so deleted is created
  again when it registers, whatever its own diff (``generateSteps``: "re-create replaced
  resource deleted due to dependent DBR");
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
import datetime
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import dill
from google.protobuf import struct_pb2
from pulumi.output import Unknown
from pulumi.runtime import rpc

from offline.fake_cloud import FROZEN_NOW, FakeCloud
from offline.scheduling import node_config_of
from offline.runner import ProgramRun, Registration, Secret, run_program

UNKNOWN = rpc.UNKNOWN
DYNAMIC_PREFIX = "pulumi-python:dynamic"

# _roc_keys: replaceOnChanges turns the *changed keys the provider reports* into replace keys
# (step_generator.go applyReplaceOnChanges, over DiffResult.ChangedKeys). The dynamic provider
# host never reports any (its Diff sends changes, replaces and deleteBeforeReplace, no
# ``diffs``: sdk/python/lib/pulumi/dynamic/__main__.py), so on a dynamic resource whose
# provider's diff answers, replaceOnChanges replaces nothing — the change is an update. Only a
# diff answering ``changes=None`` (DIFF_UNKNOWN) has the engine diff the inputs itself
# (diffResource), and then replaceOnChanges applies. Checked against the real engine
# (tests/test_real_pulumi_replacement.py).

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
FORCE_NEW["aws:eks/nodeGroup:NodeGroup"] = frozenset({
    # internal/service/eks/node_group.go: these are ForceNew; version and release_version are
    # Optional+Computed, updated in place (UpdateNodegroupVersion).
    "amiType", "capacityType", "clusterName", "diskSize", "instanceTypes", "nodeGroupName",
    "nodeGroupNamePrefix", "nodeRoleArn", "remoteAccess", "subnetIds"})
#: Nested ForceNew fields: (property, field).
FORCE_NEW_NESTED: dict[str, frozenset[tuple[str, str]]] = {
    "aws:ec2/instance:Instance": frozenset({("rootBlockDevice", "encrypted"),
                                            ("rootBlockDevice", "kmsKeyId")}),
    "aws:eks/cluster:Cluster": frozenset({("accessConfig",
                                           "bootstrapClusterCreatorAdminPermissions")}),
    # launch_template.0.id / .name are ForceNew; its version is updated in place.
    "aws:eks/nodeGroup:NodeGroup": frozenset({("launchTemplate", "id"), ("launchTemplate", "name")}),
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
    "aws:eks/nodeGroup:NodeGroup": frozenset({
        "version", "releaseVersion", "launchTemplate", "labels", "scalingConfig", "taints",
        "updateConfig", "tags", "forceUpdateVersion", "nodeRepairConfig"}),
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


def as_the_provider_host_passes(props: Mapping[str, Any]) -> dict[str, Any]:
    """``props`` as the dynamic provider host hands them to ``diff``: sent over the wire as a
    Struct (an unknown as the sentinel string ``rpc.UNKNOWN``), deserialized with
    ``keep_unknowns=True`` — so an unknown arrives as a ``pulumi.output.Unknown`` instance
    (sdk/python/lib/pulumi/dynamic/__main__.py ``Diff``)."""
    struct = struct_pb2.Struct()
    struct.update(plain(dict(props)))
    return rpc.deserialize_properties(struct, keep_unknowns=True)


def _dynamic_provider_diff(old: Registration, news: Mapping[str, Any]):
    """The real dynamic provider's DiffResult, called as the dynamic provider host calls it:
    olds are the old outputs, the provider comes from ``news`` unless it is unknown there."""
    olds = as_the_provider_host_passes(old.outputs)
    news = as_the_provider_host_passes(news)
    # The host reads the provider from news (its check against the sentinel string never
    # matches a deserialized Unknown); this lab never computes a provider, so it is known.
    blob = news.get("__provider")
    if blob is None or isinstance(blob, Unknown):
        blob = olds["__provider"]
    provider = dill.loads(base64.b64decode(plain(blob)))
    return provider.diff(old.id, olds, news)


def _changed(olds: Mapping[str, Any], news: Mapping[str, Any]) -> set[str]:
    return {k for k in set(olds) | set(news) if olds.get(k) != news.get(k)}


def plan(old: "ProgramRun | State", new: ProgramRun,
         replace: frozenset[str] = frozenset(), fresh: "ProgramRun | None" = None) -> Plan:
    """What ``pulumi up`` of ``new`` does to ``old`` (a run, or a ``State``: its current
    resources, not its pending deletes); ``replace``: the URNs given to ``--replace``, which
    the engine replaces whatever their diff (step_generator.go isTargetedReplace).

    ``fresh``, the run whose replaced resources have their new ids and outputs
    (``fresh_ids_run``): a dependent is diffed with the value the new copy really outputs, as
    the engine does — an output the re-creation leaves as it was (an echoed input, a name)
    changes nothing (checked against the real engine: tests/test_real_pulumi_replacement.py).
    Without it an input that flows from a replaced resource is unknown, hence changed: a
    replaced set that may hold more than the engine's."""
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
        after = fresh.by_urn.get(reg.urn) if fresh is not None else None
        for prop, sources in reg.property_dependencies.items():
            if prop in inputs and any(s in result.replaced for s in sources):
                inputs[prop] = UNKNOWN if after is None else plain(after.inputs.get(prop))
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
        # Deleted with a resource being replaced: replaced too, whatever its diff (the
        # engine's diff checks this before the provider's; step_generator.go "marked for
        # replacement because ... (its DeletedWith resource) is being replaced").
        if (reg.options.get("deletedWith") or "") in result.replaced:
            result.replaced[reg.urn] = ["deletedWith"]
            continue
        if not changed and not provider_changed:
            continue
        replace_on = set(reg.options.get("replaceOnChanges") or [])
        forcing = sorted(p for p in changed if p in replace_on or "*" in replace_on)
        if reg.type.startswith(DYNAMIC_PREFIX):
            answer = _dynamic_provider_diff(before, inputs)
            if answer.changes is False:
                continue  # DiffNone: a same step, whatever the inputs (step_generator.go)
            if answer.changes is not None:
                forcing = []  # replaceOnChanges sees no changed key: _roc_keys
            forcing += [p for p in answer.replaces or [] if p not in forcing]
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


# --- what a host boots with ---------------------------------------------------------------------


def labels_of(host) -> dict[str, str]:
    """The labels the host's kubelet registers its Node with: its NodeConfig's, with what the
    join script fills in at boot — a mark it replaces (``sed``) by the instance id cloud-init
    answers (``cloud-init query v1.instance_id``), which is this host's id — plus nodeadm's."""
    script = str(plain(host.inputs["userData"]))
    config = node_config_of(script)
    flags = config["spec"]["kubelet"]["flags"]
    [labels] = [f.split("=", 1)[1] for f in flags if f.startswith("--node-labels=")]
    found = dict(item.split("=", 1) for item in labels.split(","))
    for mark, var in re.findall(r'sed -i "s/(@\w+@)/\$(\w+)/" "\$NODE_CONFIG"', script):
        if re.search(rf"^\s*{var}=\$\(cloud-init query (?:v1\.)?instance_id\)", script, re.M):
            found = {k: host.id if v == mark else v for k, v in found.items()}
    return {**found, "eks.amazonaws.com/compute-type": "hybrid"}


def activation_of(host) -> str:
    """The activation the host registers with SSM through (its NodeConfig's)."""
    return node_config_of(str(plain(host.inputs["userData"])))["spec"]["hybrid"]["ssm"][
        "activationId"]



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
            if args.inputs.get("createdAt") == "":
                # A re-creation runs later than the creation it replaces: a provider that reads
                # the clock (the activation's expiry) computes a new time.
                later = datetime.datetime.strptime(FROZEN_NOW, "%Y-%m-%dT%H:%M:%SZ") + \
                    datetime.timedelta(hours=self.epoch)
                args.inputs = {**args.inputs, "createdAt": later.strftime("%Y-%m-%dT%H:%M:%SZ")}
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
        return bool(_dynamic_provider_diff(before, news).delete_before_replace)
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


def depending_on(graph: Mapping[str, Registration], root: str,
                 ignore: frozenset[str] = frozenset()) -> list[str]:
    """The resources of the snapshot ``graph`` (in its order, a topological one) that depend on
    ``root`` directly or not, through dependencies, property dependencies (both in
    ``dependencies``), deletedWith or their provider; children as such are not followed
    (pkg/resource/graph/dependency_graph.go DependingOn, includeChildren=false)."""
    order = list(graph)
    found: list[str] = []
    dependent = {root}
    for urn in order[order.index(root) + 1:]:
        reg = graph[urn]
        if urn in ignore:
            continue
        # A provider reference is "<urn>::<id>".
        edges = {*reg.dependencies, reg.options.get("deletedWith") or "",
                 (reg.provider or "").rsplit("::", 1)[0]}
        if edges & dependent:
            found.append(urn)
            dependent.add(urn)
    return found


def requires_replacement(reg: Registration, replace_set: set[str]) -> list[str]:
    """step_generator.go calculateDependentReplacements, ``requiresReplacement``: the keys for
    which a dependent must be replaced when the resources in ``replace_set`` are — [] for none.

    The dependent's own old inputs, each one whose property dependencies include a resource of
    the replace set swapped for an unknown (``resource.MakeComputed``), diffed against its old
    outputs by its provider with unknowns allowed; then its replaceOnChanges. The replaced
    resource's outputs are not involved."""
    if not reg.custom:
        return []
    provider_urn = (reg.provider or "").rsplit("::", 1)[0]
    if provider_urn in replace_set or (reg.options.get("deletedWith") or "") in replace_set:
        return ["(provider or deletedWith replaced)"]
    olds = plain(reg.inputs)
    inputs = dict(olds)
    unknown = set()
    for prop in olds:
        if any(dep in replace_set for dep in reg.property_dependencies.get(prop) or ()):
            inputs[prop] = UNKNOWN
            unknown.add(prop)
    if not unknown:
        return []  # a bare dependsOn edge never forces a replacement
    # diffResource applies the dependent's ignoreChanges to the inputs it diffs.
    for prop in reg.options.get("ignoreChanges") or []:
        if prop in olds:
            inputs[prop] = olds[prop]
            unknown.discard(prop)
    roc_unknown = set(unknown)
    if reg.type.startswith(DYNAMIC_PREFIX):
        answer = _dynamic_provider_diff(reg, inputs)
        keys = list(answer.replaces or [])
        if answer.changes is not None:
            roc_unknown = set()  # replaceOnChanges sees no changed key: _roc_keys
    elif reg.type in FORCE_NEW:
        # The bridge (a Terraform schema diff): an unknown ForceNew attribute requires a new
        # resource; so does user_data under user_data_replace_on_change (ec2_instance.go).
        keys = sorted(p for p in unknown if p in FORCE_NEW[reg.type])
        keys += [f"{p}.{sub}" for p, sub in FORCE_NEW_NESTED.get(reg.type, ()) if p in unknown]
        if reg.type == "aws:ec2/instance:Instance" and "userData" in unknown \
                and inputs.get("userDataReplaceOnChange"):
            keys.append("userData")
    else:
        raise NotImplementedError(
            f"no replacement rule for {reg.type} ({reg.name}), whose {sorted(unknown)} come from "
            f"a resource replaced delete-first: the model does not guess")
    replace_on = set(reg.options.get("replaceOnChanges") or [])
    keys += [p for p in sorted(roc_unknown) if (p in replace_on or "*" in replace_on)
             and p not in keys]
    return keys


def dependent_replacements(graph: Mapping[str, Registration], root: str,
                           registered: frozenset[str] = frozenset()) -> list[tuple[str, list[str]]]:
    """The dependents deleted before ``root`` is replaced delete-first, in dependency order,
    with their replace keys (calculateDependentReplacements); ``registered``: the URNs this
    update has already registered, which cannot depend on ``root`` (impossibleDependents)."""
    replace_set = {root}
    found: list[tuple[str, list[str]]] = []
    for urn in depending_on(graph, root, registered):
        keys = requires_replacement(graph[urn], replace_set)
        if keys:
            found.append((urn, keys))
            replace_set.add(urn)
    return found


#: Why a step runs, for a dependent deleted ahead of a delete-first replacement, and for its
#: creation when it registers again.
DEPENDENT_DELETE = "dependent of a delete-first replacement"
DEPENDENT_RECREATE = "re-created after a delete-first dependency"


def steps(state: State, new: ProgramRun, fresh: ProgramRun,
          replace: frozenset[str] = frozenset()) -> list[Step]:
    """The engine's steps for ``pulumi up`` of ``new`` from ``state`` (``--replace`` of the
    URNs in ``replace``), in an order the engine may run them in; created and updated copies
    are ``fresh``'s registrations (their new ids and outputs).

    Which resources are replaced is decided as :func:`plan` does with ``fresh``: a dependent
    of a replaced resource gets the value the new copy really outputs (an up's answer; the
    real engine's, preview's too, for an output the re-creation leaves as it was: an echoed
    input). ``fresh`` given as ``new`` itself carries no new outputs: every input from a
    replaced resource is then unknown, which may replace more than the engine does."""
    result = plan(state, new, replace, fresh=None if fresh is new else fresh)
    out: list[Step] = []
    deleted: set[int] = set()
    pending_now: list[Registration] = []
    graph = dict(state.current)
    #: Dependents deleted ahead of a delete-first replacement: created again in their turn.
    recreate: set[str] = set()
    registered: set[str] = set()

    def delete(reg: Registration, why: str) -> None:
        if id(reg) not in deleted:
            deleted.add(id(reg))
            out.append(Step("delete", reg.urn, reg, why))

    for reg in new.resources():
        urn = reg.urn
        registered.add(urn)
        created = fresh.by_urn[urn]
        if urn in recreate:
            out.append(Step("create", urn, created, DEPENDENT_RECREATE))
        elif urn in result.created:
            out.append(Step("create", urn, created, "new"))
        elif urn in result.replaced:
            before = state.current[urn]
            if _delete_first(reg, before, plain(reg.inputs)):
                # calculateDependentReplacements, then their deletes in reverse dependency
                # order, skipping one already deleted for another delete-first replacement.
                dependents = dependent_replacements(graph, urn, frozenset(registered))
                for d, _keys in reversed(dependents):
                    delete(state.current[d], DEPENDENT_DELETE)
                    recreate.add(d)
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
