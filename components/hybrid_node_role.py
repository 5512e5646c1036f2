"""The IAM role hybrid nodes act as (through SSM hybrid activation credentials), shaped like
terraform-aws-eks's hybrid-node-role module and the official CloudFormation template: only what
nodeadm, the kubelet and the SSM agent use, scoped to one cluster."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_aws as aws

from components.iam import Role, RoleArgs, managed_policy_arn, trust_policy


@dataclass(frozen=True)
class HybridNodeRoleArgs:
    #: The cluster the ``HYBRID_LINUX`` access entry is made in (its output: EKS does not
    #: retry an access entry for a cluster that does not exist yet).
    cluster_name: pulumi.Input[str]
    #: The cluster nodeadm may describe, and the EKSClusterARN tag value of the registrations
    #: the role may deregister (hybrid_node_policy).
    cluster_arn: pulumi.Input[str]
    #: The account SSM acts in: the trust policy's confused-deputy conditions and the
    #: managed-instance ARNs the role may deregister name it.
    account_id: str
    #: The region of the activation: the trust policy's source ARN and the managed-instance
    #: ARNs the role may deregister name it.
    region: str


def hybrid_node_trust_policy(account_id: str, region: str) -> dict:
    """SSM assumes the role on behalf of registered machines of this account and region only:
    the confused-deputy guards of the official template."""
    return trust_policy("ssm.amazonaws.com", conditions={
        "StringEquals": {"aws:SourceAccount": account_id},
        "ArnLike": {"aws:SourceArn": f"arn:aws:ssm:{region}:{account_id}:*"},
    })


def hybrid_node_policy(cluster_arn: pulumi.Input[str], account_id: str, region: str) -> dict:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                # nodeadm init reads the cluster (endpoint, CA, service CIDR) and checks the
                # node's access entry; without ListAccessEntries it fails with AccessDenied.
                "Sid": "ReadThisCluster",
                "Effect": "Allow",
                "Action": ["eks:DescribeCluster", "eks:ListAccessEntries"],
                "Resource": cluster_arn,
            },
            {
                # nodeadm uninstall looks up its own registration; the action has no resource
                # type to scope it to.
                "Sid": "FindOwnRegistration",
                "Effect": "Allow",
                "Action": "ssm:DescribeInstanceInformation",
                "Resource": "*",
            },
            {
                # ...and deregisters it: only managed instances registered for this cluster
                # (the activation's EKSClusterARN tag is copied onto each of them).
                "Sid": "DeregisterOwnRegistration",
                "Effect": "Allow",
                "Action": "ssm:DeregisterManagedInstance",
                "Resource": f"arn:aws:ssm:{region}:{account_id}:managed-instance/*",
                "Condition": {"StringEquals": {"ssm:resourceTag/EKSClusterARN": cluster_arn}},
            },
        ],
    }


class HybridNodeRole(pulumi.ComponentResource):
    """The role and its ``HYBRID_LINUX`` access entry: what a hybrid node is to AWS and to
    the cluster."""

    role: Role
    access_entry: aws.eks.AccessEntry
    arn: pulumi.Output[str]
    role_name: pulumi.Output[str]
    #: The managed-policy attachments, which need nothing of the cluster: the activation and a
    #: host's SSM registration and image pulls act with them. (The inline policy that reads the
    #: cluster names its ARN, so it waits for the cluster; only nodeadm init uses it, and the
    #: join retries until the cluster is ready.)
    policies: list[pulumi.Resource]
    #: The policies and the access entry: a host joins only once all of them exist.
    attachments: list[pulumi.Resource]

    def __init__(self, name: str, args: HybridNodeRoleArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:eks:HybridNodeRole", name, None, opts)
        self.role = Role(f"{name}-iam", RoleArgs(
            assume_role_policy=hybrid_node_trust_policy(args.account_id, args.region),
            managed_policies=[
                managed_policy_arn("AmazonSSMManagedInstanceCore"),
                managed_policy_arn("AmazonEC2ContainerRegistryPullOnly"),
            ],
            inline_policies={"cluster": hybrid_node_policy(args.cluster_arn, args.account_id,
                                                           args.region)},
            description="EKS hybrid nodes (SSM hybrid activation credentials)",
        ), opts=pulumi.ResourceOptions(parent=self))
        self.arn = self.role.arn
        self.role_name = self.role.role_name
        self.access_entry = aws.eks.AccessEntry(
            f"{name}-access",
            cluster_name=args.cluster_name,
            principal_arn=self.role.arn,
            # EKS sets the username and groups of hybrid nodes itself; no access policies.
            type="HYBRID_LINUX",
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.policies = [a for a in self.role.attachments
                         if isinstance(a, aws.iam.RolePolicyAttachment)]
        self.attachments = [*self.role.attachments, self.access_entry]
        self.register_outputs({"arn": self.arn, "name": self.role_name})
