"""Whole-stack security invariants, as functions over recorded registrations.

Each returns the list of problems it found (empty: the invariant holds), so a test can both run
it over the real stack and prove on planted bad registrations that it catches what it claims.
Later layers add resource types; these checks keep running over all of them.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Iterable

from stacks.config import RFC1918
from offline.runner import ProgramRun, Registration, Secret, provider_default_tags

LOAD_BALANCER_TYPE_PREFIXES = ("aws:lb/", "aws:alb/", "aws:elb/", "aws:elasticloadbalancing",
                               "aws:elasticloadbalancingv2/", "aws:globalaccelerator/")


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Secret) else value


def _ingress_cidrs(reg: Registration) -> Iterable[str]:
    """Every source CIDR an ingress rule of this registration admits, in any of the forms AWS
    resources take (inline rules, standalone rules, VPC ingress rules, IPv4 and IPv6)."""
    inputs = reg.inputs
    if reg.type in ("aws:ec2/securityGroup:SecurityGroup",
                    "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"):
        for rule in inputs.get("ingress") or []:
            yield from rule.get("cidrBlocks") or []
            yield from rule.get("ipv6CidrBlocks") or []
    elif reg.type == "aws:ec2/securityGroupRule:SecurityGroupRule":
        if inputs.get("type") == "ingress":
            yield from inputs.get("cidrBlocks") or []
            yield from inputs.get("ipv6CidrBlocks") or []
    elif reg.type == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule":
        for key in ("cidrIpv4", "cidrIpv6"):
            if inputs.get(key):
                yield inputs[key]


def internet_ingress(run: ProgramRun) -> list[str]:
    """No security group admits traffic from outside RFC 1918 space: 0.0.0.0/0, ::/0, any IPv6
    source and any public range (so 0.0.0.0/1 + 128.0.0.0/1 cannot sneak past) are refused."""
    problems = []
    for reg in run.registrations:
        for cidr in _ingress_cidrs(reg):
            try:
                net = ipaddress.ip_network(_plain(cidr), strict=False)
            except ValueError:
                problems.append(f"{reg.name}: unparseable ingress source {cidr!r}")
                continue
            if net.version == 6 or not any(net.subnet_of(block) for block in RFC1918):
                problems.append(f"{reg.name} ({reg.type}): ingress from {net}")
    return problems


def public_ips(run: ProgramRun) -> list[str]:
    """No subnet maps public IPs (it must say so explicitly), no instance or launch template
    asks for one."""
    problems = []
    for reg in run.registrations:
        if reg.type == "aws:ec2/subnet:Subnet" and reg.inputs.get("mapPublicIpOnLaunch") is not False:
            problems.append(f"{reg.name}: subnet does not set mapPublicIpOnLaunch=false")
        if reg.type == "aws:ec2/instance:Instance" and reg.inputs.get("associatePublicIpAddress"):
            problems.append(f"{reg.name}: instance asks for a public IP")
        if reg.type == "aws:ec2/launchTemplate:LaunchTemplate":
            for nic in reg.inputs.get("networkInterfaces") or []:
                if str(nic.get("associatePublicIpAddress", "")).lower() == "true":
                    problems.append(f"{reg.name}: launch template asks for a public IP")
    return problems


def load_balancers(run: ProgramRun) -> list[str]:
    """No load balancer of any kind: no AWS load balancer resource, no Service of type
    LoadBalancer."""
    problems = []
    for reg in run.registrations:
        if reg.type.startswith(LOAD_BALANCER_TYPE_PREFIXES):
            problems.append(f"{reg.name}: load balancer resource {reg.type}")
        if reg.type == "kubernetes:core/v1:Service":
            if ((reg.inputs.get("spec") or {}).get("type")) == "LoadBalancer":
                problems.append(f"{reg.name}: Service of type LoadBalancer")
    return problems


def untagged_aws_resources(run: ProgramRun, lab_tag: dict[str, str]) -> list[str]:
    """Every AWS resource is managed through one explicit provider whose default tags carry the
    lab tag; no default provider exists."""
    problems = []
    providers = [r for r in run.registrations if r.type == "pulumi:providers:aws"]
    tagged = {run.provider_ref(p) for p in providers
              if lab_tag.items() <= provider_default_tags(p).items()}
    for provider in providers:
        if provider.name.startswith("default"):
            problems.append(f"default AWS provider {provider.name} is registered")
        elif run.provider_ref(provider) not in tagged:
            problems.append(f"AWS provider {provider.name} lacks the lab tag {lab_tag}")
    for reg in run.resources():
        if reg.type.startswith("aws:") and reg.provider not in tagged:
            problems.append(f"{reg.name} ({reg.type}) is not on the tagged provider")
    return problems
