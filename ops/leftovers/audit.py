"""The leftovers audit: what one stack of the lab caused in an AWS account and is still there.

Run after ``pulumi destroy`` (``python -m ops.leftovers``). Read-only: every AWS request is a
Describe, List or Get call. Each check takes a boto3 ``Session`` and a ``Scope`` and returns
``Leftover`` records; ``scan`` runs them all and collects what could not be looked at.

What is in scope, and nothing else:

- anything carrying the lab tag ``eks-hybrid-lab:stack=<project>/<stack>`` (the provider's default
  tags put it on every AWS resource of the stack; the EC2NodeClass passes it on to Karpenter's
  instances and launch templates);
- what Karpenter made for this cluster, told by its tags (``kubernetes.io/cluster/<c>=owned``
  plus ``karpenter.sh/nodepool`` or ``karpenter.k8s.aws/ec2nodeclass``; instance profiles also
  ``topology.kubernetes.io/region=<region>``, IAM being global);
- the SSM managed instances (``mi-…``) registered for this cluster (tag ``EKSClusterARN``, which
  the activation copies onto them) or carrying the lab tag;
- routes to (or inside) the hybrid pod CIDR in the route tables of the lab's VPCs, which the
  hybrid nodes gateway writes and Pulumi never owns;
- things named after the cluster: the EKS cluster, its control-plane log group
  ``/aws/eks/<c>/cluster`` and Karpenter's interruption queue ``<c>-karpenter``.

Whatever the API's filters return is checked again here (moto, for one, ignores some filters),
and anything that carries the lab tag of *another* stack is never listed, even when it matches
by cluster name (two stacks can use the same cluster name one after the other).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

NODEPOOL_TAG = "karpenter.sh/nodepool"
NODECLASS_TAG = "karpenter.k8s.aws/ec2nodeclass"
EKS_NAME_TAG = "eks:eks-cluster-name"
REGION_TAG = "topology.kubernetes.io/region"

from ops.leftovers.prices import HOURLY_USD, INSTANCE_HOURLY_USD
from ops.leftovers.answers import NotAnAwsAnswer, refuse_html_answers


# --- what the checks return ----------------------------------------------------------------------

@dataclass(frozen=True)
class Leftover:
    kind: str
    id: str
    region: str
    detail: str
    hourly_usd: Optional[float]
    remove: str


@dataclass(frozen=True)
class Scope:
    """What belongs to one stack. ``account`` and ``partition`` come from STS (``identify``)."""
    stack: str
    region: str
    cluster_name: str
    hybrid_pod_cidr: ipaddress.IPv4Network
    lab_tag_key: str
    lab_tag_value: str
    account: Optional[str] = None
    partition: str = "aws"
    #: Prices for this region, replacing HOURLY_USD / INSTANCE_HOURLY_USD entries (the lab
    #: passes its own price table, stacks/costs.py, so the two never disagree).
    hourly_usd: Mapping[str, float] = field(default_factory=dict)
    instance_hourly_usd: Mapping[str, float] = field(default_factory=dict)

    def price(self, key: str) -> float:
        return self.hourly_usd.get(key, HOURLY_USD[key])

    def instance_price(self, instance_type: str) -> Optional[float]:
        return self.instance_hourly_usd.get(instance_type, INSTANCE_HOURLY_USD.get(instance_type))

    def __post_init__(self) -> None:
        if not isinstance(self.hybrid_pod_cidr, ipaddress.IPv4Network):
            object.__setattr__(self, "hybrid_pod_cidr",
                               ipaddress.ip_network(str(self.hybrid_pod_cidr)))
        for name in ("stack", "region", "cluster_name", "lab_tag_key", "lab_tag_value"):
            if not isinstance(getattr(self, name), str) or not getattr(self, name):
                raise ValueError(f"Scope.{name} must be a non-empty string")

    @property
    def cluster_arn(self) -> str:
        if not self.account:
            raise ValueError("the account is not known yet: call identify() first")
        return (f"arn:{self.partition}:eks:{self.region}:{self.account}:cluster/"
                f"{self.cluster_name}")

    @property
    def lab_tag_filter(self) -> dict[str, Any]:
        """The lab tag as an EC2 filter."""
        return {"Name": f"tag:{self.lab_tag_key}", "Values": [self.lab_tag_value]}


@dataclass
class Report:
    scope: Scope
    leftovers: list[Leftover] = field(default_factory=list)
    #: (check, why) of each check that could not run to the end.
    errors: list[tuple[str, str]] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.errors

    @property
    def clean(self) -> bool:
        return not self.leftovers and not self.errors

    def total_hourly_usd(self) -> tuple[float, int]:
        """(sum of the known hourly costs, number of leftovers whose cost is not known)."""
        known = [item.hourly_usd for item in self.leftovers if item.hourly_usd is not None]
        return sum(known), len(self.leftovers) - len(known)


class AwsUnavailable(Exception):
    """AWS could not be queried at all (credentials, endpoint, permissions of STS)."""


# --- helpers -------------------------------------------------------------------------------------

def _config() -> Any:
    from botocore.config import Config

    return Config(retries={"mode": "standard", "max_attempts": 4}, connect_timeout=10,
                  read_timeout=30, user_agent_extra="eks-hybrid-lab-leftovers")


def _client(session: Any, service: str, scope: Scope) -> Any:
    return session.client(service, region_name=scope.region, config=_config())


def _pages(client: Any, operation: str, **request: Any) -> Iterator[dict[str, Any]]:
    yield from client.get_paginator(operation).paginate(**request)


def _chunks(values: list[str], size: int = 100) -> Iterator[list[str]]:
    for start in range(0, len(values), size):
        yield values[start:start + size]


def _tags(tag_list: Any) -> dict[str, str]:
    """Tags as a dict, from EC2/IAM ``[{"Key", "Value"}]``, KMS ``[{"TagKey", "TagValue"}]`` or
    an already flat dict (SQS, EKS, CloudWatch Logs)."""
    if isinstance(tag_list, dict):
        return {str(k): str(v) for k, v in tag_list.items()}
    tags: dict[str, str] = {}
    for tag in tag_list or []:
        key = tag.get("Key", tag.get("TagKey"))
        if key:
            tags[key] = tag.get("Value", tag.get("TagValue", "")) or ""
    return tags


def _is_lab(tags: dict[str, str], scope: Scope) -> bool:
    return tags.get(scope.lab_tag_key) == scope.lab_tag_value


def _other_stack(tags: dict[str, str], scope: Scope) -> bool:
    """Carries the lab tag of another stack: never ours, whatever else matches."""
    return scope.lab_tag_key in tags and tags[scope.lab_tag_key] != scope.lab_tag_value


def _is_karpenters(tags: dict[str, str], scope: Scope, karpenter_key: str) -> bool:
    """Made by Karpenter for this cluster: tagged as this cluster's and as Karpenter's, not as
    another cluster's (``eks:eks-cluster-name``) and not as another stack's."""
    return (tags.get(f"kubernetes.io/cluster/{scope.cluster_name}") == "owned"
            and karpenter_key in tags
            and tags.get(EKS_NAME_TAG, scope.cluster_name) == scope.cluster_name
            and not _other_stack(tags, scope))


def _error_code(error: Exception) -> str:
    response = getattr(error, "response", None) or {}
    return (response.get("Error") or {}).get("Code", "")


def _why(error: Exception) -> str:
    if isinstance(error, NotAnAwsAnswer):
        return str(error)
    code = _error_code(error)
    if code:
        message = (getattr(error, "response", {}).get("Error") or {}).get("Message", "")
        return f"{code}: {message}" if message else code
    return f"{type(error).__name__}: {error}"


def _name(tags: dict[str, str]) -> str:
    return f", Name={tags['Name']}" if tags.get("Name") else ""


def _lab_vpc_ids(ec2: Any, scope: Scope) -> list[str]:
    ids = []
    for page in _pages(ec2, "describe_vpcs", Filters=[scope.lab_tag_filter]):
        for vpc in page.get("Vpcs") or []:
            if _is_lab(_tags(vpc.get("Tags")), scope):
                ids.append(vpc["VpcId"])
    return ids


def _lab_transit_gateways(ec2: Any, scope: Scope) -> list[dict[str, Any]]:
    found = []
    for page in _pages(ec2, "describe_transit_gateways", Filters=[scope.lab_tag_filter]):
        for tgw in page.get("TransitGateways") or []:
            if tgw.get("State") != "deleted" and _is_lab(_tags(tgw.get("Tags")), scope):
                found.append(tgw)
    return found


class _ClientPerService:
    """A session that hands out one client per service and region for a whole scan (making an
    EC2 client costs tens of milliseconds; the checks ask for one each)."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._clients: dict[tuple[str, Optional[str]], Any] = {}

    def client(self, service: str, region_name: Optional[str] = None, **kwargs: Any) -> Any:
        key = (service, region_name)
        if key not in self._clients:
            self._clients[key] = refuse_html_answers(
                self._session.client(service, region_name=region_name, **kwargs))
        return self._clients[key]


# --- identity ------------------------------------------------------------------------------------

def identify(session: Any, scope: Scope) -> Scope:
    """The scope with the account and partition of the caller. Raises AwsUnavailable."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        identity = _client(session, "sts", scope).get_caller_identity()
    except (BotoCoreError, ClientError, NotAnAwsAnswer) as error:
        raise AwsUnavailable(_why(error)) from error
    arn = identity.get("Arn") or ""
    partition = arn.split(":")[1] if arn.count(":") >= 5 else scope.partition
    return replace(scope, account=identity["Account"], partition=partition)


# --- the checks ----------------------------------------------------------------------------------

#: Instance states that are not terminated (and so hold interfaces, volumes, maybe cost).
LIVE_INSTANCE_STATES = ("pending", "running", "shutting-down", "stopping", "stopped")


def find_instances(session: Any, scope: Scope) -> list[Leftover]:
    """EC2 instances not terminated, with the lab tag or Karpenter's tags for this cluster."""
    ec2 = _client(session, "ec2", scope)
    states = {"Name": "instance-state-name", "Values": list(LIVE_INSTANCE_STATES)}
    karpenter = [{"Name": f"tag:kubernetes.io/cluster/{scope.cluster_name}", "Values": ["owned"]},
                 {"Name": "tag-key", "Values": [NODEPOOL_TAG]}]
    found: dict[str, Leftover] = {}
    for filters in ([scope.lab_tag_filter, states], karpenter + [states]):
        for page in _pages(ec2, "describe_instances", Filters=filters):
            for reservation in page.get("Reservations") or []:
                for instance in reservation.get("Instances") or []:
                    instance_id = instance.get("InstanceId")
                    state = (instance.get("State") or {}).get("Name", "unknown")
                    tags = _tags(instance.get("Tags"))
                    if not instance_id or instance_id in found \
                            or state not in LIVE_INSTANCE_STATES:
                        continue
                    if _is_lab(tags, scope):
                        why = "lab tag"
                    elif _is_karpenters(tags, scope, NODEPOOL_TAG):
                        why = f"Karpenter node of NodePool {tags[NODEPOOL_TAG]}"
                    else:
                        continue
                    instance_type = instance.get("InstanceType", "?")
                    spot = instance.get("InstanceLifecycle") == "spot"
                    cost = None if spot or state not in ("pending", "running") \
                        else scope.instance_price(instance_type)
                    detail = f"{instance_type} {state}{' (spot)' if spot else ''}, {why}"
                    if state == "stopped":
                        detail += "; its EBS volumes are still billed"
                    found[instance_id] = Leftover(
                        "EC2 instance", instance_id, scope.region, detail + _name(tags), cost,
                        f"aws ec2 terminate-instances --region {scope.region} "
                        f"--instance-ids {instance_id}")
    return list(found.values())


def find_managed_instances(session: Any, scope: Scope) -> list[Leftover]:
    """SSM managed instances (``mi-…``) registered for this cluster or with the lab tag.

    ``describe_instance_information`` filtered by tag, then each one's tags read back with
    ``list_tags_for_resource`` (an mi carrying another stack's lab tag is not ours)."""
    if scope.account is None:
        scope = identify(session, scope)
    ssm = _client(session, "ssm", scope)
    found: dict[str, dict[str, Any]] = {}
    for key, value in (("tag:EKSClusterARN", scope.cluster_arn),
                       (f"tag:{scope.lab_tag_key}", scope.lab_tag_value)):
        for page in _pages(ssm, "describe_instance_information",
                           Filters=[{"Key": key, "Values": [value]}],
                           PaginationConfig={"PageSize": 50}):
            for info in page.get("InstanceInformationList") or []:
                instance_id = info.get("InstanceId") or ""
                # EC2 instances show up here too; they are looked at as EC2 instances.
                if instance_id.startswith("mi-"):
                    found.setdefault(instance_id, info)

    leftovers = []
    for instance_id, info in found.items():
        try:
            tags = _tags(ssm.list_tags_for_resource(
                ResourceType="ManagedInstance", ResourceId=instance_id).get("TagList"))
        except Exception as error:  # noqa: BLE001 - deregistered in between: gone
            if _error_code(error) in ("InvalidResourceId", "InvalidInstanceId"):
                continue
            raise
        if not (_is_lab(tags, scope) or tags.get("EKSClusterARN") == scope.cluster_arn) \
                or _other_stack(tags, scope):
            continue
        parts = [f"{info.get('PingStatus', '?')}"]
        if info.get("ComputerName") or info.get("Name"):
            parts.append(f"host {info.get('ComputerName') or info.get('Name')}")
        if info.get("IPAddress"):
            parts.append(f"IP {info['IPAddress']}")
        if info.get("ActivationId"):
            parts.append(f"activation {info['ActivationId']}")
        leftovers.append(Leftover(
            "SSM managed instance", instance_id, scope.region,
            ", ".join(parts) + " (billed if in the advanced-instances tier)", None,
            f"aws ssm deregister-managed-instance --region {scope.region} "
            f"--instance-id {instance_id}"))
    return leftovers


def find_nat_gateways(session: Any, scope: Scope) -> list[Leftover]:
    """NAT gateways not ``deleted``, with the lab tag or in a lab VPC."""
    ec2 = _client(session, "ec2", scope)
    vpcs = _lab_vpc_ids(ec2, scope)
    states = {"Name": "state", "Values": ["pending", "available", "deleting", "failed"]}
    queries = [[scope.lab_tag_filter, states]]
    queries += [[{"Name": "vpc-id", "Values": chunk}, states] for chunk in _chunks(vpcs)]
    found: dict[str, Leftover] = {}
    for filters in queries:
        for page in _pages(ec2, "describe_nat_gateways", Filter=filters):
            for nat in page.get("NatGateways") or []:
                nat_id, state = nat.get("NatGatewayId"), nat.get("State")
                tags = _tags(nat.get("Tags"))
                if not nat_id or nat_id in found or state == "deleted" \
                        or not (_is_lab(tags, scope) or nat.get("VpcId") in vpcs) \
                        or _other_stack(tags, scope):
                    continue
                ips = [a.get("PublicIp") for a in nat.get("NatGatewayAddresses") or []
                       if a.get("PublicIp")]
                found[nat_id] = Leftover(
                    "NAT gateway", nat_id, scope.region,
                    f"{state} in {nat.get('VpcId')} / {nat.get('SubnetId')}"
                    + (f", public IP {', '.join(ips)}" if ips else "") + _name(tags),
                    0.0 if state == "failed" else scope.price("nat-gateway"),
                    f"aws ec2 delete-nat-gateway --region {scope.region} "
                    f"--nat-gateway-id {nat_id}")
    return list(found.values())


def find_elastic_ips(session: Any, scope: Scope) -> list[Leftover]:
    """Elastic IP addresses with the lab tag."""
    ec2 = _client(session, "ec2", scope)
    leftovers = []
    for address in ec2.describe_addresses(Filters=[scope.lab_tag_filter]).get("Addresses") or []:
        tags = _tags(address.get("Tags"))
        allocation = address.get("AllocationId")
        if not allocation or not _is_lab(tags, scope):
            continue
        user = address.get("NetworkInterfaceId") or address.get("InstanceId")
        remove = f"aws ec2 release-address --region {scope.region} --allocation-id {allocation}"
        if address.get("AssociationId") or user:
            remove += (f"   # once {user or address['AssociationId']} no longer uses it "
                       "(deleting a NAT gateway frees its address)")
        leftovers.append(Leftover(
            "Elastic IP", allocation, scope.region,
            f"{address.get('PublicIp', '?')}" + (f", used by {user}" if user else ", unused")
            + _name(tags), scope.price("public-ipv4"), remove))
    return leftovers


def find_transit_gateway_attachments(session: Any, scope: Scope) -> list[Leftover]:
    """Attachments (not ``deleted``) to the lab's transit gateways or with the lab tag."""
    ec2 = _client(session, "ec2", scope)
    tgw_ids = [tgw["TransitGatewayId"] for tgw in _lab_transit_gateways(ec2, scope)]
    queries = [[scope.lab_tag_filter]]
    queries += [[{"Name": "transit-gateway-id", "Values": chunk}] for chunk in _chunks(tgw_ids)]
    gone = ("deleted", "failed", "rejected")
    found: dict[str, Leftover] = {}
    for filters in queries:
        for page in _pages(ec2, "describe_transit_gateway_attachments", Filters=filters):
            for attachment in page.get("TransitGatewayAttachments") or []:
                attachment_id = attachment.get("TransitGatewayAttachmentId")
                state = attachment.get("State")
                tags = _tags(attachment.get("Tags"))
                if not attachment_id or attachment_id in found or state in gone \
                        or not (_is_lab(tags, scope)
                                or attachment.get("TransitGatewayId") in tgw_ids) \
                        or _other_stack(tags, scope):
                    continue
                kind = attachment.get("ResourceType", "vpc")
                remove = (f"aws ec2 delete-transit-gateway-vpc-attachment --region {scope.region} "
                          f"--transit-gateway-attachment-id {attachment_id}") if kind == "vpc" \
                    else (f"delete the {kind} attachment {attachment_id} "
                          f"(aws ec2 describe-transit-gateway-attachments --region {scope.region})")
                found[attachment_id] = Leftover(
                    "TGW attachment", attachment_id, scope.region,
                    f"{state}, {kind} {attachment.get('ResourceId', '?')} to "
                    f"{attachment.get('TransitGatewayId')}" + _name(tags),
                    scope.price("tgw-attachment"), remove)
    return list(found.values())


def find_transit_gateways(session: Any, scope: Scope) -> list[Leftover]:
    """Transit gateways with the lab tag, not ``deleted``."""
    ec2 = _client(session, "ec2", scope)
    return [Leftover(
        "transit gateway", tgw["TransitGatewayId"], scope.region,
        f"{tgw.get('State')}" + _name(_tags(tgw.get("Tags"))), scope.price("transit-gateway"),
        f"aws ec2 delete-transit-gateway --region {scope.region} "
        f"--transit-gateway-id {tgw['TransitGatewayId']}   # after its attachments")
        for tgw in _lab_transit_gateways(ec2, scope)]


_ROUTE_TARGETS = ("NetworkInterfaceId", "TransitGatewayId", "NatGatewayId", "GatewayId",
                  "InstanceId", "VpcPeeringConnectionId", "LocalGatewayId",
                  "CarrierGatewayId", "CoreNetworkArn", "EgressOnlyInternetGatewayId")


def find_pod_cidr_routes(session: Any, scope: Scope) -> list[Leftover]:
    """Routes whose destination is inside the hybrid pod CIDR (any target) in the route tables
    of the lab's VPCs and in route tables with the lab tag. ``local`` routes are skipped: they
    cannot be deleted and go with their VPC."""
    ec2 = _client(session, "ec2", scope)
    vpcs = _lab_vpc_ids(ec2, scope)
    queries = [[scope.lab_tag_filter]]
    queries += [[{"Name": "vpc-id", "Values": chunk}] for chunk in _chunks(vpcs)]
    seen: set[str] = set()
    leftovers = []
    for filters in queries:
        for page in _pages(ec2, "describe_route_tables", Filters=filters):
            for table in page.get("RouteTables") or []:
                table_id = table.get("RouteTableId")
                tags = _tags(table.get("Tags"))
                if not table_id or table_id in seen \
                        or not (_is_lab(tags, scope) or table.get("VpcId") in vpcs) \
                        or _other_stack(tags, scope):
                    continue
                seen.add(table_id)
                for route in table.get("Routes") or []:
                    destination = route.get("DestinationCidrBlock")
                    if not destination or route.get("GatewayId") == "local":
                        continue
                    try:
                        network = ipaddress.ip_network(destination, strict=False)
                    except ValueError:
                        continue
                    if network.version != 4 or not network.subnet_of(scope.hybrid_pod_cidr):
                        continue
                    target = next((route[k] for k in _ROUTE_TARGETS if route.get(k)), "?")
                    leftovers.append(Leftover(
                        "route", f"{table_id}:{destination}", scope.region,
                        f"{destination} -> {target} ({route.get('State', '?')}, "
                        f"{route.get('Origin', '?')}) in {table.get('VpcId')}", 0.0,
                        f"aws ec2 delete-route --region {scope.region} --route-table-id "
                        f"{table_id} --destination-cidr-block {destination}"))
    return leftovers


def find_network_interfaces(session: Any, scope: Scope) -> list[Leftover]:
    """Network interfaces in the lab's VPCs or with the lab tag."""
    ec2 = _client(session, "ec2", scope)
    vpcs = _lab_vpc_ids(ec2, scope)
    queries = [[scope.lab_tag_filter]]
    queries += [[{"Name": "vpc-id", "Values": chunk}] for chunk in _chunks(vpcs)]
    found: dict[str, Leftover] = {}
    for filters in queries:
        for page in _pages(ec2, "describe_network_interfaces", Filters=filters):
            for eni in page.get("NetworkInterfaces") or []:
                eni_id = eni.get("NetworkInterfaceId")
                tags = _tags(eni.get("TagSet") or eni.get("Tags"))
                if not eni_id or eni_id in found \
                        or not (_is_lab(tags, scope) or eni.get("VpcId") in vpcs) \
                        or _other_stack(tags, scope):
                    continue
                kind = eni.get("InterfaceType") or "interface"
                attachment = eni.get("Attachment") or {}
                association = eni.get("Association") or {}
                user = attachment.get("InstanceId")
                description = eni.get("Description") or ""
                if kind == "nat_gateway":
                    remove = "goes with its NAT gateway (delete the NAT gateway)"
                elif kind == "transit_gateway":
                    remove = "goes with its transit gateway attachment (delete the attachment)"
                elif user and attachment.get("DeleteOnTermination"):
                    remove = f"goes with instance {user} (terminate it)"
                elif eni.get("RequesterManaged"):
                    remove = (f"managed by the service that made it ({description or kind}); "
                              "it goes when that resource goes")
                else:
                    remove = (f"aws ec2 delete-network-interface --region {scope.region} "
                              f"--network-interface-id {eni_id}")
                    if attachment.get("AttachmentId"):
                        remove = (f"aws ec2 detach-network-interface --region {scope.region} "
                                  f"--attachment-id {attachment['AttachmentId']} && " + remove)
                # An ephemeral public IPv4 address is billed; an Elastic IP is listed on its own.
                public = association.get("PublicIp") and not association.get("AllocationId")
                found[eni_id] = Leftover(
                    "network interface", eni_id, scope.region,
                    f"{kind} {eni.get('Status', '?')} in {eni.get('VpcId')}"
                    + (f", attached to {user}" if user else "")
                    + (f", \"{description}\"" if description else ""),
                    scope.price("public-ipv4") if public else 0.0, remove)
    return list(found.values())


def find_launch_templates(session: Any, scope: Scope) -> list[Leftover]:
    """Launch templates with the lab tag or Karpenter's tags for this cluster."""
    ec2 = _client(session, "ec2", scope)
    karpenter = [{"Name": f"tag:kubernetes.io/cluster/{scope.cluster_name}", "Values": ["owned"]},
                 {"Name": "tag-key", "Values": [NODECLASS_TAG]}]
    found: dict[str, Leftover] = {}
    for filters in ([scope.lab_tag_filter], karpenter):
        for page in _pages(ec2, "describe_launch_templates", Filters=filters):
            for template in page.get("LaunchTemplates") or []:
                template_id = template.get("LaunchTemplateId")
                tags = _tags(template.get("Tags"))
                if not template_id or template_id in found:
                    continue
                if _is_lab(tags, scope):
                    why = "lab tag"
                elif _is_karpenters(tags, scope, NODECLASS_TAG):
                    why = f"Karpenter, EC2NodeClass {tags[NODECLASS_TAG]}"
                else:
                    continue
                found[template_id] = Leftover(
                    "launch template", template_id, scope.region,
                    f"{template.get('LaunchTemplateName', '?')}, {why}", 0.0,
                    f"aws ec2 delete-launch-template --region {scope.region} "
                    f"--launch-template-id {template_id}")
    return list(found.values())


def find_instance_profiles(session: Any, scope: Scope) -> list[Leftover]:
    """Instance profiles Karpenter made for this cluster in this region (IAM is global: the
    region tag tells them apart), or with the lab tag. IAM lists profiles without their tags,
    so each profile's tags are read with ``list_instance_profile_tags``."""
    iam = _client(session, "iam", scope)
    leftovers = []
    for page in _pages(iam, "list_instance_profiles"):
        for profile in page.get("InstanceProfiles") or []:
            name = profile.get("InstanceProfileName")
            if not name:
                continue
            try:
                tags = _instance_profile_tags(iam, name)
            except Exception as error:  # noqa: BLE001
                if _error_code(error) == "NoSuchEntity":
                    continue  # deleted in between
                raise
            if _is_lab(tags, scope):
                why = "lab tag"
            elif tags.get(REGION_TAG) == scope.region \
                    and _is_karpenters(tags, scope, NODECLASS_TAG):
                why = f"Karpenter, EC2NodeClass {tags[NODECLASS_TAG]}"
            else:
                continue
            roles = [role["RoleName"] for role in profile.get("Roles") or []
                     if role.get("RoleName")]
            steps = [f"aws iam remove-role-from-instance-profile --instance-profile-name {name} "
                     f"--role-name {role}" for role in roles]
            steps.append(f"aws iam delete-instance-profile --instance-profile-name {name}")
            leftovers.append(Leftover(
                "instance profile", name, "global",
                f"{why}, path {profile.get('Path', '/')}, roles: {', '.join(roles) or 'none'}",
                0.0, " && ".join(steps)))
    return leftovers


def _instance_profile_tags(iam: Any, name: str) -> dict[str, str]:
    tags: list[dict[str, str]] = []
    marker = None
    while True:
        request: dict[str, Any] = {"InstanceProfileName": name}
        if marker:
            request["Marker"] = marker
        page = iam.list_instance_profile_tags(**request)
        tags.extend(page.get("Tags") or [])
        marker = page.get("Marker")
        if not page.get("IsTruncated") or not marker:
            return _tags(tags)


_NO_QUEUE = ("AWS.SimpleQueueService.NonExistentQueue", "QueueDoesNotExist")


def find_queues(session: Any, scope: Scope) -> list[Leftover]:
    """Karpenter's interruption queue ``<cluster>-karpenter`` and any queue with the lab tag.
    SQS lists queues without tags: each queue's tags are read with ``list_queue_tags``."""
    sqs = _client(session, "sqs", scope)
    named = f"{scope.cluster_name}-karpenter"
    urls: list[str] = []
    try:
        urls.append(sqs.get_queue_url(QueueName=named)["QueueUrl"])
    except Exception as error:  # noqa: BLE001
        if _error_code(error) not in _NO_QUEUE:
            raise
    for page in _pages(sqs, "list_queues", PaginationConfig={"PageSize": 1000}):
        urls.extend(url for url in page.get("QueueUrls") or [] if url not in urls)

    leftovers = []
    for url in urls:
        name = url.rstrip("/").rsplit("/", 1)[-1]
        try:
            tags = _tags(sqs.list_queue_tags(QueueUrl=url).get("Tags"))
        except Exception as error:  # noqa: BLE001
            if _error_code(error) in _NO_QUEUE:
                continue
            raise
        if _is_lab(tags, scope):
            why = "lab tag"
        elif name == named and not _other_stack(tags, scope):
            why = "Karpenter interruption queue of the cluster"
        else:
            continue
        leftovers.append(Leftover(
            "SQS queue", name, scope.region, f"{why}, {url} (idle queues cost nothing)", 0.0,
            f"aws sqs delete-queue --region {scope.region} --queue-url {url}"))
    return leftovers


def find_log_group(session: Any, scope: Scope) -> list[Leftover]:
    """The control-plane log group ``/aws/eks/<cluster>/cluster`` (EKS makes it again while a
    cluster of that name logs, and keeps it after the cluster goes)."""
    logs = _client(session, "logs", scope)
    name = f"/aws/eks/{scope.cluster_name}/cluster"
    leftovers = []
    for page in _pages(logs, "describe_log_groups", logGroupNamePrefix=name):
        for group in page.get("logGroups") or []:
            if group.get("logGroupName") != name:
                continue
            arn = group.get("logGroupArn") or (group.get("arn") or "").removesuffix(":*")
            try:
                tags = _tags(logs.list_tags_for_resource(resourceArn=arn).get("tags"))
            except Exception as error:  # noqa: BLE001
                if _error_code(error) == "ResourceNotFoundException":
                    continue
                raise
            if _other_stack(tags, scope):
                continue
            retention = group.get("retentionInDays")
            leftovers.append(Leftover(
                "log group", name, scope.region,
                f"{group.get('storedBytes', 0)} bytes stored, retention "
                f"{f'{retention} days' if retention else 'never expires'} "
                "(storage billed per GB-month)", None,
                f"aws logs delete-log-group --region {scope.region} --log-group-name {name}"))
    return leftovers


_KEY_GONE = ("PendingDeletion", "PendingReplicaDeletion")


def find_kms_keys(session: Any, scope: Scope) -> list[Leftover]:
    """Customer managed KMS keys with the lab tag that are not pending deletion.

    ``list_keys``, then per key ``describe_key`` (state, manager) and, for customer managed
    keys not pending deletion, ``list_resource_tags``. Chosen over the Resource Groups Tagging
    API: it needs only KMS permissions (no ``tag:GetResources``), is read from KMS itself rather
    than an eventually consistent index, and the key state has to be read from KMS anyway. A key
    whose policy does not let us describe it is skipped: the lab's keys grant the account."""
    kms = _client(session, "kms", scope)
    leftovers = []
    for page in _pages(kms, "list_keys"):
        for key in page.get("Keys") or []:
            key_id = key.get("KeyId")
            try:
                meta = kms.describe_key(KeyId=key_id)["KeyMetadata"]
                if meta.get("KeyManager") == "AWS" or meta.get("KeyState") in _KEY_GONE:
                    continue
                tags: list[dict[str, str]] = []
                for tag_page in _pages(kms, "list_resource_tags", KeyId=key_id):
                    tags.extend(tag_page.get("Tags") or [])
            except Exception as error:  # noqa: BLE001
                if _error_code(error) in ("AccessDeniedException", "NotFoundException"):
                    continue
                raise
            if not _is_lab(_tags(tags), scope):
                continue
            description = meta.get("Description") or ""
            leftovers.append(Leftover(
                "KMS key", key_id, scope.region,
                f"{meta.get('KeyState')}" + (f", \"{description}\"" if description else ""),
                scope.price("kms-key"),
                f"aws kms schedule-key-deletion --region {scope.region} --key-id {key_id} "
                "--pending-window-in-days 7"))
    return leftovers


def find_eks_cluster(session: Any, scope: Scope) -> list[Leftover]:
    """The EKS cluster of that name, if it still exists (and is not another stack's)."""
    eks = _client(session, "eks", scope)
    try:
        cluster = eks.describe_cluster(name=scope.cluster_name)["cluster"]
    except Exception as error:  # noqa: BLE001
        if _error_code(error) == "ResourceNotFoundException":
            return []
        raise
    if _other_stack(_tags(cluster.get("tags")), scope):
        return []
    groups: list[str] = []
    for page in _pages(eks, "list_nodegroups", clusterName=scope.cluster_name):
        groups.extend(page.get("nodegroups") or [])
    steps = [f"aws eks delete-nodegroup --region {scope.region} --cluster-name "
             f"{scope.cluster_name} --nodegroup-name {group}" for group in groups]
    steps.append(f"aws eks delete-cluster --region {scope.region} --name {scope.cluster_name}")
    return [Leftover(
        "EKS cluster", scope.cluster_name, scope.region,
        f"{cluster.get('status', '?')}, Kubernetes {cluster.get('version', '?')}, node groups: "
        f"{', '.join(groups) or 'none'} ($0.60/h in extended support)",
        scope.price("eks-cluster"), " && ".join(steps))]


def find_vpcs(session: Any, scope: Scope) -> list[Leftover]:
    """VPCs with the lab tag."""
    ec2 = _client(session, "ec2", scope)
    leftovers = []
    for page in _pages(ec2, "describe_vpcs", Filters=[scope.lab_tag_filter]):
        for vpc in page.get("Vpcs") or []:
            tags = _tags(vpc.get("Tags"))
            if not _is_lab(tags, scope):
                continue
            leftovers.append(Leftover(
                "VPC", vpc["VpcId"], scope.region, f"{vpc.get('CidrBlock', '?')}" + _name(tags),
                0.0,
                f"aws ec2 delete-vpc --region {scope.region} --vpc-id {vpc['VpcId']}   # after "
                "what is in it: interfaces, subnets, route tables, gateways, security groups"))
    return leftovers


#: Every check, in the order things are best removed (what holds other things first).
CHECKS: tuple[tuple[str, Callable[[Any, Scope], list[Leftover]]], ...] = (
    ("EKS cluster", find_eks_cluster),
    ("EC2 instances", find_instances),
    ("SSM managed instances", find_managed_instances),
    ("NAT gateways", find_nat_gateways),
    ("Elastic IPs", find_elastic_ips),
    ("transit gateway attachments", find_transit_gateway_attachments),
    ("transit gateways", find_transit_gateways),
    ("routes to the hybrid pod CIDR", find_pod_cidr_routes),
    ("network interfaces", find_network_interfaces),
    ("launch templates", find_launch_templates),
    ("instance profiles", find_instance_profiles),
    ("SQS queues", find_queues),
    ("control-plane log group", find_log_group),
    ("KMS keys", find_kms_keys),
    ("VPCs", find_vpcs),
)


def scan(session: Any, scope: Scope,
         checks: Optional[Iterable[tuple[str, Callable[[Any, Scope], list[Leftover]]]]] = None
         ) -> Report:
    """Runs ``checks`` (default: every check in ``CHECKS``). Raises AwsUnavailable when AWS
    cannot be queried at all; a check that fails on its own is recorded in ``Report.errors``
    and the others still run."""
    session = _ClientPerService(session)
    if scope.account is None:
        scope = identify(session, scope)
    report = Report(scope)
    for name, check in CHECKS if checks is None else checks:
        try:
            report.leftovers.extend(check(session, scope))
        except Exception as error:  # noqa: BLE001 - reported, the other checks still run
            report.errors.append((name, _why(error)))
    return report
