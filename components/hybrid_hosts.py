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
from components.cleanup.node_objects import NodeObjectCleanup
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


@dataclass(frozen=True)
class HybridHostsArgs:
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    #: The cloud VPC: the control plane, the gateway and cloud pods reach the hosts from it.
    cloud_vpc_cidr: str
    cluster_name: pulumi.Input[str]
    cluster_endpoint: pulumi.Input[str]
    cluster_certificate_authority: pulumi.Input[str]
    region: str
    kubernetes_version: str
    activation_id: pulumi.Input[str]
    activation_code: pulumi.Input[str]
    hosts: Sequence[HostSpec]
    #: Labels that mark the hosts as this stack's; with ``<label_prefix>host`` and
    #: ``<label_prefix>generation`` they select each host's Node object and nothing else.
    identity_labels: Mapping[str, str] = field(default_factory=dict)
    label_prefix: str = "eks-hybrid-lab.io/"
    #: What a host needs to join and, at delete, what must outlive it: routes to the cluster and
    #: the internet, the IAM role and access entry, and the cleanups that run after it is gone.
    wait_for: Sequence[pulumi.Resource] = ()
    #: The credentials the destroy-time cleanup acts with: the program's (aws_account.py).
    account: AwsAccount = AwsAccount()


class HybridHosts(pulumi.ComponentResource):
    security_group: aws.ec2.SecurityGroup
    instances: dict[str, aws.ec2.Instance]
    #: One per host generation: deleted after its host, it deletes that generation's Node
    #: object (hybrid nodes are billed per vCPU while it exists) and SSM registration — also
    #: when only that host goes (the GPU host switched off) or is replaced (see below).
    node_cleanups: dict[str, NodeObjectCleanup]
    #: Per host, the ``<label_prefix>generation`` label value its Node carries (boot_generation).
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
        self.generations = {}
        host_key, generation_key = f"{args.label_prefix}host", f"{args.label_prefix}generation"
        for host in args.hosts:
            identity = {**args.identity_labels, host_key: host.name}
            arch = architecture(host.instance_type)
            # An Arm host is another resource, not a replacement of the x86 one: the instance
            # ignores changes to "ami" (below), and Pulumi keeps an ignored input's old value
            # even when it replaces the resource — an x86 host replaced by an Arm one would be
            # launched with the x86 image and fail. x86 hosts keep the names they always had.
            resource = f"{name}-{host.name}" + ("" if arch == "x86_64" else f"-{arch}")

            def bootstrap(cluster_name: str, activation_id: str, activation_code: str,
                          host: HostSpec = host, arch: str = arch,
                          identity: Mapping[str, str] = identity) -> HostBootstrap:
                return HostBootstrap(
                    cluster_name=cluster_name, region=args.region,
                    kubernetes_version=args.kubernetes_version,
                    activation_id=activation_id, activation_code=activation_code,
                    architecture=arch, node_labels={**host.node_labels, **identity},
                    node_taints=host.node_taints, gpu=host.gpu)

            # A host generation: what the host boots with, so exactly what replaces the
            # instance — its user data (user_data_replace_on_change) and its subnet (ForceNew) —
            # gives its Node a new label value. A replaced host registers a new Node (named
            # after its new mi-… registration) while the old one stays NotReady and billed; the
            # old generation's cleanup selects the old label value and so the old Node only.
            # The activation code stays out: it is secret, and it changes only with the
            # activation id, which is in. (The activation id also used to be a label of its
            # own; the generation covers it, and a Node without that label is out of reach of
            # the selectors cleanups stored before generations existed.)
            generation = pulumi.Output.all(args.cluster_name, args.activation_id,
                                           args.subnet_id).apply(
                lambda values, bootstrap=bootstrap: boot_generation(
                    bootstrap(values[0], values[1], ""), subnet_id=values[2]))
            self.generations[host.name] = generation
            selector = pulumi.Output.concat(
                ",".join(f"{k}={v}" for k, v in identity.items()),
                f",{generation_key}=", generation)
            self.node_cleanups[host.name] = NodeObjectCleanup(
                f"{resource}-node",
                cluster_name=args.cluster_name, region=args.region,
                endpoint=args.cluster_endpoint,
                certificate_authority=args.cluster_certificate_authority,
                label_selector=selector, activation_id=args.activation_id,
                account=args.account, opts=child)
            if arch not in amis:
                amis[arch] = aws.ssm.get_parameter_output(
                    name=UBUNTU_AMI_PARAMETER.format(arch=NODEADM_ARCH[arch]),
                    opts=pulumi.InvokeOutputOptions(parent=self),
                ).value
            ami = amis[arch]

            def user_data(values, bootstrap=bootstrap) -> str:
                cluster_name, activation_id, activation_code, generation = values
                booted = bootstrap(cluster_name, activation_id, activation_code)
                return render_user_data(dataclasses.replace(
                    booted, node_labels={**booted.node_labels, generation_key: generation}))

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
                user_data=pulumi.Output.all(args.cluster_name, args.activation_id,
                                            args.activation_code, generation).apply(user_data),
                # A host registers with the activation in its user data, once: a new
                # activation (or a new join script) needs a new host. Its Node cleanup is
                # replaced with it (its selector holds the generation): Pulumi creates the new
                # cleanup, then the new host (it depends on the cleanup), and only after every
                # create deletes the old host and then the old cleanup — deletes of replaced
                # resources run last, dependents first (pulumi/pulumi
                # pkg/resource/deploy/deployment_executor.go performPostSteps,
                # step_generator.go GenerateDeletes and ScheduleDeletes).
                user_data_replace_on_change=True,
                tags={"Name": f"{name}-{host.name}"},
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=[*args.wait_for, self.node_cleanups[host.name]],
                    # Canonical publishes a new AMI every few days; a running host keeps its
                    # image instead of being replaced by the next preview.
                    ignore_changes=["ami"],
                ),
            )

        self.register_outputs({
            "securityGroupId": sg_id,
            "instanceIds": {k: i.id for k, i in self.instances.items()},
            "generations": dict(self.generations),
        })
