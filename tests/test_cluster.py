"""Cluster layer: EKS with remote networks, one endpoint, logs the stack owns, encrypted secrets,
security-group rules for hybrid nodes, system nodes, add-ons, kubeconfig and the provider."""

from __future__ import annotations

import ipaddress
import json

import pytest

from offline.runner import ProgramRun, Registration, Secret
from tests.conftest import NODE_TYPES, RENAMED

CLUSTER = "aws:eks/cluster:Cluster"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ADDON = "aws:eks/addon:Addon"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"


def cluster(run: ProgramRun) -> Registration:
    [found] = run.of_type(CLUSTER)
    return found


def by_name(run: ProgramRun, type_: str) -> dict[str, Registration]:
    return {r.name: r for r in run.of_type(type_)}


def test_remote_networks_are_the_server_lan_and_the_pod_cidr(dev_run):
    remote = cluster(dev_run).inputs["remoteNetworkConfig"]
    [lan] = [s for s in dev_run.of_type("aws:ec2/subnet:Subnet") if s.name == "network-onprem-private-0"]
    assert remote["remoteNodeNetworks"] == {"cidrs": [lan.inputs["cidrBlock"]]}
    assert remote["remotePodNetworks"] == {"cidrs": ["172.17.0.0/16"]}
    service = ipaddress.ip_network(cluster(dev_run).inputs["kubernetesNetworkConfig"]["serviceIpv4Cidr"])
    assert service == ipaddress.ip_network("172.20.0.0/16")
    for cidr in remote["remoteNodeNetworks"]["cidrs"] + remote["remotePodNetworks"]["cidrs"]:
        assert not ipaddress.ip_network(cidr).overlaps(service)


def test_cluster_identity_version_and_subnets(lab):
    run = lab(**RENAMED)
    eks = cluster(run)
    assert eks.inputs["name"] == "rehearsal-1"
    assert eks.inputs["version"] == "1.36"
    private = {s.id for s in run.of_type("aws:ec2/subnet:Subnet") if s.name.startswith("network-cloud-private-")}
    assert set(eks.inputs["vpcConfig"]["subnetIds"]) == private


def test_api_authentication_and_creator_admin_are_explicit(dev_run):
    inputs = cluster(dev_run).inputs
    assert inputs["accessConfig"] == {"authenticationMode": "API",
                                      "bootstrapClusterCreatorAdminPermissions": True}
    assert inputs["bootstrapSelfManagedAddons"] is False


def test_public_endpoint_open_with_a_warning_when_no_admin_cidrs(dev_run):
    vpc = cluster(dev_run).inputs["vpcConfig"]
    assert (vpc["endpointPublicAccess"], vpc["endpointPrivateAccess"]) == (True, False)
    assert vpc["publicAccessCidrs"] == ["0.0.0.0/0"]
    assert any("adminCidrs is empty" in w for w in dev_run.warnings)


def test_public_endpoint_limited_to_admins_and_both_nat_gateways(lab):
    run = lab(adminCidrs=["198.51.100.0/24", "203.0.113.7/32"])
    vpc = cluster(run).inputs["vpcConfig"]
    nat_ips = {f"{ip}/32" for ip in run.outputs["natPublicIps"]}
    assert len(nat_ips) == 2
    assert set(vpc["publicAccessCidrs"]) == {"198.51.100.0/24", "203.0.113.7/32"} | nat_ips
    assert not any("adminCidrs" in w for w in run.warnings)


def test_private_endpoint_only(lab):
    run = lab(endpointAccess="private")
    vpc = cluster(run).inputs["vpcConfig"]
    assert (vpc["endpointPublicAccess"], vpc["endpointPrivateAccess"]) == (False, True)
    assert "publicAccessCidrs" not in vpc
    assert any("endpointAccess is private" in w for w in run.warnings)


def test_control_plane_logs_go_to_a_log_group_the_stack_owns(lab):
    run = lab(**RENAMED)
    eks = cluster(run)
    assert eks.inputs["enabledClusterLogTypes"] == ["api", "audit", "authenticator"]
    [group] = run.of_type("aws:cloudwatch/logGroup:LogGroup")
    assert group.inputs["name"] == "/aws/eks/rehearsal-1/cluster"
    assert group.inputs["retentionInDays"] == 14
    # Created first, so EKS does not create (and orphan) it.
    assert group.urn in eks.explicit_dependencies


def test_secrets_are_encrypted_with_a_rotating_key_of_the_stack(dev_run):
    [key] = dev_run.of_type("aws:kms/key:Key")
    assert key.inputs["enableKeyRotation"] is True
    assert key.inputs["deletionWindowInDays"] == 7
    encryption = cluster(dev_run).inputs["encryptionConfig"]
    assert encryption == {"provider": {"keyArn": key.outputs["arn"]}, "resources": ["secrets"]}
    assert key.urn in cluster(dev_run).property_dependencies["encryptionConfig"]


def test_cluster_role_trusts_eks_with_the_cluster_policy(dev_run):
    eks = cluster(dev_run)
    [role] = [r for r in dev_run.of_type("aws:iam/role:Role") if r.name == "cluster-eks-iam-role"]
    trust = json.loads(role.inputs["assumeRolePolicy"])
    assert trust["Statement"] == [{"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"},
                                   "Action": "sts:AssumeRole"}]
    [attachment] = [a for a in dev_run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                    if a.name == "cluster-eks-iam-AmazonEKSClusterPolicy"]
    assert attachment.inputs["policyArn"] == "arn:aws:iam::aws:policy/AmazonEKSClusterPolicy"
    assert attachment.urn in eks.explicit_dependencies
    [key] = dev_run.of_type("aws:kms/key:Key")
    key_policy = json.loads(dev_run.named("cluster-eks-iam-secrets-key").inputs["policy"])
    assert key_policy["Statement"] == [{
        "Sid": "UseTheSecretsKey", "Effect": "Allow",
        "Action": ["kms:Encrypt", "kms:Decrypt", "kms:ListGrants", "kms:DescribeKey"],
        "Resource": key.outputs["arn"]}]
    assert dev_run.named("cluster-eks-iam-secrets-key").urn in eks.explicit_dependencies


def test_cluster_security_group_admits_hybrid_nodes_and_pods_and_reaches_kubelets(dev_run):
    eks = cluster(dev_run)
    cluster_sg = [r for r in dev_run.of_type(INGRESS) if r.name.startswith("cluster-")]
    rules = {(r.inputs["cidrIpv4"], r.inputs["fromPort"], r.inputs["toPort"], r.inputs["ipProtocol"])
             for r in cluster_sg}
    # 443 for kubelets and pods; DNS (TCP and UDP 53) to CoreDNS on cloud nodes, from both.
    assert rules == {("172.16.0.0/18", 443, 443, "tcp"), ("172.17.0.0/16", 443, 443, "tcp"),
                     ("172.16.0.0/18", 53, 53, "udp"), ("172.17.0.0/16", 53, 53, "udp"),
                     ("172.16.0.0/18", 53, 53, "tcp"), ("172.17.0.0/16", 53, 53, "tcp")}
    egress = [r for r in dev_run.of_type(EGRESS) if r.name.startswith("cluster-")]
    assert [(r.inputs["cidrIpv4"], r.inputs["fromPort"], r.inputs["ipProtocol"]) for r in egress] == [
        ("172.16.0.0/18", 10250, "tcp")]
    for rule in cluster_sg + egress:
        assert rule.inputs["securityGroupId"] == eks.outputs["vpcConfig"]["clusterSecurityGroupId"]
        assert eks.urn in rule.dependencies, "the rule must wait for the cluster's security group"


def test_admin_roles_get_cluster_admin_access_entries(lab):
    arns = ["arn:aws:iam::111122223333:role/Platform", "arn:aws:iam::111122223333:role/Presenter"]
    # With the GPU host too: the run tests/test_iam.py audits (no access entry comes of it).
    run = lab(adminRoleArns=arns, gpuEnabled=True)
    entries = {e.inputs["principalArn"]: e for e in run.of_type("aws:eks/accessEntry:AccessEntry")
               if e.inputs["type"] == "STANDARD"}
    assert set(entries) == set(arns)
    associations = run.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
    assert {a.inputs["principalArn"] for a in associations} == set(arns)
    for association in associations:
        assert association.inputs["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
        assert association.inputs["accessScope"] == {"type": "cluster"}


def test_no_extra_admins_by_default(dev_run):
    assert [e for e in dev_run.of_type("aws:eks/accessEntry:AccessEntry")
            if e.inputs["type"] == "STANDARD"] == []


def test_system_node_group(lab):
    # A size the capacity model does not know: the run tests/test_scheduling.py checks is
    # placed and said unchecked.
    run = lab(systemNodeInstanceType="t3.large")
    group = run.named("cluster-system-ng")
    assert group.inputs["instanceTypes"] == ["t3.large"]
    assert group.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    assert group.inputs["scalingConfig"] == {"desiredSize": 2, "minSize": 2, "maxSize": 2}
    cloud_private = {s.id: s.inputs["availabilityZone"] for s in run.of_type("aws:ec2/subnet:Subnet")
                     if s.name.startswith("network-cloud-private-")}
    assert set(group.inputs["subnetIds"]) == set(cloud_private)
    assert len(set(cloud_private.values())) == 2
    template = run.named("cluster-system-lt")
    assert group.inputs["launchTemplate"]["id"] == template.id
    metadata = template.inputs["metadataOptions"]
    assert metadata["httpTokens"] == "required" and metadata["httpPutResponseHopLimit"] == 1
    [disk] = template.inputs["blockDeviceMappings"]
    assert disk["ebs"]["encrypted"] == "true" and disk["ebs"]["volumeType"] == "gp3"
    tagged = {spec["resourceType"]: spec["tags"] for spec in template.inputs["tagSpecifications"]}
    assert tagged["instance"]["eks-hybrid-lab:stack"] == "eks-hybrid-lab/dev"
    assert tagged["volume"]["eks-hybrid-lab:stack"] == "eks-hybrid-lab/dev"


def test_graviton_system_nodes_get_the_arm_ami(lab):
    assert NODE_TYPES["systemNodeInstanceType"] == "m7g.large"
    group = lab(**NODE_TYPES).named("cluster-system-ng")
    assert group.inputs["amiType"] == "AL2023_ARM_64_STANDARD"


def test_system_nodes_wait_for_egress_and_the_cni(dev_run):
    group = dev_run.named("cluster-system-ng")
    names = {dev_run.by_urn[u].name for u in group.explicit_dependencies}
    assert {"network-cloud-private-default-route", "network-cloud-private-0-rta",
            "network-cloud-private-1-rta", "cluster-vpc-cni", "cluster-kube-proxy"} <= names


def test_addons_versions_and_configuration(dev_run):
    addons = {a.inputs["addonName"]: a for a in dev_run.of_type(ADDON)}
    assert set(addons) == {"vpc-cni", "coredns", "kube-proxy", "eks-pod-identity-agent"}
    for addon in addons.values():
        assert addon.inputs["clusterName"] == dev_run.lab_config.cluster_name
        # Resolved from EKS for the cluster's version (the fake cloud answers v1.<minor>.0).
        assert addon.inputs["addonVersion"] == "v1.35.0-eksbuild.1"
        assert addon.inputs["resolveConflictsOnCreate"] == "OVERWRITE"
        assert addon.inputs["resolveConflictsOnUpdate"] == "OVERWRITE"
    config = json.loads(addons["vpc-cni"].inputs["configurationValues"])
    assert config == {"env": {"AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS": "172.17.0.0/16"}}
    group = dev_run.named("cluster-system-ng")
    assert group.urn in addons["coredns"].explicit_dependencies
    assert "aws:eks/getAddonVersion:getAddonVersion" in dev_run.invokes


def test_kubeconfig_is_a_secret_output_that_uses_aws_eks_get_token(dev_run):
    assert "kubeconfig" in dev_run.secret_outputs
    kubeconfig = json.loads(dev_run.outputs["kubeconfig"])
    [user] = kubeconfig["users"]
    exec_ = user["user"]["exec"]
    assert exec_["command"] == "aws"
    assert exec_["args"] == ["eks", "get-token", "--cluster-name", dev_run.lab_config.cluster_name,
                             "--region", "ap-northeast-2", "--output", "json"]
    [entry] = kubeconfig["clusters"]
    assert entry["cluster"]["server"].startswith("https://")
    assert entry["cluster"]["certificate-authority-data"]


def test_every_kubernetes_resource_goes_through_the_cluster_provider(lab):
    run = lab(gpuEnabled=True)
    [provider] = run.of_type("pulumi:providers:kubernetes")
    assert isinstance(provider.inputs["kubeconfig"], Secret)
    assert cluster(run).urn in provider.dependencies
    kubernetes_resources = [r for r in run.resources() if r.type.startswith("kubernetes:")]
    assert kubernetes_resources
    for reg in kubernetes_resources:
        assert reg.provider == run.provider_ref(provider), reg.name
