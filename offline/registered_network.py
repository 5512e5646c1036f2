"""The network a ProgramRun registers, indexed for the reachability model: security groups and
their rules, subnets and route tables (with the route the hybrid nodes gateway writes at run
time), the Transit Gateway's attachments and routes, NAT and internet gateways, the cluster,
and where each kind of node puts its interfaces.

It reads registrations only; what a packet may do with them is ``offline.reachability``'s. The
assumptions (EKS's default cluster security group rules, the provider stripping AWS's default
egress, Karpenter's selector semantics) are stated where they are made.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from components import hybrid_gateway
from offline.runner import ProgramRun, Registration, Secret

Net = ipaddress.IPv4Network
ANYWHERE = ipaddress.ip_network("0.0.0.0/0")

VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
ROUTE = "aws:ec2/route:Route"
ROUTE_TABLE_ASSOCIATION = "aws:ec2/routeTableAssociation:RouteTableAssociation"
INTERNET_GATEWAY = "aws:ec2/internetGateway:InternetGateway"
INTERNET_GATEWAY_ATTACHMENT = "aws:ec2/internetGatewayAttachment:InternetGatewayAttachment"
NAT_GATEWAY = "aws:ec2/natGateway:NatGateway"
EIP = "aws:ec2/eip:Eip"
EIP_ASSOCIATION = "aws:ec2/eipAssociation:EipAssociation"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
DEFAULT_SECURITY_GROUP = "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"
SECURITY_GROUP_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS_RULE = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
TAG = "aws:ec2/tag:Tag"
INSTANCE = "aws:ec2/instance:Instance"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
CLUSTER = "aws:eks/cluster:Cluster"
ADDON = "aws:eks/addon:Addon"
TGW_ATTACHMENT = "aws:ec2transitgateway/vpcAttachment:VpcAttachment"
TGW_ROUTE = "aws:ec2transitgateway/route:Route"
TGW_ASSOCIATION = "aws:ec2transitgateway/routeTableAssociation:RouteTableAssociation"
TGW_PROPAGATION = "aws:ec2transitgateway/routeTablePropagation:RouteTablePropagation"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"
NODE_POOL = "kubernetes:karpenter.sh/v1:NodePool"

#: Registered resources that could change reachability and that this model does not read.
UNMODELLED_TYPE_PREFIXES = (
    "aws:ec2/networkAcl", "aws:ec2/defaultNetworkAcl", "aws:ec2/vpcPeeringConnection",
    "aws:ec2/vpcEndpoint", "aws:ec2/vpnGateway", "aws:ec2/vpcIpv4CidrBlockAssociation",
    "aws:ec2/networkInterface", "aws:ec2transitgateway/peeringAttachment",
    "aws:ec2transitgateway/connect", "aws:networkfirewall/",
    "aws:ec2/securityGroupAssociation", "aws:vpc/securityGroupVpcAssociation",
    "kubernetes:networking.k8s.io/v1:NetworkPolicy", "kubernetes:cilium.io/",
    "kubernetes:vpcresources.k8s.aws/",
)

COMPUTE_TYPE = "eks.amazonaws.com/compute-type"
#: What EKS tags its cluster security group with (besides what the program adds).
_EKS_SG_TAGS = ("kubernetes.io/cluster/{name}", "owned"), ("aws:eks:cluster-name", "{name}")


class Blocked(Exception):
    """A flow is dropped; the message says where and why."""


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Secret) else value


def _net(value: Any) -> Optional[ipaddress._BaseNetwork]:
    try:
        return ipaddress.ip_network(str(_plain(value)), strict=False)
    except ValueError:
        return None


def within(inner: ipaddress._BaseNetwork, outer: ipaddress._BaseNetwork) -> bool:
    return inner.version == outer.version and inner.subnet_of(outer)


def _protocol(value: Any) -> str:
    text = str(value).lower()
    return {"all": "-1", "6": "tcp", "17": "udp", "1": "icmp"}.get(text, text)


@dataclass(frozen=True)
class Rule:
    direction: str
    protocol: str
    from_port: int
    to_port: int
    #: The peer: a CIDR, a referenced security group, or a prefix list (never matched).
    cidr: Optional[ipaddress._BaseNetwork]
    group: Optional[str]
    prefix_list: Optional[str]
    origin: str

    def covers(self, protocol: str, port: int) -> bool:
        if self.protocol == "-1":
            return True
        if self.protocol != protocol:
            return False
        return self.from_port == -1 or self.from_port <= port <= self.to_port

    def admits(self, peer: Net, peer_groups: frozenset[str]) -> bool:
        if self.cidr is not None and within(peer, self.cidr):
            return True
        return self.group is not None and self.group in peer_groups


def _rule(direction: str, protocol: Any, from_port: Any, to_port: Any, origin: str, *,
          cidr: Any = None, group: Optional[str] = None, prefix_list: Optional[str] = None) -> Rule:
    def port(value: Any, default: int) -> int:
        return default if value is None else int(value)
    return Rule(direction, _protocol(protocol), port(from_port, -1), port(to_port, -1),
                _net(cidr) if cidr is not None else None, group, prefix_list, origin)


def _inline_rules(reg: Registration) -> Iterable[Rule]:
    """Rules written inside an aws.ec2.SecurityGroup / DefaultSecurityGroup."""
    for direction in ("ingress", "egress"):
        for spec in reg.inputs.get(direction) or []:
            base = (direction, spec.get("protocol", "-1"), spec.get("fromPort"), spec.get("toPort"),
                    f"{reg.name} (inline)")
            for cidr in [*(spec.get("cidrBlocks") or []), *(spec.get("ipv6CidrBlocks") or [])]:
                yield _rule(*base, cidr=cidr)
            for group in spec.get("securityGroups") or []:
                yield _rule(*base, group=group)
            if spec.get("self"):
                yield _rule(*base, group=reg.id)
            for prefix_list in spec.get("prefixListIds") or []:
                yield _rule(*base, prefix_list=prefix_list)


def _standalone_rules(reg: Registration) -> tuple[Optional[str], list[Rule]]:
    """The group a rule resource belongs to, and the rules it adds."""
    inputs = reg.inputs
    if reg.type in (INGRESS_RULE, EGRESS_RULE):
        direction = "ingress" if reg.type == INGRESS_RULE else "egress"
        base = (direction, inputs.get("ipProtocol"), inputs.get("fromPort"), inputs.get("toPort"),
                reg.name)
        rules = [_rule(*base, cidr=inputs[key]) for key in ("cidrIpv4", "cidrIpv6") if inputs.get(key)]
        if inputs.get("referencedSecurityGroupId"):
            rules.append(_rule(*base, group=inputs["referencedSecurityGroupId"]))
        if inputs.get("prefixListId"):
            rules.append(_rule(*base, prefix_list=inputs["prefixListId"]))
        return inputs.get("securityGroupId"), rules
    if reg.type == SECURITY_GROUP_RULE:
        group = inputs.get("securityGroupId")
        base = (inputs.get("type"), inputs.get("protocol"), inputs.get("fromPort"),
                inputs.get("toPort"), reg.name)
        rules = [_rule(*base, cidr=c) for c in
                 [*(inputs.get("cidrBlocks") or []), *(inputs.get("ipv6CidrBlocks") or [])]]
        if inputs.get("sourceSecurityGroupId"):
            rules.append(_rule(*base, group=inputs["sourceSecurityGroupId"]))
        if inputs.get("self"):
            rules.append(_rule(*base, group=group))
        rules += [_rule(*base, prefix_list=p) for p in inputs.get("prefixListIds") or []]
        return group, rules
    return None, []


@dataclass
class SecurityGroup:
    id: str
    label: str
    vpc: Optional[str]
    tags: dict[str, str] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)


@dataclass(frozen=True)
class Route:
    destination: Net
    #: local | internet-gateway | nat | transit-gateway | hybrid-gateway | other
    kind: str
    target: str
    origin: str


@dataclass
class RouteTable:
    id: str
    label: str
    vpc: Optional[str]
    routes: list[Route] = field(default_factory=list)


@dataclass(frozen=True)
class Subnet:
    id: str
    label: str
    vpc: str
    cidr: Net
    zone: Optional[str]
    tags: dict


@dataclass(frozen=True)
class Interface:
    """Network interfaces of an endpoint in one subnet, with the security groups they carry."""

    subnet: str
    security_groups: frozenset[str]


@dataclass(frozen=True)
class Endpoint:
    label: str
    #: "interfaces" (ENIs in subnets), "pods" (hybrid pod IPs behind the gateway, on the hosts'
    #: ``interfaces``), "internet", "api" (the cluster endpoint, resolved per source).
    kind: str
    interfaces: tuple[Interface, ...] = ()
    pod_cidrs: tuple[Net, ...] = ()
    #: Set when the endpoint exists but cannot send or receive (e.g. no security group matched).
    problem: Optional[str] = None


@dataclass(frozen=True)
class Gateway:
    """The hybrid nodes gateway as its Helm values and node group describe it."""

    route_table_ids: frozenset[str]
    pod_cidrs: tuple[Net, ...]
    vpc_cidrs: tuple[Net, ...]
    node_label: str
    nodes: tuple[Interface, ...]
    source_dest_check_off: bool


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    security_group: str
    subnets: tuple[str, ...]
    extra_security_groups: tuple[str, ...]
    public: bool
    private: bool
    public_access_cidrs: tuple[ipaddress._BaseNetwork, ...]
    remote_node_cidrs: tuple[Net, ...]
    remote_pod_cidrs: tuple[Net, ...]
    vpc: str


class Network:
    """The registered network, indexed for the evaluators."""

    def __init__(self, run: ProgramRun):
        self.run = run
        regs = run.resources()
        self.by_type: dict[str, list[Registration]] = {}
        for reg in regs:
            self.by_type.setdefault(reg.type, []).append(reg)

        self.vpcs = {r.id: r for r in self.of(VPC)}
        self.subnets = {r.id: Subnet(r.id, f"{r.id} ({r.name})", r.inputs.get("vpcId"),
                                     ipaddress.ip_network(r.inputs["cidrBlock"]),
                                     r.inputs.get("availabilityZone"), dict(r.inputs.get("tags") or {}))
                        for r in self.of(SUBNET)}
        self.internet_gateways = {r.id: r.inputs.get("vpcId") for r in self.of(INTERNET_GATEWAY)}
        for attachment in self.of(INTERNET_GATEWAY_ATTACHMENT):
            self.internet_gateways[attachment.inputs["internetGatewayId"]] = attachment.inputs["vpcId"]
        self.nat_gateways = {r.id: r for r in self.of(NAT_GATEWAY)}
        self.attachments = {r.id: r for r in self.of(TGW_ATTACHMENT)}
        self.clusters = [self._cluster(r) for r in self.of(CLUSTER)]
        self.route_tables = self._route_tables()
        self.subnet_route_table = self._associations()
        self.security_groups = self._security_groups()
        self.gateway = self._gateway()
        #: route_between's answers: the flows walk the same few subnet pairs hundreds of times.
        self._ways: dict[tuple[str, Net, str], tuple[bool, str]] = {}

    def of(self, type_: str) -> list[Registration]:
        return self.by_type.get(type_, [])

    # -- indexing ----------------------------------------------------------------------------

    def _cluster(self, reg: Registration) -> ClusterInfo:
        vpc_config = reg.inputs.get("vpcConfig") or {}
        remote = reg.inputs.get("remoteNetworkConfig") or {}

        def cidrs(key: str) -> tuple[Net, ...]:
            networks = remote.get(key) or {}
            if isinstance(networks, list):  # the API's shape: a list of {cidrs: [...]}
                return tuple(ipaddress.ip_network(c) for n in networks for c in n.get("cidrs") or [])
            return tuple(ipaddress.ip_network(c) for c in networks.get("cidrs") or [])

        subnets = tuple(vpc_config.get("subnetIds") or [])
        public = vpc_config.get("endpointPublicAccess", True) is not False
        return ClusterInfo(
            name=reg.inputs.get("name") or reg.name,
            security_group=(reg.outputs.get("vpcConfig") or {}).get("clusterSecurityGroupId", ""),
            subnets=subnets,
            extra_security_groups=tuple(vpc_config.get("securityGroupIds") or []),
            public=public,
            private=bool(vpc_config.get("endpointPrivateAccess", False)),
            public_access_cidrs=tuple(_net(c) for c in (vpc_config.get("publicAccessCidrs")
                                                        or ["0.0.0.0/0"]) if _net(c) is not None),
            remote_node_cidrs=cidrs("remoteNodeNetworks"),
            remote_pod_cidrs=cidrs("remotePodNetworks"),
            vpc=self.subnets[subnets[0]].vpc if subnets and subnets[0] in self.subnets else "",
        )

    def _route_tables(self) -> dict[str, RouteTable]:
        tables = {r.id: RouteTable(r.id, f"{r.id} ({r.name})", r.inputs.get("vpcId"))
                  for r in self.of(ROUTE_TABLE)}
        for vpc in self.vpcs.values():
            main = vpc.outputs.get("mainRouteTableId")
            if main and main not in tables:
                tables[main] = RouteTable(main, f"{main} (main route table of {vpc.name})", vpc.id)
        for table in tables.values():
            vpc = self.vpcs.get(table.vpc)
            if vpc is not None:
                table.routes.append(Route(ipaddress.ip_network(vpc.inputs["cidrBlock"]), "local",
                                          "local", "the VPC's local route"))
        for reg in self.of(ROUTE_TABLE):
            for spec in reg.inputs.get("routes") or []:
                if spec.get("cidrBlock"):
                    tables[reg.id].routes.append(self._route(spec.get("cidrBlock"), spec, reg.name))
        for reg in self.of(ROUTE):
            table = tables.get(reg.inputs.get("routeTableId"))
            destination = reg.inputs.get("destinationCidrBlock")
            if table is not None and destination:
                table.routes.append(self._route(destination, reg.inputs, reg.name))
        return tables

    def _route(self, destination: str, spec: dict, origin: str) -> Route:
        net = ipaddress.ip_network(destination)
        if spec.get("natGatewayId"):
            return Route(net, "nat", spec["natGatewayId"], origin)
        if spec.get("transitGatewayId"):
            return Route(net, "transit-gateway", spec["transitGatewayId"], origin)
        gateway = spec.get("gatewayId")
        if gateway and gateway in self.internet_gateways:
            return Route(net, "internet-gateway", gateway, origin)
        target = next((str(v) for k, v in spec.items() if k.endswith("Id") and v
                       and k != "routeTableId"), "?")
        return Route(net, "other", target, origin)

    def _associations(self) -> dict[str, str]:
        tables = {r.inputs["subnetId"]: r.inputs["routeTableId"]
                  for r in self.of(ROUTE_TABLE_ASSOCIATION) if r.inputs.get("subnetId")}
        for subnet in self.subnets.values():
            if subnet.id not in tables and subnet.vpc in self.vpcs:
                # No association: the subnet uses its VPC's main route table.
                tables[subnet.id] = self.vpcs[subnet.vpc].outputs.get("mainRouteTableId", "")
        return tables

    def _security_groups(self) -> dict[str, SecurityGroup]:
        groups: dict[str, SecurityGroup] = {}
        for reg in [*self.of(SECURITY_GROUP), *self.of(DEFAULT_SECURITY_GROUP)]:
            group = SecurityGroup(reg.id, f"{reg.id} ({reg.name})", reg.inputs.get("vpcId"),
                                  dict(reg.inputs.get("tags") or {}))
            # The provider strips AWS's default allow-all egress: only declared rules exist.
            group.rules.extend(_inline_rules(reg))
            groups[reg.id] = group
        for cluster in self.clusters:
            if not cluster.security_group:
                continue
            origin = "EKS default (created by EKS, not registered)"
            groups[cluster.security_group] = SecurityGroup(
                cluster.security_group, f"{cluster.security_group} (cluster SG)", cluster.vpc,
                {k.format(name=cluster.name): v.format(name=cluster.name) for k, v in _EKS_SG_TAGS},
                [_rule("ingress", "-1", None, None, origin, group=cluster.security_group),
                 _rule("egress", "-1", None, None, origin, cidr="0.0.0.0/0"),
                 _rule("egress", "-1", None, None, origin, group=cluster.security_group)])
        for reg in [*self.of(INGRESS_RULE), *self.of(EGRESS_RULE), *self.of(SECURITY_GROUP_RULE)]:
            group_id, rules = _standalone_rules(reg)
            if group_id in groups:
                groups[group_id].rules.extend(rules)
        for tag in self.of(TAG):
            if tag.inputs.get("resourceId") in groups:
                groups[tag.inputs["resourceId"]].tags[tag.inputs["key"]] = tag.inputs.get("value", "")
        return groups

    def _gateway(self) -> Optional[Gateway]:
        releases = [r for r in self.of(HELM_RELEASE) if r.inputs.get("chart") == hybrid_gateway.CHART]
        if not releases:
            return None
        values = releases[0].inputs.get("values") or {}

        def listed(key: str) -> list[str]:
            return [v.strip() for v in str(values.get(key) or "").split(",") if v.strip()]

        node_label = values.get("nodeLabel") or hybrid_gateway.NODE_LABEL
        groups = [g for g in self.of(NODE_GROUP)
                  if str((g.inputs.get("labels") or {}).get(node_label)) == "true"]
        return Gateway(
            route_table_ids=frozenset(listed("routeTableIDs")),
            pod_cidrs=tuple(ipaddress.ip_network(c) for c in listed("podCIDRs")),
            vpc_cidrs=tuple(ipaddress.ip_network(c) for c in listed("vpcCIDR")),
            node_label=node_label,
            nodes=tuple(i for g in groups for i in self.node_group_interfaces(g)),
            source_dest_check_off=bool(groups) and all(
                "no-source-dest-check" in self._user_data(g) for g in groups),
        )

    # -- endpoints' interfaces ---------------------------------------------------------------

    def cluster_named(self, name: Any) -> Optional[ClusterInfo]:
        return next((c for c in self.clusters if c.name == name), None)

    def _launch_template(self, group: Registration) -> Optional[Registration]:
        template_id = (group.inputs.get("launchTemplate") or {}).get("id")
        return next((t for t in self.of(LAUNCH_TEMPLATE) if t.id == template_id), None)

    def _user_data(self, group: Registration) -> str:
        template = self._launch_template(group)
        data = str(_plain(template.inputs.get("userData")) or "") if template else ""
        try:
            return base64.b64decode(data, validate=True).decode(errors="replace")
        except (binascii.Error, ValueError):
            return data

    def node_group_interfaces(self, group: Registration) -> list[Interface]:
        template = self._launch_template(group)
        groups = list((template.inputs.get("vpcSecurityGroupIds") or []) if template else [])
        if not groups:
            # A launch template naming no security group: EKS attaches the cluster's.
            cluster = self.cluster_named(group.inputs.get("clusterName"))
            groups = [cluster.security_group] if cluster else []
        return [Interface(s, frozenset(groups)) for s in group.inputs.get("subnetIds") or []]

    def untainted_node_groups(self) -> list[Registration]:
        return [g for g in self.of(NODE_GROUP) if not g.inputs.get("taints")]

    def karpenter_nodes(self, untainted_only: bool) -> tuple[list[Interface], Optional[str]]:
        interfaces: list[Interface] = []
        for pool in self.of(NODE_POOL):
            spec = (pool.inputs.get("spec") or {}).get("template", {}).get("spec", {})
            if untainted_only and spec.get("taints"):
                continue
            ref = (spec.get("nodeClassRef") or {}).get("name")
            node_class = next((c for c in self.of(NODE_CLASS)
                               if (c.inputs.get("metadata") or {}).get("name") == ref), None)
            if node_class is None:
                return [], f"NodePool {pool.name} names EC2NodeClass {ref}, which is not registered"
            class_spec = node_class.inputs.get("spec") or {}
            subnets = [s.id for s in self.subnets.values()
                       if selected(s.id, s.tags, class_spec.get("subnetSelectorTerms"))]
            groups = frozenset(g.id for g in self.security_groups.values()
                               if selected(g.id, g.tags, class_spec.get("securityGroupSelectorTerms")))
            if not subnets or not groups:
                what = "subnet" if not subnets else "security group"
                return [], f"EC2NodeClass {ref} selects no {what}: Karpenter cannot launch nodes"
            interfaces += [Interface(s, groups) for s in subnets]
        return interfaces, None

    def hybrid_hosts(self) -> list[Interface]:
        remote = [n for c in self.clusters for n in c.remote_node_cidrs]
        hosts = []
        for instance in self.of(INSTANCE):
            subnet = self.subnets.get(instance.inputs.get("subnetId"))
            if subnet is None or not any(within(subnet.cidr, n) for n in remote):
                continue
            groups = instance.inputs.get("vpcSecurityGroupIds") or []
            if not groups:  # an instance naming no group gets its VPC's default group
                groups = [self.vpcs[subnet.vpc].outputs.get("defaultSecurityGroupId", "")]
            hosts.append(Interface(subnet.id, frozenset(groups)))
        return hosts

    def deployment(self, name: str) -> Optional[Registration]:
        found = [d for d in self.of(DEPLOYMENT) if (d.inputs.get("metadata") or {}).get("name") == name]
        if len(found) > 1:
            raise ValueError(f"{len(found)} Deployments are named {name}: the flow table is ambiguous")
        return found[0] if found else None

    def release(self, chart: str) -> Optional[Registration]:
        return next((r for r in self.of(HELM_RELEASE) if r.inputs.get("chart") == chart), None)

    # -- security groups ---------------------------------------------------------------------

    def group_labels(self, groups: Iterable[str]) -> str:
        labels = [self.security_groups[g].label if g in self.security_groups else f"{g} (unknown)"
                  for g in sorted(groups)]
        return " + ".join(labels) or "no security group"

    def matching_rule(self, groups: Iterable[str], direction: str, protocol: str, port: int,
                      peer: Net, peer_groups: frozenset[str]) -> Optional[Rule]:
        for group in sorted(groups):
            for rule in self.security_groups.get(group, SecurityGroup(group, group, None)).rules:
                if rule.direction == direction and rule.covers(protocol, port) \
                        and rule.admits(peer, peer_groups):
                    return rule
        return None

    # -- routes ------------------------------------------------------------------------------

    def table_of(self, subnet_id: str) -> RouteTable:
        table_id = self.subnet_route_table.get(subnet_id, "")
        table = self.route_tables.get(table_id)
        if table is None:
            raise Blocked(f"subnet {self.subnets[subnet_id].label} has no route table")
        return table

    def routes(self, table: RouteTable) -> list[Route]:
        """A table's routes with the gateway leader's run-time route: it writes the pod CIDRs
        into the tables of its ``routeTableIDs`` (ReplaceRoute wins over any same route)."""
        if self.gateway is None or table.id not in self.gateway.route_table_ids:
            return table.routes
        written = [Route(c, "hybrid-gateway", "the gateway leader's primary ENI",
                         "written by the gateway leader at run time (routeTableIDs)")
                   for c in self.gateway.pod_cidrs]
        taken = {r.destination for r in written}
        return [r for r in table.routes if r.destination not in taken] + written

    def longest_prefix(self, table: RouteTable, destination: Net, *, whole: bool = True) -> Route:
        """The route the table uses for all of ``destination``. ``whole``: a more specific
        route that diverts part of it is a problem too."""
        routes = self.routes(table)
        candidates = [r for r in routes if within(destination, r.destination)]
        if not candidates:
            raise Blocked(f"{table.label} has no route to {destination}")
        best = max(candidates, key=lambda r: r.destination.prefixlen)
        if whole:
            for route in routes:
                if route.destination != destination and within(route.destination, destination) \
                        and (route.kind, route.target) != (best.kind, best.target):
                    raise Blocked(f"{table.label} sends part of {destination} ({route.destination}) "
                                  f"to {route.kind} {route.target}")
        return best

    def zones_of(self, attachment: Registration) -> set[Optional[str]]:
        return {self.subnets[s].zone for s in attachment.inputs.get("subnetIds") or []
                if s in self.subnets}

    def route_between(self, source: str, destination: Net, target_subnet: str) -> str:
        """Walks a packet from ``source`` (a subnet) to ``destination`` addresses in
        ``target_subnet``; returns the way ("local", "Transit Gateway") or raises Blocked."""
        key = (source, destination, target_subnet)
        if key not in self._ways:
            try:
                self._ways[key] = (True, self._route_between(source, destination, target_subnet))
            except Blocked as exc:
                self._ways[key] = (False, str(exc))
        allowed, answer = self._ways[key]
        if not allowed:
            raise Blocked(answer)
        return answer

    def _route_between(self, source: str, destination: Net, target_subnet: str) -> str:
        origin, target = self.subnets[source], self.subnets[target_subnet]
        route = self.longest_prefix(self.table_of(source), destination)
        if route.kind == "local":
            if origin.vpc == target.vpc:
                return "local"
            raise Blocked(f"{self.table_of(source).label} keeps {destination} in its own VPC")
        if route.kind != "transit-gateway":
            raise Blocked(f"{self.table_of(source).label} sends {destination} to {route.kind} "
                          f"{route.target} ({route.origin})")
        tgw = route.target
        attachment = next((a for a in self.attachments.values() if a.inputs.get("vpcId") == origin.vpc
                           and a.inputs.get("transitGatewayId") == tgw), None)
        if attachment is None:
            raise Blocked(f"the VPC of {origin.label} is not attached to {tgw}")
        if origin.zone not in self.zones_of(attachment):
            raise Blocked(f"{attachment.name} has no subnet in {origin.zone}: "
                          f"{origin.label} cannot reach the Transit Gateway")
        association = next((a for a in self.of(TGW_ASSOCIATION)
                            if a.inputs.get("transitGatewayAttachmentId") == attachment.id), None)
        if association is None:
            raise Blocked(f"{attachment.name} is associated with no Transit Gateway route table")
        tgw_table = association.inputs.get("transitGatewayRouteTableId")
        tgw_route = self._tgw_route(tgw_table, destination)
        arrival = self.attachments.get(tgw_route[1])
        if arrival is None or arrival.inputs.get("vpcId") != target.vpc:
            raise Blocked(f"Transit Gateway route table {tgw_table} sends {destination} to "
                          f"{tgw_route[1]} ({tgw_route[2]}), not to the VPC of {target.label}")
        if target.zone not in self.zones_of(arrival):
            raise Blocked(f"{arrival.name} has no subnet in {target.zone}: the Transit Gateway "
                          f"cannot deliver to {target.label}")
        # Arriving traffic is routed by the route table of the attachment's subnet in that zone.
        entry = next(s for s in arrival.inputs.get("subnetIds") or []
                     if s in self.subnets and self.subnets[s].zone == target.zone)
        inner = self.longest_prefix(self.table_of(entry), destination)
        if inner.kind != "local":
            raise Blocked(f"{self.table_of(entry).label} sends {destination}, arriving from the "
                          f"Transit Gateway, to {inner.kind} {inner.target}")
        return "Transit Gateway"

    def _tgw_route(self, table_id: str, destination: Net) -> tuple[Net, str, str]:
        routes: list[tuple[Net, str, str]] = []
        for reg in self.of(TGW_ROUTE):
            if reg.inputs.get("transitGatewayRouteTableId") == table_id and not reg.inputs.get("blackhole"):
                routes.append((ipaddress.ip_network(reg.inputs["destinationCidrBlock"]),
                               reg.inputs.get("transitGatewayAttachmentId", ""), reg.name))
        for reg in self.of(TGW_PROPAGATION):
            attachment = self.attachments.get(reg.inputs.get("transitGatewayAttachmentId"))
            if reg.inputs.get("transitGatewayRouteTableId") == table_id and attachment is not None:
                vpc = self.vpcs.get(attachment.inputs.get("vpcId"))
                if vpc is not None:
                    routes.append((ipaddress.ip_network(vpc.inputs["cidrBlock"]), attachment.id,
                                   f"propagated from {attachment.name}"))
        candidates = [r for r in routes if within(destination, r[0])]
        if not candidates:
            raise Blocked(f"Transit Gateway route table {table_id} has no route to {destination}")
        return max(candidates, key=lambda r: r[0].prefixlen)


def selected(resource_id: str, tags: dict, terms: Optional[Sequence[dict]]) -> bool:
    """Karpenter's selector terms: terms are ORed; within a term every tag must match ("*"
    matches any value)."""
    for term in terms or []:
        if term.get("id"):
            if term["id"] == resource_id:
                return True
            continue
        wanted = term.get("tags") or {}
        if wanted and all(k in tags and (v == "*" or tags[k] == v) for k, v in wanted.items()):
            return True
    return False
