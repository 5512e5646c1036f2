"""Layer 4 — Gateway: the EKS Hybrid Nodes gateway on its own node group, the VXLAN rules
between it and the server LAN, and the cleanup of the routes it writes (demo 1)."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_aws as aws

from components.hybrid_gateway import (NODE_LABEL, HybridNodesGateway, HybridNodesGatewayArgs,
                                       gateway_node_user_data, source_dest_check_policy)
from components.hybrid_hosts import VXLAN_PORT
from components.node_group import ManagedNodeGroup, ManagedNodeGroupArgs, Taint
from stacks.config import LabConfig
from stacks.layers.base import Layer
from stacks.layers.cluster import ClusterLayer
from stacks.layers.hybrid import HybridLayer
from stacks.layers.network import NetworkLayer

GATEWAY_NODE_COUNT = 2


class GatewayLayer(Layer):
    nodes: ManagedNodeGroup
    node_security_group: aws.ec2.SecurityGroup
    gateway: HybridNodesGateway
    route_table_ids: list[pulumi.Output[str]]

    def __init__(self, cfg: LabConfig, network: NetworkLayer, cluster: ClusterLayer,
                 hybrid: HybridLayer, account_id: str,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Gateway", "gateway", opts)
        server_lan = network.remote_node_cidr
        # Two zones: the gateway's replicas sit on different nodes in different zones.
        subnets = network.cloud.private_subnets[:GATEWAY_NODE_COUNT]

        # VXLAN between the gateway nodes and the hybrid nodes, in both directions and no wider:
        # the server LAN on the gateway side, the gateway nodes' subnets on the hosts' side.
        self.node_security_group = aws.ec2.SecurityGroup(
            self.child_name("nodes-sg"),
            vpc_id=network.cloud.vpc_id,
            description="Hybrid nodes gateway: VXLAN to and from the hybrid nodes",
            tags={"Name": self.child_name("nodes-sg")},
            opts=self.child(),
        )
        aws.vpc.SecurityGroupIngressRule(
            self.child_name("vxlan-from-lan"),
            security_group_id=self.node_security_group.id, ip_protocol="udp",
            from_port=VXLAN_PORT, to_port=VXLAN_PORT, cidr_ipv4=server_lan,
            description="VXLAN from hybrid nodes", opts=self.child())
        aws.vpc.SecurityGroupEgressRule(
            self.child_name("vxlan-to-lan"),
            security_group_id=self.node_security_group.id, ip_protocol="udp",
            from_port=VXLAN_PORT, to_port=VXLAN_PORT, cidr_ipv4=server_lan,
            description="VXLAN to hybrid nodes", opts=self.child())
        for index, cidr in enumerate(network.cloud.private_subnet_cidrs[:GATEWAY_NODE_COUNT]):
            aws.vpc.SecurityGroupIngressRule(
                self.child_name(f"hosts-vxlan-from-gateway-{index}"),
                security_group_id=hybrid.hosts.security_group.id, ip_protocol="udp",
                from_port=VXLAN_PORT, to_port=VXLAN_PORT, cidr_ipv4=cidr,
                description="VXLAN from the hybrid nodes gateway (the return path)",
                opts=self.child())

        self.nodes = ManagedNodeGroup(self.child_name("nodes"), ManagedNodeGroupArgs(
            cluster_name=cluster.eks.name,
            subnet_ids=[s.id for s in subnets],
            instance_type=cfg.gateway_instance_type,
            size=GATEWAY_NODE_COUNT,
            labels={NODE_LABEL: "true"},
            taints=[Taint(NODE_LABEL, "true", "NO_SCHEDULE")],
            instance_tags=cfg.lab_tag,
            extra_user_data=gateway_node_user_data(),
            extra_node_policies={"source-dest-check": source_dest_check_policy(
                cfg.region, account_id, network.cloud.vpc_id)},
            security_group_ids=[cluster.eks.cluster_security_group_id, self.node_security_group.id],
            wait_for=[*network.cloud.egress, cluster.addons["vpc-cni"], cluster.addons["kube-proxy"]],
        ), opts=self.child())

        self.route_table_ids = [network.cloud.private_route_table_id]
        self.gateway = HybridNodesGateway(self.child_name("gateway"), HybridNodesGatewayArgs(
            cluster_name=cluster.eks.name,
            cluster_endpoint=cluster.eks.endpoint,
            cluster_certificate_authority=cluster.eks.certificate_authority,
            region=cfg.region,
            account_id=account_id,
            vpc_cidr=str(cfg.cloud_vpc_cidr),
            pod_cidrs=[str(cfg.hybrid_pod_cidr)],
            route_table_ids=self.route_table_ids,
            wait_for=[hybrid.cilium.release, self.nodes.node_group,
                      cluster.addons["eks-pod-identity-agent"]],
        ), opts=self.child())

        self.register_outputs({"releaseName": self.gateway.release.name})
