"""A Transit Gateway that joins VPCs ("spokes") with routes both ways.

The gateway has its own route table with static routes instead of the default table with
propagation: the routes are then resources this program declares, creates and deletes, and a
test can read them. Each spoke's VPC route tables get a route to every other spoke's CIDR.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class Spoke:
    #: Short name used in child resource names ("cloud", "onprem").
    name: str
    #: The VPC the gateway attaches.
    vpc_id: pulumi.Input[str]
    #: The VPC's CIDR: the destination of the routes to it, in the gateway's route table and
    #: in the other spokes' route tables.
    cidr_block: str
    #: Subnets the attachment places its interfaces in: one per availability zone used.
    subnet_ids: Sequence[pulumi.Input[str]]
    #: VPC route tables that get a route to every other spoke through the gateway.
    route_table_ids: Sequence[pulumi.Input[str]]


@dataclass(frozen=True)
class TransitGatewayArgs:
    #: The VPCs the gateway joins; every spoke gets a route to every other one. Names must be
    #: unique: they name the attachments and routes.
    spokes: Sequence[Spoke]
    #: The gateway's description, what the console lists it by: the caller names its own lab
    #: (no default, so two labs in one account are told apart).
    description: str


class TransitGateway(pulumi.ComponentResource):
    transit_gateway: aws.ec2transitgateway.TransitGateway
    transit_gateway_id: pulumi.Output[str]
    attachments: dict[str, aws.ec2transitgateway.VpcAttachment]
    #: Every route this component declares (in the gateway and in the VPCs). Whatever talks
    #: across the gateway depends on them, so it is created after and destroyed before them.
    routes: list[pulumi.Resource]

    def __init__(self, name: str, args: TransitGatewayArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:network:TransitGateway", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        if len({s.name for s in args.spokes}) != len(args.spokes):
            raise ValueError("spoke names must be unique")

        self.transit_gateway = aws.ec2transitgateway.TransitGateway(
            f"{name}-tgw",
            description=args.description,
            default_route_table_association="disable",
            default_route_table_propagation="disable",
            auto_accept_shared_attachments="disable",
            dns_support="enable",
            tags={"Name": f"{name}-tgw"},
            opts=child,
        )
        self.transit_gateway_id = self.transit_gateway.id
        route_table = aws.ec2transitgateway.RouteTable(
            f"{name}-rt",
            transit_gateway_id=self.transit_gateway.id,
            tags={"Name": f"{name}-rt"},
            opts=child,
        )

        self.attachments = {}
        self.routes = []
        for spoke in args.spokes:
            attachment = aws.ec2transitgateway.VpcAttachment(
                f"{name}-{spoke.name}-attachment",
                transit_gateway_id=self.transit_gateway.id,
                vpc_id=spoke.vpc_id,
                subnet_ids=list(spoke.subnet_ids),
                transit_gateway_default_route_table_association=False,
                transit_gateway_default_route_table_propagation=False,
                dns_support="enable",
                tags={"Name": f"{name}-{spoke.name}-attachment"},
                opts=child,
            )
            self.attachments[spoke.name] = attachment
            aws.ec2transitgateway.RouteTableAssociation(
                f"{name}-{spoke.name}-association",
                transit_gateway_attachment_id=attachment.id,
                transit_gateway_route_table_id=route_table.id,
                opts=child,
            )
            self.routes.append(aws.ec2transitgateway.Route(
                f"{name}-to-{spoke.name}",
                destination_cidr_block=spoke.cidr_block,
                transit_gateway_attachment_id=attachment.id,
                transit_gateway_route_table_id=route_table.id,
                opts=child,
            ))

        for spoke in args.spokes:
            for peer in args.spokes:
                if peer is spoke:
                    continue
                for index, route_table_id in enumerate(spoke.route_table_ids):
                    suffix = f"-{index}" if len(spoke.route_table_ids) > 1 else ""
                    self.routes.append(aws.ec2.Route(
                        f"{name}-{spoke.name}-to-{peer.name}{suffix}",
                        route_table_id=route_table_id,
                        destination_cidr_block=peer.cidr_block,
                        transit_gateway_id=self.transit_gateway.id,
                        # AWS rejects a route to a gateway the VPC is not attached to yet.
                        opts=pulumi.ResourceOptions(
                            parent=self, depends_on=[self.attachments[spoke.name]]),
                    ))

        self.register_outputs({
            "transitGatewayId": self.transit_gateway_id,
            "attachmentIds": {k: a.id for k, a in self.attachments.items()},
        })
