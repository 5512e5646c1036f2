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
    #: Short name, used in resource names ("node-0", "gpu") and as the value of the host's
    #: ``<label_prefix>host`` label, so it must be unique among the hosts and a valid label value.
    name: str
    #: EC2 instance type; its architecture (instance_types.architecture) picks the Ubuntu image
    #: and the nodeadm build.
    instance_type: str
    #: Size of the encrypted gp3 root volume, GiB: the images and, for a GPU host, the driver
    #: live on it.
    root_volume_gib: int = 40
    #: Labels the kubelet registers the Node with (nodeadm's NodeConfig), besides the identity
    #: labels this component adds; workloads select the host by them.
    node_labels: Mapping[str, str] = field(default_factory=dict)
    #: kubelet taints, ``key=value:Effect``: what keeps other pods off the host.
    node_taints: Sequence[str] = ()
    #: Install the NVIDIA driver and container toolkit before the host joins (HostBootstrap).
    gpu: bool = False
    #: Images its pods run, pulled into containerd before it joins (HostBootstrap).
    prefetch_images: Sequence[str] = ()


@dataclass(frozen=True)
class HybridHostsArgs:
    #: The simulated on-prem VPC: the hosts' security group is created in it.
    vpc_id: pulumi.Input[str]
    #: The private on-prem subnet every host runs in. Part of a host's generation: the subnet
    #: cannot change in place (ForceNew), so a new one is a new host with a new token.
    subnet_id: pulumi.Input[str]
    #: The cloud VPC: the control plane, the gateway and cloud pods reach the hosts from it.
    cloud_vpc_cidr: str
    #: The cluster's name as configured, not the cluster resource's output: a host boots and
    #: installs while EKS creates the control plane, and its join waits for the cluster.
    cluster_name: str
    #: The cluster's API server: the Node cleanups and stale-Node sweeps delete Nodes through it.
    cluster_endpoint: pulumi.Input[str]
    #: The cluster's CA (base64 PEM, as EKS returns it): the Node cleanups verify the API
    #: server with it.
    cluster_certificate_authority: pulumi.Input[str]
    #: The AWS region of the cluster and the activation: nodeadm's NodeConfig names it, and the
    #: cleanups call EC2, SSM and EKS there.
    region: str
    #: The cluster's Kubernetes version ("1.35"): nodeadm installs the kubelet of this version,
    #: and a new one is new user data, so a new host.
    kubernetes_version: str
    #: The SSM hybrid activation the hosts register with. Part of a host's generation; the
    #: cleanups deregister only managed instances registered through it.
    activation_id: pulumi.Input[str]
    #: The activation's secret code: written into the user data only (which makes the user data
    #: a secret), never into the generation.
    activation_code: pulumi.Input[str]
    #: One host per spec, each with its instance, token, Node cleanup and stale-Node sweep.
    hosts: Sequence[HostSpec]
    #: The tag (key, value) that marks an instance as this stack's: every host carries it, and a
    #: Node cleanup terminates only an instance that does.
    host_tag: tuple[str, str]
    #: The label key prefix (ending in "/") of the labels this component sets on each host's
    #: Node: ``<label_prefix>host`` (the host's name), ``<label_prefix>cleanup`` (its token) and
    #: ``<label_prefix>instance`` (its instance id). Required: those keys are the caller's to
    #: name, and a Node cleanup deletes the Nodes they select.
    label_prefix: str
    #: Labels that mark the hosts as this stack's; with ``<label_prefix>host`` and
    #: ``<label_prefix>cleanup`` (its host token) they select each host's Node object and
    #: nothing else.
    identity_labels: Mapping[str, str] = field(default_factory=dict)
    #: What a host needs to boot and register, and, at delete, what must outlive it: routes to
    #: the cluster and the internet, the IAM role's policies, and the cleanups that run after it
    #: is gone. Nothing the cluster makes: the join waits for the cluster by itself.
    wait_for: Sequence[pulumi.Resource] = ()
    #: What the Node cleanups need until they have ended their hosts: the access entry and the
    #: role's cluster-read policy (the cluster itself comes with the endpoint).
    cleanup_wait_for: Sequence[pulumi.Resource] = ()
    #: The credentials the destroy-time cleanup acts with: the program's (aws_account.py).
    account: AwsAccount = AwsAccount()


@dataclass(frozen=True)
class _Host:
    """One host as its resources see it: the names and labels they share."""

    spec: HostSpec
    #: Its resources' names start with this, and its instance's Name tag is this:
    #: ``<component>-<host>``.
    resource: str
    #: x86_64 or arm64 (instance_types.architecture).
    arch: str
    #: The labels that select its Node: the stack's identity labels and ``<label_prefix>host``.
    identity: Mapping[str, str]
    #: The Node label that carries the host's token (``<label_prefix>cleanup``).
    token_key: str
    #: The Node label the host sets to its own instance id (``<label_prefix>instance``).
    instance_key: str

    @staticmethod
    def of(component: str, spec: HostSpec, args: HybridHostsArgs) -> "_Host":
        return _Host(spec=spec, resource=f"{component}-{spec.name}",
                     arch=architecture(spec.instance_type),
                     identity={**args.identity_labels, f"{args.label_prefix}host": spec.name},
                     token_key=f"{args.label_prefix}cleanup",
                     instance_key=f"{args.label_prefix}instance")

    @property
    def label_selector(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.identity.items())

    @property
    def aliases(self) -> list[str]:
        """Other names this host's instance may have in a stack's state: an Arm host's instance
        named with its architecture (``<resource>-arm64``). Aliased, such an instance is this
        host (replaced if its user data differs) rather than a second host, created before the
        first is deleted, with a second host's worth of vCPU quota.

        A change of architecture needs no name of its own: it changes the user data, so it
        replaces the host, and Pulumi creates a replacement from the program's inputs — the
        image of the new architecture — not from an ignored input's old value (pulumi/pulumi
        pkg/resource/deploy/step_generator.go, continueStepsFromDiff, which checks the
        replacement against goal.Properties; see docs/hybrid-nodes.md)."""
        return [f"{self.resource}-arm64"]

    def bootstrap(self, args: HybridHostsArgs, activation_id: str,
                  activation_code: str) -> HostBootstrap:
        """What the host boots with (its user data, hybrid_user_data), without its token."""
        return HostBootstrap(
            cluster_name=args.cluster_name, region=args.region,
            kubernetes_version=args.kubernetes_version,
            activation_id=activation_id, activation_code=activation_code,
            architecture=self.arch, node_labels={**self.spec.node_labels, **self.identity},
            node_taints=self.spec.node_taints, gpu=self.spec.gpu,
            prefetch_images=tuple(self.spec.prefetch_images), instance_label=self.instance_key)


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
        self.security_group = self._security_group(name, args)
        self.instances = {}
        self.node_cleanups = {}
        self.tokens = {}
        self.generations = {}
        self.stale_node_sweeps = {}
        #: One image lookup per architecture, shared by its hosts.
        amis: dict[str, pulumi.Output[str]] = {}
        for spec in args.hosts:
            host = _Host.of(name, spec, args)
            generation = self.generations[spec.name] = self._generation(host, args)
            token = self.tokens[spec.name] = self._token(host, generation)
            if host.arch not in amis:
                amis[host.arch] = self._ami(host.arch)
            instance = self.instances[spec.name] = self._instance(
                host, args, amis[host.arch], token)
            self.node_cleanups[spec.name] = self._node_cleanup(host, args, token, instance)
            self.stale_node_sweeps[spec.name] = self._stale_node_sweep(host, args, instance)

        self.register_outputs({
            "securityGroupId": self.security_group.id,
            "instanceIds": {k: i.id for k, i in self.instances.items()},
            "generations": dict(self.generations),
        })

    def _security_group(self, name: str, args: HybridHostsArgs) -> aws.ec2.SecurityGroup:
        """The hosts' group: what the cloud VPC reaches them on, each other, and the way out."""
        child = pulumi.ResourceOptions(parent=self)
        group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description="Simulated on-prem servers joined as EKS hybrid nodes",
            tags={"Name": f"{name}-sg"},
            opts=child,
        )
        sg_id = group.id
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
        return group

    @classmethod
    def generations_of(cls, name: str, args: HybridHostsArgs) -> dict[str, pulumi.Output[str]]:
        """Each host's generation (``_generation``) as ``HybridHosts(name, args)`` will compute
        it, before the component exists: what a check in front of the hosts (the registration
        budget) counts replacements by, with exactly the hosts' own rule."""
        return {spec.name: cls._generation(_Host.of(name, spec, args), args)
                for spec in args.hosts}

    @staticmethod
    def _generation(host: _Host, args: HybridHostsArgs) -> pulumi.Output[str]:
        """The host's generation: what the host boots with, so exactly what replaces the
        instance — its user data (user_data_replace_on_change) and its subnet (ForceNew).

        It replaces the host's token; the host labels its Node with it, so its cleanup selects
        the Node of the host it came with and no other — not the host of a generation that comes
        back (a change reverted), nor one created while an old cleanup waits for the end of an
        update (docs/hybrid-nodes.md#replacing-a-host). The activation code stays out: it is
        secret, and it changes only with the activation id, which is in.
        """
        return pulumi.Output.all(args.activation_id, args.subnet_id).apply(
            lambda values: boot_generation(host.bootstrap(args, values[0], ""),
                                           subnet_id=values[1]))

    def _token(self, host: _Host, generation: pulumi.Output[str]) -> HostToken:
        return HostToken(f"{host.resource}-token", generation=generation,
                         opts=pulumi.ResourceOptions(parent=self))

    def _ami(self, arch: str) -> pulumi.Output[str]:
        """Canonical's current Ubuntu image for ``arch``."""
        return aws.ssm.get_parameter_output(
            name=UBUNTU_AMI_PARAMETER.format(arch=NODEADM_ARCH[arch]),
            opts=pulumi.InvokeOutputOptions(parent=self),
        ).value

    def _instance(self, host: _Host, args: HybridHostsArgs, ami: pulumi.Output[str],
                  token: HostToken) -> aws.ec2.Instance:
        def user_data(values) -> str:
            activation_id, activation_code, token = values
            booted = host.bootstrap(args, activation_id, activation_code)
            return render_user_data(dataclasses.replace(
                booted, node_labels={**booted.node_labels, host.token_key: token}))

        return aws.ec2.Instance(
            host.resource,
            ami=ami,
            instance_type=host.spec.instance_type,
            subnet_id=args.subnet_id,
            vpc_security_group_ids=[self.security_group.id],
            associate_public_ip_address=False,
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required",
                http_put_response_hop_limit=1),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_type="gp3", volume_size=host.spec.root_volume_gib, encrypted=True,
                delete_on_termination=True),
            # Holds the activation code, so it is a secret (the code is one).
            user_data=pulumi.Output.all(args.activation_id, args.activation_code,
                                        token.token).apply(user_data),
            # A host registers with the activation in its user data, once: a new
            # activation (or a new join script) needs a new host.
            user_data_replace_on_change=True,
            tags={"Name": host.resource, args.host_tag[0]: args.host_tag[1]},
            opts=pulumi.ResourceOptions(
                parent=self,
                # Not on its cleanup, nor the cluster: it boots while EKS creates the
                # control plane (its cleanup depends on it, and ends it: _node_cleanup).
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
                aliases=[pulumi.Alias(name=f) for f in host.aliases],
            ),
        )

    def _node_cleanup(self, host: _Host, args: HybridHostsArgs, token: HostToken,
                      instance: aws.ec2.Instance) -> NodeObjectCleanup:
        """After its host, and its delete before the host's: it ends the host, then removes
        the Node (components/cleanup/node_objects.py)."""
        return NodeObjectCleanup(
            f"{host.resource}-node",
            cluster_name=args.cluster_name, region=args.region,
            endpoint=args.cluster_endpoint,
            certificate_authority=args.cluster_certificate_authority,
            label_selector=host.label_selector,
            activation_id=args.activation_id, token_label=host.token_key, token=token.token,
            instance_id=instance.id, instance_label=host.instance_key, host_tag=args.host_tag,
            account=args.account,
            opts=pulumi.ResourceOptions(
                parent=self, depends_on=list(args.cleanup_wait_for),
                aliases=[pulumi.Alias(name=f"{f}-node") for f in host.aliases]))

    def _stale_node_sweep(self, host: _Host, args: HybridHostsArgs,
                          instance: aws.ec2.Instance) -> StaleNodeSweep:
        """A host that comes back without its cleanup going first (terminated outside Pulumi
        and created anew after a refresh; an interrupted update reverted) leaves the old
        instance's Node: this sweep, which takes the instance's id, removes it once the new
        instance exists (components/cleanup/stale_nodes.py)."""
        return StaleNodeSweep(
            f"{host.resource}-stale-nodes",
            cluster_name=args.cluster_name, region=args.region,
            endpoint=args.cluster_endpoint,
            certificate_authority=args.cluster_certificate_authority,
            # This host, whatever its generation or instance: an update interrupted after a
            # new generation's host was created but before its cleanup, then reverted,
            # leaves that host's Node with no cleanup and a token no generation has any
            # more. The sweep deletes only Nodes registered before the current instance was
            # launched, which belong to earlier, terminated instances of this host.
            label_selector=host.label_selector,
            activation_id=args.activation_id,
            instance_id=instance.id, account=args.account,
            opts=pulumi.ResourceOptions(parent=self))
