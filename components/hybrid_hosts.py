"""EC2 instances standing in for on-prem servers, joined to EKS as hybrid nodes.

They are built the way a data-centre server is: no instance profile (with one, the SSM agent
would register the EC2 identity instead of a hybrid mi-... registration), no public IP, and no
instance metadata once cloud-init has read the user data. AWS does not support EC2 as hybrid
nodes; this is for rehearsal only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_aws as aws

from components.aws_account import AwsAccount
from components.cleanup.host_token import HostToken
from components.cleanup.node_objects import NodeObjectCleanup
from components.cleanup.stale_nodes import StaleNodeSweep
from components.hybrid_user_data import (NODEADM_ARCH, HostBootstrap, boot_generation,
                                         render_user_data)
from components.instance_types import architecture

#: Admission webhooks served from pods on hybrid nodes (controller-runtime's default port).
WEBHOOK_PORT = 9443
KUBELET_PORT = 10250

UBUNTU_AMI_PARAMETER = "/aws/service/canonical/ubuntu/server/24.04/stable/current/{arch}/hvm/ebs-gp3/ami-id"


@dataclass(frozen=True)
class HostSpec:
    #: Short name, used in resource names ("node-0", "gpu").
    name: str
    instance_type: str
    root_volume_gib: int = 40
    node_labels: Mapping[str, str] = field(default_factory=dict)
    node_taints: Sequence[str] = ()
    gpu: bool = False
    #: Images its pods run, pulled into containerd before it joins (HostBootstrap).
    prefetch_images: Sequence[str] = ()


@dataclass(frozen=True)
class HybridHostsArgs:
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    #: The cloud VPC: the control plane, the gateway and cloud pods reach the hosts from it.
    cloud_vpc_cidr: str
    #: The cluster's name as configured, not the cluster resource's output: a host boots and
    #: installs while EKS creates the control plane, and its join waits for the cluster.
    cluster_name: str
    #: The cluster's endpoint and CA: the Node cleanups reach the API server with them.
    cluster_endpoint: pulumi.Input[str]
    cluster_certificate_authority: pulumi.Input[str]
    region: str
    kubernetes_version: str
    activation_id: pulumi.Input[str]
    activation_code: pulumi.Input[str]
    hosts: Sequence[HostSpec]
    #: The tag (key, value) that marks an instance as this stack's: every host carries it, and a
    #: Node cleanup terminates only an instance that does.
    host_tag: tuple[str, str]
    #: Labels that mark the hosts as this stack's; with ``<label_prefix>host`` and
    #: ``<label_prefix>cleanup`` (its host token) they select each host's Node object and
    #: nothing else.
    identity_labels: Mapping[str, str] = field(default_factory=dict)
    label_prefix: str = "eks-hybrid-lab.io/"
    #: What a host needs to boot and register, and, at delete, what must outlive it: routes to
    #: the cluster and the internet, the IAM role's policies, and the cleanups that run after it
    #: is gone. Nothing the cluster makes: the join waits for the cluster by itself.
    wait_for: Sequence[pulumi.Resource] = ()
    #: What the Node cleanups need until they have ended their hosts: the access entry and the
    #: role's cluster-read policy (the cluster itself comes with the endpoint).
    cleanup_wait_for: Sequence[pulumi.Resource] = ()
    #: The credentials the destroy-time cleanup acts with: the program's (aws_account.py).
    account: AwsAccount = AwsAccount()


class HybridHosts(pulumi.ComponentResource):
    security_group: aws.ec2.SecurityGroup
    instances: dict[str, aws.ec2.Instance]
    #: One per host generation: the token its Node is labelled with.
    tokens: dict[str, HostToken]
    #: One per host: deleted before it, it terminates the host, then deletes the host's Node
    #: object (hybrid nodes are billed per vCPU while it exists) and its SSM registration — also
    #: when only that host goes (the GPU host switched off) or is replaced.
    node_cleanups: dict[str, NodeObjectCleanup]
    #: Per host: removes the Node an old host left when the host alone was re-created.
    stale_node_sweeps: dict[str, StaleNodeSweep]
    #: Per host, its generation (boot_generation): a new one replaces the host and its cleanup.
    generations: dict[str, pulumi.Output[str]]

    def __init__(self, name: str, args: HybridHostsArgs,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("eks-hybrid-lab:hybrid:HybridHosts", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)

        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description="Simulated on-prem servers joined as EKS hybrid nodes",
            tags={"Name": f"{name}-sg"},
            opts=child,
        )
        sg_id = self.security_group.id
        # VXLAN from the hybrid nodes gateway is opened by the gateway layer, from the gateway
        # nodes' subnets only.
        from_cloud = [
            ("kubelet", "tcp", KUBELET_PORT, "control plane and metrics to kubelets"),
            ("webhooks", "tcp", WEBHOOK_PORT, "API server to admission webhooks in hybrid pods"),
        ]
        for rule, protocol, port, why in from_cloud:
            aws.vpc.SecurityGroupIngressRule(
                f"{name}-{rule}-from-cloud",
                security_group_id=sg_id, ip_protocol=protocol, from_port=port, to_port=port,
                cidr_ipv4=args.cloud_vpc_cidr, description=why, opts=child)
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-from-lan-peers",
            security_group_id=sg_id, ip_protocol="-1", referenced_security_group_id=sg_id,
            description="hybrid nodes among themselves (Cilium VXLAN, pod traffic)", opts=child)
        aws.vpc.SecurityGroupEgressRule(
            f"{name}-egress",
            security_group_id=sg_id, ip_protocol="-1", cidr_ipv4="0.0.0.0/0",
            description="the cluster over the Transit Gateway; nodeadm, SSM and ECR over NAT",
            opts=child)

        amis: dict[str, pulumi.Output[str]] = {}
        self.instances = {}
        self.node_cleanups = {}
        self.tokens = {}
        self.generations = {}
        self.stale_node_sweeps = {}
        host_key, token_key = f"{args.label_prefix}host", f"{args.label_prefix}cleanup"
        instance_key = f"{args.label_prefix}instance"
        for host in args.hosts:
            identity = {**args.identity_labels, host_key: host.name}
            arch = architecture(host.instance_type)
            resource = f"{name}-{host.name}"
            # Arm hosts used to be resources of their own, named with the architecture; the
            # alias makes such a host this one (replaced if its user data changed), instead of a
            # second host created before the first is deleted.
            # (A change of architecture needs no resource of its own: it changes the user data,
            # so it replaces the host, and Pulumi creates a replacement from the program's
            # inputs — the image of the new architecture — not from an ignored input's old value:
            # pulumi/pulumi pkg/resource/deploy/step_generator.go, continueStepsFromDiff, which
            # checks the replacement against goal.Properties; see docs/hybrid-nodes.md.)
            former = [f"{resource}-arm64"]

            def bootstrap(cluster_name: str, activation_id: str, activation_code: str,
                          host: HostSpec = host, arch: str = arch,
                          identity: Mapping[str, str] = identity) -> HostBootstrap:
                return HostBootstrap(
                    cluster_name=cluster_name, region=args.region,
                    kubernetes_version=args.kubernetes_version,
                    activation_id=activation_id, activation_code=activation_code,
                    architecture=arch, node_labels={**host.node_labels, **identity},
                    node_taints=host.node_taints, gpu=host.gpu,
                    prefetch_images=tuple(host.prefetch_images), instance_label=instance_key)

            # A host generation: what the host boots with, so exactly what replaces the
            # instance — its user data (user_data_replace_on_change) and its subnet (ForceNew).
            # It replaces the host's token; the host labels its Node with it, so its cleanup
            # selects the Node of the host it came with and no other — not the host of a
            # generation that comes back (a change reverted), nor one created while an old
            # cleanup waits for the end of an update (docs/hybrid-nodes.md#replacing-a-host).
            # The activation code stays out: it is secret, and it changes only with the
            # activation id, which is in.
            generation = pulumi.Output.all(args.activation_id, args.subnet_id).apply(
                lambda values, bootstrap=bootstrap: boot_generation(
                    bootstrap(args.cluster_name, values[0], ""), subnet_id=values[1]))
            self.generations[host.name] = generation
            token = HostToken(f"{resource}-token", generation=generation,
                              opts=pulumi.ResourceOptions(parent=self))
            self.tokens[host.name] = token
            if arch not in amis:
                amis[arch] = aws.ssm.get_parameter_output(
                    name=UBUNTU_AMI_PARAMETER.format(arch=NODEADM_ARCH[arch]),
                    opts=pulumi.InvokeOutputOptions(parent=self),
                ).value
            ami = amis[arch]

            def user_data(values, bootstrap=bootstrap) -> str:
                activation_id, activation_code, token = values
                booted = bootstrap(args.cluster_name, activation_id, activation_code)
                return render_user_data(dataclasses.replace(
                    booted, node_labels={**booted.node_labels, token_key: token}))

            self.instances[host.name] = aws.ec2.Instance(
                resource,
                ami=ami,
                instance_type=host.instance_type,
                subnet_id=args.subnet_id,
                vpc_security_group_ids=[sg_id],
                associate_public_ip_address=False,
                metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                    http_endpoint="enabled", http_tokens="required",
                    http_put_response_hop_limit=1),
                root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                    volume_type="gp3", volume_size=host.root_volume_gib, encrypted=True,
                    delete_on_termination=True),
                # Holds the activation code, so it is a secret (the code is one).
                user_data=pulumi.Output.all(args.activation_id, args.activation_code,
                                            token.token).apply(user_data),
                # A host registers with the activation in its user data, once: a new
                # activation (or a new join script) needs a new host.
                user_data_replace_on_change=True,
                tags={"Name": f"{name}-{host.name}", args.host_tag[0]: args.host_tag[1]},
                opts=pulumi.ResourceOptions(
                    parent=self,
                    # Not on its cleanup, nor the cluster: it boots while EKS creates the
                    # control plane (its cleanup depends on it, and ends it, see below).
                    depends_on=list(args.wait_for),
                    # Canonical publishes a new AMI every few days; a running host keeps its
                    # image instead of being replaced by the next preview.
                    ignore_changes=["ami"],
                    # An on-prem server is re-imaged in place: the old host goes before the new
                    # one starts, so a replacement needs no second host's worth of vCPU quota
                    # (two GPU hosts would need twice the G and VT quota, and fail half way).
                    # The engine first deletes the dependents a new host replaces — its cleanup,
                    # which terminates the old host, then deletes the old host's Node — then the
                    # old host (already terminated) and creates the new one
                    # (step_generator.go continueStepsFromDiff, deleteBeforeReplace,
                    # calculateDependentReplacements).
                    delete_before_replace=True,
                    aliases=[pulumi.Alias(name=f) for f in former],
                ),
            )
            instance = self.instances[host.name]
            # After its host, and its delete before the host's: it ends the host, then removes
            # the Node (components/cleanup/node_objects.py).
            cleanup = NodeObjectCleanup(
                f"{resource}-node",
                cluster_name=args.cluster_name, region=args.region,
                endpoint=args.cluster_endpoint,
                certificate_authority=args.cluster_certificate_authority,
                label_selector=",".join(f"{k}={v}" for k, v in identity.items()),
                activation_id=args.activation_id, token_label=token_key, token=token.token,
                instance_id=instance.id, instance_label=instance_key, host_tag=args.host_tag,
                account=args.account,
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=list(args.cleanup_wait_for),
                    aliases=[pulumi.Alias(name=f"{f}-node") for f in former]))
            self.node_cleanups[host.name] = cleanup
            # A host that comes back without its cleanup going first (terminated outside
            # Pulumi and created anew after a refresh; an interrupted update reverted) leaves
            # the old instance's Node: this sweep, which takes the instance's id, removes it
            # once the new instance exists (components/cleanup/stale_nodes.py).
            self.stale_node_sweeps[host.name] = StaleNodeSweep(
                f"{resource}-stale-nodes",
                cluster_name=args.cluster_name, region=args.region,
                endpoint=args.cluster_endpoint,
                certificate_authority=args.cluster_certificate_authority,
                # This host, whatever its generation or instance: an update interrupted after a
                # new generation's host was created but before its cleanup, then reverted,
                # leaves that host's Node with no cleanup and a token no generation has any
                # more. The sweep deletes only Nodes registered before the current instance was
                # launched, which belong to earlier, terminated instances of this host.
                label_selector=",".join(f"{k}={v}" for k, v in identity.items()),
                activation_id=args.activation_id,
                instance_id=instance.id, account=args.account,
                opts=pulumi.ResourceOptions(parent=self))

        self.register_outputs({
            "securityGroupId": sg_id,
            "instanceIds": {k: i.id for k, i in self.instances.items()},
            "generations": dict(self.generations),
        })
