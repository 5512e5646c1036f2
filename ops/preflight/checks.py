"""Can this account and this machine hold the lab? Read-only checks run before `pulumi up`.

Every AWS call here is a Describe, List or Get (``sts:GetCallerIdentity``,
``ec2:Describe*``, ``servicequotas:Get*``, ``iam:GetRole``, ``eks:DescribeCluster``,
``logs:DescribeLogGroups``, ``logs:ListTagsForResource``, ``sqs:GetQueueUrl``,
``sqs:ListQueueTags``): the preflight changes nothing. Each check returns a
``Check`` — PASS, WARN or FAIL with what was looked at and, when it is not a PASS, the fix —
or SKIP when an earlier failure leaves nothing to check with. ``run_preflight`` runs them in
order and never raises for an AWS or CLI problem: a failed call becomes a line of the report.

The lab's settings arrive as plain values (``LabNeeds``, ``InstanceNeed``); this module knows
AWS, not the lab's config.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Iterable, NamedTuple, Optional, Sequence

import boto3
from botocore.config import Config
from botocore.exceptions import (BotoCoreError, ClientError, ConnectTimeoutError,
                                 EndpointConnectionError, NoCredentialsError,
                                 PartialCredentialsError)

from components.principals import same_role

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class InstanceNeed:
    """Instances of one type the lab launches, and where."""

    #: What they are, as the report names them: "system nodes", "hybrid hosts".
    role: str
    instance_type: str
    count: int
    #: The setting that chooses the type: the fix of a FAIL names it.
    setting: str
    #: They are placed in the first ``span`` of the lab's zones ...
    span: int
    #: ... and the type must be offered in at least this many of those.
    min_zones: int
    #: Why that placement, appended to "the first zone" in a FAIL (", which holds ...").
    placement_note: str = ""
    #: Instances EKS may add for a while when a Kubernetes upgrade rolls them (a managed node
    #: group: docs/capacity.md#quota-during-an-upgrade); 0 for instances replaced delete-first.
    upgrade_surge: int = 0


@dataclass(frozen=True)
class LabNeeds:
    region: str
    availability_zone_count: int
    instances: tuple[InstanceNeed, ...]
    #: Types Karpenter may launch when demo 2 bursts, in any of the lab's zones.
    burst_instance_types: tuple[str, ...]
    #: vCPUs the burst NodePool may add at most.
    burst_cpu_limit: int
    #: Zone ids the lab never uses (EKS cannot place control-plane interfaces there).
    excluded_zone_ids: tuple[str, ...] = ()
    #: Where the burst types are set, for the fix of a WARN.
    burst_types_source: str = "the burst NodePool's instance types"
    zone_count_setting: str = "availabilityZoneCount"
    #: The fewest zones the setting allows: below it, only another region helps.
    min_zone_count: int = 2
    burst_cpu_setting: str = "burstCpuLimit"
    #: What the lab creates that counts against regional quotas.
    vpcs: int = 2
    #: NAT gateways the lab puts in its first zone (each VPC's NAT sits in the first zone).
    nat_gateways_first_zone: int = 2
    elastic_ips: int = 2
    #: Names the lab takes in the region (the cluster, its control-plane log group, the
    #: interruption queue): one that exists without ``owner_tag`` is someone else's, and
    #: creating the lab's would fail. Empty: not checked.
    cluster_name: str = ""
    log_group_name: str = ""
    queue_name: str = ""
    #: The tag (key, value) on everything this stack creates.
    owner_tag: tuple[str, str] = ("", "")
    cluster_name_setting: str = "clusterName"
    #: Roles the lab gives cluster-admin access entries, besides the deployer.
    admin_role_arns: tuple[str, ...] = ()
    admin_roles_setting: str = "adminRoleArns"


class CommandResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


Which = Callable[[str], Optional[str]]
Run = Callable[[Sequence[str]], CommandResult]


def run_command(argv: Sequence[str]) -> CommandResult:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=60, check=False)
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


#: The preflight is interactive and only reads: short timeouts, the SDK's standard retries
#: (3 attempts unless AWS_MAX_ATTEMPTS or the profile's max_attempts says otherwise).
CLIENT_CONFIG = Config(retries={"mode": "standard"}, connect_timeout=5, read_timeout=20)

_DENIED = {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation",
           "UnauthorizedAccess", "AuthorizationError"}
_REGION_DISABLED = {"AuthFailure", "OptInRequired", "InvalidClientTokenId",
                    "UnrecognizedClientException"}
CREDENTIALS_FIX = "configure AWS credentials (aws configure / AWS_PROFILE)"


def _client(session: boto3.Session, service: str, region: str):
    return session.client(service, region_name=region, config=CLIENT_CONFIG)


def _code(exc: BaseException) -> str:
    return exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""


def describe_error(exc: BaseException) -> str:
    """A one-line account of a failed call (an HTML error page shrinks to its status code)."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = error.get("Code") or "error"
        message = (error.get("Message") or "").strip()
        if message.startswith("<") or not message:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            return f"{code} (HTTP {status})" if status and str(status) != code else f"HTTP {code}"
        message = message.splitlines()[0]
        return f"{code}: {message[:200]}"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:200]}" if text else type(exc).__name__


def _call_failed(name: str, action: str, exc: BaseException) -> Check:
    """A Describe call that failed: not permitted is a WARN (nothing known to be wrong with
    the account, only unchecked); anything else is a FAIL."""
    if _code(exc) in _DENIED:
        return Check(name, WARN, f"not checked: {action} is not permitted ({describe_error(exc)})",
                     f"allow {action} for these credentials, or check this by hand")
    return Check(name, FAIL, f"{action} failed: {describe_error(exc)}",
                 "check network access to AWS and the credentials, then run the preflight again")


def skipped(name: str, why: str) -> Check:
    return Check(name, SKIP, f"not checked: {why}")


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# --- 1. credentials ------------------------------------------------------------------------------


def check_credentials(session: boto3.Session, region: str) -> Check:
    return _credentials(session, region)[0]


def _credentials(session: boto3.Session, region: str) -> tuple[Check, Optional[str]]:
    """The check and, when it passes, the caller's ARN (the deployer)."""
    name = "credentials"
    try:
        identity = _client(session, "sts", region).get_caller_identity()
    except (NoCredentialsError, PartialCredentialsError) as exc:
        return Check(name, FAIL, f"no AWS credentials found ({describe_error(exc)})",
                     CREDENTIALS_FIX), None
    except ClientError as exc:
        return Check(name, FAIL, f"sts:GetCallerIdentity was refused: {describe_error(exc)}",
                     f"{CREDENTIALS_FIX}; if they work in other regions, make sure {region} "
                     "is enabled for the account"), None
    except (EndpointConnectionError, ConnectTimeoutError) as exc:
        return Check(name, FAIL, f"could not reach STS in {region}: {describe_error(exc)}",
                     "check network access to AWS (proxy, VPN), then run the preflight "
                     "again"), None
    except BotoCoreError as exc:
        return Check(name, FAIL, f"could not use the AWS credentials: {describe_error(exc)}",
                     f"{CREDENTIALS_FIX}; for SSO profiles run aws sso login"), None
    return (Check(name, PASS, f"account {identity['Account']} as {identity['Arn']}"),
            identity["Arn"])


# --- 2. region -----------------------------------------------------------------------------------

_ENABLED = ("opt-in-not-required", "opted-in")


def check_region(session: boto3.Session, region: str) -> Check:
    name = "region"
    enable = (f"enable {region} for the account (console: Account > AWS Regions, or "
              f"aws account enable-region --region-name {region}) or set another aws:region")
    try:
        regions = _client(session, "ec2", region).describe_regions(AllRegions=True)["Regions"]
    except ClientError as exc:
        if _code(exc) in _REGION_DISABLED:
            return Check(name, FAIL, f"{region} refused the credentials ({describe_error(exc)}): "
                                     "it is probably not enabled for this account", enable)
        return _call_failed(name, "ec2:DescribeRegions", exc)
    except BotoCoreError as exc:
        return _call_failed(name, "ec2:DescribeRegions", exc)
    status = {r["RegionName"]: r.get("OptInStatus", "opt-in-not-required") for r in regions}
    if region not in status:
        return Check(name, FAIL, f"{region} is not a region of this account's partition",
                     "set aws:region to a region the account has (aws ec2 describe-regions)")
    if status[region] not in _ENABLED:
        return Check(name, FAIL, f"{region} is not enabled for the account ({status[region]})",
                     enable)
    return Check(name, PASS, f"{region} is enabled for the account ({status[region]})")


# --- 3. availability zones -----------------------------------------------------------------------


def usable_zones(session: boto3.Session, needs: LabNeeds) -> tuple[list[str], list[str]]:
    """(usable zone names sorted, why the others are left out): available, opt-in-not-required
    Availability Zones (no Local or Wavelength Zones) whose ids EKS supports — the zones the
    program picks from, in its order."""
    zones = _client(session, "ec2", needs.region).describe_availability_zones()["AvailabilityZones"]
    usable, left_out = [], []
    for zone in zones:
        label = f"{zone['ZoneName']} ({zone.get('ZoneId', '?')})"
        if zone.get("ZoneType", "availability-zone") != "availability-zone":
            continue  # Local and Wavelength Zones are never candidates; not worth a mention
        if zone.get("State") != "available":
            left_out.append(f"{label} is {zone.get('State')}")
        elif zone.get("OptInStatus", "opt-in-not-required") != "opt-in-not-required":
            left_out.append(f"{label} is an opt-in zone")
        elif zone.get("ZoneId") in needs.excluded_zone_ids:
            left_out.append(f"{label} is not supported by EKS")
        else:
            usable.append(zone["ZoneName"])
    return sorted(usable), left_out


def check_availability_zones(session: boto3.Session, needs: LabNeeds) -> tuple[Check, list[str]]:
    """The check and the zones the lab would use (empty when they are unknown)."""
    name = "availability zones"
    try:
        usable, left_out = usable_zones(session, needs)
    except (ClientError, BotoCoreError) as exc:
        return _call_failed(name, "ec2:DescribeAvailabilityZones", exc), []
    wanted = needs.availability_zone_count
    setting = needs.zone_count_setting
    chosen = usable[:wanted]
    excluded = f"; left out: {', '.join(left_out)}" if left_out else ""
    if len(usable) < wanted:
        shown = ", ".join(usable) or "none"
        fix = (f"lower {setting} to {len(usable)} (pulumi config set {setting} {len(usable)}) "
               f"or set aws:region to a region with {wanted} usable zones"
               if len(usable) >= needs.min_zone_count else
               f"set aws:region to a region with at least {wanted} usable zones")
        return Check(name, FAIL,
                     f"{setting} = {wanted} needs {wanted} usable zones in {needs.region}; "
                     f"it has {len(usable)}: {shown}{excluded}", fix), chosen
    return Check(name, PASS,
                 f"{_plural(len(usable), 'usable zone')} in {needs.region}; the lab uses "
                 f"{', '.join(chosen)} ({setting} = {wanted}){excluded}"), chosen


# --- 4. instance types offered -------------------------------------------------------------------


def offered_zones(session: boto3.Session, region: str,
                  instance_types: Iterable[str]) -> dict[str, set[str]]:
    """Instance type -> zones of ``region`` that offer it (types offered nowhere are absent)."""
    types = sorted(set(instance_types))
    ec2 = _client(session, "ec2", region)
    offered: dict[str, set[str]] = {}
    for page in ec2.get_paginator("describe_instance_type_offerings").paginate(
            LocationType="availability-zone",
            Filters=[{"Name": "instance-type", "Values": types}]):
        for offer in page["InstanceTypeOfferings"]:
            offered.setdefault(offer["InstanceType"], set()).add(offer["Location"])
    return offered


def check_instance_types(session: boto3.Session, needs: LabNeeds,
                         zones: Sequence[str]) -> list[Check]:
    """One check per kind of instance the lab launches, plus one for the burst types."""
    wanted = [n.instance_type for n in needs.instances] + list(needs.burst_instance_types)
    try:
        offered = offered_zones(session, needs.region, wanted)
    except (ClientError, BotoCoreError) as exc:
        return [_call_failed("instance types", "ec2:DescribeInstanceTypeOfferings", exc)]
    checks = [_check_need(need, offered.get(need.instance_type, set()), zones, needs.region)
              for need in needs.instances]
    checks.append(_check_burst(needs, offered, zones))
    return checks


def _check_need(need: InstanceNeed, offered: set[str], zones: Sequence[str],
                region: str) -> Check:
    name = f"instance type for {need.role}"
    placed = list(zones[: need.span])
    hits = [z for z in placed if z in offered]
    where = (f"the first zone{need.placement_note}" if need.span == 1
             else f"{need.min_zones} of {', '.join(placed)}")
    if len(hits) >= need.min_zones:
        return Check(name, PASS, f"{need.instance_type} ({_plural(need.count, 'instance')}) "
                                 f"is offered in {', '.join(hits)}")
    if not offered:
        found = f"{need.instance_type} is not offered in any zone of {region}"
    elif need.span == 1:
        found = (f"{need.instance_type} is offered in {', '.join(sorted(offered))} "
                 f"but not in {placed[0]}")
    else:
        found = (f"{need.instance_type} is offered in {_plural(len(hits), 'zone')} of "
                 f"{', '.join(placed)} ({', '.join(hits) or 'none'})")
    listing = (f"aws ec2 describe-instance-type-offerings --region {region} --location-type "
               f"availability-zone --filters Name=location,Values={','.join(placed)}")
    return Check(name, FAIL, f"{found}; needed in {where} for the {need.role}",
                 f"pick another type with {need.setting} (pulumi config set {need.setting} "
                 f"<type>); list what a zone offers: {listing}")


def _check_burst(needs: LabNeeds, offered: dict[str, set[str]], zones: Sequence[str]) -> Check:
    name = "instance types for burst nodes"
    usable = [t for t in needs.burst_instance_types if offered.get(t, set()) & set(zones)]
    missing = [t for t in needs.burst_instance_types if t not in usable]
    if not usable:
        return Check(name, WARN,
                     f"none of {', '.join(needs.burst_instance_types)} is offered in "
                     f"{', '.join(zones)}: Karpenter has nothing to launch when demo 2 bursts",
                     f"set aws:region to a region that offers them, or change "
                     f"{needs.burst_types_source}")
    note = f" ({', '.join(missing)} not offered; Karpenter uses the others)" if missing else ""
    return Check(name, PASS, f"Karpenter can launch {', '.join(usable)}{note}")


# --- 5. quotas -----------------------------------------------------------------------------------

class Quota(NamedTuple):
    service: str
    code: str
    #: The quota's name as the Service Quotas console shows it.
    title: str

    @property
    def check_name(self) -> str:
        return f"quota {self.title} ({self.code})"


VPCS_PER_REGION = Quota("vpc", "L-F678F1CE", "VPCs per Region")
NAT_GATEWAYS_PER_AZ = Quota("vpc", "L-FE5A380F", "NAT gateways per Availability Zone")
ELASTIC_IPS = Quota("ec2", "L-0263D0A3", "EC2-VPC Elastic IPs")
STANDARD_VCPUS = Quota("ec2", "L-1216C47A", "Running On-Demand Standard instances vCPUs")
GVT_VCPUS = Quota("ec2", "L-DB2E81BA", "Running On-Demand G and VT instances vCPUs")

#: Families counted by the On-Demand vCPU quotas the preflight checks.
_STANDARD_FAMILY_START = set("acdhimrtz")
_NOT_STANDARD = {"inf", "hpc", "mac", "trn", "dl", "u-"}


def vcpu_quota_class(instance_type: str) -> str:
    """"standard", "gvt" or "other": which On-Demand vCPU quota an instance type counts against."""
    family = re.match(r"[a-z-]*", instance_type).group(0)
    if family in ("g", "gr", "vt"):
        return "gvt"
    if family and family[0] in _STANDARD_FAMILY_START and family not in _NOT_STANDARD:
        return "standard"
    return "other"


class QuotaValue(NamedTuple):
    value: Optional[float]
    #: How the value was found ("applied", "AWS default"), or why it was not.
    source: str
    denied: bool = False


def read_quota(sq, quota: Quota) -> QuotaValue:
    """The applied value of a quota, or its AWS default when none is applied. Never raises:
    a value that cannot be read comes back as None with the reason."""
    service, code = quota.service, quota.code
    try:
        return QuotaValue(sq.get_service_quota(ServiceCode=service, QuotaCode=code)
                          ["Quota"]["Value"], "applied")
    except ClientError as exc:
        if _code(exc) in _DENIED:
            return QuotaValue(None, describe_error(exc), denied=True)
        if _code(exc) != "NoSuchResourceException":
            return QuotaValue(None, describe_error(exc))
    except BotoCoreError as exc:
        return QuotaValue(None, describe_error(exc))
    try:
        return QuotaValue(sq.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)
                          ["Quota"]["Value"], "AWS default")
    except ClientError as exc:
        return QuotaValue(None, describe_error(exc), denied=_code(exc) in _DENIED)
    except BotoCoreError as exc:
        return QuotaValue(None, describe_error(exc))


def _paginate(client, operation: str, key: str, **request) -> list[dict]:
    items: list[dict] = []
    for page in client.get_paginator(operation).paginate(**request):
        items.extend(page[key])
    return items


def instance_vcpus(session: boto3.Session, region: str,
                   instance_types: Iterable[str]) -> dict[str, int]:
    """Default vCPUs of each instance type (types EC2 does not know are absent)."""
    ec2 = _client(session, "ec2", region)
    types = sorted(set(instance_types))
    found: dict[str, int] = {}

    def describe(batch: list[str]) -> None:
        for page in ec2.get_paginator("describe_instance_types").paginate(InstanceTypes=batch):
            for info in page["InstanceTypes"]:
                found[info["InstanceType"]] = info["VCpuInfo"]["DefaultVCpus"]

    for start in range(0, len(types), 100):
        batch = types[start:start + 100]
        try:
            describe(batch)
        except ClientError as exc:
            if _code(exc) != "InvalidInstanceType":
                raise
            for one in batch:  # one unknown type fails the whole batch: find the good ones
                try:
                    describe([one])
                except ClientError as inner:
                    if _code(inner) != "InvalidInstanceType":
                        raise
    return found


def _quota_check(quota: Quota, read: QuotaValue, region: str, used: float, adds: float,
                 *, used_note: str = "", free_fix: str = "", later: float = 0,
                 later_note: str = "", later_setting: str = "", adds_note: str = "",
                 moment: str = "") -> Check:
    """PASS when what is used plus what the lab adds fits the quota, FAIL when it does not;
    ``later`` is what the lab may add afterwards (the burst, an upgrade's surge): a WARN when
    only that overflows. ``moment`` names the check of such a later moment."""
    service, code, _ = quota
    name = quota.check_name + (f" {moment}" if moment else "")
    usage = f"in use {used:g}{used_note}, the lab adds {adds:g}{adds_note}"
    if later:
        usage += f" (+ up to {later:g} {later_note})"
    ask = (f"request an increase: aws service-quotas request-service-quota-increase "
           f"--region {region} --service-code {service} --quota-code {code} --desired-value "
           f"{used + adds + later:g}")
    if read.value is None:
        if read.denied:
            return Check(name, WARN, f"quota lookup not permitted ({read.source}); {usage}",
                         "allow servicequotas:GetServiceQuota and "
                         "servicequotas:GetAWSDefaultServiceQuota, or compare by hand in the "
                         "Service Quotas console")
        return Check(name, WARN, f"could not read the quota ({read.source}); {usage}",
                     "compare by hand in the Service Quotas console")
    total = used + adds
    detail = f"quota {read.value:g} ({read.source}); {usage}"
    if total > read.value:
        return Check(name, FAIL, f"{detail}: {total:g} > {read.value:g}",
                     f"{free_fix + ', or ' if free_fix else ''}{ask}")
    if total + later > read.value:
        room = read.value - total
        lower = (f"lower {later_setting} to {room:g} (pulumi config set {later_setting} "
                 f"{room:g}), or " if later_setting and room > 0 else "")
        return Check(name, WARN, f"{detail}: {total + later:g} > {read.value:g} at full burst",
                     f"{lower}{ask}")
    return Check(name, PASS, f"{detail}: {total + later:g} of {read.value:g}")


def check_quotas(session: boto3.Session, needs: LabNeeds, zones: Sequence[str]) -> list[Check]:
    """Quota headroom: what the account uses now plus what the lab adds, against the quota."""
    region = needs.region
    ec2 = _client(session, "ec2", region)
    sq = _client(session, "service-quotas", region)
    checks: list[Check] = []

    def guarded(name: str, action: str, build: Callable[[], Check]) -> None:
        try:
            checks.append(build())
        except (ClientError, BotoCoreError) as exc:
            checks.append(_call_failed(name, action, exc))

    def vpcs() -> Check:
        used = len(_paginate(ec2, "describe_vpcs", "Vpcs"))
        return _quota_check(VPCS_PER_REGION, read_quota(sq, VPCS_PER_REGION), region, used,
                            needs.vpcs, free_fix="delete unused VPCs")

    def nat_gateways() -> Check:
        first = zones[0]
        gateways = _paginate(ec2, "describe_nat_gateways", "NatGateways",
                             Filter=[{"Name": "state", "Values": ["pending", "available"]}])
        subnet_ids = sorted({g["SubnetId"] for g in gateways if g.get("SubnetId")})
        subnets = (_paginate(ec2, "describe_subnets", "Subnets", SubnetIds=subnet_ids)
                   if subnet_ids else [])
        zone_of = {s["SubnetId"]: s["AvailabilityZone"] for s in subnets}
        used = sum(1 for g in gateways if zone_of.get(g.get("SubnetId")) == first)
        return _quota_check(NAT_GATEWAYS_PER_AZ, read_quota(sq, NAT_GATEWAYS_PER_AZ), region,
                            used, needs.nat_gateways_first_zone, used_note=f" in {first}",
                            free_fix=f"delete unused NAT gateways in {first}")

    def elastic_ips() -> Check:
        used = len(ec2.describe_addresses(
            Filters=[{"Name": "domain", "Values": ["vpc"]}])["Addresses"])
        return _quota_check(ELASTIC_IPS, read_quota(sq, ELASTIC_IPS), region, used,
                            needs.elastic_ips, free_fix="release unused Elastic IPs")

    guarded(VPCS_PER_REGION.check_name, "ec2:DescribeVpcs", vpcs)
    if zones:
        guarded(NAT_GATEWAYS_PER_AZ.check_name, "ec2:DescribeNatGateways",
                nat_gateways)
    else:
        checks.append(skipped(NAT_GATEWAYS_PER_AZ.check_name,
                              "the lab's zones are unknown"))
    guarded(ELASTIC_IPS.check_name, "ec2:DescribeAddresses", elastic_ips)
    try:
        checks.extend(_vcpu_checks(session, needs, ec2, sq))
    except (ClientError, BotoCoreError) as exc:
        checks.append(_call_failed("quota On-Demand vCPUs",
                                   "ec2:DescribeInstances / ec2:DescribeInstanceTypes", exc))
    return checks


def _vcpu_checks(session: boto3.Session, needs: LabNeeds, ec2, sq) -> list[Check]:
    region = needs.region
    instances = [i for r in _paginate(
        ec2, "describe_instances", "Reservations",
        Filters=[{"Name": "instance-state-name", "Values": ["pending", "running"]}])
        for i in r["Instances"]]
    lab_types = {n.instance_type for n in needs.instances}
    vcpus = instance_vcpus(session, needs.region,
                           lab_types | {i["InstanceType"] for i in instances})

    used = {"standard": 0, "gvt": 0}
    for inst in instances:
        # The quotas count an instance type's vCPUs; CpuOptions only stands in for a type
        # EC2 no longer describes.
        cpu = inst.get("CpuOptions") or {}
        count = vcpus.get(inst["InstanceType"],
                          cpu.get("CoreCount", 0) * cpu.get("ThreadsPerCore", 1))
        cls = vcpu_quota_class(inst["InstanceType"])
        if cls in used:
            used[cls] += count

    adds = {"standard": 0, "gvt": 0}
    checks: list[Check] = []
    for need in needs.instances:
        cls = vcpu_quota_class(need.instance_type)
        if need.instance_type not in vcpus:
            checks.append(Check(f"quota vCPUs of {need.role}", WARN,
                                f"{need.instance_type} is not an instance type EC2 knows in "
                                f"{needs.region}: its vCPUs are not counted below",
                                f"pick another type with {need.setting}"))
        elif cls == "other":
            checks.append(Check(f"quota vCPUs of {need.role}", WARN,
                                f"{need.instance_type} counts against an On-Demand vCPU quota "
                                "this preflight does not check",
                                "compare that quota with "
                                f"{need.count * vcpus[need.instance_type]} vCPUs by hand in "
                                "the Service Quotas console"))
        else:
            adds[cls] += need.count * vcpus[need.instance_type]

    note = " (an estimate from pending and running instances)"
    # Hosts are replaced delete-first (components/hybrid_hosts.py): a replacement needs no more
    # than the host it replaces. Managed node groups surge while an upgrade rolls them.
    replaced = " (a host is replaced delete-first: replacing it needs no more)"
    surge = sum(need.upgrade_surge * vcpus[need.instance_type] for need in needs.instances
                if need.upgrade_surge and need.instance_type in vcpus
                and vcpu_quota_class(need.instance_type) == "standard")
    burst_vcpus = (needs.burst_cpu_limit
                   if any(vcpu_quota_class(t) == "standard" for t in needs.burst_instance_types)
                   else 0)
    standard = read_quota(sq, STANDARD_VCPUS)
    base = _quota_check(
        STANDARD_VCPUS, standard, region, used["standard"],
        adds["standard"], used_note=note, free_fix="stop unused instances", later=burst_vcpus,
        later_note=f"when demo 2 bursts, capped by {needs.burst_cpu_setting}",
        later_setting=needs.burst_cpu_setting)
    checks.append(base)
    # Only when the stack itself fits: a FAIL above already asks for more.
    if surge and base.status != FAIL:
        checks.append(_quota_check(
            STANDARD_VCPUS, standard, region, used["standard"],
            adds["standard"], used_note=note, free_fix="stop unused instances", later=surge,
            later_note="while a change rolls the node groups: EKS launches up to two nodes per "
                       "zone of a group before it drains one",
            adds_note=replaced, moment="during an upgrade"))
    if adds["gvt"]:
        checks.append(_quota_check(
            GVT_VCPUS, read_quota(sq, GVT_VCPUS), region, used["gvt"], adds["gvt"],
            used_note=note, free_fix="stop unused G or VT instances", adds_note=replaced))
    return checks


# --- 6. names the lab takes in the region ------------------------------------------------------

_ABSENT = {"ResourceNotFoundException", "AWS.SimpleQueueService.NonExistentQueue",
           "QueueDoesNotExist"}


def _cluster_tags(session: boto3.Session, region: str, name: str) -> Optional[dict]:
    """The tags of EKS cluster ``name``, None when there is no such cluster."""
    try:
        cluster = _client(session, "eks", region).describe_cluster(name=name)["cluster"]
    except ClientError as exc:
        if _code(exc) in _ABSENT:
            return None
        raise
    return cluster.get("tags") or {}


def _log_group_tags(session: boto3.Session, region: str, name: str) -> Optional[dict]:
    logs = _client(session, "logs", region)
    groups = _paginate(logs, "describe_log_groups", "logGroups", logGroupNamePrefix=name)
    group = next((g for g in groups if g["logGroupName"] == name), None)
    if group is None:
        return None
    # DescribeLogGroups' ``arn`` ends in ":*"; tagging calls want the ARN without it.
    arn = group.get("logGroupArn") or group["arn"].removesuffix(":*")
    return logs.list_tags_for_resource(resourceArn=arn).get("tags") or {}


def _queue_tags(session: boto3.Session, region: str, name: str) -> Optional[dict]:
    sqs = _client(session, "sqs", region)
    try:
        url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
    except ClientError as exc:
        if _code(exc) in _ABSENT:
            return None
        raise
    return sqs.list_queue_tags(QueueUrl=url).get("Tags") or {}


def check_names_free(session: boto3.Session, needs: LabNeeds) -> Check:
    """FAIL when a name the lab creates is already taken in the region by something that is not
    this stack's (no owner tag, or another stack's): two stacks of one account and region with
    the same clusterName, or what an old run left behind. The stack's own (an earlier
    ``pulumi up``) is fine."""
    name = "names in the region"
    key, value = needs.owner_tag
    lookups = (("EKS cluster", needs.cluster_name, _cluster_tags, "eks:DescribeCluster"),
               ("log group", needs.log_group_name, _log_group_tags,
                "logs:DescribeLogGroups / logs:ListTagsForResource"),
               ("SQS queue", needs.queue_name, _queue_tags, "sqs:GetQueueUrl / sqs:ListQueueTags"))
    free, ours, taken = [], [], []
    unchecked: list[tuple[str, BaseException]] = []
    for what, resource, tags_of, action in lookups:
        try:
            tags = tags_of(session, needs.region, resource)
        except (ClientError, BotoCoreError) as exc:
            unchecked.append((action, exc))
            continue
        if tags is None:
            free.append(resource)
        elif tags.get(key) == value:
            ours.append(resource)
        else:
            owner = f"{key}={tags[key]}" if key in tags else f"no {key} tag"
            taken.append(f"the {what} {resource} exists and is not this stack's ({owner})")
    setting = needs.cluster_name_setting
    if taken:
        return Check(name, FAIL, f"in {needs.region}, " + "; ".join(taken) +
                     f": creating the lab's would fail ({setting} = {needs.cluster_name})",
                     f"give this stack a name no one uses in {needs.region}: pulumi config set "
                     f"{setting} <name> (by default it is hybrid-lab-<stack>); if they are what "
                     "an earlier run of this lab left behind, remove them (python -m "
                     "ops.leftovers lists them with the commands)")
    if unchecked:
        action, exc = unchecked[0]
        return _call_failed(name, action, exc)
    detail = f"{', '.join(free)} free in {needs.region}" if free else ""
    if ours:
        detail += ("; " if detail else "") + (f"{', '.join(ours)} already this stack's "
                                              f"({key}={value}: an earlier pulumi up)")
    return Check(name, PASS, detail)


# --- 7. the account's spot service-linked role ----------------------------------------------------

SPOT_ROLE = "AWSServiceRoleForEC2Spot"
SPOT_ROLE_FIX = "aws iam create-service-linked-role --aws-service-name spot.amazonaws.com"


def check_spot_role(session: boto3.Session, region: str) -> Check:
    """EC2 creates the Spot service-linked role at an account's first spot launch, if the
    caller may: Karpenter's controller may not, so in an account that never ran spot its first
    spot launch fails (AuthFailure.ServiceLinkedRoleCreationNotPermitted) and it falls back to
    on-demand — demo 2 then bursts on other capacity than it was measured with."""
    name = "spot service-linked role"
    try:
        role = _client(session, "iam", region).get_role(RoleName=SPOT_ROLE)["Role"]
    except ClientError as exc:
        if _code(exc) == "NoSuchEntity":
            return Check(name, WARN,
                         f"{SPOT_ROLE} does not exist (the account has not run spot): "
                         "Karpenter's first spot launch fails and demo 2's burst nodes "
                         "fall back to on-demand",
                         f"create it once for the account: {SPOT_ROLE_FIX}")
        return _call_failed(name, "iam:GetRole", exc)
    except BotoCoreError as exc:
        return _call_failed(name, "iam:GetRole", exc)
    return Check(name, PASS, f"{SPOT_ROLE} exists ({role['Arn']}): Karpenter can launch spot")


# --- 8. admin access entries ---------------------------------------------------------------------


def check_admin_roles(caller_arn: str, needs: LabNeeds) -> Check:
    """The cluster gives whoever creates it an admin access entry; an adminRoleArns item that
    is the deployer's own role asks for a second one, and CreateAccessEntry fails. (The program
    refuses it too, before it creates anything.)"""
    name = "admin access entries"
    setting = needs.admin_roles_setting
    if not needs.admin_role_arns:
        return Check(name, PASS, f"{setting} is empty: the deployer ({caller_arn}) is the only "
                                 "cluster admin")
    for index, arn in enumerate(needs.admin_role_arns):
        if same_role(caller_arn, arn):
            return Check(name, FAIL,
                         f"{setting} item {arn} is the role you deploy as ({caller_arn}): the "
                         "cluster already makes its creator an admin, and a second access "
                         "entry for the same role fails",
                         f"remove the item (pulumi config rm --path '{setting}[{index}]'): "
                         f"{setting} is for other roles")
    return Check(name, PASS, f"the deployer ({caller_arn}) is not among the "
                             f"{_plural(len(needs.admin_role_arns), 'role')} of {setting}")


# --- 9, 10. command-line tools --------------------------------------------------------------------

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")
AWS_CLI_INSTALL = "https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html"
PULUMI_INSTALL = ("install the Pulumi CLI: curl -fsSL https://get.pulumi.com | sh "
                  "(https://www.pulumi.com/docs/install/)")


def _run_version(run: Run, argv: list[str]) -> tuple[Optional[CommandResult], str]:
    try:
        return run(argv), ""
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def check_aws_cli(which: Which = shutil.which, run: Run = run_command) -> Check:
    name = "aws CLI"
    why = "the kubeconfig runs aws eks get-token"
    path = which("aws")
    if not path:
        return Check(name, FAIL, f"aws is not on PATH ({why})",
                     f"install the AWS CLI v2: {AWS_CLI_INSTALL}")
    result, error = _run_version(run, [path, "--version"])
    if result is None or result.returncode != 0:
        said = error or (result.stderr or result.stdout).strip()[:200]
        return Check(name, FAIL, f"{path} --version failed: {said}",
                     f"reinstall the AWS CLI v2: {AWS_CLI_INSTALL}")
    text = f"{result.stdout}\n{result.stderr}"
    match = re.search(r"aws-cli/(\d+)\.(\d+)\.(\d+)", text)
    if not match:
        return Check(name, WARN, f"{path} --version printed no aws-cli/<version>: "
                                 f"{text.strip()[:120]!r}",
                     f"make sure it is the AWS CLI v2 ({why})")
    version = ".".join(match.groups())
    if int(match.group(1)) < 2:
        return Check(name, FAIL, f"{path} is aws-cli/{version}, v1 ({why}; use v2)",
                     f"replace it with the AWS CLI v2 (pip uninstall awscli, then "
                     f"{AWS_CLI_INSTALL})")
    return Check(name, PASS, f"aws-cli/{version} at {path}")


def check_pulumi_cli(which: Which = shutil.which, run: Run = run_command) -> Check:
    name = "pulumi CLI"
    path = which("pulumi")
    if not path:
        return Check(name, FAIL, "pulumi is not on PATH", PULUMI_INSTALL)
    result, error = _run_version(run, [path, "version"])
    if result is None or result.returncode != 0:
        said = error or (result.stderr or result.stdout).strip()[:200]
        return Check(name, FAIL, f"{path} version failed: {said}", f"re{PULUMI_INSTALL}")
    # stdout first: an upgrade notice on stderr names other versions.
    match = _VERSION.search(result.stdout) or _VERSION.search(result.stderr)
    if not match:
        return Check(name, WARN, f"could not read a version from {path} version: "
                                 f"{(result.stdout + result.stderr).strip()[:120]!r}",
                     "make sure it is Pulumi 3.0 or newer (pulumi version)")
    version = ".".join(match.groups())
    if int(match.group(1)) < 3:
        return Check(name, FAIL, f"pulumi {version} at {path}; the project needs 3.0 or newer",
                     f"upgrade: {PULUMI_INSTALL}")
    return Check(name, PASS, f"pulumi {version} at {path}")
