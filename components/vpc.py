"""A VPC whose workloads live in private subnets and reach the internet through one NAT gateway.

The public subnet holds only the NAT gateway: nothing in this VPC gets a public IP and nothing
is reachable from the internet. Private subnets share one route table so the routes other
components add (Transit Gateway, the hybrid nodes gateway's pod-CIDR route) land in one place.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws

#: A NAT gateway needs a handful of addresses; /28 is the smallest subnet AWS allows.
NAT_SUBNET_PREFIX = 28


def plan_subnets(cidr_block: str, private_count: int) -> tuple[list[str], str]:
    """Carves a VPC CIDR into ``private_count`` private subnets and one small NAT subnet.

    The VPC is cut into quarters: private subnet i takes quarter i (so up to three, each a
    quarter of the VPC: room for VPC-CNI pod IPs), the NAT subnet is the first /28 of the last
    quarter. The result depends only on the inputs, so subnets never move between runs.
    """
    vpc = ipaddress.ip_network(cidr_block)
    if not 1 <= private_count <= 3:
        raise ValueError(f"private_count must be 1 to 3, not {private_count}")
    if vpc.prefixlen > 24:
        raise ValueError(f"{cidr_block} is too small to carve (needs /24 or larger)")
    quarters = list(vpc.subnets(prefixlen_diff=2))
    nat = next(quarters[3].subnets(new_prefix=NAT_SUBNET_PREFIX))
    return [str(q) for q in quarters[:private_count]], str(nat)


@dataclass(frozen=True)
class VpcArgs:
    #: The VPC's CIDR, /24 or larger: its first quarters become the private subnets, one per
    #: zone, and the NAT subnet is carved from the last quarter (plan_subnets).
    cidr_block: str
    #: One private subnet per zone, in this order; the NAT gateway goes in the first zone.
    availability_zones: Sequence[str]
    #: Tags only the private subnets carry (for example Karpenter's discovery tag).
    private_subnet_tags: Mapping[str, str] = field(default_factory=dict)


class Vpc(pulumi.ComponentResource):
    vpc: aws.ec2.Vpc
    vpc_id: pulumi.Output[str]
    cidr_block: str
    private_subnets: list[aws.ec2.Subnet]
    private_subnet_ids: list[pulumi.Output[str]]
    private_subnet_cidrs: list[str]
    private_route_table: aws.ec2.RouteTable
    private_route_table_id: pulumi.Output[str]
    nat_gateway: aws.ec2.NatGateway
    nat_public_ip: pulumi.Output[str]
    #: What makes the private subnets reach the internet: their default route to the NAT
    #: gateway and their route-table associations. Anything that needs the internet from a
    #: private subnet (nodes joining, controllers calling AWS APIs at delete time) depends on
    #: these, so it is created after them and destroyed before them.
    egress: list[pulumi.Resource]

    def __init__(self, name: str, args: VpcArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:network:Vpc", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        private_cidrs, nat_cidr = plan_subnets(args.cidr_block, len(args.availability_zones))

        def tags(resource_name: str, extra: Optional[Mapping[str, str]] = None) -> dict:
            return {"Name": resource_name, **(extra or {})}

        self.cidr_block = args.cidr_block
        self.private_subnet_cidrs = private_cidrs
        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.cidr_block,
            # EKS (and hybrid nodes resolving the cluster endpoint) need both.
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags=tags(f"{name}-vpc"),
            opts=child,
        )
        self.vpc_id = self.vpc.id

        # Adopting the default security group with no rules strips AWS's allow-all defaults, so
        # nothing can fall back to it by accident.
        aws.ec2.DefaultSecurityGroup(
            f"{name}-default-sg",
            vpc_id=self.vpc.id,
            ingress=[],
            egress=[],
            tags=tags(f"{name}-default-sg"),
            opts=child,
        )

        igw = aws.ec2.InternetGateway(
            f"{name}-igw", vpc_id=self.vpc.id, tags=tags(f"{name}-igw"), opts=child)

        nat_subnet = aws.ec2.Subnet(
            f"{name}-nat",
            vpc_id=self.vpc.id,
            cidr_block=nat_cidr,
            availability_zone=args.availability_zones[0],
            map_public_ip_on_launch=False,
            tags=tags(f"{name}-nat"),
            opts=child,
        )
        public_rt = aws.ec2.RouteTable(
            f"{name}-public-rt", vpc_id=self.vpc.id, tags=tags(f"{name}-public-rt"), opts=child)
        aws.ec2.Route(
            f"{name}-public-default-route",
            route_table_id=public_rt.id,
            destination_cidr_block="0.0.0.0/0",
            gateway_id=igw.id,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-nat-rta", subnet_id=nat_subnet.id, route_table_id=public_rt.id, opts=child)

        eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags=tags(f"{name}-nat-eip"), opts=child)
        self.nat_gateway = aws.ec2.NatGateway(
            f"{name}-nat-gw",
            allocation_id=eip.allocation_id,
            subnet_id=nat_subnet.id,
            connectivity_type="public",
            tags=tags(f"{name}-nat-gw"),
            # A NAT gateway created before its VPC has an internet gateway cannot route.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]),
        )
        self.nat_public_ip = self.nat_gateway.public_ip

        # No inline routes=: a route table declared with them would delete routes it does not
        # own (the hybrid nodes gateway writes the pod-CIDR route into this table).
        self.private_route_table = aws.ec2.RouteTable(
            f"{name}-private-rt", vpc_id=self.vpc.id, tags=tags(f"{name}-private-rt"), opts=child)
        self.private_route_table_id = self.private_route_table.id
        egress_route = aws.ec2.Route(
            f"{name}-private-default-route",
            route_table_id=self.private_route_table.id,
            destination_cidr_block="0.0.0.0/0",
            nat_gateway_id=self.nat_gateway.id,
            opts=child,
        )

        self.private_subnets = []
        self.egress = [egress_route]
        for index, (cidr, zone) in enumerate(zip(private_cidrs, args.availability_zones)):
            subnet = aws.ec2.Subnet(
                f"{name}-private-{index}",
                vpc_id=self.vpc.id,
                cidr_block=cidr,
                availability_zone=zone,
                map_public_ip_on_launch=False,
                tags=tags(f"{name}-private-{index}", args.private_subnet_tags),
                opts=child,
            )
            self.egress.append(aws.ec2.RouteTableAssociation(
                f"{name}-private-{index}-rta",
                subnet_id=subnet.id,
                route_table_id=self.private_route_table.id,
                opts=child,
            ))
            self.private_subnets.append(subnet)
        self.private_subnet_ids = [s.id for s in self.private_subnets]

        self.register_outputs({
            "vpcId": self.vpc_id,
            "cidrBlock": self.cidr_block,
            "privateSubnetIds": self.private_subnet_ids,
            "privateRouteTableId": self.private_route_table_id,
            "natPublicIp": self.nat_public_ip,
        })
