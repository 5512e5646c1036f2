"""Layer 5 — Karpenter: the controller, its interruption handling, and the cloud-burst NodePool
demo 2 overflows into."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.karpenter import Karpenter, KarpenterArgs
from stacks.config import LabConfig
from stacks.layers.base import Layer
from stacks.layers.cluster import SYSTEM_NODE_COUNT, ClusterLayer
from stacks.layers.network import NetworkLayer

DISCOVERY_TAG = "karpenter.sh/discovery"
NODE_CLASS = "default"
NODE_POOL = "cloud-burst"
#: General-purpose types that hold several burst pods, in two generations so spot has
#: somewhere to go (docs/karpenter.md#interruption-discovery-nodepool).
BURST_INSTANCE_TYPES = ["m6i.xlarge", "m6i.2xlarge", "m7i.xlarge", "m7i.2xlarge"]
#: Only demo 2's burst pods tolerate it: any other pod on a burst node would keep the node from
#: ever being empty, so it would outlive the run and skew the next one.
BURST_TAINT = {"key": "eks-hybrid-lab.io/burst", "value": "true", "effect": "NoSchedule"}
BURST_TOLERATION = {**BURST_TAINT, "operator": "Equal"}


def ec2_node_class(cfg: LabConfig, node_role_name: pulumi.Input[str]) -> dict:
    return {
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "role": node_role_name,
        # Only the cloud VPC's private subnets and the cluster security group carry this tag.
        "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: cfg.cluster_name}}],
        "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: cfg.cluster_name}}],
        # The provider's default tags do not reach what Karpenter launches: the lab tag is
        # passed on here so the leftovers audit sees burst instances too.
        "tags": {**cfg.lab_tag, "Name": f"{cfg.cluster_name}-{NODE_POOL}"},
        "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                            "httpPutResponseHopLimit": 1, "httpTokens": "required"},
        "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {
            "volumeSize": "30Gi", "volumeType": "gp3", "encrypted": True,
            "deleteOnTermination": True}}],
    }


def burst_node_pool(cfg: LabConfig) -> dict:
    return {
        "template": {
            "metadata": {"labels": {"node-type": NODE_POOL}},
            "spec": {
                "taints": [dict(BURST_TAINT)],
                "requirements": [
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In",
                     "values": ["spot", "on-demand"]},
                    {"key": "node.kubernetes.io/instance-type", "operator": "In",
                     "values": BURST_INSTANCE_TYPES},
                ],
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                                 "name": NODE_CLASS},
            },
        },
        # The cost guard: Karpenter launches nothing past this many vCPUs.
        "limits": {"cpu": str(cfg.burst_cpu_limit)},
        "disruption": {
            "consolidationPolicy": "WhenEmpty",
            "consolidateAfter": "30s",
            # Scenario C ranks pods only on nodes the budget lets Karpenter disrupt: all of them.
            "budgets": [{"nodes": "100%"}],
        },
    }


class KarpenterLayer(Layer):
    karpenter: Karpenter
    node_class: k8s.apiextensions.CustomResource
    node_pool: k8s.apiextensions.CustomResource

    def __init__(self, cfg: LabConfig, network: NetworkLayer, cluster: ClusterLayer,
                 account_id: str, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Karpenter", "karpenter", opts)

        # Burst nodes take the cluster security group; it is EKS's, so it is tagged here.
        sg_tag = aws.ec2.Tag(
            self.child_name("cluster-sg-discovery"),
            resource_id=cluster.eks.cluster_security_group_id,
            key=DISCOVERY_TAG, value=cfg.cluster_name, opts=self.child())

        self.karpenter = Karpenter(self.child_name("karpenter"), KarpenterArgs(
            cluster_name=cfg.cluster_name,
            cluster_name_output=cluster.eks.name,
            cluster_arn=cluster.eks.arn,
            region=cfg.region,
            account_id=account_id,
            version=cfg.karpenter_version,
            # One per system node: the chart spreads replicas over nodes and zones.
            controller_replicas=SYSTEM_NODE_COUNT,
            pod_deletion_cost=cfg.burst_scenario == "C",
            wait_for=[cluster.system_nodes.node_group, cluster.addons["eks-pod-identity-agent"],
                      *network.cloud.egress],
            cleanup_waits_for=[sg_tag, *network.cloud.private_subnets],
            account=cfg.aws_account,
        ), opts=self.child())

        controller = self.karpenter.controller
        self.node_class = k8s.apiextensions.CustomResource(
            self.child_name("node-class"),
            api_version="karpenter.k8s.aws/v1",
            kind="EC2NodeClass",
            metadata={"name": NODE_CLASS},
            spec=ec2_node_class(cfg, self.karpenter.node_role.role_name),
            # Deleted while the controller runs: its finalizer removes the instance profiles
            # and launch templates Karpenter made for it.
            opts=self.child(depends_on=[controller, sg_tag],
                            custom_timeouts=pulumi.CustomTimeouts(delete="20m")),
        )
        self.node_pool = k8s.apiextensions.CustomResource(
            self.child_name("node-pool"),
            api_version="karpenter.sh/v1",
            kind="NodePool",
            metadata={"name": NODE_POOL},
            spec=burst_node_pool(cfg),
            # Deleted first of all Karpenter: the NodeClaims' finalizers terminate the burst
            # instances while the controller still runs.
            opts=self.child(depends_on=[controller, self.node_class],
                            custom_timeouts=pulumi.CustomTimeouts(delete="20m")),
        )
        self.register_outputs({"nodePool": NODE_POOL})
