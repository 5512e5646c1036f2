"""What a rehearsal costs while the lab is up: on-demand prices per layer, per hour and per day.

The charges that run while the lab is up (docs/demo-guide.md#costs-and-teardown): the EKS control plane, NAT gateways,
Transit Gateway attachments, EC2 instances and their volumes, hybrid-node vCPU hours. Prices
are approximate on-demand list prices; each entry says where it comes from and when it was
read. ``priceOverrides`` (``key=usd`` items) replaces any of them, for another region or a
newer price list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

from components.instance_types import vcpus
from stacks.config import LabConfig

READ_ON = "2026-11-29"

#: Control-plane log volume (api, audit, authenticator) in GB a day, low and high: a quiet
#: small cluster writes a few hundred MB a day across the log types; this one also renews about
#: five leader Leases every one to two seconds (gateway, Karpenter, Cilium operator, controller
#: manager, scheduler), each an audit event. Estimates (docs/eks-support.md), not measured.
CONTROL_PLANE_LOG_GB_PER_DAY = (0.5, 2.0)
HOURS_PER_MONTH = 730


@dataclass(frozen=True)
class Price:
    usd: float
    unit: str  # hour | vcpu-hour | gb-month | month
    source: str


_US_EC2 = "aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go (generated 2026-01-19)"
_SEOUL_EC2 = "public ap-northeast-2 on-demand table (m5/m6i/m7i .xlarge); other sizes scale linearly within a family"

PRICES: dict[str, dict[str, Price]] = {
    "us-east-1": {
        "eks.cluster": Price(0.10, "hour", "EKS pricing, standard support (upgradePolicy STANDARD)"),
        "logs.ingestion": Price(0.50, "gb", "CloudWatch Logs pricing, standard class ingestion"),
        "eks.hybridVcpu": Price(0.020, "vcpu-hour", "EKS Hybrid Nodes, first tier (secondary source)"),
        "natGateway": Price(0.045, "hour", "VPC pricing (plus $0.045/GB processed)"),
        "publicIpv4": Price(0.005, "hour", "VPC pricing, public IPv4 address in use"),
        "tgwAttachment": Price(0.05, "hour", "Transit Gateway pricing (plus $0.02/GB)"),
        "ebs.gp3": Price(0.08, "gb-month", "EBS pricing, gp3"),
        "kms.key": Price(1.00, "month", "KMS pricing, customer managed key"),
        "ec2.m5.xlarge": Price(0.192, "hour", _US_EC2),
        "ec2.m6i.large": Price(0.096, "hour", _US_EC2),
        "ec2.m6i.xlarge": Price(0.192, "hour", _US_EC2),
        "ec2.m6i.2xlarge": Price(0.384, "hour", _US_EC2),
        "ec2.m7i.xlarge": Price(0.2016, "hour", _US_EC2),
        "ec2.m7i.2xlarge": Price(0.4032, "hour", _US_EC2),
        "ec2.g6.xlarge": Price(0.8048, "hour", _US_EC2),
    },
    "ap-northeast-2": {
        "eks.cluster": Price(0.10, "hour", "EKS pricing, standard support (upgradePolicy STANDARD; one price in all regions)"),
        "logs.ingestion": Price(0.76, "gb", "CloudWatch Logs pricing, standard class ingestion, Asia Pacific (Seoul) (estimate)"),
        "eks.hybridVcpu": Price(0.020, "vcpu-hour", "EKS Hybrid Nodes, first tier (estimate for Seoul)"),
        "natGateway": Price(0.059, "hour", "VPC pricing, Asia Pacific (estimate; plus $0.059/GB)"),
        "publicIpv4": Price(0.005, "hour", "VPC pricing, public IPv4 address in use (flat in every region)"),
        "tgwAttachment": Price(0.07, "hour", "Transit Gateway pricing, Asia Pacific (estimate)"),
        "ebs.gp3": Price(0.0912, "gb-month", "EBS pricing, gp3 (estimate for Seoul)"),
        "kms.key": Price(1.00, "month", "KMS pricing, customer managed key"),
        "ec2.m5.xlarge": Price(0.236, "hour", _SEOUL_EC2),
        "ec2.m6i.large": Price(0.118, "hour", _SEOUL_EC2),
        "ec2.m6i.xlarge": Price(0.236, "hour", _SEOUL_EC2),
        "ec2.m6i.2xlarge": Price(0.472, "hour", _SEOUL_EC2),
        "ec2.m7i.xlarge": Price(0.2478, "hour", _SEOUL_EC2),
        "ec2.m7i.2xlarge": Price(0.4956, "hour", _SEOUL_EC2),
        "ec2.g6.xlarge": Price(1.00, "hour", "estimate (g6 in Seoul not confirmed: run ops.preflight)"),
    },
}
#: Regions without a table use this one's prices (and say so).
FALLBACK_REGION = "us-east-1"

@dataclass(frozen=True)
class LayerCost:
    layer: str
    low: Optional[float]  # USD per hour, always running; None: a price is missing
    high: Optional[float]  # with the optional parts (GPU host, burst at its cap)
    note: str = ""


class PriceBook:
    def __init__(self, region: str, overrides: Mapping[str, float]):
        self.region = region if region in PRICES else FALLBACK_REGION
        self.fallback = region not in PRICES
        self.prices = {k: p.usd for k, p in PRICES[self.region].items()}
        self.prices.update(overrides)
        self.missing: set[str] = set()

    def hourly(self, key: str) -> float:
        if key not in self.prices:
            self.missing.add(key)
            return float("nan")
        price = self.prices[key]
        unit = PRICES[self.region][key].unit if key in PRICES[self.region] else "hour"
        return price / HOURS_PER_MONTH if unit == "month" else price

    def ec2(self, instance_type: str) -> float:
        return self.hourly(f"ec2.{instance_type}")

    def logs(self, gb_per_day: float) -> float:
        """Hourly cost of ingesting ``gb_per_day`` into CloudWatch Logs."""
        return gb_per_day / 24 * self.hourly("logs.ingestion")

    def ebs(self, gib: float) -> float:
        return gib * self.hourly("ebs.gp3") / HOURS_PER_MONTH


def _layer_cost(layer: str, low: float, high: float, note: str = "") -> LayerCost:
    def clean(x: float) -> Optional[float]:
        return None if x != x else round(x, 4)  # NaN: a price was missing
    return LayerCost(layer, clean(low), clean(high), note)


def estimate(cfg: LabConfig, overrides: Optional[Mapping[str, float]] = None) -> tuple[list[LayerCost], PriceBook]:
    """Per-layer hourly cost of the layers ``cfg`` builds. Figures follow the resources the
    layers create (components and their sizes) — see the comments for each."""
    book = PriceBook(cfg.region, overrides or {})
    costs = []
    for layer in cfg.layers:
        if layer == "network":
            # Two NAT gateways, each with a public IPv4 address; two TGW attachments.
            value = 2 * book.hourly("natGateway") + 2 * book.hourly("publicIpv4") + 2 * book.hourly("tgwAttachment")
            costs.append(_layer_cost(layer, value, value))
        elif layer == "cluster":
            # The control plane (standard support: the cluster's upgradePolicy), its KMS key,
            # two system nodes with 30 GiB gp3 each, and its api/audit/authenticator logs'
            # ingestion (their storage, 7 days of a few GB, is cents a month).
            value = (book.hourly("eks.cluster") + book.hourly("kms.key")
                     + 2 * (book.ec2(cfg.system_node_instance_type) + book.ebs(30)))
            low_logs, high_logs = (book.logs(gb) for gb in CONTROL_PLANE_LOG_GB_PER_DAY)
            costs.append(_layer_cost(
                layer, value + low_logs, value + high_logs,
                f"control-plane logs {CONTROL_PLANE_LOG_GB_PER_DAY[0]:g}-"
                f"{CONTROL_PLANE_LOG_GB_PER_DAY[1]:g} GB/day"))
        elif layer == "hybrid":
            # Each host: the EC2 instance standing in for a server, its 40 GiB volume, and
            # the EKS hybrid-node fee per vCPU-hour while its Node exists.
            rate = book.hourly("eks.hybridVcpu")
            node = (book.ec2(cfg.hybrid_node_instance_type) + book.ebs(40)
                    + vcpus(cfg.hybrid_node_instance_type) * rate)
            value = cfg.hybrid_node_count * node
            gpu = 0.0
            if cfg.gpu_enabled:
                gpu = (book.ec2(cfg.gpu_instance_type) + book.ebs(100)
                       + vcpus(cfg.gpu_instance_type) * rate)
            costs.append(_layer_cost(layer, value + gpu, value + gpu,
                                     f"GPU host {gpu:.2f}/h" if cfg.gpu_enabled else ""))
        elif layer == "gateway":
            value = 2 * (book.ec2(cfg.gateway_instance_type) + book.ebs(30))
            costs.append(_layer_cost(layer, value, value))
        elif layer == "karpenter":
            # Nothing runs until demo 2 bursts; at the NodePool's cap, burstCpuLimit vCPUs of
            # the dearest (per vCPU) on-demand burst type, each node with a 30 GiB volume.
            from stacks.layers.karpenter import BURST_INSTANCE_TYPES
            per_vcpu = max(book.ec2(t) / vcpus(t) for t in BURST_INSTANCE_TYPES)
            nodes = cfg.burst_cpu_limit / min(vcpus(t) for t in BURST_INSTANCE_TYPES)
            high = cfg.burst_cpu_limit * per_vcpu + nodes * book.ebs(30)
            costs.append(_layer_cost(layer, 0.0, high, f"burst up to {cfg.burst_cpu_limit} vCPUs"))
        else:
            costs.append(_layer_cost(layer, 0.0, 0.0, "runs on the nodes above"))
    return costs, book


def totals(costs: list[LayerCost]) -> tuple[Optional[float], Optional[float]]:
    if any(c.low is None or c.high is None for c in costs):
        return None, None
    return round(sum(c.low for c in costs), 4), round(sum(c.high for c in costs), 4)
