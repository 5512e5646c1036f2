"""The destroy-time cleanup of what the EKS Hybrid Nodes gateway leaves behind: its pod-CIDR
routes in the listed VPC route tables and its CiliumVTEPConfig.

EC2 is moto in-process (``mock_aws``), a botocore Stubber where an exact sequence of answers
matters (throttling, a route gone between describe and delete), and a moto server on 127.0.0.1
for the pickled provider run in a fresh process. Kubernetes is the fake HTTPS API server of
tests/fake_kube_api.py.

moto reports ``Origin`` as AWS does for what it implements: ``CreateRoute`` for create_route,
``CreateRouteTable`` for the ``local`` routes. It has no VGW route propagation, so the
propagated route (``EnableVgwRoutePropagation``) is planted by making moto's route model report
that origin for one route.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

import boto3
import pytest
from botocore.stub import Stubber

from components.cleanup.gateway_routes import GatewayRouteCleanup, GatewayRouteCleanupProvider
from offline.runner import Secret, run_program
from tests.fake_kube_api import (CLUSTER, FAKE_AWS_ENV, REGION, FakeApiServer, Pki,
                                 assert_authorized)
from tests.fake_kube_api import api, fake_aws, pki  # noqa: F401 (fixtures)
from tests.fake_kube_api import no_eks  # noqa: F401 (fixture)
from tests.moto_server import serve as serve_moto
from tests.offline_guard import forbid_network
from tests.pickled_provider import result_of, run_pickled

pytestmark = pytest.mark.usefixtures("no_eks")

# moto is imported in the fixtures that use it, not here: its EC2 models cost ~1.2 s to import,
# which every test worker would pay at collection even if it runs none of these tests.

POD_CIDR = "172.17.0.0/16"
OTHER_POD_CIDR = "172.18.0.0/16"
NODE_CIDR = "172.16.0.0/16"
VTEP = "hybrid-gateway"
RESOURCE_ID = f"gateway-routes-{CLUSTER}"
NOWHERE = "http://127.0.0.1:9"  # closed port: a call that escaped the stubber fails fast
GROUP, PLURAL = "cilium.io", "ciliumvtepconfigs"


# --- EC2 scenery ----------------------------------------------------------------------------

@dataclass
class Vpc:
    """What was planted; ``routes()`` reads back what is left."""
    client: object
    listed: list[str]
    unlisted: str
    eni: str
    tgw: str = ""
    propagated: set[tuple[str, str]] = field(default_factory=set)

    def routes(self, table_id: str) -> set[tuple[str, str]]:
        """(destination, target) of every route in ``table_id``."""
        return self.all_routes([table_id])[table_id]

    def all_routes(self, table_ids: list[str] | None = None) -> dict[str, set[tuple[str, str]]]:
        """``routes()`` of each table (all three by default), in one call."""
        table_ids = table_ids or self.listed + [self.unlisted]
        tables = self.client.describe_route_tables(RouteTableIds=table_ids)["RouteTables"]
        return {t["RouteTableId"]: {
            (r["DestinationCidrBlock"],
             next(r[k] for k in ("NetworkInterfaceId", "TransitGatewayId", "GatewayId",
                                 "NatGatewayId") if k in r))
            for r in t["Routes"] if "DestinationCidrBlock" in r} for t in tables}


def plant_vpc(ec2, with_decoys: bool = True) -> Vpc:
    """Two listed tables and one unlisted, with the gateway's routes in all three and, in the
    listed ones, routes the cleanup must not touch."""
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    eni = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    tables = [ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"] for _ in range(3)]
    planted = Vpc(ec2, listed=tables[:2], unlisted=tables[2], eni=eni)
    a, b, c = tables
    for table in tables:
        ec2.create_route(RouteTableId=table, DestinationCidrBlock=POD_CIDR,
                         NetworkInterfaceId=eni)
    ec2.create_route(RouteTableId=a, DestinationCidrBlock="172.17.8.0/24",
                     NetworkInterfaceId=eni)
    ec2.create_route(RouteTableId=b, DestinationCidrBlock=OTHER_POD_CIDR,
                     NetworkInterfaceId=eni)
    if not with_decoys:
        return planted
    # Another destination, same target.
    ec2.create_route(RouteTableId=a, DestinationCidrBlock="192.168.50.0/24",
                     NetworkInterfaceId=eni)
    # The hybrid node CIDR and a pod sub-block over the Transit Gateway.
    tgw = ec2.create_transit_gateway()["TransitGateway"]["TransitGatewayId"]
    ec2.create_transit_gateway_vpc_attachment(TransitGatewayId=tgw, VpcId=vpc,
                                              SubnetIds=[subnet])
    planted.tgw = tgw
    ec2.create_route(RouteTableId=a, DestinationCidrBlock=NODE_CIDR, TransitGatewayId=tgw)
    ec2.create_route(RouteTableId=a, DestinationCidrBlock="172.17.32.0/20",
                     TransitGatewayId=tgw)
    # Pod sub-blocks through an internet and a NAT gateway.
    igw = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=igw, VpcId=vpc)
    ec2.create_route(RouteTableId=b, DestinationCidrBlock="172.17.64.0/24", GatewayId=igw)
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    nat = ec2.create_nat_gateway(SubnetId=subnet, AllocationId=allocation)["NatGateway"]
    ec2.create_route(RouteTableId=b, DestinationCidrBlock="172.17.128.0/24",
                     NatGatewayId=nat["NatGatewayId"])
    # A `local` route inside the pod CIDR (a secondary VPC CIDR): origin CreateRouteTable.
    ec2.associate_vpc_cidr_block(VpcId=vpc, CidrBlock="172.17.200.0/24")
    # A pod sub-block to the ENI that did not come from CreateRoute (see propagated_origin).
    ec2.create_route(RouteTableId=a, DestinationCidrBlock="172.17.96.0/24",
                     NetworkInterfaceId=eni)
    planted.propagated.add((a, "172.17.96.0/24"))
    return planted


@pytest.fixture
def propagated_origin(monkeypatch):
    """Makes moto report ``EnableVgwRoutePropagation`` for the routes in ``propagated``."""
    from moto.ec2.models.route_tables import Route

    propagated: set[tuple[str, str]] = set()
    moto_origin = Route.origin.fget

    def origin(route: Route) -> str:
        if (route.route_table.id, route.destination_cidr_block) in propagated:
            return "EnableVgwRoutePropagation"
        return moto_origin(route)

    monkeypatch.setattr(Route, "origin", property(origin))
    return propagated


@pytest.fixture(scope="module")
def aws_session():
    """One boto3 session for the module: it keeps the loaded EC2 model, so clients are cheap."""
    # moto adds its handler to botocore's when it is imported, and a session takes botocore's
    # handlers when it is made: made first, its clients would never reach moto (the file's
    # first test, when it ran alone, went to AWS's endpoint).
    import moto  # noqa: F401

    with pytest.MonkeyPatch.context() as monkeypatch:
        for name, value in FAKE_AWS_ENV.items():
            monkeypatch.setenv(name, value)
        yield boto3.session.Session()


@pytest.fixture(autouse=True)
def quick_boto(monkeypatch, aws_session):
    """Speed only. A new ``Session()`` (the STS presign of the EKS token) is the shared
    session instead of loading the endpoint and service data again; moto skips loading its
    catalogue of default AMIs (nothing here uses them)."""
    new_session = boto3.session.Session

    def session(*args, **kwargs):
        return aws_session if not args and not kwargs else new_session(*args, **kwargs)

    monkeypatch.setattr(boto3, "DEFAULT_SESSION", aws_session)
    monkeypatch.setattr(boto3.session, "Session", session)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")


def only_client(monkeypatch, client) -> None:
    """Makes ``client`` the one EC2 client the provider can get: for REGION, default endpoint.
    (One client for the module: building an EC2 client costs ~25 ms, 700 methods.)"""
    def fake_client(service, *args, **kwargs):
        # The cleanup's bounded client config (timeouts, retries) comes as ``config``.
        kwargs.pop("config", None)
        assert (service, args, kwargs) == ("ec2", (), {"region_name": REGION}), (service, kwargs)
        return client

    monkeypatch.setattr(boto3, "client", fake_client)


@pytest.fixture(scope="module")
def moto_client(aws_session):
    return aws_session.client("ec2", region_name=REGION)


@pytest.fixture
def ec2(monkeypatch, fake_aws, moto_client):
    """EC2 in moto, in-process. Keeps the test's fake keys (the fake API server checks the
    token is signed with them) and the shared boto3 session."""
    from moto import mock_aws

    only_client(monkeypatch, moto_client)
    with mock_aws(config={"core": {"mock_credentials": False, "reset_boto3_session": False}}):
        yield moto_client


@pytest.fixture
def provider() -> GatewayRouteCleanupProvider:
    # Instance attributes, so they also travel with the pickled provider.
    p = GatewayRouteCleanupProvider()
    p.retry_base_seconds = 0
    p.request_timeout_seconds = 3
    return p


def props_for(api_url: str, pki: Pki, tables: list[str],
              pod_cidrs: tuple[str, ...] = (POD_CIDR, OTHER_POD_CIDR)) -> dict:
    return {"region": REGION, "routeTableIds": list(tables), "podCidrs": list(pod_cidrs),
            "clusterName": CLUSTER, "endpoint": api_url, "certificateAuthority": pki.ca_b64,
            "vtepConfigName": VTEP}


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"https://127.0.0.1:{sock.getsockname()[1]}"


def expected_after_cleanup(vpc: Vpc, before: dict) -> dict:
    """``before`` without the gateway's routes in the listed tables."""
    gateway = {(POD_CIDR, vpc.eni), ("172.17.8.0/24", vpc.eni), (OTHER_POD_CIDR, vpc.eni)}
    return {t: (routes - gateway if t in vpc.listed else routes) for t, routes in before.items()}


# --- EC2 part (moto) ------------------------------------------------------------------------

def test_deletes_only_the_gateways_routes_in_the_listed_tables(
        ec2, api, pki, provider, propagated_origin):
    vpc = plant_vpc(ec2)
    propagated_origin.update(vpc.propagated)
    api.plant_object("cilium.io/v2", PLURAL, VTEP)
    before = vpc.all_routes()
    a, b = vpc.listed
    # The scenery is what it says: every decoy is in place, with the origin it claims.
    assert {("172.17.96.0/24", "EnableVgwRoutePropagation"), ("172.17.200.0/24", "CreateRouteTable"),
            ("172.17.32.0/20", "CreateRoute"), (POD_CIDR, "CreateRoute")} <= {
        (r["DestinationCidrBlock"], r["Origin"])
        for t in ec2.describe_route_tables(RouteTableIds=[a])["RouteTables"]
        for r in t["Routes"]}
    assert (POD_CIDR, vpc.eni) in before[vpc.unlisted]

    provider.delete(RESOURCE_ID, props_for(api.url, pki, vpc.listed))

    after = vpc.all_routes()
    assert after == expected_after_cleanup(vpc, before)
    # Spelled out: what stays in the listed tables.
    assert after[a] == {("10.0.0.0/16", "local"), ("172.17.200.0/24", "local"),
                        ("192.168.50.0/24", vpc.eni), (NODE_CIDR, vpc.tgw),
                        ("172.17.32.0/20", vpc.tgw), ("172.17.96.0/24", vpc.eni)}
    assert (POD_CIDR, vpc.eni) not in after[b] and (OTHER_POD_CIDR, vpc.eni) not in after[b]
    assert len(after[b]) == 4  # local x2, IGW and NAT sub-blocks
    assert after[vpc.unlisted] == before[vpc.unlisted]
    assert not api.has_object(GROUP, PLURAL, VTEP)


def test_only_the_listed_pod_cidrs_count(ec2, api, pki, provider):
    vpc = plant_vpc(ec2, with_decoys=False)
    before = vpc.all_routes()
    provider.delete(RESOURCE_ID, props_for(api.url, pki, vpc.listed, pod_cidrs=(POD_CIDR,)))

    a, b = vpc.listed
    after = vpc.all_routes()
    assert after[a] == before[a] - {(POD_CIDR, vpc.eni), ("172.17.8.0/24", vpc.eni)}
    assert after[b] == before[b] - {(POD_CIDR, vpc.eni)}
    assert (OTHER_POD_CIDR, vpc.eni) in after[b]


def test_a_listed_table_that_is_gone_is_success(ec2, api, pki, provider):
    vpc = plant_vpc(ec2, with_decoys=False)
    gone = "rtb-0123456789abcdef0"
    before = vpc.all_routes()
    provider.delete(RESOURCE_ID, props_for(api.url, pki, [vpc.listed[0], gone, vpc.listed[1]]))
    assert vpc.all_routes() == expected_after_cleanup(vpc, before)


def test_nothing_left_is_success(ec2, api, pki, provider):
    vpc = plant_vpc(ec2, with_decoys=False)
    props = props_for(api.url, pki, vpc.listed)
    provider.delete(RESOURCE_ID, props)
    # A second destroy attempt (after a partial failure) finds nothing and succeeds.
    provider.delete(RESOURCE_ID, props)


# --- EC2 part (Stubber: exact answers) ------------------------------------------------------

TABLE = "rtb-0aaaaaaaaaaaaaaa1"
ENI = "eni-0bbbbbbbbbbbbbbb1"


def table_answer(*routes: dict) -> dict:
    return {"RouteTables": [{"RouteTableId": TABLE, "VpcId": "vpc-01", "Routes": [
        {"DestinationCidrBlock": "10.0.0.0/16", "GatewayId": "local",
         "Origin": "CreateRouteTable", "State": "active"}, *routes]}]}


GATEWAY_ROUTE = {"DestinationCidrBlock": POD_CIDR, "NetworkInterfaceId": ENI,
                 "Origin": "CreateRoute", "State": "blackhole"}


@pytest.fixture(scope="module")
def nowhere_client(aws_session):
    return aws_session.client("ec2", region_name=REGION, endpoint_url=NOWHERE)


@pytest.fixture
def stubbed(monkeypatch, nowhere_client):
    """A Stubber on the only EC2 client the provider can get."""
    only_client(monkeypatch, nowhere_client)
    with Stubber(nowhere_client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


def expect_delete(stubber: Stubber, destination: str = POD_CIDR) -> None:
    stubber.add_response("delete_route", {},
                         {"RouteTableId": TABLE, "DestinationCidrBlock": destination})


def test_route_already_gone_is_success(stubbed, api, pki, provider):
    stubbed.add_response("describe_route_tables", table_answer(GATEWAY_ROUTE),
                         {"RouteTableIds": [TABLE]})
    stubbed.add_client_error("delete_route", "InvalidRoute.NotFound", "no route", 400,
                             {"RouteTableId": TABLE, "DestinationCidrBlock": POD_CIDR})
    provider.delete(RESOURCE_ID, props_for(api.url, pki, [TABLE]))


def test_a_table_the_api_returns_but_was_not_listed_is_left_alone(stubbed, api, pki, provider):
    other = {"RouteTableId": "rtb-0ccccccccccccccc1", "VpcId": "vpc-01",
             "Routes": [GATEWAY_ROUTE]}
    answer = table_answer(GATEWAY_ROUTE)
    answer["RouteTables"].append(other)
    stubbed.add_response("describe_route_tables", answer, {"RouteTableIds": [TABLE]})
    expect_delete(stubbed)  # and nothing else: the Stubber refuses any other call
    provider.delete(RESOURCE_ID, props_for(api.url, pki, [TABLE]))


def test_throttled_calls_are_retried(stubbed, api, pki, provider):
    stubbed.add_client_error("describe_route_tables", "RequestLimitExceeded", "slow down", 503,
                             {"RouteTableIds": [TABLE]})
    stubbed.add_response("describe_route_tables", table_answer(GATEWAY_ROUTE),
                         {"RouteTableIds": [TABLE]})
    stubbed.add_client_error("delete_route", "Throttling", "Rate exceeded", 400,
                             {"RouteTableId": TABLE, "DestinationCidrBlock": POD_CIDR})
    stubbed.add_client_error("delete_route", "InternalError", "oops", 500,
                             {"RouteTableId": TABLE, "DestinationCidrBlock": POD_CIDR})
    expect_delete(stubbed)
    provider.delete(RESOURCE_ID, props_for(api.url, pki, [TABLE]))


def test_persistent_failure_names_the_route_and_the_command(stubbed, api, pki, provider):
    api.plant_object("cilium.io/v2", PLURAL, VTEP)
    stubbed.add_response("describe_route_tables", table_answer(GATEWAY_ROUTE),
                         {"RouteTableIds": [TABLE]})
    for _ in range(provider.attempts):
        stubbed.add_client_error("delete_route", "InternalError", "oops", 500,
                                 {"RouteTableId": TABLE, "DestinationCidrBlock": POD_CIDR})
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, props_for(api.url, pki, [TABLE]))

    message = str(raised.value)
    assert f"route {POD_CIDR} in route table {TABLE}" in message
    assert "InternalError" in message
    assert (f"aws ec2 delete-route --region {REGION} --route-table-id {TABLE} "
            f"--destination-cidr-block {POD_CIDR}") in message
    assert "kubectl" not in message and "CiliumVTEPConfig" not in message
    # The Kubernetes part ran anyway.
    assert not api.has_object(GROUP, PLURAL, VTEP)


def test_unreadable_table_is_reported_and_kubernetes_still_runs(stubbed, api, pki, provider):
    api.plant_object("cilium.io/v2", PLURAL, VTEP)
    stubbed.add_client_error("describe_route_tables", "UnauthorizedOperation", "denied", 403,
                             {"RouteTableIds": [TABLE]})
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, props_for(api.url, pki, [TABLE]))

    message = str(raised.value)
    assert f"route table {TABLE} ({REGION}) could not be read: UnauthorizedOperation" in message
    assert f"aws ec2 describe-route-tables --region {REGION} --route-table-ids {TABLE}" in message
    assert "aws ec2 delete-route" in message
    assert not api.has_object(GROUP, PLURAL, VTEP)


def test_ec2_part_blowing_up_still_runs_the_kubernetes_part(api, pki, provider, monkeypatch):
    def no_client(*_args, **_kwargs):
        raise RuntimeError("no EC2 client today")

    monkeypatch.setattr(boto3, "client", no_client)
    api.plant_object("cilium.io/v2", PLURAL, VTEP)
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, props_for(api.url, pki, [TABLE, "rtb-0ddddddddddddddd1"]))

    message = str(raised.value)
    assert f"route table {TABLE} ({REGION}) could not be read: RuntimeError" in message
    assert "route table rtb-0ddddddddddddddd1" in message
    assert "kubectl" not in message
    assert not api.has_object(GROUP, PLURAL, VTEP)


# --- Kubernetes part (fake HTTPS API server) ------------------------------------------------

VTEP_PATH = "/apis/cilium.io/{}/ciliumvtepconfigs/" + VTEP


def deletes(api: FakeApiServer) -> list[tuple[str, int]]:
    return [(r.path, r.status) for r in api.of("DELETE")]


def test_vtep_config_at_v2_is_deleted(ec2, api, pki, provider):
    vpc = plant_vpc(ec2, with_decoys=False)
    api.plant_object("cilium.io/v2", PLURAL, VTEP)
    api.plant_object("cilium.io/v2", PLURAL, "someone-elses")
    provider.delete(RESOURCE_ID, props_for(api.url, pki, vpc.listed))

    assert deletes(api) == [(VTEP_PATH.format("v2"), 200)]
    assert not api.has_object(GROUP, PLURAL, VTEP)
    assert api.has_object(GROUP, PLURAL, "someone-elses")
    assert_authorized(api)


def test_vtep_config_served_only_at_v2alpha1_is_deleted_there(ec2, api, pki, provider):
    vpc = plant_vpc(ec2, with_decoys=False)
    api.plant_object("cilium.io/v2alpha1", PLURAL, VTEP)
    provider.delete(RESOURCE_ID, props_for(api.url, pki, vpc.listed))

    assert deletes(api) == [(VTEP_PATH.format("v2"), 404), (VTEP_PATH.format("v2alpha1"), 200)]
    assert not api.has_object(GROUP, PLURAL, VTEP)
    assert_authorized(api)


def test_absent_vtep_config_is_success(ec2, api, pki, provider):
    vpc = plant_vpc(ec2, with_decoys=False)
    api.served |= {"cilium.io/v2", "cilium.io/v2alpha1"}
    provider.delete(RESOURCE_ID, props_for(api.url, pki, vpc.listed))
    assert deletes(api) == [(VTEP_PATH.format("v2"), 404), (VTEP_PATH.format("v2alpha1"), 404)]


def test_vtep_delete_retries_a_503(ec2, api, pki, provider):
    vpc = plant_vpc(ec2, with_decoys=False)
    api.plant_object("cilium.io/v2", PLURAL, VTEP)
    api.fail_next = [503]
    provider.delete(RESOURCE_ID, props_for(api.url, pki, vpc.listed))
    assert deletes(api) == [(VTEP_PATH.format("v2"), 503), (VTEP_PATH.format("v2"), 200)]
    assert not api.has_object(GROUP, PLURAL, VTEP)


def test_unreachable_api_server_raises_with_kubectl_hint_after_the_routes(
        ec2, pki, provider):
    vpc = plant_vpc(ec2, with_decoys=False)
    before = vpc.all_routes()
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, props_for(closed_port_url(), pki, vpc.listed))

    message = str(raised.value)
    assert f"CiliumVTEPConfig {VTEP}" in message
    assert f"kubectl delete ciliumvtepconfig {VTEP}" in message
    assert "aws ec2 delete-route" not in message
    # The EC2 part ran and finished.
    assert vpc.all_routes() == expected_after_cleanup(vpc, before)


# --- create, diff, update -------------------------------------------------------------------

def test_create_is_pure(pki, provider, monkeypatch):
    forbid_network(monkeypatch)
    props = props_for("https://eks.example.invalid", pki, ["rtb-01", "rtb-02"])
    created = provider.create(props)
    assert created.id == RESOURCE_ID
    assert created.outs == props


@pytest.mark.parametrize("change, match", [
    ({"routeTableIds": []}, "routeTableIds"),
    ({"routeTableIds": None}, "routeTableIds"),
    ({"routeTableIds": ["subnet-01"]}, "routeTableIds"),
    ({"podCidrs": []}, "podCidrs"),
    ({"podCidrs": ["172.17.0.0/33"]}, "172.17.0.0/33"),
    ({"podCidrs": ["not-a-cidr"]}, "not-a-cidr"),
    ({"podCidrs": ["172.17.0.0"]}, "172.17.0.0"),
    ({"podCidrs": ["172.17.0.1/16"]}, "172.17.0.1/16"),
    ({"podCidrs": ["fd00::/64"]}, "IPv4"),
    ({"clusterName": ""}, "clusterName"),
    ({"endpoint": "http://127.0.0.1:1"}, "https"),
])
def test_create_refuses_bad_props(pki, provider, change, match):
    props = {**props_for("https://eks.example.invalid", pki, ["rtb-01"]), **change}
    with pytest.raises(ValueError, match=match):
        provider.create(props)


def test_diff_replaces_on_what_to_clean_and_updates_on_how_to_reach_it(pki, provider):
    olds = {**props_for("https://eks.example.invalid", pki, ["rtb-01", "rtb-02"]),
            "__provider": "code"}
    for key, value in [("routeTableIds", ["rtb-01"]), ("routeTableIds", ["rtb-01", "rtb-03"]),
                       ("podCidrs", [POD_CIDR]), ("region", "us-west-2"),
                       ("clusterName", "other"), ("vtepConfigName", "other")]:
        diff = provider.diff(RESOURCE_ID, olds, {**olds, key: value})
        assert diff.changes and diff.replaces == [key], key
        assert not diff.delete_before_replace
    for key, value in [("endpoint", "https://new.example.invalid"),
                       ("certificateAuthority", "Q0E=")]:
        diff = provider.diff(RESOURCE_ID, olds, {**olds, key: value})
        assert diff.changes and diff.replaces == [], key
    # Order of tables and CIDRs does not matter.
    reordered = {**olds, "routeTableIds": ["rtb-02", "rtb-01"],
                 "podCidrs": list(reversed(olds["podCidrs"]))}
    assert not provider.diff(RESOURCE_ID, olds, reordered).changes
    assert not provider.diff(RESOURCE_ID, olds, dict(olds)).changes
    # New provider code alone is an update, so destroy runs the latest delete().
    diff = provider.diff(RESOURCE_ID, olds, {**olds, "__provider": "new code"})
    assert diff.changes and diff.replaces == []

    props = {k: v for k, v in olds.items() if k != "__provider"}
    news = {**props, "endpoint": "https://new.example.invalid"}
    assert provider.update(RESOURCE_ID, props, news).outs == news


# --- the pickled provider in a fresh process ------------------------------------------------

@pytest.fixture
def moto_server(monkeypatch):
    """A moto server on 127.0.0.1 (an ephemeral port), in a thread of this process."""
    yield from serve_moto(monkeypatch)


def test_pickled_provider_deletes_in_a_fresh_process(moto_server, api, pki, provider):
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_server)
    vpc = plant_vpc(ec2, with_decoys=False)
    ec2.create_route(RouteTableId=vpc.listed[0], DestinationCidrBlock="192.168.50.0/24",
                     NetworkInterfaceId=vpc.eni)
    api.plant_object("cilium.io/v2alpha1", PLURAL, VTEP)
    before = vpc.all_routes()

    # The EC2 endpoint only: the EKS token must still be a presigned URL for the real STS
    # host (the API server's authenticator accepts nothing else; presigning is local).
    env = {**FAKE_AWS_ENV, "AWS_ENDPOINT_URL_EC2": moto_server}
    done = run_pickled(provider, "delete", RESOURCE_ID, props_for(api.url, pki, vpc.listed),
                       env=env, timeout=30)
    assert result_of(done) is None

    after = vpc.all_routes()
    assert after == expected_after_cleanup(vpc, before)
    assert ("192.168.50.0/24", vpc.eni) in after[vpc.listed[0]]
    assert (POD_CIDR, vpc.eni) in after[vpc.unlisted]
    assert not api.has_object(GROUP, PLURAL, VTEP)
    assert_authorized(api)


# --- the resource ---------------------------------------------------------------------------

def test_resource_registers_public_outputs(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(
        "import pulumi\n"
        "from components.cleanup.gateway_routes import GatewayRouteCleanup\n"
        "res = GatewayRouteCleanup('gateway-routes', region='r',\n"
        "    route_table_ids=['rtb-01', pulumi.Output.from_input('rtb-02')],\n"
        "    pod_cidrs=['172.17.0.0/16'], cluster_name='c', endpoint='https://e',\n"
        "    certificate_authority=pulumi.Output.secret('Q0E='))\n"
        "pulumi.export('out', pulumi.Output.all(res.region, res.routeTableIds, res.podCidrs,\n"
        "    res.clusterName, res.endpoint, res.certificateAuthority, res.vtepConfigName))\n")
    run = run_program({"aws:region": REGION}, program=program)
    [reg] = run.of_type("pulumi-python:dynamic/cleanup:GatewayRoutes")
    assert reg.name == "gateway-routes"
    assert reg.inputs["certificateAuthority"] == "Q0E="
    assert reg.inputs["routeTableIds"] == ["rtb-01", "rtb-02"]
    assert reg.inputs["vtepConfigName"] == "hybrid-gateway"
    assert not isinstance(reg.inputs["__provider"], Secret)
    assert run.outputs["out"] == ["r", ["rtb-01", "rtb-02"], ["172.17.0.0/16"], "c",
                                  "https://e", "Q0E=", "hybrid-gateway"]
