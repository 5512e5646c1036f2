"""An EKS managed node group on Amazon Linux 2023 with a launch template of its own: IMDSv2
only, an encrypted root volume, instance and volume tags, and an optional extra user-data part
(for example, the hybrid nodes gateway turning off source/dest check)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws

from components.iam import Role, RoleArgs, managed_policy_arn, trust_policy
from components.instance_types import architecture

WORKER_POLICIES = (
    managed_policy_arn("AmazonEKSWorkerNodePolicy"),
    managed_policy_arn("AmazonEKS_CNI_Policy"),
    managed_policy_arn("AmazonEC2ContainerRegistryPullOnly"),
)

_MIME_BOUNDARY = "//eks-hybrid-lab//"


def mime_user_data(shell_script: str) -> str:
    """Base64 MIME multi-part user data holding one shell script. Managed node groups merge
    their own nodeadm part into a launch template's user data only in MIME form."""
    body = (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{_MIME_BOUNDARY}"\n\n'
        f"--{_MIME_BOUNDARY}\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
        f"{shell_script.rstrip()}\n\n"
        f"--{_MIME_BOUNDARY}--\n"
    )
    return base64.b64encode(body.encode()).decode()


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str  # NO_SCHEDULE | NO_EXECUTE | PREFER_NO_SCHEDULE (the EKS API's spelling)


@dataclass(frozen=True)
class ManagedNodeGroupArgs:
    #: The cluster the nodes join (its output, so the group waits for the cluster).
    cluster_name: pulumi.Input[str]
    #: The private subnets the nodes run in; EKS spreads them over these.
    subnet_ids: Sequence[pulumi.Input[str]]
    #: One EC2 instance type; its architecture picks the AL2023 image type.
    instance_type: str
    #: The number of nodes: desired, minimum and maximum alike (nothing scales this group).
    size: int
    #: The Kubernetes version of the nodes: the control plane's, as the cluster resource
    #: outputs it (EksCluster.version), so a version change upgrades the group after the
    #: control plane, as EKS requires (docs/eks-support.md#upgrades). Required: a group
    #: without one gets the cluster's version from EKS at create and is never upgraded.
    kubernetes_version: pulumi.Input[str]
    #: Kubernetes labels on the nodes, which workloads select them by.
    labels: Mapping[str, str] = field(default_factory=dict)
    #: Kubernetes taints on the nodes: what keeps other pods off them.
    taints: Sequence[Taint] = ()
    #: Tags the instances and volumes carry (the provider's default tags do not reach them).
    instance_tags: Mapping[str, str] = field(default_factory=dict)
    #: Size of each node's encrypted gp3 root volume, GiB.
    root_volume_gib: int = 30
    #: A shell script run at boot before the node joins (wrapped in MIME for EKS).
    extra_user_data: Optional[str] = None
    #: Security groups for the nodes instead of the cluster's alone (include the cluster
    #: security group: EKS adds it only when the launch template names none).
    security_group_ids: Sequence[pulumi.Input[str]] = ()
    #: What the nodes need before they can join and until they have drained: the route to the
    #: internet, the CNI add-on. (A component's own depends_on does not reach its children.)
    wait_for: Sequence[pulumi.Resource] = ()


class ManagedNodeGroup(pulumi.ComponentResource):
    node_group: aws.eks.NodeGroup
    node_role: Role
    launch_template: aws.ec2.LaunchTemplate

    def __init__(self, name: str, args: ManagedNodeGroupArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:eks:ManagedNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.node_role = Role(f"{name}-node", RoleArgs(
            assume_role_policy=trust_policy("ec2.amazonaws.com"),
            managed_policies=list(WORKER_POLICIES),
            description=f"Nodes of the {name} managed node group",
        ), opts=child)

        tags = {"Name": name, **args.instance_tags}
        self.launch_template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            description=f"{name}: IMDSv2 only, encrypted root volume",
            update_default_version=True,
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                # One hop: pods on the VPC CNI cannot borrow the node role through IMDS; every
                # controller of this lab gets its own identity through Pod Identity.
                http_put_response_hop_limit=1,
            ),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=args.root_volume_gib,
                    volume_type="gp3",
                    encrypted="true",
                    delete_on_termination="true",
                ),
            )],
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=tags)
                for kind in ("instance", "volume")
            ],
            user_data=mime_user_data(args.extra_user_data) if args.extra_user_data else None,
            vpc_security_group_ids=list(args.security_group_ids) or None,
            opts=child,
        )

        arch = architecture(args.instance_type)
        self.node_group = aws.eks.NodeGroup(
            f"{name}-ng",
            cluster_name=args.cluster_name,
            node_role_arn=self.node_role.arn,
            subnet_ids=list(args.subnet_ids),
            instance_types=[args.instance_type],
            ami_type="AL2023_ARM_64_STANDARD" if arch == "arm64" else "AL2023_x86_64_STANDARD",
            # An in-place UpdateNodegroupVersion when it changes (not ForceNew in the AWS
            # provider); no release_version, so EKS takes that version's latest AMI release.
            version=args.kubernetes_version,
            capacity_type="ON_DEMAND",
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=args.size, min_size=args.size, max_size=args.size),
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1),
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
                id=self.launch_template.id, version=self.launch_template.latest_version),
            labels=dict(args.labels) or None,
            taints=[aws.eks.NodeGroupTaintArgs(key=t.key, value=t.value, effect=t.effect)
                    for t in args.taints] or None,
            opts=pulumi.ResourceOptions(
                parent=self,
                # Nodes need their role's policies to join and while they drain at delete.
                depends_on=[*self.node_role.attachments, *args.wait_for],
                custom_timeouts=pulumi.CustomTimeouts(create="30m", update="30m", delete="30m"),
            ),
        )
        self.register_outputs({"nodeGroupName": self.node_group.node_group_name,
                               "nodeRoleArn": self.node_role.arn})
