"""Layer 3 — Hybrid: the hybrid nodes' IAM role and access entry, the SSM hybrid activation,
simulated on-prem hosts joined with nodeadm, Cilium, the optional GPU host, and the cleanups
that make their removal complete."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Optional

import pulumi

from components.cilium import Cilium, CiliumArgs
from components.cleanup.registration_budget import RegistrationBudget
from components.demos import VLLM
from components.eks_cluster import cluster_arn
from components.hybrid_activation import HybridActivation, HybridActivationArgs
from components.hybrid_hosts import HostSpec, HybridHosts, HybridHostsArgs
from components.hybrid_node_role import HybridNodeRole, HybridNodeRoleArgs
from components.nvidia_device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs
from stacks.config import CILIUM_NODE_MASK, LabConfig
from stacks.layers.base import Layer
from stacks.layers.cluster import ClusterLayer
from stacks.layers.network import NetworkLayer

#: SSM allows an activation at most 30 days ahead.
ACTIVATION_DAYS = 30
#: Workloads opt in to hybrid nodes by tolerating this taint.
HYBRID_TAINT = ("eks.amazonaws.com/compute-type", "hybrid", "NoSchedule")
GPU_TAINT = ("gpu", "true", "NoSchedule")
#: The labels that mark this stack's hybrid nodes; the Node cleanups delete only these.
LABEL_PREFIX = "eks-hybrid-lab.io/"
STACK_LABEL = f"{LABEL_PREFIX}stack"


def registration_limit(cfg: LabConfig) -> int:
    """The activation's registration limit: every host once, plus one re-join each; the GPU
    host's share is reserved even when it is off, so switching it on does not replace the
    activation (and the hosts). A change that needs more than are left stops at preview
    (components/cleanup/registration_budget.py; docs/hybrid-nodes.md#activation-registrations)."""
    return 2 * (cfg.hybrid_node_count + 1)


def _taint(key: str, value: str, effect: str) -> str:
    return f"{key}={value}:{effect}"


def _toleration(key: str, value: str, effect: str) -> dict:
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


def activation_name(cfg: LabConfig) -> str:
    """The activation's name (SSM's DefaultInstanceName): what the preflight finds it by."""
    return f"{cfg.cluster_name}-hybrid-nodes"


def stack_label_value(cfg: LabConfig) -> str:
    # Label values: at most 63 characters of [A-Za-z0-9._-].
    return f"{cfg.project}.{cfg.stack}"[:63].rstrip("-_.")


class HybridLayer(Layer):
    role: HybridNodeRole
    activation: HybridActivation
    #: The hosts depend on it: its check stops a change the activation cannot register.
    registration_budget: RegistrationBudget
    hosts: HybridHosts
    cilium: Cilium
    device_plugin: Optional[NvidiaDevicePlugin]
    node_label_selector: str

    def __init__(self, cfg: LabConfig, network: NetworkLayer, cluster: ClusterLayer,
                 account_id: str, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Hybrid", "hybrid", opts)
        eks = cluster.eks

        self.role = HybridNodeRole(self.child_name("node-role"), HybridNodeRoleArgs(
            cluster_name=eks.name, cluster_arn=eks.arn, account_id=account_id,
            region=cfg.region), opts=self.child())

        self.activation = HybridActivation(self.child_name("activation"), HybridActivationArgs(
            role_name=self.role.role_name,
            # From the configured name, not the cluster's output: only a tag (copied onto each
            # registration) and a condition hold it, and the activation, so the hosts, then
            # wait for none of the cluster.
            cluster_arn=cluster_arn(cfg.region, account_id, cfg.cluster_name),
            region=cfg.region,
            registration_limit=registration_limit(cfg),
            valid_days=ACTIVATION_DAYS,
            generation=cfg.activation_generation,
            name=activation_name(cfg),
            description=f"{cfg.project}/{cfg.stack}: hybrid nodes of EKS cluster {cfg.cluster_name}",
            wait_for=self.role.policies,
            account=cfg.aws_account,
        ), opts=self.child())
        self.activation.expires_at.apply(
            lambda at: _warn_if_expiring(at, cfg.activation_generation))

        # All of this stack's hybrid nodes (each host also gets host and generation labels,
        # by which its own Node cleanup finds it).
        self.node_label_selector = f"{STACK_LABEL}={stack_label_value(cfg)}"

        labels = {"topology.kubernetes.io/zone": "onprem"}
        specs = [HostSpec(name=f"node-{i}", instance_type=cfg.hybrid_node_instance_type,
                          node_labels=labels, node_taints=[_taint(*HYBRID_TAINT)])
                 for i in range(cfg.hybrid_node_count)]
        if cfg.gpu_enabled:
            specs.append(HostSpec(
                name="gpu", instance_type=cfg.gpu_instance_type, gpu=True,
                # The vLLM image alone is about 10 GB (ctr keeps its compressed layers beside the
                # unpacked ones).
                root_volume_gib=100,
                # The very reference the vLLM Deployment runs, pulled while the driver
                # installs: the pod starts without pulling, and a new image is a new host.
                prefetch_images=(VLLM,),
                node_labels={**labels, "nvidia.com/gpu.present": "true"},
                node_taints=[_taint(*HYBRID_TAINT), _taint(*GPU_TAINT)]))

        hosts_name = self.child_name("hosts")
        hosts_args = HybridHostsArgs(
            vpc_id=network.on_prem.vpc_id,
            subnet_id=network.on_prem.private_subnet_ids[0],
            cloud_vpc_cidr=network.cloud.cidr_block,
            cluster_name=cfg.cluster_name,
            cluster_endpoint=eks.endpoint,
            cluster_certificate_authority=eks.certificate_authority,
            region=cfg.region,
            kubernetes_version=cfg.kubernetes_version,
            activation_id=self.activation.activation_id,
            activation_code=self.activation.activation_code,
            hosts=specs,
            identity_labels={STACK_LABEL: stack_label_value(cfg)},
            label_prefix=LABEL_PREFIX,
            host_tag=next(iter(cfg.lab_tag.items())),
            wait_for=[
                # The cluster over the Transit Gateway and nodeadm's downloads over NAT.
                *network.transit.routes, *network.on_prem.egress,
                *self.role.policies,
                self.activation.registrations_cleanup,
            ],
            # The access entry and the policy that reads the cluster outlive the hosts.
            cleanup_wait_for=self.role.attachments,
            account=cfg.aws_account,
        )
        # Before any host is created or replaced: a change creating more hosts than the
        # activation has registrations left stops at its check, at preview.
        self.registration_budget = RegistrationBudget(
            self.child_name("registration-budget"),
            activation_id=self.activation.activation_id, activation_name=activation_name(cfg),
            registration_limit=registration_limit(cfg),
            activation_generation=cfg.activation_generation, region=cfg.region,
            # Each host's generation, by HybridHosts' own rule: exactly what replaces its
            # instance, so the budget counts the hosts the engine replaces (a test holds it).
            hosts=HybridHosts.generations_of(hosts_name, hosts_args), account=cfg.aws_account,
            opts=self.child())
        self.hosts = HybridHosts(hosts_name, dataclasses.replace(
            hosts_args, wait_for=[*hosts_args.wait_for, self.registration_budget]),
            opts=self.child())

        hybrid_toleration = _toleration(*HYBRID_TAINT)
        self.cilium = Cilium(self.child_name("cilium"), CiliumArgs(
            pod_cidrs=[str(cfg.hybrid_pod_cidr)],
            node_mask=CILIUM_NODE_MASK,
            # The operator stays off the GPU host: it tolerates the hybrid taint only.
            hybrid_node_count=cfg.hybrid_node_count,
            operator_tolerations=[hybrid_toleration],
            # Its pods run on every host: at destroy it goes before each host's Node cleanup,
            # whose delete terminates that host (the host dies there, not at its instance's
            # delete), so the release is not left waiting on pods of a dead node.
            wait_for=[*self.hosts.instances.values(), *self.hosts.node_cleanups.values()],
        ), opts=self.child())

        self.device_plugin = None
        if cfg.gpu_enabled:
            self.device_plugin = NvidiaDevicePlugin(
                self.child_name("nvidia"),
                NvidiaDevicePluginArgs(
                    tolerations=[hybrid_toleration, _toleration(*GPU_TAINT)],
                    wait_for=[self.hosts.instances["gpu"], self.hosts.node_cleanups["gpu"],
                              self.cilium.release]),
                opts=self.child())

        self.register_outputs({
            "activationId": self.activation.activation_id,
            "hostIds": {k: i.id for k, i in self.hosts.instances.items()},
        })


def _warn_if_expiring(expires_at: str, generation: int) -> None:
    expiry = datetime.datetime.strptime(expires_at, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc)
    left = expiry - datetime.datetime.now(datetime.timezone.utc)
    if left < datetime.timedelta(days=1):
        state = "expired" if left.total_seconds() <= 0 else "expires within a day"
        pulumi.log.warn(
            f"the SSM hybrid activation {state} ({expires_at}): a hybrid host created from now "
            "on cannot register. Renew it with: pulumi config set activationGeneration "
            f"{generation + 1} (the hosts are replaced and register again).")
