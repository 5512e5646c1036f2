"""Layer 1 — Network: the cloud VPC, the simulated on-prem VPC and the Transit Gateway."""

from __future__ import annotations

from typing import Optional, Sequence

import pulumi

from components.transit_gateway import Spoke, TransitGateway, TransitGatewayArgs
from components.vpc import Vpc, VpcArgs
from stacks.config import LabConfig
from stacks.layers.base import Layer


class NetworkLayer(Layer):
    #: Cluster, nodes, pods and control-plane interfaces; one private subnet per zone.
    cloud: Vpc
    #: The simulated data centre: its one private subnet is the "server LAN" the hybrid hosts
    #: live in, and so the cluster's remote node network.
    on_prem: Vpc
    transit: TransitGateway
    remote_node_cidr: str
    availability_zones: list[str]

    def __init__(self, cfg: LabConfig, zones: Sequence[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Network", "network", opts)
        self.availability_zones = list(zones[: cfg.availability_zone_count])

        self.cloud = Vpc(
            self.child_name("cloud"),
            VpcArgs(
                cidr_block=str(cfg.cloud_vpc_cidr),
                availability_zones=self.availability_zones,
                # Karpenter launches burst nodes into the subnets carrying this tag; the
                # on-prem VPC never carries it.
                private_subnet_tags={"karpenter.sh/discovery": cfg.cluster_name},
            ),
            opts=self.child(),
        )
        self.on_prem = Vpc(
            self.child_name("onprem"),
            # Its own NAT gateway stands in for the data centre's internet uplink (nodeadm
            # downloads, SSM, ECR, a public EKS endpoint).
            VpcArgs(cidr_block=str(cfg.on_prem_vpc_cidr), availability_zones=zones[:1]),
            opts=self.child(),
        )
        self.remote_node_cidr = self.on_prem.private_subnet_cidrs[0]

        self.transit = TransitGateway(
            self.child_name("transit"),
            TransitGatewayArgs(
                description=f"{cfg.project}/{cfg.stack}: cloud VPC <-> simulated on-prem VPC",
                spokes=[
                    Spoke(name="cloud", vpc_id=self.cloud.vpc_id,
                          cidr_block=self.cloud.cidr_block,
                          subnet_ids=self.cloud.private_subnet_ids,
                          route_table_ids=[self.cloud.private_route_table_id]),
                    Spoke(name="onprem", vpc_id=self.on_prem.vpc_id,
                          cidr_block=self.on_prem.cidr_block,
                          subnet_ids=self.on_prem.private_subnet_ids,
                          route_table_ids=[self.on_prem.private_route_table_id]),
                ],
            ),
            opts=self.child(),
        )

        self.register_outputs({
            "cloudVpcId": self.cloud.vpc_id,
            "onPremVpcId": self.on_prem.vpc_id,
            "transitGatewayId": self.transit.transit_gateway_id,
            "remoteNodeCidr": self.remote_node_cidr,
        })
