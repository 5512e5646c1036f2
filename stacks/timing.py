"""How long `pulumi up` and `pulumi destroy` take: the critical path through the dependency
graph, weighted with typical durations per resource type.

Pulumi starts a resource as soon as everything it depends on is done, so the wall time of an
`up` is the longest chain of create durations; a `destroy` walks the same graph backwards.
The table below gives typical durations with where each comes from; they are estimates, and the
chain they pick out is the useful part: it is what to shorten.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from stacks.config import LAYERS
from stacks.offline import ProgramRun, Registration


@dataclass(frozen=True)
class Duration:
    create: float  # seconds
    delete: float
    source: str


#: Typical durations by resource type. Types not listed take DEFAULT.
DURATIONS: dict[str, Duration] = {
    "aws:eks/cluster:Cluster": Duration(570, 180, "create 8.5-10 min (terraform-aws-eks #2203, DevopsArtFactory/terraform-provisioning #46, AWS 2021-03 'under 9 min'); delete 1-4 min (Terraform logs)"),
    "aws:eks/nodeGroup:NodeGroup": Duration(150, 250, "create 2-3 min (DevopsArtFactory #47); delete 4-10 min (Terraform logs, cloud-nuke #339)"),
    "aws:eks/addon:Addon": Duration(45, 30, "vpc-cni, kube-proxy: under a minute (estimate); coredns waits for nodes (terraform-aws-eks #1765)"),
    "aws:eks/podIdentityAssociation:PodIdentityAssociation": Duration(5, 5, "API call"),
    "aws:eks/accessEntry:AccessEntry": Duration(5, 5, "API call"),
    "aws:ec2/natGateway:NatGateway": Duration(110, 60, "create 1.5-2 min, delete about 1 min (six Terraform logs)"),
    "aws:ec2transitgateway/transitGateway:TransitGateway": Duration(120, 120, "1-2 min (estimate; terraform-provider-aws #6605 test: 95 s create+destroy)"),
    "aws:ec2transitgateway/vpcAttachment:VpcAttachment": Duration(90, 90, "1-2 min (estimate)"),
    "aws:ec2/instance:Instance": Duration(20, 60, "running in 10-16 s (karpenter-provider-aws #3827); terminate about a minute"),
    "aws:kms/key:Key": Duration(20, 5, "12-29 s (Terraform logs); deletion only schedules it"),
    "aws:cloudwatch/logGroup:LogGroup": Duration(2, 2, "0-2 s (Terraform logs)"),
    "aws:iam/role:Role": Duration(5, 3, "1-7 s (DevopsArtFactory #46, steampipe-plugin-aws #131)"),
    "kubernetes:helm.sh/v3:Release": Duration(60, 45, "Cilium 30 s, Karpenter 63 s (Terraform logs)"),
    "kubernetes:karpenter.sh/v1:NodePool": Duration(2, 60, "deletion waits for its instances to terminate"),
    "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass": Duration(2, 30, "deletion waits for its instance profiles"),
    "kubernetes:apps/v1:Deployment": Duration(30, 20, "pods pulled and ready"),
    "pulumi-python:dynamic/cleanup:SsmRegistrations": Duration(1, 15, "deregistration calls"),
    "pulumi-python:dynamic/cleanup:HybridNodeObjects": Duration(1, 15, "Kubernetes API calls"),
    "pulumi-python:dynamic/cleanup:GatewayRoutes": Duration(1, 15, "route and Kubernetes API calls"),
    "pulumi-python:dynamic/cleanup:KarpenterLeftovers": Duration(1, 20, "describe calls (nothing left normally)"),
}
DEFAULT = Duration(3, 3, "API call")

#: The hybrid hosts join after they run: nodeadm install 1-3 min, init to Ready 0.5-1.5 min once
#: Cilium runs (estimate; aws/eks-hybrid #514 allows 8 min for install in its tests).
HOST_JOIN_SECONDS = 240
#: The vLLM image is about 10 GB: 4.5 minutes to pull in the seed, then the model loads.
VLLM_START_SECONDS = 420


def duration(reg: Registration, *, create: bool) -> float:
    d = DURATIONS.get(reg.type, DEFAULT)
    seconds = d.create if create else d.delete
    if create and reg.type == "aws:ec2/instance:Instance" and reg.name.startswith("hybrid-hosts-"):
        seconds += HOST_JOIN_SECONDS
    if create and reg.name == "demo-vllm":
        seconds += VLLM_START_SECONDS
    return seconds


@dataclass(frozen=True)
class Estimate:
    seconds: float
    chain: list[str]


def _edges(run: ProgramRun) -> dict[str, set[str]]:
    """resource -> what it waits for (dependencies and provider), custom resources only."""
    custom = {r.urn for r in run.resources()}
    edges = {}
    for reg in run.resources():
        targets = set(reg.dependencies)
        if reg.provider:
            targets.add(reg.provider.rsplit("::", 1)[0])
        edges[reg.urn] = {t for t in targets if t in custom}
    return edges


def _longest(run: ProgramRun, edges: dict[str, set[str]], *, create: bool,
             only: Optional[set[str]] = None) -> Estimate:
    nodes = set(edges) if only is None else only
    done: dict[str, tuple[float, Optional[str]]] = {}
    # create: a resource finishes at max(finish of what it waits for) + its own time.
    # destroy: the same over the reversed edges.
    waits = edges if create else {n: {m for m in nodes if n in edges.get(m, ())} for n in nodes}

    def finish(urn: str) -> float:
        if urn not in done:
            before = [(finish(d), d) for d in waits.get(urn, ()) if d in nodes]
            start, via = max(before, default=(0.0, None))
            done[urn] = (start + duration(run.by_urn[urn], create=create), via)
        return done[urn][0]

    if not nodes:
        return Estimate(0.0, [])
    end = max(nodes, key=finish)
    chain, urn = [], end
    while urn is not None:
        chain.append(run.by_urn[urn].name)
        urn = done[urn][1]
    return Estimate(done[end][0], list(reversed(chain)))


def estimate_up(run: ProgramRun) -> Estimate:
    return _longest(run, _edges(run), create=True)


def estimate_destroy(run: ProgramRun) -> Estimate:
    return _longest(run, _edges(run), create=False)


def estimate_layer_by_layer(run: ProgramRun) -> float:
    """If each layer waited for the whole previous one (layers chained with depends_on)."""
    edges = _edges(run)
    total = 0.0
    for layer in LAYERS:
        members = {r.urn for r in run.resources() if run.layer_of(r) == layer}
        total += _longest(run, edges, create=True, only=members).seconds
    return total
