"""Whole-stack security invariants. They run over every configuration the suite exercises, and
each check is first shown to catch what it claims on planted bad registrations."""

from __future__ import annotations

import pytest

from offline.runner import ProgramRun, Registration
from tests import invariants

# Configurations that change what registers; later layers add their own variants here.
VARIANTS = [
    {},
    {"availabilityZoneCount": 3},
    {"cloudVpcCidr": "192.168.0.0/24", "onPremVpcCidr": "10.20.0.0/24", "aws_region": "us-east-1"},
    # Runs other tests make too: the GPU host, and a public endpoint limited to admins.
    {"gpuEnabled": True},
    {"adminCidrs": ["198.51.100.0/24", "203.0.113.7/32"]},
    {"endpointAccess": "private", "hybridNodeCount": 4, "upToLayer": "hybrid"},
]


@pytest.mark.parametrize("overrides", VARIANTS, ids=lambda o: ",".join(o) or "defaults")
def test_stack_keeps_every_security_invariant(lab, overrides):
    run = lab(**overrides)
    lab_tag = {"eks-hybrid-lab:stack": "eks-hybrid-lab/dev"}
    assert run.resources(), "the program registered nothing"
    assert invariants.internet_ingress(run) == []
    assert invariants.public_ips(run) == []
    assert invariants.load_balancers(run) == []
    assert invariants.untagged_aws_resources(run, lab_tag) == []


# --- the checks catch what they claim ----------------------------------------------------------

PROVIDER_URN = "urn:pulumi:dev::eks-hybrid-lab::pulumi:providers:aws::aws"


def reg(type_: str, name: str, inputs: dict, provider: str = f"{PROVIDER_URN}::p-id") -> Registration:
    return Registration(type=type_, name=name, urn=f"urn:{type_}::{name}", id=f"{name}-id",
                        parent="", custom=True, inputs=inputs, dependencies=[],
                        property_dependencies={}, provider=provider,
                        additional_secret_outputs=[], custom_timeouts={}, options={})


def planted(*registrations: Registration) -> ProgramRun:
    provider = Registration(
        type="pulumi:providers:aws", name="aws", urn=PROVIDER_URN, id="p-id", parent="",
        custom=True, inputs={"defaultTags": '{"tags": {"eks-hybrid-lab:stack": "eks-hybrid-lab/dev"}}'},
        dependencies=[], property_dependencies={}, provider="", additional_secret_outputs=[],
        custom_timeouts={}, options={})
    return ProgramRun(stack="dev", config={}, registrations=[provider, *registrations],
                      outputs={}, warnings=[])


@pytest.mark.parametrize("bad", [
    reg("aws:ec2/securityGroup:SecurityGroup", "sg", {"ingress": [{"cidrBlocks": ["0.0.0.0/0"]}]}),
    reg("aws:ec2/securityGroup:SecurityGroup", "sg6", {"ingress": [{"ipv6CidrBlocks": ["::/0"]}]}),
    reg("aws:ec2/securityGroupRule:SecurityGroupRule", "halves",
        {"type": "ingress", "cidrBlocks": ["10.0.0.0/8", "0.0.0.0/1", "128.0.0.0/1"]}),
    reg("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "v4", {"cidrIpv4": "0.0.0.0/0"}),
    reg("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "v6", {"cidrIpv6": "::/0"}),
    reg("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "public", {"cidrIpv4": "52.95.0.0/16"}),
    reg("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "docs", {"cidrIpv4": "198.51.100.0/24"}),
    reg("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "cgnat", {"cidrIpv4": "100.64.0.0/10"}),
    reg("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup", "default", {"ingress": [{"cidrBlocks": ["0.0.0.0/0"]}]}),
], ids=lambda r: r.name)
def test_internet_ingress_check_catches(bad):
    assert invariants.internet_ingress(planted(bad))


def test_internet_ingress_check_allows_private_sources_and_egress():
    run = planted(
        reg("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "lan", {"cidrIpv4": "172.16.0.0/18"}),
        reg("aws:ec2/securityGroupRule:SecurityGroupRule", "egress", {"type": "egress", "cidrBlocks": ["0.0.0.0/0"]}),
    )
    assert invariants.internet_ingress(run) == []


@pytest.mark.parametrize("bad", [
    reg("aws:ec2/subnet:Subnet", "unset", {}),
    reg("aws:ec2/subnet:Subnet", "maps", {"mapPublicIpOnLaunch": True}),
    reg("aws:ec2/instance:Instance", "host", {"associatePublicIpAddress": True}),
    reg("aws:ec2/launchTemplate:LaunchTemplate", "lt", {"networkInterfaces": [{"associatePublicIpAddress": "true"}]}),
], ids=lambda r: r.name)
def test_public_ip_check_catches(bad):
    assert invariants.public_ips(planted(bad))


@pytest.mark.parametrize("bad", [
    reg("aws:lb/loadBalancer:LoadBalancer", "alb", {}),
    reg("aws:elb/loadBalancer:LoadBalancer", "clb", {}),
    reg("kubernetes:core/v1:Service", "svc", {"spec": {"type": "LoadBalancer"}}),
], ids=lambda r: r.name)
def test_load_balancer_check_catches(bad):
    assert invariants.load_balancers(planted(bad))


def test_untagged_check_catches_a_resource_on_another_provider():
    run = planted(reg("aws:ec2/vpc:Vpc", "stray", {}, provider="urn:other::default_7_0_0::x"))
    assert invariants.untagged_aws_resources(run, {"eks-hybrid-lab:stack": "eks-hybrid-lab/dev"}) == [
        "stray (aws:ec2/vpc:Vpc) is not on the tagged provider"]


def test_untagged_check_catches_a_provider_without_the_lab_tag():
    run = planted(reg("aws:ec2/vpc:Vpc", "vpc", {}))
    assert invariants.untagged_aws_resources(run, {"eks-hybrid-lab:stack": "eks-hybrid-lab/prod"})
