"""Network layer: CIDRs, zone spread, NAT egress, routes both ways through the Transit Gateway,
no route to the hybrid pod CIDR, discovery tags, emptied default security groups."""

from __future__ import annotations

import ipaddress

import pytest

from components.vpc import plan_subnets
from offline.runner import ProgramRun, Registration
from tests.conftest import RENAMED

VPC = "aws:ec2/vpc:Vpc"
SUBNET = "aws:ec2/subnet:Subnet"
ROUTE = "aws:ec2/route:Route"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
RTA = "aws:ec2/routeTableAssociation:RouteTableAssociation"
NAT = "aws:ec2/natGateway:NatGateway"
TGW = "aws:ec2transitgateway/transitGateway:TransitGateway"
TGW_ATTACHMENT = "aws:ec2transitgateway/vpcAttachment:VpcAttachment"
TGW_ROUTE = "aws:ec2transitgateway/route:Route"
TGW_RTA = "aws:ec2transitgateway/routeTableAssociation:RouteTableAssociation"


def vpc_by_cidr(run: ProgramRun, cidr: str) -> Registration:
    [vpc] = [v for v in run.of_type(VPC) if v.inputs["cidrBlock"] == cidr]
    return vpc


def in_vpc(run: ProgramRun, type_: str, vpc: Registration) -> list[Registration]:
    return [r for r in run.of_type(type_) if r.inputs.get("vpcId") == vpc.id]


def private_route_table(run: ProgramRun, vpc: Registration) -> Registration:
    [rt] = [r for r in in_vpc(run, ROUTE_TABLE, vpc) if r.name.endswith("-private-rt")]
    return rt


def routes_in(run: ProgramRun, table: Registration) -> dict[str, Registration]:
    return {r.inputs["destinationCidrBlock"]: r for r in run.of_type(ROUTE)
            if r.inputs["routeTableId"] == table.id}


def private_subnets(run: ProgramRun, vpc: Registration) -> list[Registration]:
    return [s for s in in_vpc(run, SUBNET, vpc) if "-private-" in s.name]


def test_two_vpcs_with_the_configured_cidrs_and_dns(dev_run):
    vpcs = {v.inputs["cidrBlock"]: v for v in dev_run.of_type(VPC)}
    assert set(vpcs) == {"10.0.0.0/16", "172.16.0.0/16"}
    for vpc in vpcs.values():
        assert vpc.inputs["enableDnsHostnames"] is True
        assert vpc.inputs["enableDnsSupport"] is True


@pytest.mark.parametrize("zones", [2, 3])
def test_cloud_private_subnets_one_per_zone_inside_the_vpc(lab, zones):
    run = lab(availabilityZoneCount=zones)
    cloud = vpc_by_cidr(run, "10.0.0.0/16")
    subnets = private_subnets(run, cloud)
    assert len(subnets) == zones
    assert len({s.inputs["availabilityZone"] for s in subnets}) == zones
    assert {s.inputs["availabilityZone"] for s in subnets} <= {
        f"ap-northeast-2{z}" for z in "abcd"}
    nets = [ipaddress.ip_network(s.inputs["cidrBlock"]) for s in in_vpc(run, SUBNET, cloud)]
    for net in nets:
        assert net.subnet_of(ipaddress.ip_network("10.0.0.0/16"))
    for i, a in enumerate(nets):
        for b in nets[i + 1:]:
            assert not a.overlaps(b), f"{a} overlaps {b}"
    assert run.outputs["availabilityZones"] == sorted(
        {s.inputs["availabilityZone"] for s in subnets})


def test_on_prem_vpc_has_one_server_lan_that_is_the_remote_node_network(dev_run):
    onprem = vpc_by_cidr(dev_run, "172.16.0.0/16")
    [lan] = private_subnets(dev_run, onprem)
    assert ipaddress.ip_network(lan.inputs["cidrBlock"]).subnet_of(ipaddress.ip_network("172.16.0.0/16"))
    assert dev_run.outputs["remoteNodeCidr"] == lan.inputs["cidrBlock"]
    assert dev_run.outputs["onPremServerLanSubnetId"] == lan.id


def test_public_subnets_hold_only_the_nat_gateway_and_map_no_public_ips(dev_run):
    for vpc in dev_run.of_type(VPC):
        public_tables = [r for r in in_vpc(dev_run, ROUTE_TABLE, vpc) if r.name.endswith("-public-rt")]
        [public_rt] = public_tables
        routes = routes_in(dev_run, public_rt)
        assert set(routes) == {"0.0.0.0/0"}
        assert routes["0.0.0.0/0"].inputs["gatewayId"].startswith("igw-")
        public_subnet_ids = {a.inputs["subnetId"] for a in dev_run.of_type(RTA)
                             if a.inputs["routeTableId"] == public_rt.id}
        nats = [n for n in dev_run.of_type(NAT) if n.inputs["subnetId"] in public_subnet_ids]
        assert len(public_subnet_ids) == 1 and len(nats) == 1
        assert nats[0].inputs["connectivityType"] == "public"
    for subnet in dev_run.of_type(SUBNET):
        assert subnet.inputs["mapPublicIpOnLaunch"] is False


def test_one_nat_gateway_per_vpc(dev_run):
    assert len(dev_run.of_type(NAT)) == 2
    assert len(dev_run.outputs["natPublicIps"]) == 2


def test_private_subnets_default_route_goes_to_their_own_nat(dev_run):
    for vpc in dev_run.of_type(VPC):
        rt = private_route_table(dev_run, vpc)
        default = routes_in(dev_run, rt)["0.0.0.0/0"]
        [nat] = [n for n in dev_run.of_type(NAT) if n.id == default.inputs["natGatewayId"]]
        subnet_vpc = {s.id: s.inputs["vpcId"] for s in dev_run.of_type(SUBNET)}
        assert subnet_vpc[nat.inputs["subnetId"]] == vpc.id
        associated = {a.inputs["subnetId"] for a in dev_run.of_type(RTA) if a.inputs["routeTableId"] == rt.id}
        assert associated == {s.id for s in private_subnets(dev_run, vpc)}


def test_route_tables_declare_no_inline_routes(dev_run):
    # Inline routes= would make Pulumi delete routes it does not own (the gateway's).
    for table in dev_run.of_type(ROUTE_TABLE):
        assert not table.inputs.get("routes"), table.name


def test_routes_both_ways_through_the_transit_gateway(dev_run):
    [tgw] = dev_run.of_type(TGW)
    cloud = vpc_by_cidr(dev_run, "10.0.0.0/16")
    onprem = vpc_by_cidr(dev_run, "172.16.0.0/16")
    for here, there in ((cloud, onprem), (onprem, cloud)):
        route = routes_in(dev_run, private_route_table(dev_run, here))[there.inputs["cidrBlock"]]
        assert route.inputs["transitGatewayId"] == tgw.id

    attachments = {a.inputs["vpcId"]: a for a in dev_run.of_type(TGW_ATTACHMENT)}
    assert set(attachments) == {cloud.id, onprem.id}
    assert set(attachments[cloud.id].inputs["subnetIds"]) == {s.id for s in private_subnets(dev_run, cloud)}
    assert set(attachments[onprem.id].inputs["subnetIds"]) == {s.id for s in private_subnets(dev_run, onprem)}

    tgw_routes = {r.inputs["destinationCidrBlock"]: r for r in dev_run.of_type(TGW_ROUTE)}
    assert set(tgw_routes) == {"10.0.0.0/16", "172.16.0.0/16"}
    assert tgw_routes["10.0.0.0/16"].inputs["transitGatewayAttachmentId"] == attachments[cloud.id].id
    assert tgw_routes["172.16.0.0/16"].inputs["transitGatewayAttachmentId"] == attachments[onprem.id].id
    associated = {a.inputs["transitGatewayAttachmentId"] for a in dev_run.of_type(TGW_RTA)}
    assert associated == {a.id for a in attachments.values()}
    assert tgw.inputs["defaultRouteTableAssociation"] == "disable"
    assert tgw.inputs["defaultRouteTablePropagation"] == "disable"


def test_routes_to_the_transit_gateway_wait_for_their_vpc_attachment(dev_run):
    attachments = {a.inputs["vpcId"]: a for a in dev_run.of_type(TGW_ATTACHMENT)}
    table_vpc = {t.id: t.inputs["vpcId"] for t in dev_run.of_type(ROUTE_TABLE)}
    tgw_bound = [r for r in dev_run.of_type(ROUTE) if r.inputs.get("transitGatewayId")]
    assert len(tgw_bound) == 2
    for route in tgw_bound:
        attachment = attachments[table_vpc[route.inputs["routeTableId"]]]
        assert attachment.urn in route.explicit_dependencies
    for route in dev_run.of_type(TGW_ROUTE):
        [attachment] = [a for a in attachments.values()
                        if a.id == route.inputs["transitGatewayAttachmentId"]]
        assert attachment.urn in route.dependencies


#: Every network range moved off its default (tests/test_gateway.py runs it too).
CUSTOM_CIDRS = dict(cloudVpcCidr="192.168.0.0/24", onPremVpcCidr="10.20.0.0/16",
                    hybridPodCidr="10.30.0.0/16", serviceCidr="10.40.0.0/16")


@pytest.mark.parametrize("overrides", [{}, CUSTOM_CIDRS, {"availabilityZoneCount": 3}])
def test_no_route_to_the_hybrid_pod_cidr_anywhere(lab, overrides):
    # The hybrid nodes gateway owns that route in the cloud route tables.
    run = lab(**overrides)
    pod_cidr = ipaddress.ip_network(run.config["eks-hybrid-lab:hybridPodCidr"])
    for route in run.of_type(ROUTE) + run.of_type(TGW_ROUTE):
        destination = ipaddress.ip_network(route.inputs["destinationCidrBlock"])
        if destination.prefixlen == 0:
            continue  # the NAT / internet default routes
        assert not destination.overlaps(pod_cidr), f"{route.name} routes {destination}"


def test_only_cloud_private_subnets_carry_the_karpenter_discovery_tag(lab):
    run = lab(**RENAMED)
    cloud = vpc_by_cidr(run, "10.0.0.0/16")
    tagged = {s.name for s in run.of_type(SUBNET)
              if (s.inputs.get("tags") or {}).get("karpenter.sh/discovery") == "rehearsal-1"}
    assert tagged == {s.name for s in private_subnets(run, cloud)}
    for reg in run.resources():
        if reg.name not in tagged:
            assert "karpenter.sh/discovery" not in (reg.inputs.get("tags") or {}), reg.name


def test_default_security_groups_are_emptied(dev_run):
    defaults = {d.inputs["vpcId"]: d for d in dev_run.of_type("aws:ec2/defaultSecurityGroup:DefaultSecurityGroup")}
    assert set(defaults) == {v.id for v in dev_run.of_type(VPC)}
    for group in defaults.values():
        assert group.inputs["ingress"] == [] and group.inputs["egress"] == []


def test_nat_gateway_waits_for_the_internet_gateway(dev_run):
    igws = {i.inputs["vpcId"]: i for i in dev_run.of_type("aws:ec2/internetGateway:InternetGateway")}
    subnet_vpc = {s.id: s.inputs["vpcId"] for s in dev_run.of_type(SUBNET)}
    for nat in dev_run.of_type(NAT):
        assert igws[subnet_vpc[nat.inputs["subnetId"]]].urn in nat.explicit_dependencies


def test_custom_cidrs_flow_through(lab):
    run = lab(**CUSTOM_CIDRS)
    assert {v.inputs["cidrBlock"] for v in run.of_type(VPC)} == {"192.168.0.0/24", "10.20.0.0/16"}
    cloud = vpc_by_cidr(run, "192.168.0.0/24")
    cidrs = sorted(s.inputs["cidrBlock"] for s in in_vpc(run, SUBNET, cloud))
    assert cidrs == ["192.168.0.0/26", "192.168.0.192/28", "192.168.0.64/26"]


@pytest.mark.parametrize("cidr,count,private,nat", [
    ("10.0.0.0/16", 2, ["10.0.0.0/18", "10.0.64.0/18"], "10.0.192.0/28"),
    ("10.0.0.0/16", 3, ["10.0.0.0/18", "10.0.64.0/18", "10.0.128.0/18"], "10.0.192.0/28"),
    ("172.16.0.0/16", 1, ["172.16.0.0/18"], "172.16.192.0/28"),
    ("192.168.1.0/24", 2, ["192.168.1.0/26", "192.168.1.64/26"], "192.168.1.192/28"),
])
def test_plan_subnets(cidr, count, private, nat):
    assert plan_subnets(cidr, count) == (private, nat)


@pytest.mark.parametrize("cidr,count", [("10.0.0.0/25", 2), ("10.0.0.0/16", 4), ("10.0.0.0/16", 0)])
def test_plan_subnets_refuses_what_it_cannot_carve(cidr, count):
    with pytest.raises(ValueError):
        plan_subnets(cidr, count)
