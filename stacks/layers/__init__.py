"""The six layers and their wiring: build the ones `upToLayer` asks for, in order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import pulumi
import pulumi_aws as aws

from components.zones import eks_availability_zones
from stacks.aws_config import account_violations, account_warnings
from stacks.config import (AVAILABLE_LAYERS, ConfigError, LabConfig, Violation,
                           deployer_admin_violations)
from stacks.layers.cluster import ClusterLayer
from stacks.layers.demo import DemoLayer
from stacks.layers.gateway import GatewayLayer
from stacks.layers.hybrid import HybridLayer
from stacks.layers.karpenter import KarpenterLayer
from stacks.layers.network import NetworkLayer


@dataclass
class Lab:
    """What has been built; a layer that `upToLayer` leaves out stays None."""

    config: LabConfig
    aws_provider: aws.Provider
    zones: list[str]
    account_id: str
    network: Optional[NetworkLayer] = None
    cluster: Optional[ClusterLayer] = None
    hybrid: Optional[HybridLayer] = None
    gateway: Optional[GatewayLayer] = None
    karpenter: Optional[KarpenterLayer] = None
    demo: Optional[DemoLayer] = None


def _layer_options(lab: Lab) -> pulumi.ResourceOptions:
    # Children inherit their providers from the layer: every AWS resource carries the lab tag,
    # and every Kubernetes resource goes through the cluster's provider (so it depends on the
    # cluster and is deleted before it).
    providers: list[pulumi.ProviderResource] = [lab.aws_provider]
    if lab.cluster is not None:
        providers.append(lab.cluster.kubernetes)
    return pulumi.ResourceOptions(providers=providers)


def _build_network(lab: Lab) -> None:
    lab.network = NetworkLayer(lab.config, lab.zones, opts=_layer_options(lab))


def _build_cluster(lab: Lab) -> None:
    lab.cluster = ClusterLayer(lab.config, lab.network, opts=_layer_options(lab))


def _build_hybrid(lab: Lab) -> None:
    lab.hybrid = HybridLayer(lab.config, lab.network, lab.cluster, lab.account_id,
                             opts=_layer_options(lab))


def _build_gateway(lab: Lab) -> None:
    lab.gateway = GatewayLayer(lab.config, lab.network, lab.cluster, lab.hybrid, lab.account_id,
                               opts=_layer_options(lab))


def _build_karpenter(lab: Lab) -> None:
    lab.karpenter = KarpenterLayer(lab.config, lab.network, lab.cluster, lab.account_id,
                                   opts=_layer_options(lab))


def _build_demo(lab: Lab) -> None:
    lab.demo = DemoLayer(lab.config, lab.cluster, lab.hybrid, lab.karpenter,
                         opts=_layer_options(lab))


#: One builder per layer this version builds, in creation order. Each may use only the layers
#: built before it (so every prefix of layers is a complete stack).
BUILDERS: dict[str, Callable[[Lab], None]] = {
    "network": _build_network,
    "cluster": _build_cluster,
    "hybrid": _build_hybrid,
    "gateway": _build_gateway,
    "karpenter": _build_karpenter,
    "demo": _build_demo,
}
assert tuple(BUILDERS) == AVAILABLE_LAYERS, "BUILDERS and config.AVAILABLE_LAYERS disagree"


def build_lab(cfg: LabConfig) -> Lab:
    provider = aws.Provider(
        "aws",
        region=cfg.region,
        default_tags=aws.ProviderDefaultTagsArgs(tags=cfg.lab_tag),
        # An explicit provider reads no aws: stack config: the account settings are passed on
        # here (docs/pulumi-cli.md#an-explicit-provider-reads-no-stack-config).
        **cfg.aws_account.provider_args(),
    )
    zones = eks_availability_zones(provider)
    # What only the account can tell is checked before any layer registers a resource (the
    # provider is not a cloud resource), and reported at once.
    violations = []
    if len(zones) < cfg.availability_zone_count:
        violations.append(Violation(
            "availabilityZoneCount", cfg.availability_zone_count,
            f"region {cfg.region} offers only {len(zones)} zone(s) EKS can use: {', '.join(zones)}"))
    caller = aws.get_caller_identity(opts=pulumi.InvokeOptions(provider=provider))
    violations += account_violations(cfg.aws_account, caller.account_id)
    violations += deployer_admin_violations(cfg.admin_role_arns, caller.arn)
    if violations:
        raise ConfigError(violations)
    for warning in account_warnings(cfg.aws_account):
        pulumi.log.warn(warning)
    lab = Lab(config=cfg, aws_provider=provider, zones=zones, account_id=caller.account_id)
    for layer in cfg.layers:
        BUILDERS[layer](lab)
    return lab
