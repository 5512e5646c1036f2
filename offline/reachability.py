"""Reachability: the flows the lab needs, evaluated against what registers.

A registered security group or route proves nothing by itself: the lab once registered a
cluster security group that dropped DNS from every hybrid pod. This module states the flows the
lab needs (``FLOWS``: source, destination, protocol/port and why) and walks each one through the
network the program registers (a ``ProgramRun``): the source's security-group egress, the route
tables (longest prefix: local, Transit Gateway, NAT gateway, the route the hybrid nodes gateway
writes at run time), the Transit Gateway's route table, the destination's security-group
ingress, and the route back (security groups are stateful, so a reply needs no rule, but it
needs a route). ``internet_exposure`` is the negative: nothing outside RFC 1918 reaches any
interface. The offline plan prints ``render``'s table.

Endpoints come only from what registers, so a flow is evaluated only when its ends are built:
- hybrid nodes: the Instances in the cluster's remote node network, with their security groups;
  hybrid pods exist once Cilium's release registers. A hybrid pod's packet leaves from the node
  IP (service NAT, Cilium masquerading) or from the pod IP (Cilium's VTEP encapsulates it to the
  gateway leader over UDP 8472, the leader decapsulates it into the VPC; the reply follows the
  pod-CIDR route the leader writes into the route tables of its Helm values ``routeTableIDs``
  and goes back over VXLAN). Both occur (docs/networking.md#where-a-hybrid-pods-packets-come-from), so the flows ask for both. Pod-IP
  flows exist only once the gateway's release registers.
- the API server: the control plane's interfaces in the cluster's subnets, carrying the cluster
  security group (the Cluster's output ``vpcConfig.clusterSecurityGroupId``) and any
  ``vpcConfig.securityGroupIds``. Kubelets use the endpoint: a public-only endpoint is reached
  over NAT and must list the NAT's address in ``publicAccessCidrs``; a private one through the
  interfaces.
- managed node groups: their launch template's ``vpcSecurityGroupIds``, or the cluster security
  group when it names none (EKS then attaches it). Gateway nodes carry the gateway release's
  ``nodeLabel``; node groups without taints are where CoreDNS and untolerating cloud pods run.
- Karpenter nodes: each NodePool's EC2NodeClass; its subnets and security groups are whatever
  carries the selector terms' tags (an ``aws.ec2.Tag`` puts the discovery tag on the cluster
  security group). Pods on the VPC CNI use their node's interfaces and security groups.
- demo workloads: their Deployments; the side (cloud or hybrid) comes from their required
  ``eks.amazonaws.com/compute-type`` affinity.

What the model assumes, and cannot show:
- The cluster security group is created by EKS with its documented defaults (all traffic from
  itself; all traffic out), which no registration shows. A group this program creates with
  ``aws.ec2.SecurityGroup`` has no egress but what is declared (the provider removes AWS's
  default allow-all egress).
- Network ACLs are the VPC defaults (allow all); pods have no security groups of their own (no
  security groups for pods) and no NetworkPolicy applies. ``unmodelled`` lists any registered
  resource that could change reachability and that the model does not read.
- A security-group reference admits only packets from the referenced group's own interfaces'
  addresses, never pod-CIDR packets the gateway forwards: those need a CIDR rule (conservative).
- The gateway's run-time behaviour (leader election, the route it writes, VTEP for the VPC CIDR
  only, no SNAT), Cilium's masquerading and the destination of service traffic are modelled from
  docs/gateway.md and docs/networking.md, not observed. MTU, DNS resolution of names, the AWS-managed public
  endpoint's own filtering beyond ``publicAccessCidrs`` and the internet itself are not modelled;
  "the internet" is every public address (a default route and egress to 0.0.0.0/0).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence, TextIO

from components import cilium, hybrid_gateway
from stacks.config import RFC1918
from offline.runner import ProgramRun, Registration
from offline.registered_network import (ADDON, ANYWHERE, CLUSTER, COMPUTE_TYPE, EIP,
                                       EIP_ASSOCIATION, INSTANCE, LAUNCH_TEMPLATE, NODE_CLASS,
                                       NODE_GROUP, NODE_POOL, SUBNET, TGW_ATTACHMENT,
                                       UNMODELLED_TYPE_PREFIXES, Blocked, Endpoint, Gateway,
                                       Interface, Net, Network, selected, within)

HEADER = ("Flows (reachability model over the registered security groups, routes, Transit Gateway "
          "and NAT)")

# --- the flows the lab needs ------------------------------------------------------------------

HYBRID_NODES = "hybrid nodes"
HYBRID_PODS_NODE_IP = "hybrid pods (node IP)"
HYBRID_PODS_POD_IP = "hybrid pods (pod IP)"
API_INTERFACES = "API server ENIs"
API_ENDPOINT = "API endpoint"
COREDNS = "CoreDNS (cloud nodes)"
GATEWAY_NODES = "gateway nodes"
SYSTEM_NODES = "system nodes"
KARPENTER_NODES = "Karpenter nodes"
INTERNET = "internet"
#: Where the rehearsal tools (``python -m rehearse``) put their cloud pods: any cloud worker, in
#: demo 1's namespace, so only once the demo layer is built (rehearse/lab/flows.py lists what they
#: connect to).
REHEARSAL_CLOUD_PODS = "rehearsal pods (cloud)"


@dataclass(frozen=True)
class Flow:
    source: str
    destination: str
    protocol: str
    port: int
    why: str


#: Demo workloads as flow ends: endpoint name -> (Deployment name, side, address it uses).
#: "cloud": pod IPs on cloud nodes; "node IP"/"pod IP": a hybrid pod seen from its node's
#: address or its own.
WORKLOADS: dict[str, tuple[str, str]] = {
    "prober-cloud": ("prober-cloud", "cloud"),
    "echo-cloud": ("echo-cloud", "cloud"),
    "echo-hybrid (pod IP)": ("echo-hybrid", "pod IP"),
    "prober-hybrid (node IP)": ("prober-hybrid", "node IP"),
    "prober-hybrid (pod IP)": ("prober-hybrid", "pod IP"),
    "vllm-client": ("vllm-client", "cloud"),
    "vllm (pod IP)": ("vllm", "pod IP"),
    "vllm (node IP)": ("vllm", "node IP"),
}

_VXLAN = hybrid_gateway.VXLAN_PORT

FLOWS: tuple[Flow, ...] = (
    # docs/networking.md#ports: what hybrid nodes need of the control plane, and it of them.
    Flow(HYBRID_NODES, API_ENDPOINT, "tcp", 443, "kubelet to the API server (docs/networking.md#ports)"),
    Flow(HYBRID_PODS_NODE_IP, API_INTERFACES, "tcp", 443,
         "pods to the API server through the kubernetes Service, NATed to the node"),
    Flow(HYBRID_PODS_POD_IP, API_INTERFACES, "tcp", 443,
         "pods to the API server from their own address, through the gateway"),
    Flow(API_INTERFACES, HYBRID_NODES, "tcp", 10250, "logs, exec, port-forward (docs/networking.md#ports)"),
    # CoreDNS runs on cloud nodes (hybrid nodes are tainted); both sources occur
    # (docs/networking.md#where-a-hybrid-pods-packets-come-from).
    Flow(HYBRID_PODS_NODE_IP, COREDNS, "udp", 53, "DNS from every hybrid pod (docs/networking.md#ports)"),
    Flow(HYBRID_PODS_NODE_IP, COREDNS, "tcp", 53, "DNS over TCP (large answers, docs/networking.md#ports)"),
    Flow(HYBRID_PODS_POD_IP, COREDNS, "udp", 53, "DNS from every hybrid pod (docs/networking.md#ports)"),
    Flow(HYBRID_PODS_POD_IP, COREDNS, "tcp", 53, "DNS over TCP (large answers, docs/networking.md#ports)"),
    # docs/gateway.md#what-it-does: the gateway's VXLAN, each direction its own flow (dst port 8472 both ways).
    Flow(HYBRID_NODES, GATEWAY_NODES, "udp", _VXLAN, "Cilium VTEP to the gateway leader"),
    Flow(GATEWAY_NODES, HYBRID_NODES, "udp", _VXLAN,
         "gateway to hybrid nodes (the return rule, docs/networking.md#ports)"),
    # Demo 1: both directions, through ClusterIP services (port 80 -> target port 8080).
    Flow("prober-cloud", "echo-hybrid (pod IP)", "tcp", 8080,
         "demo 1: cloud to hybrid through the gateway (Service echo-hybrid)"),
    Flow("prober-hybrid (node IP)", "echo-cloud", "tcp", 8080,
         "demo 1: hybrid to cloud (Service echo-cloud), NATed to the node"),
    Flow("prober-hybrid (pod IP)", "echo-cloud", "tcp", 8080,
         "demo 1: hybrid to cloud (Service echo-cloud) through the gateway"),
    # Demo 3 (gpuEnabled): the cloud client calls the model; the server downloads it.
    Flow("vllm-client", "vllm (pod IP)", "tcp", 8000,
         "demo 3: completions from the cloud (Service vllm)"),
    Flow("vllm (node IP)", INTERNET, "tcp", 443, "demo 3: the model download, masqueraded"),
    # Egress: joining, images, SSM and EKS endpoints, credential refresh.
    Flow(HYBRID_NODES, INTERNET, "tcp", 443,
         "nodeadm from hybrid-assets, SSM, EKS and ECR endpoints, images"),
    Flow(SYSTEM_NODES, INTERNET, "tcp", 443, "ECR, EKS and STS endpoints, images"),
    Flow(GATEWAY_NODES, INTERNET, "tcp", 443, "ECR and EC2 endpoints (routes, source/dest check)"),
    Flow(KARPENTER_NODES, INTERNET, "tcp", 443, "ECR, EKS and STS endpoints, images"),
    Flow(SYSTEM_NODES, API_ENDPOINT, "tcp", 443, "kubelets on cloud nodes"),
    Flow(GATEWAY_NODES, API_ENDPOINT, "tcp", 443, "kubelets on gateway nodes"),
    Flow(KARPENTER_NODES, API_ENDPOINT, "tcp", 443, "kubelets on burst nodes"),
    # The rehearsal tools (rehearse/lab/flows.py names each connection; tests/test_rehearsal_flows.py
    # holds them to this table). gateway-throughput: iperf3 each way, pod IP to pod IP.
    Flow(HYBRID_PODS_NODE_IP, REHEARSAL_CLOUD_PODS, "tcp", 5201,
         "rehearse gateway-throughput hybrid → cloud: iperf3 to a cloud pod, NATed to the node"),
    Flow(HYBRID_PODS_POD_IP, REHEARSAL_CLOUD_PODS, "tcp", 5201,
         "rehearse gateway-throughput hybrid → cloud: iperf3 to a cloud pod through the gateway"),
    Flow(REHEARSAL_CLOUD_PODS, HYBRID_PODS_POD_IP, "tcp", 5201,
         "rehearse gateway-throughput cloud → hybrid: iperf3 to a hybrid pod through the gateway"),
    # hostnet: a host-network server on a hybrid node, and the hybrid host network as a client.
    Flow(REHEARSAL_CLOUD_PODS, HYBRID_NODES, "tcp", 9443,
         "rehearse hostnet: a cloud pod to the host-network server (the webhook port)"),
    Flow(HYBRID_NODES, "echo-cloud", "tcp", 8080,
         "rehearse hostnet: the hybrid host network to echo-cloud (pod IP and ClusterIP)"),
    # verify gateway: the gateway's host-network ports through the API server's pod proxy.
    Flow(API_INTERFACES, GATEWAY_NODES, "tcp", 8088,
         "rehearse verify gateway: /healthz through the API server's pod proxy"),
    Flow(API_INTERFACES, GATEWAY_NODES, "tcp", 10080,
         "rehearse verify gateway: the leader gauge on /metrics through the pod proxy"),
    # verify gpu: one completion through the API server's service proxy.
    Flow(API_INTERFACES, "vllm (pod IP)", "tcp", 8000,
         "rehearse verify gpu: a completion through the API server's service proxy"),
)


@dataclass(frozen=True)
class FlowResult:
    source: str
    destination: str
    protocol: str
    port: int
    why: str
    allowed: bool
    #: The way taken, in a few words ("Transit Gateway", "hybrid nodes gateway", "NAT ...").
    path: str
    #: What the packet passes, or the first thing that drops it.
    detail: str


# --- endpoints --------------------------------------------------------------------------------

def _interfaces(label: str, interfaces: Iterable[Interface],
                problem: Optional[str] = None) -> Optional[Endpoint]:
    unique = tuple(dict.fromkeys(interfaces))
    if not unique and problem is None:
        return None
    return Endpoint(label, "interfaces", unique, problem=problem)


def _hybrid_pods(net: Network, address: str, label: str) -> Optional[Endpoint]:
    hosts = net.hybrid_hosts()
    if not hosts or net.release(cilium.CHART) is None:
        return None
    if address == "node IP":
        return Endpoint(label, "interfaces", tuple(dict.fromkeys(hosts)))
    if net.gateway is None:
        return None  # without the gateway, Cilium masquerades everything to the node IP
    pod_cidrs = tuple(c for cluster in net.clusters for c in cluster.remote_pod_cidrs)
    return Endpoint(label, "pods", tuple(dict.fromkeys(hosts)), pod_cidrs, None if pod_cidrs else
                    "the cluster declares no remote pod network: pod IPs cannot reach the VPC")


def _cloud_workers(net: Network, label: str) -> Optional[Endpoint]:
    """Where pods that tolerate no taint run: untainted node groups and NodePools."""
    karpenter, problem = net.karpenter_nodes(untainted_only=True)
    interfaces = [i for g in net.untainted_node_groups() for i in net.node_group_interfaces(g)]
    return _interfaces(label, [*interfaces, *karpenter], problem)


def _workload_side(deployment: Registration) -> Optional[str]:
    pod = ((deployment.inputs.get("spec") or {}).get("template") or {}).get("spec") or {}
    if (pod.get("nodeSelector") or {}).get(COMPUTE_TYPE) == "hybrid":
        return "hybrid"
    required = (((pod.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            if expression.get("key") == COMPUTE_TYPE and "hybrid" in (expression.get("values") or []):
                return {"In": "hybrid", "NotIn": "cloud"}.get(expression.get("operator"))
    return None


def _workload(net: Network, name: str) -> Optional[Endpoint]:
    deployment_name, address = WORKLOADS[name]
    deployment = net.deployment(deployment_name)
    if deployment is None:
        return None
    side = _workload_side(deployment)
    wanted = "cloud" if address == "cloud" else "hybrid"
    if side != wanted:
        return Endpoint(name, "interfaces", problem=(
            f"Deployment {deployment_name} is not pinned to {wanted} nodes (required "
            f"{COMPUTE_TYPE} affinity says {side or 'nothing'}): the flow table is out of date"))
    if address == "cloud":
        return _cloud_workers(net, name)
    return _hybrid_pods(net, address, name)


def _endpoint(net: Network, name: str) -> Optional[Endpoint]:
    if name in WORKLOADS:
        return _workload(net, name)
    if name == INTERNET:
        return Endpoint(INTERNET, "internet")
    if name == HYBRID_NODES:
        return _interfaces(name, net.hybrid_hosts())
    if name in (HYBRID_PODS_NODE_IP, HYBRID_PODS_POD_IP):
        return _hybrid_pods(net, "node IP" if name == HYBRID_PODS_NODE_IP else "pod IP", name)
    if name == API_INTERFACES:
        return _interfaces(name, [Interface(s, frozenset([c.security_group, *c.extra_security_groups]))
                                  for c in net.clusters for s in c.subnets])
    if name == API_ENDPOINT:
        return Endpoint(name, "api") if net.clusters else None
    if name == COREDNS:
        if not any(a.inputs.get("addonName") == "coredns" for a in net.of(ADDON)):
            return None
        return _cloud_workers(net, name)
    if name == SYSTEM_NODES:
        return _interfaces(name, [i for g in net.untainted_node_groups()
                                  for i in net.node_group_interfaces(g)])
    if name == GATEWAY_NODES:
        if net.gateway is None:
            return None
        return _interfaces(name, net.gateway.nodes,
                           None if net.gateway.nodes else "no node group carries the gateway's "
                           f"nodeLabel {net.gateway.node_label}=true")
    if name == REHEARSAL_CLOUD_PODS:
        if net.deployment(WORKLOADS["echo-cloud"][0]) is None:
            return None  # no demo layer: the tools have nothing to rehearse
        return _cloud_workers(net, name)
    if name == KARPENTER_NODES:
        if not net.of(NODE_POOL):
            return None
        interfaces, problem = net.karpenter_nodes(untainted_only=False)
        return _interfaces(name, interfaces, problem)
    raise ValueError(f"the flow table names an unknown endpoint {name!r}")


# --- evaluators -------------------------------------------------------------------------------

def _direct(net: Network, source: Interface, destination: Interface, protocol: str,
            port: int) -> str:
    """One interface to another, each from its subnet's addresses: egress, the route there,
    ingress, the route back. Returns the way and the rule that admits it."""
    src_net = net.subnets[source.subnet].cidr
    dst_net = net.subnets[destination.subnet].cidr
    what = f"{protocol}/{port}"
    if net.matching_rule(source.security_groups, "egress", protocol, port, dst_net,
                         destination.security_groups) is None:
        raise Blocked(f"no egress on {net.group_labels(source.security_groups)} for {what} "
                      f"to {dst_net}")
    way = net.route_between(source.subnet, dst_net, destination.subnet)
    rule = net.matching_rule(destination.security_groups, "ingress", protocol, port, src_net,
                             source.security_groups)
    if rule is None:
        raise Blocked(f"no ingress on {net.group_labels(destination.security_groups)} for {what} "
                      f"from {src_net}")
    try:
        net.route_between(destination.subnet, src_net, source.subnet)
    except Blocked as exc:
        raise Blocked(f"the reply has no way back: {exc}") from None
    return f"{way} ({rule.origin})"


def _gateway_ready(net: Network, pod_cidrs: Sequence[Net], vpc_side: Net) -> Gateway:
    gateway = net.gateway
    assert gateway is not None
    values = (net.release(cilium.CHART).inputs.get("values") or {})
    if not (values.get("vtep") or {}).get("enabled"):
        raise Blocked("Cilium's VTEP is off: hybrid nodes do not send pod traffic to the gateway")
    for cidr in pod_cidrs:
        if not any(within(cidr, c) for c in gateway.pod_cidrs):
            raise Blocked(f"the gateway's podCIDRs do not cover {cidr}")
    if not any(within(vpc_side, c) for c in gateway.vpc_cidrs):
        raise Blocked(f"the gateway's vpcCIDR does not cover {vpc_side}: Cilium sends only the "
                      "VPC CIDR through it")
    if not gateway.nodes:
        raise Blocked(f"no node group carries the gateway's nodeLabel {gateway.node_label}=true")
    if not gateway.source_dest_check_off:
        raise Blocked("the gateway nodes keep source/dest check on: their interface drops the "
                      "pod traffic they forward")
    return gateway


def _vxlan(net: Network, hosts: Sequence[Interface], gateway: Gateway) -> None:
    for host in hosts:
        for node in gateway.nodes:
            for source, destination in ((host, node), (node, host)):
                try:
                    _direct(net, source, destination, "udp", _VXLAN)
                except Blocked as exc:
                    side = "hybrid node -> gateway" if source is host else "gateway -> hybrid node"
                    raise Blocked(f"VXLAN {side}: {exc}") from None


def _gateway_route(net: Network, subnet: str, pod_cidr: Net, what: str) -> None:
    """Traffic to hybrid pods leaves ``subnet`` by the route the gateway leader writes."""
    route = net.longest_prefix(net.table_of(subnet), pod_cidr)
    if route.kind != "hybrid-gateway":
        raise Blocked(f"{what} to {pod_cidr} from {net.subnets[subnet].label} goes to "
                      f"{route.kind} {route.target} ({route.origin}), not to the gateway: "
                      f"{net.table_of(subnet).label} is not in its routeTableIDs")


def _from_pods(net: Network, pods: Endpoint, destination: Interface, protocol: str,
               port: int) -> str:
    """Pod IP -> VPC: VXLAN to the gateway leader, forwarded into the VPC, reply by the
    gateway-written route and VXLAN back."""
    dst_net = net.subnets[destination.subnet].cidr
    gateway = _gateway_ready(net, pods.pod_cidrs, dst_net)
    _vxlan(net, pods.interfaces, gateway)
    admitted_by = set()
    for pod_cidr in pods.pod_cidrs:
        for node in gateway.nodes:
            if net.matching_rule(node.security_groups, "egress", protocol, port, dst_net,
                                 destination.security_groups) is None:
                raise Blocked(f"the gateway forwards but {net.group_labels(node.security_groups)} "
                              f"has no egress for {protocol}/{port} to {dst_net}")
            net.route_between(node.subnet, dst_net, destination.subnet)
        # Forwarded: the packet keeps the pod's address, so only a CIDR rule admits it.
        rule = net.matching_rule(destination.security_groups, "ingress", protocol, port,
                                 pod_cidr, frozenset())
        if rule is None:
            raise Blocked(f"no ingress on {net.group_labels(destination.security_groups)} for "
                          f"{protocol}/{port} from {pod_cidr}")
        admitted_by.add(rule.origin)
        _gateway_route(net, destination.subnet, pod_cidr, "the reply")
    return f"hybrid nodes gateway ({', '.join(sorted(admitted_by))})"


def _to_pods(net: Network, source: Interface, pods: Endpoint, protocol: str, port: int) -> str:
    """VPC -> pod IP: the gateway-written route to the leader, its ingress, VXLAN to the host,
    the reply back over VXLAN."""
    src_net = net.subnets[source.subnet].cidr
    gateway = _gateway_ready(net, pods.pod_cidrs, src_net)
    for pod_cidr in pods.pod_cidrs:
        if net.matching_rule(source.security_groups, "egress", protocol, port, pod_cidr,
                             frozenset()) is None:
            raise Blocked(f"no egress on {net.group_labels(source.security_groups)} for "
                          f"{protocol}/{port} to {pod_cidr}")
        _gateway_route(net, source.subnet, pod_cidr, "traffic")
        for node in gateway.nodes:
            if net.matching_rule(node.security_groups, "ingress", protocol, port, src_net,
                                 source.security_groups) is None:
                raise Blocked(f"the gateway's {net.group_labels(node.security_groups)} has no "
                              f"ingress for {protocol}/{port} from {src_net}")
            net.route_between(node.subnet, src_net, source.subnet)
    _vxlan(net, pods.interfaces, gateway)
    return "hybrid nodes gateway"


def _to_internet(net: Network, source: Interface, protocol: str, port: int) -> tuple[str, Registration]:
    """Private subnet -> NAT gateway -> internet gateway. Returns the way and the NAT."""
    if net.matching_rule(source.security_groups, "egress", protocol, port, ANYWHERE,
                         frozenset()) is None:
        raise Blocked(f"no egress on {net.group_labels(source.security_groups)} for "
                      f"{protocol}/{port} to {ANYWHERE}")
    subnet = net.subnets[source.subnet]
    table = net.table_of(source.subnet)
    route = net.longest_prefix(table, ANYWHERE, whole=False)
    if route.kind == "internet-gateway":
        raise Blocked(f"{table.label} sends the internet to {route.target} directly, which needs "
                      "a public IP (nothing here has one)")
    if route.kind != "nat":
        raise Blocked(f"{table.label} sends the internet to {route.kind} {route.target}, not a NAT "
                      "gateway")
    nat = net.nat_gateways.get(route.target)
    if nat is None:
        raise Blocked(f"{table.label} routes to {route.target}, which is not a registered NAT gateway")
    nat_subnet = net.subnets.get(nat.inputs.get("subnetId"))
    if nat_subnet is None or nat_subnet.vpc != subnet.vpc:
        raise Blocked(f"{nat.name} is not in the VPC of {subnet.label}")
    if nat.inputs.get("connectivityType", "public") != "public" or not nat.inputs.get("allocationId"):
        raise Blocked(f"{nat.name} is not a public NAT gateway with an Elastic IP")
    nat_table = net.table_of(nat_subnet.id)
    upstream = net.longest_prefix(nat_table, ANYWHERE, whole=False)
    if upstream.kind != "internet-gateway" or net.internet_gateways.get(upstream.target) != subnet.vpc:
        raise Blocked(f"{nat.name}'s subnet {nat_subnet.label} has no default route to its VPC's "
                      f"internet gateway ({nat_table.label} sends it to {upstream.kind})")
    return f"NAT {nat.name}", nat


def _to_api(net: Network, source: Interface, protocol: str, port: int) -> str:
    subnet = net.subnets[source.subnet]
    cluster = net.clusters[0]
    # With both endpoints, nodes in the cluster's VPC resolve the private one; hybrid nodes
    # resolve the public one (docs/networking.md#remote-networks).
    if cluster.private and (not cluster.public or subnet.vpc == cluster.vpc):
        ways = {_direct(net, source, interface, protocol, port)
                for interface in _endpoint(net, API_INTERFACES).interfaces}
        return f"private endpoint: {'; '.join(sorted(ways))}"
    way, nat = _to_internet(net, source, protocol, port)
    address = ipaddress.ip_network(f"{nat.outputs.get('publicIp')}/32")
    if not any(within(address, c) for c in cluster.public_access_cidrs):
        raise Blocked(f"the public endpoint's publicAccessCidrs do not list {nat.name}'s address "
                      f"{address}")
    return f"public endpoint over {way}"


def _evaluate(net: Network, flow: Flow, source: Endpoint, destination: Endpoint) -> tuple[str, str]:
    for end in (source, destination):
        if end.problem:
            raise Blocked(f"{end.label}: {end.problem}")
    if destination.kind == "internet":
        ways = {_to_internet(net, i, flow.protocol, flow.port)[0] for i in source.interfaces}
        return ", ".join(sorted(ways)), "; ".join(sorted(ways))
    if destination.kind == "api":
        ways = {_to_api(net, i, flow.protocol, flow.port) for i in source.interfaces}
        short = {w.split(":")[0] for w in ways}
        return ", ".join(sorted(short)), "; ".join(sorted(ways))
    if source.kind == "pods" and destination.kind == "interfaces":
        ways = {_from_pods(net, source, d, flow.protocol, flow.port) for d in destination.interfaces}
        return "hybrid nodes gateway", "; ".join(sorted(ways))
    if source.kind == "interfaces" and destination.kind == "pods":
        ways = {_to_pods(net, s, destination, flow.protocol, flow.port) for s in source.interfaces}
        return "hybrid nodes gateway", "; ".join(sorted(ways))
    if source.kind == "interfaces" and destination.kind == "interfaces":
        ways = {_direct(net, s, d, flow.protocol, flow.port)
                for s in source.interfaces for d in destination.interfaces}
        short = "Transit Gateway" if any(w.startswith("Transit") for w in ways) else "local"
        return short, "; ".join(sorted(ways))
    raise ValueError(f"no evaluator for {source.kind} -> {destination.kind}")


def evaluate(run: ProgramRun, flows: Sequence[Flow] = FLOWS) -> list[FlowResult]:
    """One result per flow whose two ends the run builds, in table order."""
    net = Network(run)
    results = []
    for flow in flows:
        source, destination = _endpoint(net, flow.source), _endpoint(net, flow.destination)
        if source is None or destination is None:
            continue
        try:
            path, detail = _evaluate(net, flow, source, destination)
            allowed = True
        except Blocked as exc:
            path, detail, allowed = "-", str(exc), False
        results.append(FlowResult(flow.source, flow.destination, flow.protocol, flow.port,
                                  flow.why, allowed, path, detail))
    return results


def render(results: Sequence[FlowResult], out: TextIO,
           exposure: Optional[Sequence[str]] = None) -> None:
    """The plan's section: one line per flow, the reason for each BLOCKED one."""
    out.write(f"\n{HEADER}\n")
    if not results:
        out.write("  (no flow has both ends built)\n")
    width = max((len(f"{r.source} -> {r.destination}") for r in results), default=0)
    for r in results:
        ends = f"{r.source} -> {r.destination}"
        status = "ALLOWED" if r.allowed else "BLOCKED"
        tail = f"via {r.path}" if r.allowed else r.detail
        out.write(f"  {status}  {r.protocol}/{r.port:<5}  {ends:<{width}}  {tail}  [{r.why}]\n")
    blocked = sum(1 for r in results if not r.allowed)
    out.write(f"  {len(results)} flows, {blocked} blocked\n")
    if exposure is not None:
        out.write("  Internet exposure: " + ("none (nothing outside RFC 1918 reaches an interface)\n"
                                             if not exposure else f"{len(exposure)} problem(s)\n"))
        for problem in exposure:
            out.write(f"    ! {problem}\n")


# --- the negative: nothing outside RFC 1918 reaches an interface ------------------------------

def _private(cidr: ipaddress._BaseNetwork) -> bool:
    return cidr.version == 4 and any(cidr.subnet_of(block) for block in RFC1918)


def internet_exposure(run: ProgramRun) -> list[str]:
    """What would let a packet from outside RFC 1918 reach an interface: a security-group
    ingress from a public (or IPv6, or prefix-list) source, a public IP on an instance, launch
    template, subnet or Elastic IP, or anything but a NAT gateway in a public subnet (one whose
    route table reaches an internet gateway). Each alone is refused, not only all three together.
    The EKS public endpoint is AWS's, not an interface of these VPCs; the lab warns when it is
    open to 0.0.0.0/0."""
    net = Network(run)
    problems = []
    for group in net.security_groups.values():
        for rule in group.rules:
            if rule.direction != "ingress":
                continue
            if rule.prefix_list:
                problems.append(f"{group.label}: ingress from prefix list {rule.prefix_list} "
                                f"({rule.origin}) cannot be shown to be private")
            elif rule.cidr is not None and not _private(rule.cidr):
                problems.append(f"{group.label}: ingress from {rule.cidr} ({rule.origin})")

    public_tables = {t.id for t in net.route_tables.values()
                     if any(r.kind == "internet-gateway" for r in net.routes(t))}
    public_subnets = {s for s, t in net.subnet_route_table.items() if t in public_tables}
    nat_subnets = {n.inputs.get("subnetId") for n in net.nat_gateways.values()}

    def in_public(subnet_id: Any, what: str) -> None:
        if subnet_id in public_subnets:
            problems.append(f"{what} is in public subnet {net.subnets[subnet_id].label}")

    for subnet in net.subnets.values():
        if subnet.id in public_subnets and subnet.id not in nat_subnets:
            problems.append(f"public subnet {subnet.label} holds no NAT gateway")
    for reg in run.resources():
        inputs = reg.inputs
        if reg.type == SUBNET and inputs.get("mapPublicIpOnLaunch"):
            problems.append(f"{reg.name}: subnet maps public IPs on launch")
        elif reg.type == INSTANCE:
            if inputs.get("associatePublicIpAddress"):
                problems.append(f"{reg.name}: instance asks for a public IP")
            in_public(inputs.get("subnetId"), f"instance {reg.name}")
        elif reg.type == LAUNCH_TEMPLATE:
            for nic in inputs.get("networkInterfaces") or []:
                if str(nic.get("associatePublicIpAddress", "")).lower() == "true":
                    problems.append(f"{reg.name}: launch template asks for a public IP")
                in_public(nic.get("subnetId"), f"launch template {reg.name}")
        elif reg.type == NODE_GROUP:
            for subnet in inputs.get("subnetIds") or []:
                in_public(subnet, f"node group {reg.name}")
        elif reg.type == CLUSTER:
            for subnet in (inputs.get("vpcConfig") or {}).get("subnetIds") or []:
                in_public(subnet, f"the control plane's interfaces of {reg.name}")
        elif reg.type == TGW_ATTACHMENT:
            for subnet in inputs.get("subnetIds") or []:
                in_public(subnet, f"Transit Gateway attachment {reg.name}")
        elif reg.type == EIP and (inputs.get("instance") or inputs.get("networkInterface")
                                  or inputs.get("associateWithPrivateIp")):
            problems.append(f"{reg.name}: Elastic IP on an instance or interface")
        elif reg.type == EIP_ASSOCIATION:
            problems.append(f"{reg.name}: Elastic IP association")
        elif reg.type == NODE_CLASS:
            terms = (inputs.get("spec") or {}).get("subnetSelectorTerms")
            for subnet in public_subnets:
                if selected(subnet, net.subnets[subnet].tags, terms):
                    problems.append(f"EC2NodeClass {reg.name} selects public subnet "
                                    f"{net.subnets[subnet].label}")
    return problems


def unmodelled(run: ProgramRun) -> list[str]:
    """Registered resources that could change reachability but that the model does not read
    (NACLs, peering, endpoints, network policies...): each one means the model must grow."""
    return [f"{r.name} ({r.type})" for r in run.resources()
            if r.type.startswith(UNMODELLED_TYPE_PREFIXES)]
