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
labels, say — are then what the new generation really gets.
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


def plan(old: ProgramRun, new: ProgramRun) -> Plan:
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

    def __init__(self, replaced: set[str], **kwargs: Any):
        super().__init__(**kwargs)
        self._replaced_names = {_type_and_name(urn) for urn in replaced}

    def new_resource(self, args):
        if (args.typ, args.name) in self._replaced_names:
            args = copy.copy(args)
            args.name = f"{args.name}-replacement"
        return super().new_resource(args)


def fresh_ids_run(config: Mapping[str, str], replaced: set[str]) -> ProgramRun:
    return run_program(dict(config), cloud=FreshIdsCloud(
        replaced, region=config.get("aws:region") or "us-east-1"))


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
