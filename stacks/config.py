"""The lab's settings: one typed, frozen object, validated before any resource is registered.

Every setting is declared once, in ``SETTINGS`` (key, type, default, description); ``Pulumi.yaml``
declares the same keys and a test keeps the two in step. ``load_config`` reads raw string values
(as Pulumi hands them over), checks every rule and raises one ``ConfigError`` that lists every
violation with the key, the value and the rule — so a wrong setting costs one run, not one per
mistake, and nothing is created.
"""

from __future__ import annotations

import dataclasses
import datetime
import difflib
import ipaddress
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

import pulumi

from components.aws_account import AwsAccount
from components.eks_versions import (EXTENDED_SUPPORT_USD_PER_HOUR, STANDARD_SUPPORT_USD_PER_HOUR,
                                     in_standard_support, offered_versions, support_window)
from components.principals import same_role
# The stack's aws: settings (imported here for load_config and for the modules that import
# them from here).
from stacks.aws_config import (AWS_NAMESPACE, HONOURED, PIN_COMMAND,  # noqa: F401
                               account_violations, account_warnings, aws_account_settings,
                               aws_provider_keys, unapplied_provider_settings,
                               unknown_provider_keys)
from stacks.region import LAB_PARTITION, arn_partition, region_problem
from stacks.violation import ROLE_ARN, Violation

PROJECT = "eks-hybrid-lab"

#: The six layers, in creation order; destroy runs the reverse.
LAYERS: tuple[str, ...] = ("network", "cluster", "hybrid", "gateway", "karpenter", "demo")

#: The layers this version of the program builds. It grows as layers land; ``upToLayer``
#: defaults to the last of them, so a stack with default settings always deploys.
AVAILABLE_LAYERS: tuple[str, ...] = LAYERS

#: How long a lab may stay up: its SSM activation lasts 30 days (then the hosts cannot
#: register again without a new activation). A version whose standard support ends within it
#: is warned about.
LAB_LIFETIME_DAYS = 30


def today() -> datetime.date:
    """The date the support windows are judged on (a seam for the tests)."""
    return datetime.date.today()


#: Cilium's per-node pod block (clusterPoolIPv4MaskSize): 128 pods per node. It cannot change
#: once nodes have blocks, so it is fixed here.
CILIUM_NODE_MASK = 25

#: The first Karpenter with the ``podDeletionCostManagement`` feature gate (scenario C). An older
#: chart ignores the setting, so scenario C would silently run as scenario B.
POD_DELETION_COST_KARPENTER = "1.15.0"

RFC1918 = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))


@dataclass(frozen=True)
class Setting:
    key: str
    type: str  # the Pulumi.yaml config type: string | integer | boolean | array
    #: For a ``derived_default`` setting, the empty string: Pulumi.yaml declares it so the CLI
    #: does not require the key, and the program derives the value when it is empty.
    default: Any
    description: str
    #: The default as documented when it is computed from the stack name (Pulumi.yaml then
    #: declares none): see DERIVED_DEFAULTS.
    derived_default: Optional[str] = None


SETTINGS: tuple[Setting, ...] = (
    Setting("upToLayer", "string", AVAILABLE_LAYERS[-1],
            "Build the layers up to and including this one: network, cluster, hybrid, gateway, "
            "karpenter or demo. Lowering it removes the layers above (staged teardown)."),
    Setting("clusterName", "string", "",
            "EKS cluster name; also the karpenter.sh/discovery tag value and the prefix of the "
            "interruption queue, the activation and the log group. Defaults to "
            "hybrid-lab-<stack> (made a valid EKS name), so two stacks in one account and "
            "region do not collide.",
            derived_default="hybrid-lab-<stack>"),
    Setting("kubernetesVersion", "string", "1.35",
            "Kubernetes version of the cluster and of nodeadm on hybrid hosts (1.<minor>, in "
            "EKS standard support: the cluster is created with upgradePolicy STANDARD)."),
    Setting("availabilityZoneCount", "integer", 2,
            "Availability zones for the cloud VPC's private subnets (2 or 3)."),
    Setting("cloudVpcCidr", "string", "10.0.0.0/16",
            "CIDR of the cloud VPC (RFC 1918, /16 to /24)."),
    Setting("onPremVpcCidr", "string", "172.16.0.0/16",
            "CIDR of the simulated on-prem VPC (RFC 1918, /16 to /24); its server LAN subnet is "
            "the cluster's remote node network."),
    Setting("hybridPodCidr", "string", "172.17.0.0/16",
            "Remote pod network: the pod CIDR of hybrid nodes (Cilium cluster-pool IPAM)."),
    Setting("serviceCidr", "string", "172.20.0.0/16",
            "Kubernetes service CIDR of the cluster (RFC 1918, /12 to /24)."),
    Setting("endpointAccess", "string", "public",
            "EKS API endpoint: public or private (hybrid nodes need one, not both)."),
    Setting("adminCidrs", "array", [],
            "CIDRs allowed to reach a public API endpoint; empty leaves it open to the internet "
            "(IAM-authenticated) with a warning."),
    Setting("adminRoleArns", "array", [],
            "IAM role ARNs given cluster-admin through EKS access entries (besides whoever "
            "runs pulumi up)."),
    Setting("logRetentionDays", "integer", 7,
            "Retention of the control-plane log group, in days (a CloudWatch retention value)."),
    Setting("hybridNodeCount", "integer", 2,
            "Simulated on-prem hosts joined as hybrid nodes (1 to 10)."),
    Setting("hybridNodeInstanceType", "string", "m5.xlarge",
            "EC2 instance type of the simulated on-prem hosts."),
    Setting("activationGeneration", "integer", 1,
            "Raise by one to replace the SSM hybrid activation (it is valid for 30 days): the "
            "hybrid hosts are replaced too and register again."),
    Setting("gpuEnabled", "boolean", False,
            "Add one GPU host as a hybrid node for demo 3 (costs money; off by default)."),
    Setting("gpuInstanceType", "string", "g6.xlarge",
            "EC2 instance type of the GPU host."),
    Setting("systemNodeInstanceType", "string", "m6i.large",
            "EC2 instance type of the system managed node group."),
    Setting("gatewayInstanceType", "string", "m6i.large",
            "EC2 instance type of the hybrid nodes gateway node group."),
    Setting("karpenterVersion", "string", "1.15.0",
            "Karpenter chart version (no leading v)."),
    Setting("burstScenario", "string", "A",
            "Demo 2 scale-in scenario: A (nothing), B (Kyverno pod-deletion-cost), "
            "C (B plus Karpenter's podDeletionCostManagement)."),
    Setting("burstCpuLimit", "integer", 32,
            "CPU cap of the cloud-burst NodePool (at least 4): a cost guard."),
    Setting("burstReplicas", "integer", 3,
            "Replicas of demo 2's burst Deployment at deploy time (0 to 50); the demo scales "
            "it 3 -> 15 -> 12 -> 10 -> 3 with kubectl."),
    Setting("priceOverrides", "array", [],
            "Prices for the cost estimate, as key=usd items replacing the built-in table (for "
            "example ec2.m5.xlarge=0.25 or natGateway=0.05; see stacks/costs.py for the keys)."),
    Setting("gpuModel", "string", "Qwen/Qwen2.5-0.5B-Instruct",
            "Hugging Face model demo 3's vLLM server loads (a small one: a g6.xlarge has one "
            "24 GB GPU)."),
)

SETTINGS_BY_KEY = {s.key: s for s in SETTINGS}

#: The longest cluster name whose derived names AWS still accepts: the Karpenter interruption
#: queue ``<clusterName>-karpenter`` must fit SQS's 80 characters.
CLUSTER_NAME_MAX = 80 - len("-karpenter")


def default_cluster_name(stack: str) -> str:
    """``hybrid-lab-<stack>`` as a valid EKS cluster name: each run of characters EKS does not
    allow (a stack name may hold dots) becomes a hyphen, and it is cut to CLUSTER_NAME_MAX."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", f"hybrid-lab-{stack}")
    return name[:CLUSTER_NAME_MAX]


#: Defaults computed from the stack name, for the settings that declare ``derived_default``.
DERIVED_DEFAULTS: dict[str, Callable[[str], Any]] = {"clusterName": default_cluster_name}
assert set(DERIVED_DEFAULTS) == {s.key for s in SETTINGS if s.derived_default}


class ConfigError(pulumi.RunError):
    """Every broken rule at once; raised before any resource is registered.

    A RunError, so `pulumi up` prints the message without a Python traceback."""

    def __init__(self, violations: list[Violation]):
        self.violations = violations
        lines = "\n".join(f"  - {v}" for v in violations)
        super().__init__(
            f"invalid configuration ({len(violations)} problem{'s' if len(violations) > 1 else ''}); "
            f"nothing was created:\n{lines}"
        )

    def as_written(self, written: Mapping[str, str], project: str = PROJECT) -> "ConfigError":
        """The same problems, each value shown as the stack file writes it. ``written`` maps a
        full key (``eks-hybrid-lab:hybridNodeCount``) to its text in the file (``"20"``); a
        value the rule judged other than the file's (a derived default) keeps its own."""
        def full(key: str) -> str:
            return key if ":" in key else f"{project}:{key}"
        return ConfigError([
            dataclasses.replace(v, written=written[full(v.key)])
            if full(v.key) in written and _same_text(v.value, written[full(v.key)]) else v
            for v in self.violations])


def _same_text(value: Any, written: str) -> bool:
    """Whether ``written`` (YAML source text of a scalar or flow value) is ``value`` as text."""
    import yaml

    try:
        loaded = yaml.safe_load(written)
    except yaml.YAMLError:
        return False
    if isinstance(loaded, bool):
        loaded = "true" if loaded else "false"
    elif isinstance(loaded, (list, dict)):
        try:
            return isinstance(value, str) and json.loads(value) == loaded
        except ValueError:
            return False
    return str(loaded) == str(value)


@dataclass(frozen=True)
class LabConfig:
    project: str
    stack: str
    region: str
    up_to_layer: str
    cluster_name: str
    kubernetes_version: str
    availability_zone_count: int
    cloud_vpc_cidr: ipaddress.IPv4Network
    on_prem_vpc_cidr: ipaddress.IPv4Network
    hybrid_pod_cidr: ipaddress.IPv4Network
    service_cidr: ipaddress.IPv4Network
    endpoint_access: str
    admin_cidrs: tuple[ipaddress.IPv4Network, ...]
    admin_role_arns: tuple[str, ...]
    log_retention_days: int
    hybrid_node_count: int
    hybrid_node_instance_type: str
    activation_generation: int
    gpu_enabled: bool
    gpu_instance_type: str
    system_node_instance_type: str
    gateway_instance_type: str
    karpenter_version: str
    burst_scenario: str
    burst_cpu_limit: int
    burst_replicas: int
    price_overrides: tuple[tuple[str, float], ...]
    gpu_model: str
    #: The stack's aws:profile, aws:allowedAccountIds and aws:assumeRoles: every tool acts
    #: with these credentials, in these accounts (components/aws_account.py).
    aws_account: AwsAccount = AwsAccount()

    @property
    def layers(self) -> tuple[str, ...]:
        """The layers this stack builds, in creation order."""
        return LAYERS[: LAYERS.index(self.up_to_layer) + 1]

    @property
    def hybrid_host_count(self) -> int:
        """Simulated on-prem hosts: the hybrid nodes plus the GPU host when enabled."""
        return self.hybrid_node_count + (1 if self.gpu_enabled else 0)

    @property
    def lab_tag(self) -> dict[str, str]:
        """The tag every AWS resource of this stack carries; the leftovers audit looks for it."""
        return {f"{PROJECT}:stack": f"{self.project}/{self.stack}"}


# --- parsing: raw Pulumi config strings into Python values --------------------------------------

_TRUE, _FALSE = {"true", "True", "TRUE"}, {"false", "False", "FALSE"}


def _parse(setting: Setting, raw: Optional[str]) -> tuple[Any, Optional[str]]:
    """Returns (value, problem). ``raw`` is the string Pulumi stores; None means not set."""
    if raw is None:
        return setting.default, None
    if setting.type == "string":
        return raw, None
    if setting.type == "integer":
        if re.fullmatch(r"[+-]?\d+", raw.strip()):
            return int(raw), None
        return raw, "must be a whole number"
    if setting.type == "boolean":
        if raw in _TRUE:
            return True, None
        if raw in _FALSE:
            return False, None
        return raw, "must be true or false"
    if setting.type == "array":
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return value, None
        return raw, (
            "must be a list of strings; set items with "
            f"pulumi config set --path '{setting.key}[0]' <value>"
        )
    raise AssertionError(f"unknown setting type {setting.type}")  # pragma: no cover


def _written(setting: Setting, raw: Optional[str]) -> Optional[str]:
    """How a value Pulumi handed over as text is best shown: a number, a boolean or a list the
    way a stack file writes it (``20``, not ``"20"``), anything else quoted as text."""
    if raw is None or setting.type == "string":
        return None
    if setting.type == "integer" and re.fullmatch(r"[+-]?\d+", raw.strip()):
        return raw.strip()
    if setting.type == "boolean" and raw in _TRUE | _FALSE:
        return raw
    if setting.type == "array":
        try:
            json.loads(raw)
        except ValueError:
            return None
        return raw
    return None


# --- rules --------------------------------------------------------------------------------------

_CLUSTER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
_INSTANCE_TYPE = re.compile(r"[a-z][a-z0-9-]*[0-9][a-z0-9-]*\.[a-z0-9][a-z0-9-]*")
_SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")
_HF_MODEL = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")


def _network(value: str) -> tuple[Optional[ipaddress.IPv4Network], Optional[str]]:
    try:
        net = ipaddress.ip_network(value, strict=False)
    except ValueError:
        return None, "must be an IPv4 CIDR such as 10.0.0.0/16"
    if net.version != 4:
        return None, "must be an IPv4 CIDR (EKS hybrid nodes and this lab are IPv4 only)"
    if str(net) != value.strip():
        return None, f"has host bits set; the network is {net}"
    return net, None


def _private_network(value: str, min_prefix: int, max_prefix: int):
    net, problem = _network(value)
    if problem:
        return None, problem
    if not any(net.subnet_of(block) for block in RFC1918):
        return None, "must be inside an RFC 1918 range (10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16)"
    if not min_prefix <= net.prefixlen <= max_prefix:
        return None, f"must be a /{min_prefix} to /{max_prefix} block"
    return net, None


def _rule_choice(choices: tuple[str, ...]) -> Callable[[Any], tuple[Any, Optional[str]]]:
    def check(value):
        if value in choices:
            return value, None
        return None, "must be one of " + ", ".join(choices)
    return check


def _rule_int(low: int, high: Optional[int] = None):
    def check(value):
        if value >= low and (high is None or value <= high):
            return value, None
        if high is None:
            return None, f"must be at least {low}"
        if high == low + 1:
            return None, f"must be {low} or {high}"
        return None, f"must be from {low} to {high}"
    return check


def _rule_cluster_name(value):
    if not _CLUSTER_NAME.fullmatch(value):
        return None, ("must be 1-100 characters of letters, digits, hyphens and underscores, "
                      "starting with a letter or digit (EKS cluster name rules)")
    if len(value) > CLUSTER_NAME_MAX:
        return None, (f"must be at most {CLUSTER_NAME_MAX} characters: the Karpenter "
                      "interruption queue <clusterName>-karpenter must fit SQS's 80")
    return value, None


def _rule_kubernetes_version(value):
    if value in offered_versions():
        return value, None
    return None, ("must be 1.<minor>, one of " + ", ".join(offered_versions())
                  + " (the versions EKS offers for new clusters)")


def _standard_support_violation(version: str, day: datetime.date) -> Optional[str]:
    """A version whose EKS standard support is over: under upgradePolicy STANDARD (what the lab
    sets) EKS would upgrade it at once; under EXTENDED it would bill six times as much."""
    window = support_window(version)
    if not window.ends_within(day):
        return None
    current = in_standard_support(day)
    return (f"EKS standard support for {version} ended on {window.standard_ends.isoformat()} "
            f"(docs/eks-support.md): extended support bills the control plane "
            f"${EXTENDED_SUPPORT_USD_PER_HOUR:.2f}/h instead of ${STANDARD_SUPPORT_USD_PER_HOUR:.2f}/h, "
            "and the lab creates clusters with upgradePolicy STANDARD; choose "
            + " or ".join(current))


def _rule_instance_type(value):
    if _INSTANCE_TYPE.fullmatch(value):
        return value, None
    return None, "must be an EC2 instance type name such as m6i.large"


def _version(value: str) -> tuple[int, ...]:
    """A validated MAJOR.MINOR.PATCH as a tuple that compares by number."""
    return tuple(int(part) for part in value.split("."))


def _rule_karpenter_version(value):
    if value.startswith("v"):
        return None, "must be a semantic version without the leading v (chart tags have none), e.g. 1.15.0"
    match = _SEMVER.fullmatch(value)
    if not match:
        return None, "must be a semantic version MAJOR.MINOR.PATCH such as 1.15.0"
    if int(match.group(1)) < 1:
        return None, "must be 1.0.0 or later (the karpenter.sh/v1 NodePool API)"
    return value, None


def _rule_admin_cidrs(values):
    nets = []
    for item in values:
        net, problem = _network(item)
        if problem:
            return None, f"item {json.dumps(item)} {problem}"
        nets.append(net)
    return tuple(nets), None


#: The retention periods CloudWatch Logs accepts.
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827,
                      2192, 2557, 2922, 3288, 3653)


def _rule_role_arns(values):
    for item in values:
        if not ROLE_ARN.fullmatch(item):
            return None, (f"item {json.dumps(item)} is not an IAM role ARN "
                          "(arn:aws:iam::<account>:role/<name>)")
        if arn_partition(item) != LAB_PARTITION:
            # Each partition has its own IAM: a role of another cannot reach this cluster
            # (docs/configuration.md#regions).
            return None, (f"item {json.dumps(item)} is a role of the {arn_partition(item)} "
                          f"partition; the lab's clusters are in the {LAB_PARTITION} partition, "
                          "whose IAM is its own: give a role of the aws partition "
                          "(arn:aws:iam::<account>:role/<name>)")
    return tuple(values), None


def _rule_log_retention(value):
    if value in LOG_RETENTION_DAYS:
        return value, None
    return None, "must be a CloudWatch retention: " + ", ".join(map(str, LOG_RETENTION_DAYS))


_PRICE_ITEM = re.compile(r"([a-z][\w.-]*)=(\d+(?:\.\d+)?)")


def _rule_price_overrides(values):
    items = []
    for item in values:
        match = _PRICE_ITEM.fullmatch(item)
        if not match:
            return None, f"item {json.dumps(item)} is not key=usd (for example ec2.m5.xlarge=0.25)"
        items.append((match.group(1), float(match.group(2))))
    return tuple(items), None


_RULES: dict[str, Callable[[Any], tuple[Any, Optional[str]]]] = {
    "upToLayer": _rule_choice(LAYERS),
    "clusterName": _rule_cluster_name,
    "kubernetesVersion": _rule_kubernetes_version,
    "availabilityZoneCount": _rule_int(2, 3),
    "cloudVpcCidr": lambda v: _private_network(v, 16, 24),
    "onPremVpcCidr": lambda v: _private_network(v, 16, 24),
    # /8 to /32 is what EKS accepts for a remote network.
    "hybridPodCidr": lambda v: _private_network(v, 8, 32),
    "serviceCidr": lambda v: _private_network(v, 12, 24),
    "endpointAccess": _rule_choice(("public", "private")),
    "adminCidrs": _rule_admin_cidrs,
    "adminRoleArns": _rule_role_arns,
    "logRetentionDays": _rule_log_retention,
    "activationGeneration": _rule_int(1),
    "hybridNodeCount": _rule_int(1, 10),
    "hybridNodeInstanceType": _rule_instance_type,
    "gpuEnabled": lambda v: (v, None),
    "gpuInstanceType": _rule_instance_type,
    "systemNodeInstanceType": _rule_instance_type,
    "gatewayInstanceType": _rule_instance_type,
    "karpenterVersion": _rule_karpenter_version,
    "burstScenario": _rule_choice(("A", "B", "C")),
    "burstCpuLimit": _rule_int(4),
    "burstReplicas": _rule_int(0, 50),
    "priceOverrides": _rule_price_overrides,
    "gpuModel": lambda v: (v, None) if _HF_MODEL.fullmatch(v) else (
        None, "must be a Hugging Face model id such as Qwen/Qwen2.5-0.5B-Instruct"),
}

# Pairs of networks that must not overlap (docs/networking.md#remote-networks): the key that is reported, then the
# key it collides with. Each pair is reported once, on the later key of the table above.
_DISJOINT = (
    ("onPremVpcCidr", "cloudVpcCidr"),
    ("hybridPodCidr", "cloudVpcCidr"),
    ("hybridPodCidr", "onPremVpcCidr"),
    ("serviceCidr", "cloudVpcCidr"),
    ("serviceCidr", "onPremVpcCidr"),
    ("serviceCidr", "hybridPodCidr"),
)


def _field(key: str) -> str:
    """camelCase setting key -> snake_case LabConfig field (onPremVpcCidr -> on_prem_vpc_cidr)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", key).lower()


def load_config(values: Mapping[str, str], *, stack: str, region: Optional[str],
                project: str = PROJECT, day: Optional[datetime.date] = None,
                others: Optional[Mapping[str, Any]] = None) -> LabConfig:
    """Builds the validated config from raw values keyed by setting name (no namespace).

    ``region`` is the ``aws:region`` setting; ``day`` the date support windows are judged on
    (today); ``others`` the stack's keys of other namespaces (``aws:profile``), judged by
    ``unapplied_provider_settings``. Raises ConfigError listing every violation.
    """
    violations: list[Violation] = unapplied_provider_settings(others or {})
    account, account_violations = aws_account_settings(others or {})
    violations += account_violations
    parsed: dict[str, Any] = {}

    for key in sorted(set(values) - set(SETTINGS_BY_KEY)):
        close = difflib.get_close_matches(key, SETTINGS_BY_KEY, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        violations.append(Violation(f"{project}:{key}", values[key],
                                    f"is not a setting of {project}{hint}"))

    for setting in SETTINGS:
        raw = values.get(setting.key)
        # Unset (a config from the tests) or the declared empty default (what the CLI hands
        # the program when the stack leaves the key out): derived from the stack name.
        if raw in (None, "") and setting.key in DERIVED_DEFAULTS:
            raw = DERIVED_DEFAULTS[setting.key](stack)
        value, problem = _parse(setting, raw)
        if problem is None:
            value, problem = _RULES[setting.key](value)
        if problem is None:
            parsed[setting.key] = value
        else:
            violations.append(Violation(setting.key, raw, problem, _written(setting, raw)))

    version = parsed.get("kubernetesVersion")
    if version is not None:
        problem = _standard_support_violation(version, day or today())
        if problem:
            violations.append(Violation("kubernetesVersion", version, problem))

    for key, other in _DISJOINT:
        if key in parsed and other in parsed and parsed[key].overlaps(parsed[other]):
            violations.append(Violation(
                key, str(parsed[key]), f"must not overlap {other} ({parsed[other]})"))

    pods, count, gpu = (parsed.get(k) for k in ("hybridPodCidr", "hybridNodeCount", "gpuEnabled"))
    if pods is not None and count is not None and gpu is not None:
        hosts = count + (1 if gpu else 0)
        blocks = 2 ** (CILIUM_NODE_MASK - pods.prefixlen) if pods.prefixlen <= CILIUM_NODE_MASK else 0
        if blocks < hosts:
            violations.append(Violation(
                "hybridPodCidr", str(pods),
                f"must hold a /{CILIUM_NODE_MASK} pod block for each of the {hosts} hybrid hosts "
                f"(Cilium gives every node one); it holds {blocks}"))

    scenario, karpenter = parsed.get("burstScenario"), parsed.get("karpenterVersion")
    if scenario == "C" and karpenter is not None and _version(karpenter) < _version(
            POD_DELETION_COST_KARPENTER):
        violations.append(Violation(
            "burstScenario", scenario,
            f"scenario C needs karpenterVersion {POD_DELETION_COST_KARPENTER} or later (the "
            f"podDeletionCostManagement feature gate); karpenterVersion is {karpenter}, whose "
            "chart ignores the gate, so C would run as B. Raise karpenterVersion or choose A or B"))

    violations += _capacity_violations(parsed)

    layer = parsed.get("upToLayer")
    if layer is not None and layer not in AVAILABLE_LAYERS:
        violations.append(Violation(
            "upToLayer", layer,
            f"this version builds only the layers {', '.join(AVAILABLE_LAYERS)}; "
            f"set upToLayer to one of them"))

    # A region of the aws partition only: stacks/region.py says why.
    problem = region_problem(region)
    if problem:
        violations.append(Violation("aws:region", region, problem))

    if violations:
        raise ConfigError(violations)
    return LabConfig(project=project, stack=stack, region=region, aws_account=account,
                     **{_field(k): v for k, v in parsed.items()})


def _capacity_violations(parsed: Mapping[str, Any]) -> list[Violation]:
    """The hosts must be instance types whose size the lab knows: demo 2 sizes its burst pods
    from the hybrid hosts' CPU, and demo 3 asks for one GPU."""
    from components import demos
    from components.capacity import burst_cpu_request_m
    from components.instance_types import instance_capacity

    found = []
    hybrid = parsed.get("hybridNodeInstanceType")
    if hybrid is not None:
        try:
            burst_cpu_request_m(hybrid, demos.hybrid_co_tenant_cpu_m())
        except ValueError as error:
            found.append(Violation(
                "hybridNodeInstanceType", hybrid,
                f"must be a size whose CPU and memory the lab knows (m, c, r or g families, "
                f"large to 48xlarge) with room for four burst pods per host: {error}"))
    gpu = parsed.get("gpuInstanceType")
    if gpu is not None and parsed.get("gpuEnabled"):
        try:
            gpus = instance_capacity(gpu).gpus
        except ValueError:
            gpus = 0
        if gpus < 1:
            found.append(Violation(
                "gpuInstanceType", gpu,
                "must be an NVIDIA GPU instance type of the g4dn, g5, g6 or g6e families "
                "(demo 3's vLLM server asks for one GPU)"))
    return found


def deployer_admin_violations(admin_role_arns: tuple[str, ...], caller_arn: str) -> list[Violation]:
    """adminRoleArns items that are the role ``pulumi up`` runs as (``caller_arn``, from
    sts:GetCallerIdentity). The cluster already gives its creator an admin access entry
    (bootstrap_cluster_creator_admin_permissions), so a second one for the same role fails at
    CreateAccessEntry — after the cluster has taken 10 minutes to create."""
    return [Violation(
        "adminRoleArns", arn,
        f"is the role pulumi up runs as ({caller_arn}); the cluster already makes its creator an "
        "admin, and a second access entry for the same role fails. adminRoleArns is for other "
        "roles: remove this item")
        for arn in admin_role_arns if same_role(caller_arn, arn)]


def load_keyed_config(config: Mapping[str, Any], *, stack: str, region: Optional[str],
                      project: str = PROJECT) -> LabConfig:
    """``load_config`` for a stack's whole config keyed as Pulumi keys it: this project's keys
    (``eks-hybrid-lab:burstReplicas``) are the lab's settings, every other namespace's
    (``aws:profile``) is judged as ``others``."""
    prefix = f"{PROJECT}:"
    values = {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}
    others = {k: v for k, v in config.items() if not k.startswith(prefix)}
    return load_config(values, stack=stack, region=region, project=project, others=others)


def read_pulumi_config() -> LabConfig:
    """Loads the config of the running Pulumi program (real or under mocks)."""
    from pulumi.runtime import config as runtime_config

    # Every key set for this stack, so a misspelt key is reported instead of silently ignored.
    everything: dict[str, Any] = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    for warning in unknown_provider_keys(everything):
        pulumi.log.warn(warning)
    # Pulumi.yaml's project-level defaults are applied by the CLI and arrive here as values;
    # defaults for keys that are absent come from SETTINGS.
    return load_keyed_config(everything, stack=pulumi.get_stack(), project=pulumi.get_project(),
                             region=pulumi.Config("aws").get("region"))

