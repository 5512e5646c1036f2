"""The EKS Hybrid Nodes gateway (aws/eks-hybrid-nodes-gateway): a VXLAN gateway on two cloud
nodes that makes hybrid pods reachable from the VPC. The elected leader writes
``<hybrid pod CIDR> -> <its primary ENI>`` into the route tables it is given and upserts the
``CiliumVTEPConfig`` that points Cilium at it.

Its IAM is narrower than the project's example: it may read route tables and instances in this
region, and write routes only in exactly the route tables it is given. The routes and the
VTEP config it leaves behind at uninstall are removed by a cleanup that runs after the release.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.aws_account import AwsAccount
from components.cleanup.gateway_routes import GatewayRouteCleanup
from components.iam import Role, RoleArgs, trust_policy
from components.node_group import ManagedNodeGroup, ManagedNodeGroupArgs, Taint
from components.propagation import POD_IDENTITY_SETTLE_SECONDS, PropagationWait

#: VXLAN between the gateway and the hybrid nodes.
VXLAN_PORT = 8472

CHART = "oci://public.ecr.aws/eks/eks-hybrid-nodes-gateway"
#: 1.0.0 crashes on a comma-separated list of VPC CIDRs.
VERSION = "1.0.1"
NAMESPACE = "eks-hybrid-nodes-gateway"
#: The release name; the chart names its service account after it (the chart's fullname).
RELEASE_NAME = "eks-hybrid-nodes-gateway"
SERVICE_ACCOUNT = RELEASE_NAME
#: The Lease the replicas elect a leader with; its holder is "<node name>_<uuid>" (the pods
#: use the host network, so the identity is the node's, not the pod's).
LEASE_NAME = "hybrid-gateway-leader"
NODE_LABEL = "hybrid-gateway-node"
VTEP_CONFIG_NAME = "hybrid-gateway"


def gateway_node_user_data() -> str:
    """The boot script of a gateway node: source/dest check off on the interface at device
    index 0, IP forwarding on.

    Its one AWS call, ec2:ModifyNetworkInterfaceAttribute, is granted on every interface by
    AmazonEKS_CNI_Policy, which every managed node group role here carries (the VPC CNI
    needs it), so the node role needs nothing of its own for it: a statement scoped to this
    VPC would narrow nothing while the CNI policy grants the same action on "*"."""
    return (Path(__file__).resolve().parent / "templates" / "gateway-node.sh").read_text()


def route_table_arn(region: str, account_id: str, route_table_id: str) -> str:
    return f"arn:aws:ec2:{region}:{account_id}:route-table/{route_table_id}"


def gateway_route_policy(region: str, account_id: str,
                         route_table_ids: Sequence[pulumi.Input[str]]) -> dict:
    """What the gateway's code calls, and no more: DescribeRouteTables and DescribeInstances
    (no resource types to scope them to, so limited to the region), CreateRoute and
    ReplaceRoute on exactly the route tables it programs. IAM cannot restrict the route's
    destination CIDR."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "FindRouteTablesAndTheLeader",
                "Effect": "Allow",
                "Action": ["ec2:DescribeRouteTables", "ec2:DescribeInstances"],
                "Resource": "*",
                "Condition": {"StringEquals": {"aws:RequestedRegion": region}},
            },
            {
                "Sid": "WriteThePodRouteInItsTablesOnly",
                "Effect": "Allow",
                "Action": ["ec2:CreateRoute", "ec2:ReplaceRoute"],
                "Resource": [pulumi.Output.from_input(rtb).apply(
                    lambda i: route_table_arn(region, account_id, i)) for rtb in route_table_ids],
            },
        ],
    }


def gateway_values(vpc_cidr: str, pod_cidrs: Sequence[str],
                   route_table_ids: Sequence[str]) -> dict:
    return {
        "vpcCIDR": vpc_cidr,
        "podCIDRs": ",".join(pod_cidrs),
        "routeTableIDs": ",".join(route_table_ids),
        # Managed node groups, not EKS Auto Mode: no compute-type node selector.
        "autoMode": {"enabled": False},
        "replicas": 2,
        "nodeLabel": NODE_LABEL,
    }


@dataclass(frozen=True)
class GatewayNodesArgs:
    #: The cluster the node group joins (its output, so the group waits for the cluster).
    cluster_name: pulumi.Input[str]
    #: The cluster security group: the nodes carry it beside their own, since naming a security
    #: group in the launch template stops EKS adding it.
    cluster_security_group_id: pulumi.Input[str]
    #: The cloud VPC: the nodes' own (VXLAN) security group is created in it.
    vpc_id: pulumi.Input[str]
    #: One subnet per node, in different zones, and their CIDRs.
    subnet_ids: Sequence[pulumi.Input[str]]
    #: The CIDRs of ``subnet_ids``: the hybrid nodes' security group admits VXLAN from these.
    subnet_cidrs: Sequence[str]
    #: The gateway nodes' EC2 instance type (one node per subnet).
    instance_type: str
    #: The hybrid nodes' network (the server LAN): the gateway nodes exchange VXLAN with it.
    peer_cidr: str
    #: The hybrid nodes' security group: it gets the rules that admit VXLAN from the gateway
    #: nodes' subnets (the return path).
    peer_security_group_id: pulumi.Input[str]
    #: The nodes' Kubernetes version (ManagedNodeGroupArgs.kubernetes_version): the control
    #: plane's, as the cluster resource outputs it.
    kubernetes_version: pulumi.Input[str]
    #: Tags the nodes' instances and volumes carry (ManagedNodeGroupArgs.instance_tags).
    instance_tags: Mapping[str, str] = field(default_factory=dict)
    #: What the nodes need before they join and until they have drained
    #: (ManagedNodeGroupArgs.wait_for): the route out, the CNI and kube-proxy add-ons.
    wait_for: Sequence[pulumi.Resource] = ()


class GatewayNodes(pulumi.ComponentResource):
    """The gateway's own node group (label and taint ``hybrid-gateway-node=true``; source/dest
    check off on each primary interface) and VXLAN between it and the hybrid nodes, in both
    directions and no wider: the server LAN on the gateway side, the gateway nodes' subnets on
    the hosts' side."""

    security_group: aws.ec2.SecurityGroup
    group: ManagedNodeGroup

    def __init__(self, name: str, args: GatewayNodesArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:gateway:GatewayNodes", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg", vpc_id=args.vpc_id,
            description="Hybrid nodes gateway: VXLAN to and from the hybrid nodes",
            tags={"Name": f"{name}-sg"}, opts=child)
        vxlan = dict(ip_protocol="udp", from_port=VXLAN_PORT, to_port=VXLAN_PORT)
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-vxlan-from-peers", security_group_id=self.security_group.id,
            cidr_ipv4=args.peer_cidr, description="VXLAN from hybrid nodes", opts=child, **vxlan)
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-vxlan-to-peers", security_group_id=self.security_group.id,
            cidr_ipv4=args.peer_cidr, description="VXLAN to hybrid nodes", opts=child, **vxlan)
        for index, cidr in enumerate(args.subnet_cidrs):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-peers-vxlan-from-{index}",
                security_group_id=args.peer_security_group_id, cidr_ipv4=cidr,
                description="VXLAN from the hybrid nodes gateway (the return path)",
                opts=child, **vxlan)
        self.group = ManagedNodeGroup(f"{name}-group", ManagedNodeGroupArgs(
            cluster_name=args.cluster_name,
            subnet_ids=list(args.subnet_ids),
            instance_type=args.instance_type,
            size=len(args.subnet_ids),
            kubernetes_version=args.kubernetes_version,
            labels={NODE_LABEL: "true"},
            taints=[Taint(NODE_LABEL, "true", "NO_SCHEDULE")],
            instance_tags=args.instance_tags,
            # Its AWS call is granted by the node role's AmazonEKS_CNI_Policy.
            extra_user_data=gateway_node_user_data(),
            security_group_ids=[args.cluster_security_group_id, self.security_group.id],
            wait_for=args.wait_for,
        ), opts=child)
        self.register_outputs({"securityGroupId": self.security_group.id})


@dataclass(frozen=True)
class HybridNodesGatewayArgs:
    #: The cluster the Pod Identity association is made in, and whose CiliumVTEPConfig the
    #: route cleanup deletes.
    cluster_name: pulumi.Input[str]
    #: The cluster's API server: the route cleanup deletes the CiliumVTEPConfig the leader
    #: wrote through it.
    cluster_endpoint: pulumi.Input[str]
    #: The cluster's CA: the route cleanup verifies the API server with it.
    cluster_certificate_authority: pulumi.Input[str]
    #: The route tables' region: the gateway's IAM policy confines its reads to it and names the
    #: tables by ARN in it; the route cleanup removes the routes there.
    region: str
    #: The route tables' account, in the ARNs the gateway's IAM policy names them by.
    account_id: str
    #: The cloud VPC's CIDR: the chart's required vpcCIDR, the network whose pods and nodes the
    #: gateway connects to hybrid pods.
    vpc_cidr: str
    #: The hybrid pod networks the leader routes to itself (the chart's podCIDRs); the route
    #: cleanup removes the routes to them.
    pod_cidrs: Sequence[str]
    #: The route tables of the subnets where nodes, pods and control-plane interfaces live.
    route_table_ids: Sequence[pulumi.Input[str]]
    #: The release needs these first: Cilium (its CiliumNode and CiliumVTEPConfig CRDs), the
    #: gateway nodes, the Pod Identity agent. At delete, it goes before all of them.
    wait_for: Sequence[pulumi.Resource] = ()
    #: The credentials the destroy-time cleanup acts with: the program's (aws_account.py).
    account: AwsAccount = AwsAccount()


class HybridNodesGateway(pulumi.ComponentResource):
    role: Role
    pod_identity: aws.eks.PodIdentityAssociation
    #: Created once the association has had time to take effect; the release waits for it.
    pod_identity_ready: PropagationWait
    route_cleanup: GatewayRouteCleanup
    release: k8s.helm.v3.Release
    namespace: str = NAMESPACE
    lease_name: str = LEASE_NAME

    def __init__(self, name: str, args: HybridNodesGatewayArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:gateway:HybridNodesGateway", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.role = Role(f"{name}-routes", RoleArgs(
            assume_role_policy=trust_policy("pods.eks.amazonaws.com",
                                            actions=("sts:AssumeRole", "sts:TagSession")),
            inline_policies={"routes": gateway_route_policy(
                args.region, args.account_id, args.route_table_ids)},
            description="EKS Hybrid Nodes gateway: the pod-CIDR route in its route tables",
        ), opts=child)
        self.pod_identity = aws.eks.PodIdentityAssociation(
            f"{name}-pod-identity",
            cluster_name=args.cluster_name,
            namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT,
            role_arn=self.role.arn,
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.role.attachments),
        )
        # The gateway's pods get credentials only if the association has taken effect when
        # they are created (components/propagation.py).
        self.pod_identity_ready = PropagationWait(
            f"{name}-pod-identity-ready", trigger=self.pod_identity.association_id,
            seconds=POD_IDENTITY_SETTLE_SECONDS, opts=child)

        # Deleted after the release (which depends on it) and before the route tables and the
        # cluster (its inputs): removes the routes and VTEP config the leader wrote.
        self.route_cleanup = GatewayRouteCleanup(
            f"{name}-route-cleanup",
            region=args.region,
            route_table_ids=list(args.route_table_ids),
            pod_cidrs=list(args.pod_cidrs),
            cluster_name=args.cluster_name,
            endpoint=args.cluster_endpoint,
            certificate_authority=args.cluster_certificate_authority,
            vtep_config_name=VTEP_CONFIG_NAME,
            account=args.account,
            opts=child,
        )

        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=RELEASE_NAME,
            chart=CHART,
            version=VERSION,
            namespace=NAMESPACE,
            create_namespace=True,
            values=pulumi.Output.all(*args.route_table_ids).apply(
                lambda ids: gateway_values(args.vpc_cidr, args.pod_cidrs, ids)),
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*args.wait_for, self.pod_identity_ready, self.route_cleanup],
            ),
        )
        self.register_outputs({"releaseName": self.release.name, "roleArn": self.role.arn})
