"""Stack outputs: what later steps, the demos and the presenter read with `pulumi stack output`."""

from __future__ import annotations

import pulumi

from stacks.config import LAYERS
from stacks.layers import Lab


def export_lab(lab: Lab) -> None:
    cfg = lab.config
    pulumi.export("layers", list(cfg.layers))
    pulumi.export("destroyOrder", list(reversed(cfg.layers)))
    pulumi.export("notBuilt", [layer for layer in LAYERS if layer not in cfg.layers])
    pulumi.export("region", cfg.region)

    if lab.network is not None:
        net = lab.network
        pulumi.export("availabilityZones", net.availability_zones)
        pulumi.export("cloudVpcId", net.cloud.vpc_id)
        pulumi.export("cloudVpcCidr", net.cloud.cidr_block)
        pulumi.export("cloudPrivateSubnetIds", net.cloud.private_subnet_ids)
        pulumi.export("cloudPrivateRouteTableIds", [net.cloud.private_route_table_id])
        pulumi.export("onPremVpcId", net.on_prem.vpc_id)
        pulumi.export("onPremVpcCidr", net.on_prem.cidr_block)
        pulumi.export("onPremServerLanSubnetId", net.on_prem.private_subnet_ids[0])
        pulumi.export("remoteNodeCidr", net.remote_node_cidr)
        pulumi.export("transitGatewayId", net.transit.transit_gateway_id)
        pulumi.export("natPublicIps", [net.cloud.nat_public_ip, net.on_prem.nat_public_ip])
