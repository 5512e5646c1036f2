"""Layer 4 — Gateway: the EKS Hybrid Nodes gateway on its own node group, the VXLAN rules
between it and the server LAN, and the cleanup of the routes it writes (demo 1)."""

from __future__ import annotations

from typing import Optional

import pulumi

from components.hybrid_gateway import (GatewayNodes, GatewayNodesArgs, HybridNodesGateway,
                                       HybridNodesGatewayArgs)
from stacks.config import LabConfig
from stacks.layers.base import Layer
from stacks.layers.cluster import ClusterLayer
from stacks.layers.hybrid import HybridLayer
from stacks.layers.network import NetworkLayer

GATEWAY_NODE_COUNT = 2


class GatewayLayer(Layer):
    nodes: GatewayNodes
    gateway: HybridNodesGateway
    route_table_ids: list[pulumi.Output[str]]

    def __init__(self, cfg: LabConfig, network: NetworkLayer, cluster: ClusterLayer,
                 hybrid: HybridLayer, account_id: str,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Gateway", "gateway", opts)
        # Two zones: the gateway's replicas sit on different nodes in different zones.
        self.nodes = GatewayNodes(self.child_name("nodes"), GatewayNodesArgs(
            cluster_name=cluster.eks.name,
            cluster_security_group_id=cluster.eks.cluster_security_group_id,
            vpc_id=network.cloud.vpc_id,
            subnet_ids=network.cloud.private_subnet_ids[:GATEWAY_NODE_COUNT],
            subnet_cidrs=network.cloud.private_subnet_cidrs[:GATEWAY_NODE_COUNT],
            instance_type=cfg.gateway_instance_type,
            # Follows kubernetesVersion, once the control plane runs it.
            kubernetes_version=cluster.eks.version,
            peer_cidr=network.remote_node_cidr,
            peer_security_group_id=hybrid.hosts.security_group.id,
            instance_tags=cfg.lab_tag,
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
            account=cfg.aws_account,
            wait_for=[hybrid.cilium.release, self.nodes.group.node_group,
                      cluster.addons["eks-pod-identity-agent"]],
        ), opts=self.child())

        self.register_outputs({"releaseName": self.gateway.release.name})
