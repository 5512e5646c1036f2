"""Karpenter on EKS, shaped like terraform-aws-eks's karpenter module: the controller's IAM
(Pod Identity) with the getting-started policy scoped to one cluster, the node role and its
access entry, the interruption queue and its rules, the CRD and controller charts, and the
cleanup of anything Karpenter leaves behind.

The NodePools and EC2NodeClasses are the caller's: they must depend on ``controller`` so that
at destroy they are deleted first, while the controller can still terminate their instances.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.aws_account import AwsAccount
from components.cleanup.karpenter_leftovers import KarpenterLeftoverCleanup
from components.iam import Role, RoleArgs, managed_policy_arn, trust_policy
from components.propagation import POD_IDENTITY_SETTLE_SECONDS, PropagationWait

CRD_CHART = "oci://public.ecr.aws/karpenter/karpenter-crd"
CHART = "oci://public.ecr.aws/karpenter/karpenter"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "karpenter"
NODE_POLICIES = (
    managed_policy_arn("AmazonEKSWorkerNodePolicy"),
    managed_policy_arn("AmazonEKS_CNI_Policy"),
    managed_policy_arn("AmazonEC2ContainerRegistryPullOnly"),
    managed_policy_arn("AmazonSSMManagedInstanceCore"),
)
#: The events Karpenter acts on before AWS takes an instance away.
INTERRUPTION_EVENTS = {
    "health": ("aws.health", "AWS Health Event"),
    "spot-interruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "state-change": ("aws.ec2", "EC2 Instance State-change Notification"),
}


def controller_policy(cluster: str, region: str, account_id: str,
                      cluster_arn: pulumi.Input[str], queue_arn: pulumi.Input[str],
                      node_role_arn: pulumi.Input[str]) -> dict:
    """The getting-started controller policy (Karpenter v1): every write is conditioned on the
    tags Karpenter puts on what it creates for this cluster, so it cannot touch anything else."""
    ec2 = f"arn:aws:ec2:{region}"
    owned = {f"aws:RequestTag/kubernetes.io/cluster/{cluster}": "owned",
             "aws:RequestTag/eks:eks-cluster-name": cluster}
    resource_owned = {f"aws:ResourceTag/kubernetes.io/cluster/{cluster}": "owned"}
    profiles = f"arn:aws:iam::{account_id}:instance-profile/*"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "AllowScopedEC2InstanceAccessActions", "Effect": "Allow",
             "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
             "Resource": [f"{ec2}::image/*", f"{ec2}::snapshot/*",
                          f"{ec2}:*:security-group/*", f"{ec2}:*:subnet/*",
                          f"{ec2}:*:capacity-reservation/*"]},
            {"Sid": "AllowScopedEC2LaunchTemplateAccessActions", "Effect": "Allow",
             "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
             "Resource": f"{ec2}:*:launch-template/*",
             "Condition": {"StringEquals": resource_owned,
                           "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}},
            {"Sid": "AllowScopedEC2InstanceActionsWithTags", "Effect": "Allow",
             "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
             "Resource": [f"{ec2}:*:fleet/*", f"{ec2}:*:instance/*", f"{ec2}:*:volume/*",
                          f"{ec2}:*:network-interface/*", f"{ec2}:*:launch-template/*",
                          f"{ec2}:*:spot-instances-request/*"],
             "Condition": {"StringEquals": owned,
                           "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
            {"Sid": "AllowScopedResourceCreationTagging", "Effect": "Allow",
             "Action": "ec2:CreateTags",
             "Resource": [f"{ec2}:*:fleet/*", f"{ec2}:*:instance/*", f"{ec2}:*:volume/*",
                          f"{ec2}:*:network-interface/*", f"{ec2}:*:launch-template/*",
                          f"{ec2}:*:spot-instances-request/*"],
             "Condition": {"StringEquals": {**owned, "ec2:CreateAction": [
                 "RunInstances", "CreateFleet", "CreateLaunchTemplate"]},
                 "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"}}},
            {"Sid": "AllowScopedResourceTagging", "Effect": "Allow",
             "Action": "ec2:CreateTags",
             "Resource": f"{ec2}:*:instance/*",
             "Condition": {"StringEquals": resource_owned,
                           "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"},
                           "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": cluster},
                           "ForAllValues:StringEquals": {"aws:TagKeys": [
                               "eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]}}},
            {"Sid": "AllowScopedDeletion", "Effect": "Allow",
             "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
             "Resource": [f"{ec2}:*:instance/*", f"{ec2}:*:launch-template/*"],
             "Condition": {"StringEquals": resource_owned,
                           "StringLike": {"aws:ResourceTag/karpenter.sh/nodepool": "*"}}},
            # DescribeInstanceStatus: the instance-status controller (Karpenter 1.14+) polls it
            # to drain nodes on impaired instances; denied, it logs an error and turns the
            # health checks off. DescribePlacementGroups (also in the getting-started policy)
            # is called only for an EC2NodeClass with a placement group, which this lab has not.
            {"Sid": "AllowRegionalReadActions", "Effect": "Allow",
             "Action": ["ec2:DescribeCapacityReservations", "ec2:DescribeImages",
                        "ec2:DescribeInstances", "ec2:DescribeInstanceStatus",
                        "ec2:DescribeInstanceTypeOfferings", "ec2:DescribeInstanceTypes",
                        "ec2:DescribeLaunchTemplates", "ec2:DescribeSecurityGroups",
                        "ec2:DescribeSpotPriceHistory", "ec2:DescribeSubnets"],
             "Resource": "*",
             "Condition": {"StringEquals": {"aws:RequestedRegion": region}}},
            {"Sid": "AllowSSMReadActions", "Effect": "Allow", "Action": "ssm:GetParameter",
             "Resource": f"arn:aws:ssm:{region}::parameter/aws/service/*"},
            {"Sid": "AllowPricingReadActions", "Effect": "Allow", "Action": "pricing:GetProducts",
             "Resource": "*"},
            {"Sid": "AllowInterruptionQueueActions", "Effect": "Allow",
             "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
             "Resource": queue_arn},
            {"Sid": "AllowPassingInstanceRole", "Effect": "Allow", "Action": "iam:PassRole",
             "Resource": node_role_arn,
             "Condition": {"StringEquals": {"iam:PassedToService": "ec2.amazonaws.com"}}},
            {"Sid": "AllowScopedInstanceProfileCreationActions", "Effect": "Allow",
             "Action": "iam:CreateInstanceProfile", "Resource": profiles,
             "Condition": {"StringEquals": {**owned,
                                            "aws:RequestTag/topology.kubernetes.io/region": region},
                           "StringLike": {"aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
            {"Sid": "AllowScopedInstanceProfileTagActions", "Effect": "Allow",
             "Action": "iam:TagInstanceProfile", "Resource": profiles,
             "Condition": {"StringEquals": {
                 **resource_owned, "aws:ResourceTag/topology.kubernetes.io/region": region,
                 **owned, "aws:RequestTag/topology.kubernetes.io/region": region},
                 "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                                "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
            {"Sid": "AllowScopedInstanceProfileActions", "Effect": "Allow",
             "Action": ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile",
                        "iam:DeleteInstanceProfile"],
             "Resource": profiles,
             "Condition": {"StringEquals": {
                 **resource_owned, "aws:ResourceTag/topology.kubernetes.io/region": region},
                 "StringLike": {"aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*"}}},
            {"Sid": "AllowInstanceProfileReadActions", "Effect": "Allow",
             "Action": "iam:GetInstanceProfile", "Resource": profiles},
            {"Sid": "AllowUnscopedInstanceProfileListAction", "Effect": "Allow",
             "Action": "iam:ListInstanceProfiles", "Resource": "*"},
            {"Sid": "AllowAPIServerEndpointDiscovery", "Effect": "Allow",
             "Action": "eks:DescribeCluster", "Resource": cluster_arn},
        ],
    }


def queue_policy(queue_arn: pulumi.Input[str]) -> dict:
    """Only EventBridge and SQS may send; nothing may use the queue without TLS."""
    return {
        "Version": "2012-10-17",
        "Id": "KarpenterInterruption",
        "Statement": [
            {"Sid": "EventsToQueue", "Effect": "Allow",
             "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
             "Action": "sqs:SendMessage", "Resource": queue_arn},
            {"Sid": "DenyNonTls", "Effect": "Deny", "Principal": "*", "Action": "sqs:*",
             "Resource": queue_arn,
             "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
        ],
    }


def controller_values(cluster: str, region: str, queue_name: pulumi.Input[str], replicas: int,
                      pod_deletion_cost: bool) -> dict:
    return {
        "settings": {
            "clusterName": cluster,
            "interruptionQueue": queue_name,
            "featureGates": {"podDeletionCostManagement": pod_deletion_cost},
        },
        "replicas": replicas,
        "controller": {
            "resources": {"requests": {"cpu": "1", "memory": "1Gi"},
                          "limits": {"cpu": "1", "memory": "1Gi"}},
            # Nodes allow one IMDS hop, so the controller is told its region instead of
            # asking the instance metadata service.
            "env": [{"name": "AWS_REGION", "value": region}],
        },
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    # Not on the nodes it manages...
                    {"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"},
                    # ...and not on hybrid nodes, which the chart's default admits.
                    {"key": "eks.amazonaws.com/compute-type", "operator": "NotIn",
                     "values": ["hybrid"]},
                ]}]}},
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname"}]},
        },
    }


@dataclass(frozen=True)
class KarpenterArgs:
    #: A plain string: it is part of the IAM condition keys, the chart's settings and names.
    cluster_name: str
    #: The same name as the cluster's output (``aws.eks.Cluster.name``). What acts on the cluster
    #: (the access entry, the Pod Identity association, the leftover cleanup) takes this one: a
    #: plain string creates no dependency, and EKS does not retry CreateAccessEntry on a cluster
    #: that does not exist yet.
    cluster_name_output: pulumi.Input[str]
    #: The cluster the controller may describe (controller_policy).
    cluster_arn: pulumi.Input[str]
    #: Where the controller acts: the controller policy's ARNs and conditions and the
    #: controller's AWS_REGION name it, and the leftover cleanup looks there.
    region: str
    #: The account in the controller policy's ARNs.
    account_id: str
    #: The Karpenter release, for both charts (the CRD chart and the controller's) alike.
    version: str
    #: Controller replicas (the chart's ``replicas``): one leads, the others wait for the lease.
    controller_replicas: int
    #: Scenario C of demo 2: Karpenter ranks its pods' deletion cost.
    pod_deletion_cost: bool
    #: The controller needs these running (system nodes, the Pod Identity agent) and the
    #: internet (AWS APIs) until it has terminated its instances at delete.
    wait_for: Sequence[pulumi.Resource] = ()
    #: Kept until the leftover cleanup has run (subnets, security groups).
    cleanup_waits_for: Sequence[pulumi.Resource] = ()
    #: The credentials the destroy-time cleanup acts with: the program's (aws_account.py).
    account: AwsAccount = AwsAccount()


class Karpenter(pulumi.ComponentResource):
    node_role: Role
    controller_role: Role
    queue: aws.sqs.Queue
    cleanup: KarpenterLeftoverCleanup
    #: Created once the controller's association has had time to take effect.
    pod_identity_ready: PropagationWait
    crds: k8s.helm.v3.Release
    controller: k8s.helm.v3.Release
    values: Mapping[str, Any]

    def __init__(self, name: str, args: KarpenterArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:karpenter:Karpenter", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        cluster = args.cluster_name

        self.node_role = Role(f"{name}-node", RoleArgs(
            assume_role_policy=trust_policy("ec2.amazonaws.com"),
            managed_policies=list(NODE_POLICIES),
            description=f"Nodes Karpenter launches for {cluster}",
        ), opts=child)
        node_access = aws.eks.AccessEntry(
            f"{name}-node-access", cluster_name=args.cluster_name_output,
            principal_arn=self.node_role.arn,
            type="EC2_LINUX", opts=child)

        self.queue = aws.sqs.Queue(
            f"{name}-interruption",
            name=f"{cluster}-karpenter",
            message_retention_seconds=300,
            sqs_managed_sse_enabled=True,
            opts=child,
        )
        aws.sqs.QueuePolicy(
            f"{name}-interruption-policy",
            queue_url=self.queue.url,
            policy=pulumi.Output.json_dumps(queue_policy(self.queue.arn)),
            opts=child,
        )
        rules = []
        for event, (source, detail_type) in INTERRUPTION_EVENTS.items():
            rule = aws.cloudwatch.EventRule(
                f"{name}-{event}",
                description=f"Karpenter interruption handling for {cluster}: {detail_type}",
                event_pattern=pulumi.Output.json_dumps(
                    {"source": [source], "detail-type": [detail_type]}),
                opts=child,
            )
            rules.append(rule)
            rules.append(aws.cloudwatch.EventTarget(
                f"{name}-{event}-target", rule=rule.name, target_id="KarpenterInterruptionQueue",
                arn=self.queue.arn, opts=child))

        self.controller_role = Role(f"{name}-controller", RoleArgs(
            assume_role_policy=trust_policy("pods.eks.amazonaws.com",
                                            actions=("sts:AssumeRole", "sts:TagSession")),
            inline_policies={"controller": controller_policy(
                cluster, args.region, args.account_id, args.cluster_arn, self.queue.arn,
                self.node_role.arn)},
            description=f"Karpenter controller of {cluster}",
        ), opts=child)
        pod_identity = aws.eks.PodIdentityAssociation(
            f"{name}-pod-identity", cluster_name=args.cluster_name_output, namespace=NAMESPACE,
            service_account=SERVICE_ACCOUNT, role_arn=self.controller_role.arn,
            opts=pulumi.ResourceOptions(parent=self, depends_on=self.controller_role.attachments))
        # The controller's pods get credentials only if the association has taken effect when
        # they are created (components/propagation.py).
        self.pod_identity_ready = PropagationWait(
            f"{name}-pod-identity-ready", trigger=pod_identity.association_id,
            seconds=POD_IDENTITY_SETTLE_SECONDS, opts=child)

        # Deleted after the controller (which depends on it): terminates whatever instances,
        # launch templates and instance profiles escaped the finalizers, before the node role,
        # subnets and security groups are deleted.
        self.cleanup = KarpenterLeftoverCleanup(
            f"{name}-leftovers", region=args.region, cluster_name=args.cluster_name_output,
            account=args.account,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=[*self.node_role.attachments, node_access,
                                         *args.cleanup_waits_for]))

        # The CRD chart owns the CRDs' lifecycle (the main chart's crds/ are install-only).
        self.crds = k8s.helm.v3.Release(
            f"{name}-crds", name="karpenter-crd", chart=CRD_CHART, version=args.version,
            namespace=NAMESPACE, opts=child)
        self.values = controller_values(cluster, args.region, self.queue.name,
                                        args.controller_replicas, args.pod_deletion_cost)
        self.controller = k8s.helm.v3.Release(
            f"{name}-controller-release", name="karpenter", chart=CHART, version=args.version,
            namespace=NAMESPACE, values=self.values,
            # The CRDs come from the CRD chart.
            skip_crds=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[
                self.crds, self.pod_identity_ready, node_access, self.cleanup, *rules,
                *args.wait_for]),
        )
        self.register_outputs({"nodeRoleName": self.node_role.role_name,
                               "queueName": self.queue.name})
