"""The leftovers audit (ops/leftovers/audit.py) and its command (python -m ops.leftovers).

AWS is moto: in-process (``mock_aws``) for the checks and the command's ``main``, a moto server
on 127.0.0.1 for the real command in a fresh process (``AWS_ENDPOINT_URL``, fake keys). The
scenery is planted once per module (the audit only reads): this stack's leftovers next to
look-alikes that must not be listed — another stack's lab tag, another cluster's Karpenter
tags, an untagged VPC with a route to the same pod CIDR, another log group, other queues and
keys. The fresh process audits the same planted account through the server (a
ThreadedMotoServer and ``mock_aws`` act on the same state); another moto account, reached
through ``AssumeRole``, stands for an empty account.

Where moto differs from AWS:
- no ``DescribeInstanceInformation`` (SSM managed instances), and ``InvalidResourceId`` for any
  tag call on a ``ManagedInstance``: the check is tested with a botocore Stubber, and for whole
  scans the ``managed_instances`` fixture answers both from planted instances, filtered by tag
  as AWS does;
- no ``ListInstanceProfileTags``: the Karpenter cleanup tests' fixture adds it;
- ``DescribeNatGateways`` and ``DescribeTransitGatewayAttachments`` ignore tag filters (the
  checks look at the tags again); transit gateway VPC attachments keep no tags (they are found
  through their lab-tagged transit gateway); a deleted NAT gateway keeps its network interface;
- every KMS key gets an RSA key pair (70 ms each): ``dev_account`` hands out a cached one.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import moto.kms.models
import dataclasses

import pytest

from offline.runner import config_from_stack_file
from stacks.costs import PRICES
from botocore.exceptions import ClientError
from botocore.stub import Stubber
from moto import mock_aws
from moto.core.responses import ActionResult
from moto.ssm.exceptions import InvalidResourceId
from moto.ssm.responses import SimpleSystemManagerResponse

from ops.leftovers import audit
from ops.leftovers.audit import Leftover, Report, Scope, find_managed_instances, scan
from ops.leftovers import cli as command
from tests.fake_kube_api import FAKE_AWS_ENV, REGION
from tests.fake_kube_api import fake_aws  # noqa: F401 (fixture)
from tests.test_cleanup_gateway_routes import (aws_session, moto_server,  # noqa: F401 (fixtures)
                                               quick_boto)
from tests.test_cleanup_karpenter_leftovers import (  # noqa: F401 (fixture)
    karpenter_tags, make_profile, make_role, make_template, moto_lists_instance_profile_tags,
    profile_tags, run_instances, tag_list)

PROJECT_DIR = Path(__file__).resolve().parents[1]
CLUSTER = "hybrid-lab"
OTHER_CLUSTER = "other-lab"
POD_CIDR = "172.17.0.0/16"
LAB_KEY = "eks-hybrid-lab:stack"
ACCOUNT = "123456789012"  # moto's default account: the planted one
EMPTY_ACCOUNT = "111111111111"
SERVICES = ("ec2", "iam", "logs", "sqs", "kms", "eks", "ssm")
NOWHERE = "http://127.0.0.1:9"  # closed port: a call that escaped the stubber fails fast
MOTO = {"core": {"mock_credentials": False, "reset_boto3_session": False}}


def lab(stack: str = "dev") -> dict[str, str]:
    return {LAB_KEY: f"eks-hybrid-lab/{stack}"}


def scope_for(stack: str = "dev", account: str | None = None) -> Scope:
    return Scope(stack=stack, region=REGION, cluster_name=CLUSTER, hybrid_pod_cidr=POD_CIDR,
                 lab_tag_key=LAB_KEY, lab_tag_value=f"eks-hybrid-lab/{stack}", account=account)


def cluster_arn(cluster: str = CLUSTER, account: str = ACCOUNT) -> str:
    return f"arn:aws:eks:{REGION}:{account}:cluster/{cluster}"


def write_stack_file(directory: Path, stack: str, **settings: str) -> Path:
    values = {"aws:region": REGION, "eks-hybrid-lab:clusterName": CLUSTER,
              "eks-hybrid-lab:hybridPodCidr": POD_CIDR, **settings}
    path = directory / f"Pulumi.{stack}.yaml"
    path.write_text("config:\n" + "".join(f"  {k}: {json.dumps(v)}\n" for k, v in values.items()))
    return path


def listed(leftovers: list[Leftover]) -> set[tuple[str, str]]:
    pairs = [(item.kind, item.id) for item in leftovers]
    assert len(pairs) == len(set(pairs)), f"listed twice: {pairs}"
    return set(pairs)


# --- SSM managed instances in moto -----------------------------------------------------------

class ManagedInstances:
    """SSM managed instances planted for the ``managed_instances`` fixture, per account."""

    def __init__(self) -> None:
        self.tags: dict[tuple[str, str], dict[str, str]] = {}

    def plant(self, account: str, instance_id: str, tags: dict[str, str]) -> None:
        self.tags[(account, instance_id)] = dict(tags)

    def of(self, account: str) -> dict[str, dict[str, str]]:
        return {i: tags for (a, i), tags in self.tags.items() if a == account}


@pytest.fixture(scope="module")
def managed_instance_store() -> ManagedInstances:
    return ManagedInstances()


@pytest.fixture(autouse=True)
def managed_instances(monkeypatch, managed_instance_store) -> ManagedInstances:
    """moto 5.2.5 has no DescribeInstanceInformation and answers InvalidResourceId to any tag
    call on a ManagedInstance: answer both (in-process mock and threaded server alike) from the
    planted instances of the caller's account, keeping those whose tags match every ``tag:``
    filter, as AWS does."""
    store = managed_instance_store
    moto_list_tags = SimpleSystemManagerResponse.list_tags_for_resource

    def describe_instance_information(self) -> ActionResult:
        filters = self._get_param("Filters") or []
        if any(not f["Key"].startswith("tag:") for f in filters):
            raise NotImplementedError(f"filters {filters}")
        return ActionResult({"InstanceInformationList": [
            {"InstanceId": instance_id, "PingStatus": "ConnectionLost",
             "ResourceType": "ManagedInstance", "ComputerName": f"host-{instance_id[-4:]}",
             "IPAddress": "172.16.0.10", "ActivationId": "act-1"}
            for instance_id, tags in store.of(self.current_account).items()
            if all(tags.get(f["Key"][4:]) in f["Values"] for f in filters)]})

    def list_tags_for_resource(self) -> ActionResult:
        if self._get_param("ResourceType") != "ManagedInstance":
            return moto_list_tags(self)
        tags = store.of(self.current_account).get(self._get_param("ResourceId"))
        if tags is None:
            raise InvalidResourceId()
        return ActionResult({"TagList": tag_list(tags)})

    monkeypatch.setattr(SimpleSystemManagerResponse, "describe_instance_information",
                        describe_instance_information, raising=False)
    monkeypatch.setattr(SimpleSystemManagerResponse, "list_tags_for_resource",
                        list_tags_for_resource)
    return store


# --- the scenery -----------------------------------------------------------------------------

def plant(clients: dict[str, Any], managed: ManagedInstances, account: str = ACCOUNT,
          stack: str = "dev") -> set[tuple[str, str]]:
    """This stack's leftovers and the look-alikes around them. Returns (kind, id) of every
    leftover the audit must list."""
    ec2, iam, logs, sqs, kms, eks = (clients[s] for s in SERVICES[:-1])
    ours, other = lab(stack), lab("prod")

    def spec(resource_type: str, tags: dict[str, str]) -> list[dict[str, Any]]:
        return [{"ResourceType": resource_type, "Tags": tag_list(tags)}] if tags else []

    def vpc_with_route(tags: dict[str, str], cidr: str) -> tuple[str, str, str, str]:
        vpc = ec2.create_vpc(CidrBlock=cidr, TagSpecifications=spec("vpc", tags))["Vpc"]["VpcId"]
        subnet = ec2.create_subnet(VpcId=vpc, CidrBlock=cidr.replace(".0.0/16", ".1.0/24"))[
            "Subnet"]["SubnetId"]
        eni = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"][
            "NetworkInterfaceId"]
        table = ec2.create_route_table(VpcId=vpc)["RouteTable"]["RouteTableId"]
        ec2.create_route(RouteTableId=table, DestinationCidrBlock=POD_CIDR,
                         NetworkInterfaceId=eni)
        return vpc, subnet, eni, table

    def nat(subnet: str, tags: dict[str, str]) -> tuple[str, str]:
        allocation = ec2.allocate_address(
            Domain="vpc", TagSpecifications=spec("elastic-ip", tags))["AllocationId"]
        nat_id = ec2.create_nat_gateway(
            SubnetId=subnet, AllocationId=allocation,
            TagSpecifications=spec("natgateway", tags))["NatGateway"]["NatGatewayId"]
        return nat_id, allocation

    expected: set[tuple[str, str]] = set()

    # The lab's VPC: the gateway's route and a sub-block over the TGW, a NAT gateway, its EIP.
    vpc, subnet, eni, table = vpc_with_route(ours, "10.0.0.0/16")
    nat_id, allocation = nat(subnet, ours)
    tgw = ec2.create_transit_gateway(TagSpecifications=spec("transit-gateway", ours))[
        "TransitGateway"]["TransitGatewayId"]
    attachment = ec2.create_transit_gateway_vpc_attachment(
        TransitGatewayId=tgw, VpcId=vpc, SubnetIds=[subnet])[
        "TransitGatewayVpcAttachment"]["TransitGatewayAttachmentId"]
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="172.17.32.0/20",
                     TransitGatewayId=tgw)
    ec2.create_route(RouteTableId=table, DestinationCidrBlock="172.16.0.0/16",
                     TransitGatewayId=tgw)  # the hybrid node CIDR: not a pod route
    expected |= {("VPC", vpc), ("NAT gateway", nat_id), ("Elastic IP", allocation),
                 ("transit gateway", tgw), ("TGW attachment", attachment),
                 ("route", f"{table}:{POD_CIDR}"), ("route", f"{table}:172.17.32.0/20")}
    # A NAT gateway of the lab that is deleted (its untagged EIP is not ours either).
    gone_nat, _ = nat(subnet, {})
    ec2.delete_nat_gateway(NatGatewayId=gone_nat)
    # Every interface in the lab's VPC (the planted one, the NAT gateways', the attachment's).
    expected |= {("network interface", e["NetworkInterfaceId"]) for e in
                 ec2.describe_network_interfaces(
                     Filters=[{"Name": "vpc-id", "Values": [vpc]}])["NetworkInterfaces"]}
    assert ("network interface", eni) in expected

    # Instances: a hybrid host (lab tag) and a Karpenter node of this cluster without it.
    host = run_instances(ec2, {**ours, "Name": "hybrid-0"})[0]
    burst = run_instances(ec2, karpenter_tags(CLUSTER))[0]
    expected |= {("EC2 instance", host), ("EC2 instance", burst)}
    ec2.terminate_instances(InstanceIds=run_instances(ec2, ours))

    # Launch templates and the instance profile of this cluster's Karpenter.
    expected.add(("launch template",
                  make_template(ec2, "karpenter.k8s.aws/hybrid-lab", karpenter_tags(CLUSTER))))
    expected.add(("launch template", make_template(ec2, "lab-gateway-nodes", ours)))
    make_role(iam, "hybrid-lab-karpenter-node")
    make_profile(iam, "hybrid-lab_1234", profile_tags(CLUSTER, REGION),
                 "hybrid-lab-karpenter-node")
    expected.add(("instance profile", "hybrid-lab_1234"))

    # The control-plane log group, the interruption queue (untagged), a lab-tagged queue.
    logs.create_log_group(logGroupName=f"/aws/eks/{CLUSTER}/cluster", tags=ours)
    sqs.create_queue(QueueName=f"{CLUSTER}-karpenter")
    sqs.create_queue(QueueName="lab-notes", tags=ours)
    expected |= {("log group", f"/aws/eks/{CLUSTER}/cluster"),
                 ("SQS queue", f"{CLUSTER}-karpenter"), ("SQS queue", "lab-notes")}

    # KMS: a lab key in use; a lab key pending deletion is not a leftover.
    lab_key = [{"TagKey": LAB_KEY, "TagValue": ours[LAB_KEY]}]
    expected.add(("KMS key", kms.create_key(Tags=lab_key)["KeyMetadata"]["KeyId"]))
    kms.schedule_key_deletion(KeyId=kms.create_key(Tags=lab_key)["KeyMetadata"]["KeyId"],
                              PendingWindowInDays=7)

    # The cluster itself, and two hybrid hosts' SSM registrations: one through the
    # EKSClusterARN tag the activation copies, one with only the lab tag.
    eks.create_cluster(name=CLUSTER, roleArn=f"arn:aws:iam::{account}:role/eks",
                       resourcesVpcConfig={"subnetIds": [subnet]}, tags=ours)
    managed.plant(account, "mi-0aaaaaaaaaaaaaaa1", {"EKSClusterARN": cluster_arn(account=account)})
    managed.plant(account, "mi-0aaaaaaaaaaaaaaa2", ours)
    expected |= {("EKS cluster", CLUSTER), ("SSM managed instance", "mi-0aaaaaaaaaaaaaaa1"),
                 ("SSM managed instance", "mi-0aaaaaaaaaaaaaaa2")}

    # --- look-alikes that are not this stack's --------------------------------------------
    # Another stack's VPC with the same pod route, its NAT gateway, EIP and transit gateway.
    other_vpc, other_subnet, _, _ = vpc_with_route(other, "10.1.0.0/16")
    nat(other_subnet, other)
    other_tgw = ec2.create_transit_gateway(TagSpecifications=spec("transit-gateway", other))[
        "TransitGateway"]["TransitGatewayId"]
    ec2.create_transit_gateway_vpc_attachment(TransitGatewayId=other_tgw, VpcId=other_vpc,
                                              SubnetIds=[other_subnet])
    # An untagged VPC with a route to the same CIDR — but a lab-tagged route table in it is
    # the lab's — and an unused untagged EIP.
    plain_vpc, _, plain_eni, _ = vpc_with_route({}, "10.2.0.0/16")
    tagged_table = ec2.create_route_table(VpcId=plain_vpc, TagSpecifications=spec(
        "route-table", ours))["RouteTable"]["RouteTableId"]
    ec2.create_route(RouteTableId=tagged_table, DestinationCidrBlock="172.17.64.0/24",
                     NetworkInterfaceId=plain_eni)
    expected.add(("route", f"{tagged_table}:172.17.64.0/24"))
    ec2.allocate_address(Domain="vpc")
    # Instances: another cluster's Karpenter node; one tagged for this cluster by another
    # stack (the same cluster name); a managed node group's node; another stack's host.
    run_instances(ec2, karpenter_tags(OTHER_CLUSTER))
    run_instances(ec2, karpenter_tags(CLUSTER, **other))
    run_instances(ec2, {f"kubernetes.io/cluster/{CLUSTER}": "owned",
                        "eks:nodegroup-name": "system"})
    run_instances(ec2, other)
    make_template(ec2, "karpenter.k8s.aws/other-lab", karpenter_tags(OTHER_CLUSTER))
    make_template(ec2, "prod-gateway-nodes", other)
    make_role(iam, "other-node")
    make_profile(iam, "hybrid-lab_uswest2", profile_tags(CLUSTER, "us-west-2"), "other-node")
    make_profile(iam, "other-lab_1234", profile_tags(OTHER_CLUSTER, REGION), "other-node")
    logs.create_log_group(logGroupName=f"/aws/eks/{OTHER_CLUSTER}/cluster")
    logs.create_log_group(logGroupName=f"/aws/eks/{CLUSTER}/cluster-archive")
    sqs.create_queue(QueueName=f"{OTHER_CLUSTER}-karpenter")
    sqs.create_queue(QueueName=f"{CLUSTER}-karpenter-dlq")
    sqs.create_queue(QueueName="prod-notes", tags=other)
    kms.create_key(Tags=[{"TagKey": LAB_KEY, "TagValue": other[LAB_KEY]}])
    kms.create_key(Description="someone else's")
    eks.create_cluster(name=OTHER_CLUSTER, roleArn=f"arn:aws:iam::{account}:role/eks",
                       resourcesVpcConfig={"subnetIds": [other_subnet]})
    managed.plant(account, "mi-0bbbbbbbbbbbbbbb1",
                  {"EKSClusterARN": cluster_arn(OTHER_CLUSTER, account)})
    managed.plant(account, "mi-0bbbbbbbbbbbbbbb2", other)
    return expected


@dataclass
class Scanned:
    report: Report
    calls: list[str]  # the AWS operations it called


@dataclass
class Account:
    session: Any
    expected: set[tuple[str, str]]
    scanned: Scanned | None = None


class SharedClients:
    """The module's boto3 session, handing out one client per service and settings (config
    settings by value: the audit makes a Config per client) for every scan of the module.
    Speed only: an EC2 client costs ~20 ms to make, and each scan made one. ``listeners``
    hear every call of every client (a session's own handlers reach only clients made after
    they were registered)."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.clients: dict[tuple, Any] = {}
        self.listeners: list[Callable[..., None]] = []

    def _heard(self, **event: Any) -> None:
        for listener in list(self.listeners):
            listener(**event)

    def client(self, service: str, **kwargs: Any) -> Any:
        config = kwargs.get("config")
        key = (service, repr(sorted((k, v) for k, v in kwargs.items() if k != "config")),
               repr(sorted(config._user_provided_options.items())) if config else None)
        if key not in self.clients:
            client = self.session.client(service, **kwargs)
            client.meta.events.register("before-call", self._heard, unique_id="test-listeners")
            self.clients[key] = client
        return self.clients[key]


class AccountSession:
    """Clients of the shared session (models loaded once) with another account's keys."""

    def __init__(self, session: Any, credentials: dict[str, str]) -> None:
        self.session, self.credentials = session, credentials

    def client(self, service: str, **kwargs: Any) -> Any:
        return self.session.client(
            service, aws_access_key_id=self.credentials["AccessKeyId"],
            aws_secret_access_key=self.credentials["SecretAccessKey"],
            aws_session_token=self.credentials["SessionToken"], **kwargs)


def assume(session: Any, account: str, **kwargs: Any) -> dict[str, str]:
    """Keys of another moto account (moto maps them to ``account``)."""
    return session.client("sts", region_name=REGION, **kwargs).assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/auditor", RoleSessionName="leftovers")[
        "Credentials"]


@pytest.fixture(scope="module")
def dev_account(aws_session, managed_instance_store):
    """moto in-process for the rest of the module, with the scenery of stack dev planted in
    the default account. Tests only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_REGION",
                     *(f"AWS_ENDPOINT_URL_{s.upper()}" for s in SERVICES + ("sts",))):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
        # Speed only: one RSA key pair per key spec instead of one per KMS key.
        monkeypatch.setattr(moto.kms.models, "generate_private_key", functools.lru_cache(
            moto.kms.models.generate_private_key))
        with mock_aws(config=MOTO):
            clients = {s: aws_session.client(s, region_name=REGION) for s in SERVICES}
            yield Account(SharedClients(aws_session), plant(clients, managed_instance_store))


@pytest.fixture
def empty_account(dev_account) -> AccountSession:
    """Another account of the same moto, with nothing in it."""
    return AccountSession(dev_account.session, assume(dev_account.session, EMPTY_ACCOUNT))


@pytest.fixture
def dev_scan(dev_account, managed_instances, moto_lists_instance_profile_tags) -> Scanned:
    """One scan of stack dev's account (made once, the account does not change), with every
    AWS operation it called. Function-scoped for moto's missing operations, which the
    function-scoped fixtures add."""
    if dev_account.scanned is None:
        calls: list[str] = []

        def record(model, **_):
            calls.append(model.name)

        dev_account.session.listeners.append(record)
        try:
            report = scan(dev_account.session, scope_for())
        finally:
            dev_account.session.listeners.remove(record)
        dev_account.scanned = Scanned(report, calls)
    return dev_account.scanned


# --- the checks, in-process ------------------------------------------------------------------

def test_scan_lists_exactly_this_stacks_leftovers_with_read_only_calls(dev_account, dev_scan):
    report, calls = dev_scan.report, dev_scan.calls
    assert report.errors == []
    assert report.scope.account == ACCOUNT
    assert listed(report.leftovers) == dev_account.expected
    # Every check found something: nothing is trivially in scope by finding nothing.
    assert len({item.kind for item in report.leftovers}) == len(audit.CHECKS)
    assert "GetCallerIdentity" in calls and "DescribeInstanceInformation" in calls
    assert [c for c in calls if not c.startswith(("Describe", "List", "Get"))] == []


def test_costs_and_commands(dev_scan):
    report = dev_scan.report
    by_kind: dict[str, list[Leftover]] = {}
    for item in report.leftovers:
        by_kind.setdefault(item.kind, []).append(item)
    costs = {kind: {item.hourly_usd for item in items} for kind, items in by_kind.items()}
    assert costs == {
        "EKS cluster": {0.10}, "NAT gateway": {0.045}, "Elastic IP": {0.005},
        "TGW attachment": {0.05}, "transit gateway": {0.0}, "EC2 instance": {0.0816},
        "KMS key": {1 / 730}, "SSM managed instance": {None}, "log group": {None},
        "route": {0.0}, "network interface": {0.0}, "launch template": {0.0},
        "instance profile": {0.0}, "SQS queue": {0.0}, "VPC": {0.0}}
    total, unknown = report.total_hourly_usd()
    assert unknown == 3
    assert total == pytest.approx(0.10 + 0.045 + 0.005 + 0.05 + 2 * 0.0816 + 1 / 730)

    profile, = by_kind["instance profile"]
    assert profile.region == "global"
    assert profile.remove == (
        "aws iam remove-role-from-instance-profile --instance-profile-name hybrid-lab_1234 "
        "--role-name hybrid-lab-karpenter-node && "
        "aws iam delete-instance-profile --instance-profile-name hybrid-lab_1234")
    assert {item.remove for item in by_kind["SSM managed instance"]} == {
        f"aws ssm deregister-managed-instance --region {REGION} --instance-id {i}"
        for i in ("mi-0aaaaaaaaaaaaaaa1", "mi-0aaaaaaaaaaaaaaa2")}
    route = next(i for i in by_kind["route"] if i.id.endswith(f":{POD_CIDR}"))
    assert route.remove == (f"aws ec2 delete-route --region {REGION} --route-table-id "
                            f"{route.id.split(':')[0]} --destination-cidr-block {POD_CIDR}")
    assert all(item.remove and item.detail for item in report.leftovers)


def test_another_stack_with_the_same_cluster_name(dev_account, dev_scan):
    """Stack prod, looking at the same account with the same cluster name: its own lab-tagged
    things and what only the cluster name tells apart, but nothing that carries dev's tag."""
    report = scan(dev_account.session, scope_for("prod"))
    assert report.errors == []
    found = listed(report.leftovers)
    # Tagged for the cluster only (Karpenter's, the interruption queue, a registration through
    # EKSClusterARN): whichever stack uses the name may have made them.
    by_name_only = {(item.kind, item.id) for item in dev_scan.report.leftovers
                    if "Karpenter" in item.detail or item.id == "mi-0aaaaaaaaaaaaaaa1"}
    assert len(by_name_only) == 5
    assert found & dev_account.expected == by_name_only
    assert {("SSM managed instance", "mi-0bbbbbbbbbbbbbbb2"), ("SQS queue", "prod-notes"),
            ("launch template", next(i.id for i in report.leftovers
                                     if i.detail.startswith("prod-gateway-nodes")))} <= found
    assert {kind for kind, _ in found} >= {"VPC", "NAT gateway", "Elastic IP", "route",
                                           "transit gateway", "TGW attachment", "KMS key",
                                           "EC2 instance"}


def test_a_failing_check_is_reported_and_the_others_still_run(dev_account):
    def denied(_session, _scope):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "not allowed"}},
                          "ListInstanceProfiles")

    report = scan(dev_account.session, scope_for(), checks=[
        ("instance profiles", denied), ("SQS queues", audit.find_queues)])
    assert report.errors == [("instance profiles", "AccessDenied: not allowed")]
    assert listed(report.leftovers) == {("SQS queue", f"{CLUSTER}-karpenter"),
                                        ("SQS queue", "lab-notes")}
    assert not report.clean and not report.complete


# --- SSM managed instances with a Stubber ----------------------------------------------------

class StubSession:
    """Hands out the given clients; a client not given means AWS must not be asked."""

    def __init__(self, **clients: Any) -> None:
        self.clients = clients

    def client(self, service: str, region_name: str | None = None, config: Any = None) -> Any:
        assert region_name == REGION, region_name
        return self.clients[service]


@pytest.fixture
def stubbed_ssm(aws_session):
    client = aws_session.client("ssm", region_name=REGION, endpoint_url=NOWHERE)
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def expect_describe(stubber: Stubber, key: str, value: str, *ids: str) -> None:
    stubber.add_response(
        "describe_instance_information",
        {"InstanceInformationList": [{"InstanceId": i, "PingStatus": "Online"} for i in ids]},
        {"Filters": [{"Key": key, "Values": [value]}], "MaxResults": 50})


def expect_tags(stubber: Stubber, instance_id: str, tags: dict[str, str]) -> None:
    stubber.add_response("list_tags_for_resource", {"TagList": tag_list(tags)},
                         {"ResourceType": "ManagedInstance", "ResourceId": instance_id})


def test_managed_instances_of_the_cluster_and_of_the_stack_are_found(stubbed_ssm):
    ssm, stubber = stubbed_ssm
    expect_describe(stubber, "tag:EKSClusterARN", cluster_arn(), "mi-1", "i-0123456789abcdef0")
    expect_describe(stubber, f"tag:{LAB_KEY}", "eks-hybrid-lab/dev", "mi-1", "mi-2", "mi-3")
    expect_tags(stubber, "mi-1", {"EKSClusterARN": cluster_arn(), **lab()})
    expect_tags(stubber, "mi-2", lab())
    # Returned by the API, but its tags say another stack: not listed.
    expect_tags(stubber, "mi-3", {"EKSClusterARN": cluster_arn(), **lab("prod")})

    found = find_managed_instances(StubSession(ssm=ssm), scope_for(account=ACCOUNT))
    assert [item.id for item in found] == ["mi-1", "mi-2"]
    assert all(item.kind == "SSM managed instance" and item.hourly_usd is None
               for item in found)


def test_no_managed_instances(stubbed_ssm):
    ssm, stubber = stubbed_ssm
    expect_describe(stubber, "tag:EKSClusterARN", cluster_arn())
    expect_describe(stubber, f"tag:{LAB_KEY}", "eks-hybrid-lab/dev")
    assert find_managed_instances(StubSession(ssm=ssm), scope_for(account=ACCOUNT)) == []


def test_a_registration_gone_in_between_is_not_listed(stubbed_ssm):
    ssm, stubber = stubbed_ssm
    expect_describe(stubber, "tag:EKSClusterARN", cluster_arn(), "mi-1")
    expect_describe(stubber, f"tag:{LAB_KEY}", "eks-hybrid-lab/dev")
    stubber.add_client_error("list_tags_for_resource", "InvalidResourceId")
    assert find_managed_instances(StubSession(ssm=ssm), scope_for(account=ACCOUNT)) == []


# --- the command, in-process -----------------------------------------------------------------

def test_command_prints_a_table_with_costs_and_commands(dev_account, tmp_path, capsys,
                                                        monkeypatch):
    scanned = []

    def recorded_scan(session, scope):
        scanned.append(scan(session, scope))
        return scanned[-1]

    # The report the command prints, kept to compare with what it printed (rather than a
    # second scan of the unchanged account).
    monkeypatch.setattr(command, "scan", recorded_scan)
    code = command.main(["--stack-file", str(write_stack_file(tmp_path, "dev"))],
                        session=dev_account.session)
    out = capsys.readouterr().out
    assert code == 1
    assert f"eks-hybrid-lab leftovers of stack dev in {REGION} (account {ACCOUNT})" in out
    header = next(line for line in out.splitlines() if line.startswith("KIND"))
    assert header.split() == ["KIND", "ID", "~$/h", "DETAIL"]
    assert out.count("  remove: ") == len(dev_account.expected)
    assert f"remove: aws ec2 delete-nat-gateway --region {REGION} --nat-gateway-id nat-" in out
    # The command prices with the lab's table (stacks/costs.py) for the stack's region.
    scope = command.scope_of(config_from_stack_file("dev", path=write_stack_file(tmp_path, "dev")))
    report, = scanned
    assert report.scope == dataclasses.replace(scope, account=ACCOUNT)
    total, unknown = report.total_hourly_usd()
    assert f" for {len(dev_account.expected)} leftovers; {unknown} of unknown cost." in out
    assert f"Total: ~${total:.4f}".rstrip("0") in out
    nat = [item for item in report.leftovers if item.kind == "NAT gateway"]
    assert nat and nat[0].hourly_usd == PRICES[REGION]["natGateway"].usd
    assert "Costs are approximate" in out


def test_command_on_an_empty_account_says_nothing_is_left(empty_account, tmp_path, capsys):
    stack_file = str(write_stack_file(tmp_path, "dev"))
    assert command.main(["--stack-file", stack_file], session=empty_account) == 0
    assert f"nothing of stack dev is left in {REGION}" in capsys.readouterr().out

    assert command.main(["--stack-file", stack_file, "--json"], session=empty_account) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["clean"], data["leftovers"], data["account"]) == (True, [], EMPTY_ACCOUNT)


@pytest.mark.parametrize("argv, message", [
    (["--stack", "no-such-stack"], "no stack file"),
    (["--stack", "../../etc/passwd"], "is not a stack name"),
    (["--stack-file", "{dir}/settings.yaml"], "pass --stack NAME"),
    (["--stack-file", "{dir}/Pulumi.bad.yaml"], "hybridPodCidr"),
    (["--stack-file", "{dir}/Pulumi.dev.yaml", "--region", "moon-1"], "aws:region"),
    (["--stack-file", "{dir}/Pulumi.broken.yaml"], "Pulumi.broken.yaml: not a Pulumi stack file"),
    (["--stack-file", "{dir}/Pulumi.list.yaml"], "Pulumi.list.yaml: not a Pulumi stack file"),
])
def test_bad_stack_or_config_exits_2_with_the_message(argv, message, tmp_path, capsys):
    write_stack_file(tmp_path, "dev")
    write_stack_file(tmp_path, "bad", **{"eks-hybrid-lab:hybridPodCidr": "8.8.8.0/24"})
    (tmp_path / "settings.yaml").write_text((tmp_path / "Pulumi.dev.yaml").read_text())
    (tmp_path / "Pulumi.broken.yaml").write_text("config: {aws:region: [\n")
    (tmp_path / "Pulumi.list.yaml").write_text("- config\n")
    argv = [arg.replace("{dir}", str(tmp_path)) for arg in argv]
    assert command.main(argv, session=StubSession()) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: ") and message in captured.err


def test_aws_that_cannot_be_queried_exits_2(aws_session, tmp_path, capsys):
    sts = aws_session.client("sts", region_name=REGION, endpoint_url=NOWHERE)
    with Stubber(sts) as stubber:
        stubber.add_client_error("get_caller_identity", "ExpiredToken",
                                 "The security token included in the request is expired")
        code = command.main(["--stack-file", str(write_stack_file(tmp_path, "dev"))],
                            session=StubSession(sts=sts))
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert f"cannot query AWS in {REGION} for stack dev: ExpiredToken" in captured.err


def test_an_incomplete_audit_exits_2(dev_account, monkeypatch, tmp_path, capsys):
    def broken(_session, _scope):
        raise ClientError({"Error": {"Code": "AccessDeniedException", "Message": "no"}},
                          "ListKeys")

    monkeypatch.setattr(audit, "CHECKS", (("KMS keys", broken),))
    code = command.main(["--stack-file", str(write_stack_file(tmp_path, "dev"))],
                        session=dev_account.session)
    captured = capsys.readouterr()
    assert code == 2
    assert "KMS keys: AccessDeniedException: no" in captured.out
    assert "nothing of stack" not in captured.out
    assert "1 of 1 checks could not run" in captured.err


# --- the command in a fresh process, against a moto server -----------------------------------

def test_command_in_a_fresh_process_against_a_moto_server(dev_account, fake_aws, moto_server,
                                                          tmp_path):
    """The real command, as a user runs it, auditing the planted account through the server."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("AWS_") and k.lower() not in ("http_proxy", "https_proxy",
                                                              "all_proxy")}
    env.update(FAKE_AWS_ENV, AWS_ENDPOINT_URL=moto_server, NO_PROXY="127.0.0.1,localhost")
    done = subprocess.run(
        [sys.executable, "-m", "ops.leftovers", "--stack-file",
         str(write_stack_file(tmp_path, "dev")), "--json"],
        cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)

    assert (data["clean"], data["complete"], data["errors"]) == (False, True, [])
    assert (data["stack"], data["region"], data["account"]) == ("dev", REGION, ACCOUNT)
    assert data["scope"] == {"lab_tag": {LAB_KEY: "eks-hybrid-lab/dev"},
                             "cluster_name": CLUSTER, "hybrid_pod_cidr": POD_CIDR}
    for item in data["leftovers"]:
        assert set(item) == {"kind", "id", "region", "detail", "hourly_usd", "remove"}
    assert {(item["kind"], item["id"]) for item in data["leftovers"]} == dev_account.expected
    known = [item["hourly_usd"] for item in data["leftovers"] if item["hourly_usd"] is not None]
    assert data["total_hourly_usd"] == pytest.approx(sum(known))
    assert data["unknown_cost_count"] == len(data["leftovers"]) - len(known) == 3
    assert "approximate" in data["cost_note"]
