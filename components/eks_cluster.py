"""An EKS control plane that can take hybrid nodes: remote node and pod networks, API
authentication, one endpoint (public xor private), its log group owned by the stack, secrets
encrypted with a key of its own, and the security-group rules hybrid nodes need.

Plain ``aws.eks.Cluster``, not pulumi-eks: pulumi-eks cannot express remote networks or
``HYBRID_LINUX`` access entries, and as a remote component it would hide its children from the
tests.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Optional, Sequence

import pulumi
import pulumi_aws as aws

from components.aws_account import AwsAccount
from components.eks_versions import SUPPORT_TYPE
from components.iam import Role, RoleArgs, managed_policy_arn, trust_policy

#: How long `pulumi up` waits for the control plane (the AWS provider's default too). A hybrid
#: host's join keeps trying at least this long (hybrid_user_data.JOIN_DEADLINE_SECONDS).
CREATE_TIMEOUT_MINUTES = 30


def cluster_arn(region: str, account_id: str, cluster_name: str) -> str:
    """The ARN EKS gives a cluster of this name: known before the cluster exists, for what
    must name it without waiting for it (a tag, a policy condition)."""
    return f"arn:aws:eks:{region}:{account_id}:cluster/{cluster_name}"


CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
CONTROL_PLANE_LOG_TYPES = ("api", "audit", "authenticator")


@dataclass(frozen=True)
class RemoteAccess:
    """A port that cloud pods serve to hybrid nodes and their pods."""

    protocol: str
    port: int
    why: str


#: CoreDNS runs on cloud nodes (hybrid nodes are tainted), so every pod on a hybrid node needs
#: it: TCP and UDP 53 (AWS "Prepare networking for hybrid nodes";
#: docs/networking.md#where-a-hybrid-pods-packets-come-from).
DNS = (
    RemoteAccess("udp", 53, "DNS from hybrid nodes and pods to CoreDNS on cloud nodes"),
    RemoteAccess("tcp", 53, "DNS over TCP from hybrid nodes and pods to CoreDNS on cloud nodes"),
)


@dataclass(frozen=True)
class EksClusterArgs:
    #: The EKS cluster's name; also names its log group (/aws/eks/<name>/cluster) and appears in
    #: the descriptions of its key and role. Changing it replaces the cluster.
    cluster_name: str
    #: The control plane's Kubernetes version ("1.35"); EKS upgrades it in place, one minor
    #: version at a time.
    kubernetes_version: str
    #: The private subnets (at least two zones) EKS places the control plane's network
    #: interfaces in; cloud nodes and pods reach the API server through them.
    subnet_ids: Sequence[pulumi.Input[str]]
    #: The Service CIDR (ClusterIPs): must overlap neither VPC nor the remote networks.
    service_cidr: str
    #: The networks hybrid nodes' own addresses come from: EKS routes to them, and the cluster
    #: security group admits kubelets from them (and reaches kubelets on them).
    remote_node_cidrs: Sequence[str]
    #: The networks hybrid pods' addresses come from (Cilium's pool): the control plane reaches
    #: webhooks in hybrid pods on them, and the cluster security group admits pods from them.
    remote_pod_cidrs: Sequence[str]
    #: True: public endpoint only; False: private endpoint only. Hybrid nodes need one, not both.
    endpoint_public: bool
    #: Who may reach a public endpoint (ignored for a private one).
    public_access_cidrs: Sequence[pulumi.Input[str]]
    #: Days the control plane's log group keeps the api, audit and authenticator logs.
    log_retention_days: int
    #: IAM roles given cluster-admin through STANDARD access entries.
    admin_role_arns: Sequence[str] = ()
    #: What EKS does when the version leaves standard support: STANDARD upgrades it; EXTENDED
    #: (the API's default when unset) keeps it and bills extended support.
    support_type: str = SUPPORT_TYPE


class EksCluster(pulumi.ComponentResource):
    cluster: aws.eks.Cluster
    name: pulumi.Output[str]
    arn: pulumi.Output[str]
    endpoint: pulumi.Output[str]
    #: The control plane's Kubernetes version, known once EKS has applied it.
    version: pulumi.Output[str]
    certificate_authority: pulumi.Output[str]
    cluster_security_group_id: pulumi.Output[str]
    remote_node_cidrs: list[str]
    remote_pod_cidrs: list[str]
    #: The cluster security group's DNS rules for the remote networks.
    dns_rules: list[aws.vpc.SecurityGroupIngressRule]
    log_group: aws.cloudwatch.LogGroup
    #: Access entries and their policy associations: whoever acts through them depends on them.
    access: list[pulumi.Resource]

    def __init__(self, name: str, args: EksClusterArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:eks:Cluster", name, None, opts)
        self.remote_node_cidrs = list(args.remote_node_cidrs)
        self.remote_pod_cidrs = list(args.remote_pod_cidrs)

        self.log_group = self._log_group(name, args)
        key = self._secrets_key(name, args)
        role = self._role(name, args, key)
        self.cluster = self._cluster(name, args, role, key)
        self.name = self.cluster.name
        self.arn = self.cluster.arn
        self.endpoint = self.cluster.endpoint
        # The version as the cluster resource reports it once its create or upgrade is done:
        # what node groups take theirs from, so none is upgraded before the control plane.
        self.version = self.cluster.version
        self.certificate_authority = self.cluster.certificate_authority.apply(lambda ca: ca.data)
        self.cluster_security_group_id = self.cluster.vpc_config.apply(
            lambda vpc: vpc.cluster_security_group_id)

        self._remote_network_rules(name, args)
        self.dns_rules = self.admit_remote_networks(f"{name}-dns", DNS,
                                                    pulumi.ResourceOptions(parent=self))
        self.access = self._admin_access(name, args)

        self.register_outputs({
            "name": self.name, "arn": self.arn, "endpoint": self.endpoint,
            "clusterSecurityGroupId": self.cluster_security_group_id,
        })

    def _log_group(self, name: str, args: EksClusterArgs) -> aws.cloudwatch.LogGroup:
        """The control plane's log group. EKS creates /aws/eks/<name>/cluster itself when
        logging is on, and that group outlives the cluster (and bills for storage). Created here
        first, it is the stack's to delete."""
        return aws.cloudwatch.LogGroup(
            f"{name}-logs",
            name=f"/aws/eks/{args.cluster_name}/cluster",
            retention_in_days=args.log_retention_days,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _secrets_key(self, name: str, args: EksClusterArgs) -> aws.kms.Key:
        """The key Kubernetes secrets are envelope-encrypted with, the cluster's alone."""
        return aws.kms.Key(
            f"{name}-secrets-key",
            description=f"Envelope encryption of Kubernetes secrets in {args.cluster_name}",
            enable_key_rotation=True,
            # The shortest wait AWS allows: a destroyed lab should not keep keys around.
            deletion_window_in_days=7,
            opts=pulumi.ResourceOptions(parent=self),
        )

    def _role(self, name: str, args: EksClusterArgs, key: aws.kms.Key) -> Role:
        """The control plane's role: EKS's cluster policy and the use of ``key``."""
        return Role(f"{name}-iam", RoleArgs(
            assume_role_policy=trust_policy("eks.amazonaws.com"),
            managed_policies=[managed_policy_arn("AmazonEKSClusterPolicy")],
            # Envelope encryption: the control plane uses this one key and nothing else.
            inline_policies={"secrets-key": {
                "Version": "2012-10-17",
                "Statement": [{
                    "Sid": "UseTheSecretsKey",
                    "Effect": "Allow",
                    "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey"],
                    "Resource": key.arn,
                }],
            }},
            description=f"EKS control plane of {args.cluster_name}",
        ), opts=pulumi.ResourceOptions(parent=self))

    def _cluster(self, name: str, args: EksClusterArgs, role: Role,
                 key: aws.kms.Key) -> aws.eks.Cluster:
        return aws.eks.Cluster(
            f"{name}-cluster",
            name=args.cluster_name,
            version=args.kubernetes_version,
            role_arn=role.arn,
            vpc_config=aws.eks.ClusterVpcConfigArgs(
                subnet_ids=list(args.subnet_ids),
                endpoint_public_access=args.endpoint_public,
                endpoint_private_access=not args.endpoint_public,
                public_access_cidrs=list(args.public_access_cidrs) if args.endpoint_public else None,
            ),
            kubernetes_network_config=aws.eks.ClusterKubernetesNetworkConfigArgs(
                service_ipv4_cidr=args.service_cidr,
                ip_family="ipv4",
            ),
            remote_network_config=aws.eks.ClusterRemoteNetworkConfigArgs(
                remote_node_networks=aws.eks.ClusterRemoteNetworkConfigRemoteNodeNetworksArgs(
                    cidrs=list(args.remote_node_cidrs)),
                remote_pod_networks=aws.eks.ClusterRemoteNetworkConfigRemotePodNetworksArgs(
                    cidrs=list(args.remote_pod_cidrs)),
            ),
            access_config=aws.eks.ClusterAccessConfigArgs(
                authentication_mode="API",
                # Whoever runs `pulumi up` administers the cluster; said explicitly because the
                # default may change and the Kubernetes provider depends on it.
                bootstrap_cluster_creator_admin_permissions=True,
            ),
            # The add-ons are managed by this stack (EKS add-ons), not installed unmanaged.
            bootstrap_self_managed_addons=False,
            enabled_cluster_log_types=list(CONTROL_PLANE_LOG_TYPES),
            # Unset, EKS defaults to EXTENDED: $0.60/h instead of $0.10/h once the version
            # leaves standard support, for a lab nobody watches the bill of.
            upgrade_policy=aws.eks.ClusterUpgradePolicyArgs(support_type=args.support_type),
            encryption_config=aws.eks.ClusterEncryptionConfigArgs(
                provider=aws.eks.ClusterEncryptionConfigProviderArgs(key_arn=key.arn),
                resources=["secrets"],
            ),
            opts=pulumi.ResourceOptions(
                parent=self,
                # The role's policy must outlive the cluster's deletion, and the log group must
                # exist before EKS would create it.
                depends_on=[self.log_group, *role.attachments],
                custom_timeouts=pulumi.CustomTimeouts(create=f"{CREATE_TIMEOUT_MINUTES}m",
                                                      delete="30m"),
            ),
        )

    def _remote_network_rules(self, name: str, args: EksClusterArgs) -> None:
        """What hybrid nodes need of the cluster security group (docs/networking.md#ports):
        kubelets and pods on the remote networks reach the API server; the API server reaches
        kubelets."""
        child = pulumi.ResourceOptions(parent=self)
        for index, cidr in enumerate(args.remote_node_cidrs):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-api-from-nodes-{index}",
                security_group_id=self.cluster_security_group_id,
                ip_protocol="tcp", from_port=443, to_port=443, cidr_ipv4=cidr,
                description="kubelets on hybrid nodes to the API server",
                opts=child,
            )
            aws.vpc.SecurityGroupEgressRule(
                f"{name}-kubelet-on-nodes-{index}",
                security_group_id=self.cluster_security_group_id,
                ip_protocol="tcp", from_port=10250, to_port=10250, cidr_ipv4=cidr,
                description="API server to kubelets on hybrid nodes (logs, exec, port-forward)",
                opts=child,
            )
        for index, cidr in enumerate(args.remote_pod_cidrs):
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-api-from-pods-{index}",
                security_group_id=self.cluster_security_group_id,
                ip_protocol="tcp", from_port=443, to_port=443, cidr_ipv4=cidr,
                description="pods on hybrid nodes to the API server",
                opts=child,
            )

    def _admin_access(self, name: str, args: EksClusterArgs) -> list[pulumi.Resource]:
        """A STANDARD access entry with cluster-admin for each of ``args.admin_role_arns``."""
        child = pulumi.ResourceOptions(parent=self)
        access: list[pulumi.Resource] = []
        for index, role_arn in enumerate(args.admin_role_arns):
            entry = aws.eks.AccessEntry(
                f"{name}-admin-{index}",
                cluster_name=self.cluster.name,
                principal_arn=role_arn,
                type="STANDARD",
                opts=child,
            )
            access.append(entry)
            access.append(aws.eks.AccessPolicyAssociation(
                f"{name}-admin-{index}-policy",
                cluster_name=self.cluster.name,
                principal_arn=entry.principal_arn,
                policy_arn=CLUSTER_ADMIN_POLICY,
                access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                opts=child,
            ))
        return access

    def admit_remote_networks(self, name: str, ports: Sequence[RemoteAccess],
                              opts: pulumi.ResourceOptions) -> list[aws.vpc.SecurityGroupIngressRule]:
        """Opens ``ports`` on the cluster security group to both remote networks.

        System and Karpenter nodes carry only this group, so whatever their pods serve to hybrid
        pods must be open here. A hybrid pod's packet arrives from its node's address (service
        NAT, Cilium masquerading) or from its own (through the hybrid nodes gateway), so both
        networks are admitted. The rules belong to whoever ``opts`` parents them to: a layer
        that opens a port for its workloads removes it with them.
        """
        rules = []
        for access in ports:
            for network, cidrs in (("node", self.remote_node_cidrs), ("pod", self.remote_pod_cidrs)):
                for index, cidr in enumerate(cidrs):
                    rules.append(aws.vpc.SecurityGroupIngressRule(
                        f"{name}-{access.protocol}{access.port}-from-{network}s-{index}",
                        security_group_id=self.cluster_security_group_id,
                        ip_protocol=access.protocol, from_port=access.port, to_port=access.port,
                        cidr_ipv4=cidr, description=f"{access.why} (remote {network} network)",
                        opts=opts,
                    ))
        return rules


def kubeconfig(cluster_name: pulumi.Input[str], endpoint: pulumi.Input[str],
               certificate_authority: pulumi.Input[str], region: str,
               account: AwsAccount = AwsAccount()) -> pulumi.Output[str]:
    """A kubeconfig (JSON) that authenticates with ``aws eks get-token`` as the program does:
    with ``account``'s profile and role (components/aws_account.py). The region and those are
    written in, not taken from the environment, so it works alike from any shell. Returned as a
    secret: it names the cluster's endpoint and CA."""
    account_args, account_env = account.kubeconfig_exec()

    def render(values: list) -> str:
        name, server, ca = values
        return json.dumps({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": name, "cluster": {
                "server": server, "certificate-authority-data": ca}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "current-context": name,
            "users": [{"name": name, "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1",
                "command": "aws",
                "args": ["eks", "get-token", "--cluster-name", name,
                         "--region", region, "--output", "json", *account_args],
                **({"env": account_env} if account_env else {}),
                "interactiveMode": "Never",
            }}}],
        }, indent=2)

    return pulumi.Output.secret(
        pulumi.Output.all(cluster_name, endpoint, certificate_authority).apply(render))
