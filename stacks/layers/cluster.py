"""Layer 2 — Cluster: EKS with remote networks, system nodes, add-ons, kubeconfig and the
Kubernetes provider every Kubernetes resource of the lab uses."""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.eks_addons import eks_addon
from components.eks_cluster import EksCluster, EksClusterArgs, kubeconfig
from components.node_group import ManagedNodeGroup, ManagedNodeGroupArgs
from components.eks_versions import in_standard_support, support_window
from stacks import config as lab_config
from stacks.config import LAB_LIFETIME_DAYS, LabConfig
from stacks.layers.base import Layer
from stacks.layers.network import NetworkLayer

SYSTEM_NODE_COUNT = 2


class ClusterLayer(Layer):
    eks: EksCluster
    system_nodes: ManagedNodeGroup
    kubeconfig: pulumi.Output[str]
    #: Every Kubernetes resource of the lab is created through this provider, so each one
    #: depends on the cluster and is deleted before it.
    kubernetes: k8s.Provider
    #: The add-ons by name.
    addons: dict

    def __init__(self, cfg: LabConfig, network: NetworkLayer,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("Cluster", "cluster", opts)

        if cfg.endpoint_access == "public" and cfg.admin_cidrs:
            # The NAT gateways' addresses: nodes in both VPCs reach a public endpoint from them.
            public_cidrs = [str(c) for c in cfg.admin_cidrs] + [
                ip.apply(lambda a: f"{a}/32")
                for ip in (network.cloud.nat_public_ip, network.on_prem.nat_public_ip)]
        else:
            public_cidrs = ["0.0.0.0/0"]
            if cfg.endpoint_access == "public":
                pulumi.log.warn(
                    "endpointAccess is public and adminCidrs is empty: the EKS API endpoint "
                    "accepts connections from 0.0.0.0/0 (requests are still IAM-authenticated). "
                    "Close it with: pulumi config set --path 'adminCidrs[0]' <your-ip>/32")
        if cfg.endpoint_access == "private":
            pulumi.log.warn(
                "endpointAccess is private: `pulumi up` creates the Kubernetes resources through "
                "the private endpoint, so it must run from a machine that reaches the cloud VPC "
                f"({cfg.cloud_vpc_cidr}), e.g. over a VPN or from an instance inside it.")

        window = support_window(cfg.kubernetes_version)
        day = lab_config.today()
        if window.ends_within(day, LAB_LIFETIME_DAYS):
            newer = in_standard_support(day, LAB_LIFETIME_DAYS)
            pulumi.log.warn(
                f"kubernetesVersion {cfg.kubernetes_version}: EKS standard support ends "
                f"{window.standard_ends.isoformat()}, while this lab may still be up (its SSM "
                f"activation lasts {LAB_LIFETIME_DAYS} days). The cluster's upgradePolicy is "
                "STANDARD, so EKS then upgrades the control plane by itself, mid-rehearsal, "
                "instead of billing extended support. To rehearse on a version that stays put: "
                f"pulumi config set kubernetesVersion {newer[0] if newer else '<newer>'}")

        self.eks = EksCluster(self.child_name("eks"), EksClusterArgs(
            cluster_name=cfg.cluster_name,
            kubernetes_version=cfg.kubernetes_version,
            subnet_ids=network.cloud.private_subnet_ids,
            service_cidr=str(cfg.service_cidr),
            remote_node_cidrs=[network.remote_node_cidr],
            remote_pod_cidrs=[str(cfg.hybrid_pod_cidr)],
            endpoint_public=cfg.endpoint_access == "public",
            public_access_cidrs=public_cidrs,
            log_retention_days=cfg.log_retention_days,
            admin_role_arns=cfg.admin_role_arns,
        ), opts=self.child())

        def addon(addon_name: str, configuration=None, wait_for=()):
            return eks_addon(
                self.child_name(addon_name),
                cluster_name=self.eks.name,
                addon_name=addon_name,
                kubernetes_version=cfg.kubernetes_version,
                configuration=configuration,
                opts=self.child(depends_on=list(wait_for)),
            )

        self.addons = {
            # Cloud pods must reach hybrid pods with their own source address: without this,
            # ClusterIP services whose endpoints are on hybrid nodes fail from cloud pods.
            "vpc-cni": addon("vpc-cni", {"env": {
                "AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS": str(cfg.hybrid_pod_cidr)}}),
            "kube-proxy": addon("kube-proxy"),
            "eks-pod-identity-agent": addon("eks-pod-identity-agent"),
        }

        self.system_nodes = ManagedNodeGroup(self.child_name("system"), ManagedNodeGroupArgs(
            cluster_name=self.eks.name,
            subnet_ids=network.cloud.private_subnet_ids,
            instance_type=cfg.system_node_instance_type,
            size=SYSTEM_NODE_COUNT,
            # Follows kubernetesVersion, once the control plane runs it.
            kubernetes_version=self.eks.version,
            labels={"role": "system"},
            instance_tags=cfg.lab_tag,
            # Nodes cannot join without egress (ECR, EKS) or become Ready without the CNI;
            # at delete, they drain before either goes.
            wait_for=[*network.cloud.egress, self.addons["vpc-cni"], self.addons["kube-proxy"]],
        ), opts=self.child())

        # CoreDNS reports ACTIVE only once its pods run, so it waits for the nodes.
        self.addons["coredns"] = addon("coredns", wait_for=[self.system_nodes.node_group])

        self.kubeconfig = kubeconfig(self.eks.name, self.eks.endpoint,
                                     self.eks.certificate_authority, cfg.region,
                                     cfg.aws_account)
        self.kubernetes = k8s.Provider(
            self.child_name("k8s"),
            # Explicit: a provider without a kubeconfig would silently use $KUBECONFIG.
            kubeconfig=self.kubeconfig,
            opts=self.child(depends_on=self.eks.access),
        )

        self.register_outputs({"clusterName": self.eks.name, "endpoint": self.eks.endpoint})
