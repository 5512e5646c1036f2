"""The destroy-time cleanup of what Karpenter leaves behind for a cluster: its EC2 instances,
launch templates and instance profiles.

EC2 and IAM are moto in-process (``mock_aws``), with thin wrappers on the client methods where
an exact sequence of answers matters (throttling, something gone between listing and deleting,
an API that ignores the filters); a moto server on 127.0.0.1 serves the pickled provider run in
a fresh process.

Where moto differs from AWS:
- it does not implement ``ListInstanceProfileTags`` (NotImplementedError): the
  ``moto_lists_instance_profile_tags`` fixture adds it, answering from the profile's tags;
- an instance is ``terminated`` as soon as ``TerminateInstances`` returns (AWS: ``shutting-down``
  for a while), so the waiting is exercised by making moto report ``shutting-down`` for a few
  looks;
- deleting a launch template id that does not exist answers
  ``InvalidLaunchTemplateName.NotFoundException``, where AWS answers
  ``InvalidLaunchTemplateId.NotFound``: both are covered;
- ``ListInstanceProfiles`` and ``ListInstanceProfileTags`` never paginate: pages are made by a
  wrapper.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core.responses import ActionResult
from moto.iam.responses import IamResponse

from components.cleanup.karpenter_leftovers import KarpenterLeftoverCleanupProvider
from offline.runner import Secret, run_program
from tests.fake_kube_api import FAKE_AWS_ENV, REGION
from tests.fake_kube_api import fake_aws  # noqa: F401 (fixture)
from tests.offline_guard import forbid_network
from tests.pickled_provider import result_of, run_pickled
from tests.test_cleanup_gateway_routes import (aws_session, moto_server,  # noqa: F401 (fixtures)
                                               quick_boto)
from tests.virtual_clock import VirtualClock

CLUSTER = "lab"
OTHER_CLUSTER = "other-lab"
OTHER_REGION = "us-west-2"
RESOURCE_ID = f"karpenter-leftovers-{CLUSTER}"
NODE_ROLE = "lab-karpenter-node"
OTHER_NODE_ROLE = "other-lab-karpenter-node"
NODEPOOL, NODECLASS = "karpenter.sh/nodepool", "karpenter.k8s.aws/ec2nodeclass"
INSTANCE_FILTERS = [
    {"Name": f"tag:kubernetes.io/cluster/{CLUSTER}", "Values": ["owned"]},
    {"Name": "tag-key", "Values": [NODEPOOL]},
    {"Name": "instance-state-name",
     "Values": ["pending", "running", "stopping", "stopped", "shutting-down"]},
]
TEMPLATE_FILTERS = [
    {"Name": f"tag:kubernetes.io/cluster/{CLUSTER}", "Values": ["owned"]},
    {"Name": "tag-key", "Values": [NODECLASS]},
]


def karpenter_tags(cluster: str = CLUSTER, **extra: str) -> dict[str, str]:
    """The tags Karpenter puts on an instance or launch template of ``cluster``."""
    return {f"kubernetes.io/cluster/{cluster}": "owned", NODEPOOL: "cloud-burst",
            "eks:eks-cluster-name": cluster, NODECLASS: "default", **extra}


def profile_tags(cluster: str = CLUSTER, region: str = REGION) -> dict[str, str]:
    """The tags Karpenter puts on an instance profile it creates for an EC2NodeClass."""
    return {f"kubernetes.io/cluster/{cluster}": "owned", "topology.kubernetes.io/region": region,
            "eks:eks-cluster-name": cluster, NODECLASS: "default"}


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def client_error(code: str, status: int = 400, operation: str = "Call") -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} (injected)"},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, operation)


# --- AWS scenery ----------------------------------------------------------------------------

def unwrapped(client: Any, method: str) -> Callable[..., Any]:
    """``client.<method>`` as botocore made it, past any ``wrap`` put on the client."""
    return getattr(type(client), method).__get__(client)


@dataclass
class Scenery:
    """What was planted; the methods read back what is left (past any ``wrap``)."""
    ec2: Any
    iam: Any
    ours: list[str] = field(default_factory=list)
    other_instances: dict[str, str] = field(default_factory=dict)
    our_template: str = ""
    other_templates: dict[str, str] = field(default_factory=dict)
    our_profile: str = ""
    other_profiles: list[str] = field(default_factory=list)
    node_role_stays_in: set[str] = field(default_factory=set)

    def states(self) -> dict[str, str]:
        ids = self.ours + list(self.other_instances.values())
        return {i["InstanceId"]: i["State"]["Name"]
                for r in unwrapped(self.ec2, "describe_instances")(InstanceIds=ids)[
                    "Reservations"]
                for i in r["Instances"]}

    def templates(self) -> set[str]:
        return {t["LaunchTemplateId"]
                for t in unwrapped(self.ec2, "describe_launch_templates")()[
                    "LaunchTemplates"]}

    def profiles(self) -> set[str]:
        return {p["InstanceProfileName"]
                for p in unwrapped(self.iam, "list_instance_profiles")()["InstanceProfiles"]}

    def assert_only_ours_are_gone(self) -> None:
        states = self.states()
        assert {i: states[i] for i in self.ours} == {i: "terminated" for i in self.ours}
        kept = {label: states[i] for label, i in self.other_instances.items()}
        assert "terminated" not in kept.values() and "shutting-down" not in kept.values(), kept
        assert self.templates() == set(self.other_templates.values())
        assert self.profiles() == set(self.other_profiles)
        # The node role stays (Pulumi deletes it next), still in the profiles that are not ours.
        assert {p["InstanceProfileName"] for p in unwrapped(
            self.iam, "list_instance_profiles_for_role")(RoleName=NODE_ROLE)[
            "InstanceProfiles"]} == self.node_role_stays_in


def run_instances(ec2, tags: dict[str, str], count: int = 1) -> list[str]:
    request: dict[str, Any] = {"ImageId": "ami-0123456789abcdef0", "MinCount": count,
                               "MaxCount": count, "InstanceType": "m7g.large"}
    if tags:
        request["TagSpecifications"] = [{"ResourceType": "instance", "Tags": tag_list(tags)}]
    return [i["InstanceId"] for i in ec2.run_instances(**request)["Instances"]]


def make_template(ec2, name: str, tags: dict[str, str]) -> str:
    return ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"InstanceType": "m7g.large"},
        TagSpecifications=[{"ResourceType": "launch-template", "Tags": tag_list(tags)}],
    )["LaunchTemplate"]["LaunchTemplateId"]


def make_role(iam, name: str) -> None:
    iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole"}]}))


def make_profile(iam, name: str, tags: dict[str, str], role: str | None,
                 path: str = "/") -> None:
    iam.create_instance_profile(InstanceProfileName=name, Path=path, Tags=tag_list(tags))
    if role:
        iam.add_role_to_instance_profile(InstanceProfileName=name, RoleName=role)


def plant(ec2, iam, decoys: bool = True) -> Scenery:
    """This cluster's Karpenter leftovers and, with ``decoys``, everything around them that
    must stay."""
    s = Scenery(ec2, iam)
    s.ours = run_instances(ec2, karpenter_tags(), count=2)
    s.our_template = make_template(ec2, "karpenter.k8s.aws/lab-default", karpenter_tags())
    make_role(iam, NODE_ROLE)
    s.our_profile = "lab_17052938479362819473"
    make_profile(iam, s.our_profile, profile_tags(), NODE_ROLE,
                 path=f"/karpenter/{REGION}/{CLUSTER}/0c1f6e2a/")
    if not decoys:
        return s

    s.other_instances = {label: run_instances(ec2, tags)[0] for label, tags in [
        ("other cluster", karpenter_tags(OTHER_CLUSTER)),
        ("untagged", {}),
        # A managed node group's node: this cluster's, not Karpenter's.
        ("cluster tag only", {f"kubernetes.io/cluster/{CLUSTER}": "owned",
                              "eks:eks-cluster-name": CLUSTER, "eks:nodegroup-name": "system"}),
        ("nodepool tag only", {NODEPOOL: "cloud-burst"}),
        # Contradictory tags: the EKS tag names another cluster.
        ("eks tag of another cluster",
         karpenter_tags(**{"eks:eks-cluster-name": OTHER_CLUSTER})),
    ]}
    s.other_templates = {label: make_template(ec2, name, tags) for label, name, tags in [
        ("other cluster", "karpenter.k8s.aws/other-default", karpenter_tags(OTHER_CLUSTER)),
        ("not Karpenter's", "lab-system-nodes", {f"kubernetes.io/cluster/{CLUSTER}": "owned"}),
        ("untagged", "someone-elses", {"team": "data"}),
        ("eks tag of another cluster", "karpenter.k8s.aws/confused",
         karpenter_tags(**{"eks:eks-cluster-name": OTHER_CLUSTER})),
    ]}
    make_role(iam, OTHER_NODE_ROLE)
    managed = {k: v for k, v in profile_tags().items() if k != NODECLASS}
    for name, tags, role in [
            # The same cluster name in another region: IAM is global.
            ("lab_uswest2", profile_tags(region=OTHER_REGION), NODE_ROLE),
            ("other-lab_1234", profile_tags(OTHER_CLUSTER), OTHER_NODE_ROLE),
            ("lab_managed", managed, NODE_ROLE),
            ("plain", {}, None)]:
        make_profile(iam, name, tags, role)
        s.other_profiles.append(name)
        if role == NODE_ROLE:
            s.node_role_stays_in.add(name)
    return s


@pytest.fixture(autouse=True)
def moto_lists_instance_profile_tags(monkeypatch):
    """moto 5.2.5 lacks ListInstanceProfileTags; answer it from the profile's tags (for the
    in-process mock and the threaded server alike: both use this class)."""
    def list_instance_profile_tags(self) -> ActionResult:
        profile = self.backend.get_instance_profile(self._get_param("InstanceProfileName"))
        return ActionResult({"Tags": list(profile.tags), "IsTruncated": False})

    monkeypatch.setattr(IamResponse, "list_instance_profile_tags", list_instance_profile_tags,
                        raising=False)


@pytest.fixture(scope="module")
def clients(aws_session):
    return {service: aws_session.client(service, region_name=REGION)
            for service in ("ec2", "iam")}


@pytest.fixture
def aws(monkeypatch, fake_aws, clients):
    """EC2 and IAM in moto, in-process; the module's clients are the only ones the provider
    can get (for REGION, default endpoints)."""
    monkeypatch.delenv("AWS_ENDPOINT_URL_IAM", raising=False)

    def fake_client(service, *args, **kwargs):
        # The cleanup's bounded client config (timeouts, retries) comes as ``config``.
        kwargs.pop("config", None)
        assert service in clients and (args, kwargs) == ((), {"region_name": REGION}), \
            (service, args, kwargs)
        return clients[service]

    monkeypatch.setattr(boto3, "client", fake_client)
    with mock_aws(config={"core": {"mock_credentials": False, "reset_boto3_session": False}}):
        yield clients


@pytest.fixture
def scenery(aws) -> Scenery:
    return plant(aws["ec2"], aws["iam"])


@pytest.fixture
def lean(aws) -> Scenery:
    """Only what is to go: for tests about how, not what."""
    return plant(aws["ec2"], aws["iam"], decoys=False)


@pytest.fixture
def provider() -> KarpenterLeftoverCleanupProvider:
    # Instance attributes, so they also travel with the pickled provider.
    p = KarpenterLeftoverCleanupProvider()
    p.retry_base_seconds = 0
    p.wait_seconds = 2
    p.poll_seconds = 0.001
    return p


PROPS = {"region": REGION, "clusterName": CLUSTER}


def looks_by_id(request: dict[str, Any]) -> bool:
    """A look of the provider's wait (not its listing)."""
    return request.get("Filters", [{}])[0].get("Name") == "instance-id"


def wrap(monkeypatch, client, method: str,
         around: Callable[..., Any] | None = None) -> list[dict[str, Any]]:
    """Puts ``around(real, **request)`` in place of ``client.<method>``; returns the list of
    requests it receives."""
    real = getattr(client, method)
    calls: list[dict[str, Any]] = []

    def wrapper(**request):
        calls.append(request)
        return around(real, **request) if around else real(**request)

    monkeypatch.setattr(client, method, wrapper)
    return calls


def failing(times: int, code: str, status: int = 400) -> Callable[..., Any]:
    """An ``around`` that fails ``times`` times with ``code``, then passes the calls on."""
    count = [0]

    def around(real, **request):
        count[0] += 1
        if count[0] <= times:
            raise client_error(code, status)
        return real(**request)

    return around


# --- delete: what goes and what stays -------------------------------------------------------

MUTATIONS = {"ec2": ("terminate_instances", "delete_launch_template"),
             "iam": ("remove_role_from_instance_profile", "delete_instance_profile")}


def test_removes_only_this_clusters_karpenter_leftovers(scenery, provider, monkeypatch):
    states = scenery.states()
    assert "terminated" not in states.values()
    assert scenery.profiles() == {scenery.our_profile, *scenery.other_profiles}
    ec2, iam = scenery.ec2, scenery.iam
    described = wrap(monkeypatch, ec2, "describe_instances")
    listed = wrap(monkeypatch, ec2, "describe_launch_templates")
    terminated, deleted = (wrap(monkeypatch, ec2, m) for m in MUTATIONS["ec2"])
    removed, dropped = (wrap(monkeypatch, iam, m) for m in MUTATIONS["iam"])

    provider.delete(RESOURCE_ID, PROPS)

    scenery.assert_only_ours_are_gone()
    # It asked for this cluster's Karpenter resources only, and acted on them only.
    assert described[0]["Filters"] == INSTANCE_FILTERS
    assert [c["Filters"] for c in listed] == [TEMPLATE_FILTERS]
    assert terminated == [{"InstanceIds": scenery.ours}]
    assert deleted == [{"LaunchTemplateId": scenery.our_template}]
    assert removed == [{"InstanceProfileName": scenery.our_profile, "RoleName": NODE_ROLE}]
    assert dropped == [{"InstanceProfileName": scenery.our_profile}]
    # Then it looked at the terminated instances only, by id.
    assert [c["Filters"] for c in described[1:]] == [
        [{"Name": "instance-id", "Values": scenery.ours}]]

    # A second run (destroy retried after a failure elsewhere) finds nothing and succeeds.
    calls = [wrap(monkeypatch, client, m) for client, service in ((ec2, "ec2"), (iam, "iam"))
             for m in MUTATIONS[service]]
    provider.delete(RESOURCE_ID, PROPS)
    assert calls == [[], [], [], []]
    scenery.assert_only_ours_are_gone()


def test_tags_are_checked_again_when_the_api_ignores_the_filters(scenery, provider,
                                                                 monkeypatch):
    def unfiltered(real, **request):
        # Everything, whatever was asked (but a look by id stays a look by id).
        filters = [f for f in request.get("Filters", []) if f["Name"] == "instance-id"]
        return real(**{**request, "Filters": filters})

    # An already terminated Karpenter node of this cluster: nothing to do for it.
    [done] = run_instances(scenery.ec2, karpenter_tags())
    scenery.ec2.terminate_instances(InstanceIds=[done])
    wrap(monkeypatch, scenery.ec2, "describe_instances", unfiltered)
    wrap(monkeypatch, scenery.ec2, "describe_launch_templates", unfiltered)
    terminated = wrap(monkeypatch, scenery.ec2, "terminate_instances")

    provider.delete(RESOURCE_ID, PROPS)

    scenery.assert_only_ours_are_gone()
    assert terminated == [{"InstanceIds": scenery.ours}]


def test_nothing_to_clean_is_success(aws, provider):
    provider.delete(RESOURCE_ID, PROPS)  # an empty account


def test_things_gone_between_listing_and_deleting_are_success(lean, provider, monkeypatch):
    ec2, iam = lean.ec2, lean.iam
    gone_instance = "i-0123456789abcdef0"
    gone_templates = ["lt-0123456789abcdef0", "lt-0fedcba9876543210"]

    def with_stale_instance(real, **request):
        answer = real(**request)
        if not looks_by_id(request):
            answer["Reservations"].append({"Instances": [{
                "InstanceId": gone_instance, "State": {"Name": "running"},
                "Tags": tag_list(karpenter_tags())}]})
        return answer

    def with_stale_templates(real, **request):
        answer = real(**request)
        answer["LaunchTemplates"] += [{"LaunchTemplateId": t, "LaunchTemplateName": t,
                                       "Tags": tag_list(karpenter_tags())}
                                      for t in gone_templates]
        return answer

    def delete_template(real, **request):
        # AWS's answer for an id that is gone (moto's is InvalidLaunchTemplateName...).
        if request["LaunchTemplateId"] == gone_templates[1]:
            raise client_error("InvalidLaunchTemplateId.NotFound")
        return real(**request)

    def with_stale_profile(real, **request):
        answer = real(**request)
        answer["InstanceProfiles"].append({"InstanceProfileName": "lab_deleted_meanwhile",
                                           "Roles": [{"RoleName": NODE_ROLE}]})
        return answer

    def profile_goes_first(real, **request):
        # Karpenter's finalizer got there just before us.
        real(**request)
        iam.delete_instance_profile(InstanceProfileName=request["InstanceProfileName"])
        return real(**request)

    wrap(monkeypatch, ec2, "describe_instances", with_stale_instance)
    terminated = wrap(monkeypatch, ec2, "terminate_instances")
    wrap(monkeypatch, ec2, "describe_launch_templates", with_stale_templates)
    deleted = wrap(monkeypatch, ec2, "delete_launch_template", delete_template)
    wrap(monkeypatch, iam, "list_instance_profiles", with_stale_profile)
    wrap(monkeypatch, iam, "remove_role_from_instance_profile", profile_goes_first)

    provider.delete(RESOURCE_ID, PROPS)

    lean.assert_only_ours_are_gone()
    # The batch failed on the gone instance; then one at a time.
    assert terminated == [{"InstanceIds": [*lean.ours, gone_instance]},
                          *({"InstanceIds": [i]} for i in [*lean.ours, gone_instance])]
    assert {c["LaunchTemplateId"] for c in deleted} == {lean.our_template, *gone_templates}


def test_follows_every_page(scenery, provider, monkeypatch):
    def one_per_page(items_key: str, token_in: str, token_out: str, truncated: bool = False):
        def around(real, **request):
            at = int(request.pop(token_in, 0) or 0)
            answer = real(**{k: v for k, v in request.items() if k not in ("MaxResults",
                                                                           "MaxItems")})
            items = answer[items_key]
            answer[items_key] = items[at:at + 1]
            answer.pop(token_out, None)
            if at + 1 < len(items):
                answer[token_out] = str(at + 1)
            if truncated:
                answer["IsTruncated"] = at + 1 < len(items)
            return answer
        return around

    # Everything one item a page, down to the profiles' tags.
    wrap(monkeypatch, scenery.ec2, "describe_instances",
         one_per_page("Reservations", "NextToken", "NextToken"))
    wrap(monkeypatch, scenery.ec2, "describe_launch_templates",
         one_per_page("LaunchTemplates", "NextToken", "NextToken"))
    wrap(monkeypatch, scenery.iam, "list_instance_profiles",
         one_per_page("InstanceProfiles", "Marker", "Marker", truncated=True))
    tag_pages = wrap(monkeypatch, scenery.iam, "list_instance_profile_tags",
                     one_per_page("Tags", "Marker", "Marker", truncated=True))

    provider.delete(RESOURCE_ID, PROPS)

    scenery.assert_only_ours_are_gone()
    assert len([c for c in tag_pages if c["InstanceProfileName"] == scenery.our_profile]) == 4


# --- retries and failures -------------------------------------------------------------------

def test_throttled_calls_are_retried(lean, provider, monkeypatch):
    ec2, iam = lean.ec2, lean.iam
    calls = {
        m: wrap(monkeypatch, ec2, m, failing(1, code, status)) for m, code, status in [
            ("describe_instances", "RequestLimitExceeded", 503),
            ("terminate_instances", "RequestLimitExceeded", 503),
            ("describe_launch_templates", "RequestLimitExceeded", 503),
            ("delete_launch_template", "InternalError", 500)]}
    calls.update({
        m: wrap(monkeypatch, iam, m, failing(1, code, status)) for m, code, status in [
            ("list_instance_profiles", "Throttling", 400),
            ("list_instance_profile_tags", "Throttling", 400),
            ("remove_role_from_instance_profile", "ServiceUnavailable", 503),
            ("delete_instance_profile", "Throttling", 400)]})

    provider.delete(RESOURCE_ID, PROPS)

    lean.assert_only_ours_are_gone()
    assert len(calls["terminate_instances"]) == 2
    assert len(calls["delete_launch_template"]) == 2
    assert len(calls["remove_role_from_instance_profile"]) == 2
    assert len(calls["delete_instance_profile"]) == 2


def test_instances_that_cannot_be_terminated_are_reported_and_the_rest_runs(
        lean, provider, monkeypatch):
    wrap(monkeypatch, lean.ec2, "terminate_instances",
         failing(999, "UnauthorizedOperation", 403))
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)

    message = str(raised.value)
    a, b = lean.ours
    assert f"Karpenter left behind for cluster {CLUSTER} in {REGION}" in message
    assert f"EC2 instance {a}: UnauthorizedOperation" in message
    assert f"EC2 instance {b}: UnauthorizedOperation" in message
    assert f"aws ec2 terminate-instances --region {REGION} --instance-ids {a} {b}" in message
    assert f"aws ec2 wait instance-terminated --region {REGION} --instance-ids {a} {b}" in message
    assert "launch template lt-" not in message
    assert "instance profile lab_" not in message
    for other in lean.other_instances.values():
        assert other not in message
    # Templates and profiles were still removed; the instances are still running.
    assert lean.templates() == set(lean.other_templates.values())
    assert lean.profiles() == set(lean.other_profiles)
    assert "terminated" not in lean.states().values()


def test_persistent_failures_name_what_is_left_and_the_commands(lean, provider, monkeypatch):
    deleted = wrap(monkeypatch, lean.ec2, "delete_launch_template",
                   failing(999, "InternalError", 500))
    wrap(monkeypatch, lean.iam, "remove_role_from_instance_profile",
         failing(999, "AccessDenied", 403))
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)

    message = str(raised.value)
    lt, profile = lean.our_template, lean.our_profile
    assert len(deleted) == provider.attempts
    assert f"launch template {lt} (karpenter.k8s.aws/lab-default): InternalError" in message
    assert f"gave up after {provider.attempts} attempts" in message
    assert f"instance profile {profile} (role {NODE_ROLE} still in it): AccessDenied" in message
    assert (f"aws ec2 delete-launch-template --region {REGION} --launch-template-id {lt}"
            in message)
    assert (f"aws iam remove-role-from-instance-profile --instance-profile-name {profile} "
            f"--role-name {NODE_ROLE}") in message
    assert f"aws iam delete-instance-profile --instance-profile-name {profile}" in message
    assert "EC2 instance" not in message and "terminate-instances" not in message
    # The instances were terminated all the same; nothing else was touched.
    states = lean.states()
    assert [states[i] for i in lean.ours] == ["terminated", "terminated"]
    assert lean.profiles() == {profile, *lean.other_profiles}
    for other in [*lean.other_templates.values(), *lean.other_profiles]:
        assert other not in message


def test_listing_failures_are_reported_with_commands_and_the_rest_runs(
        lean, provider, monkeypatch):
    wrap(monkeypatch, lean.ec2, "describe_instances", failing(999, "UnauthorizedOperation",
                                                                 403))
    terminated = wrap(monkeypatch, lean.ec2, "terminate_instances")
    wrap(monkeypatch, lean.iam, "list_instance_profiles", failing(999, "AccessDenied", 403))
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)

    message = str(raised.value)
    assert "Karpenter instances of the cluster (could not list them all): " \
           "UnauthorizedOperation" in message
    assert (f"aws ec2 describe-instances --region {REGION} --filters "
            f"Name=tag:kubernetes.io/cluster/{CLUSTER},Values=owned "
            f"Name=tag-key,Values={NODEPOOL}") in message
    assert "Karpenter instance profiles of the cluster (could not list them all): " \
           "AccessDenied" in message
    assert "aws iam list-instance-profiles" in message
    assert "launch template lt-" not in message
    assert terminated == []
    assert lean.templates() == set(lean.other_templates.values())


def test_an_unreadable_profile_is_reported_others_still_cleaned(lean, provider, monkeypatch):
    make_profile(lean.iam, "unreadable", {}, None)

    def denied_for_one(real, **request):
        if request["InstanceProfileName"] == "unreadable":
            raise client_error("AccessDenied", 403)
        return real(**request)

    wrap(monkeypatch, lean.iam, "list_instance_profile_tags", denied_for_one)
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)

    message = str(raised.value)
    assert "instance profile unreadable (could not read its tags to tell whether it is " \
           "Karpenter's): AccessDenied" in message
    assert "aws iam list-instance-profile-tags --instance-profile-name unreadable" in message
    assert lean.our_profile not in message
    assert lean.profiles() == {"unreadable"}
    assert set(lean.states().values()) == {"terminated"} and lean.templates() == set()


def test_a_part_that_blows_up_does_not_stop_the_others(lean, provider, monkeypatch):
    def no_ec2(service, **kwargs):
        if service == "ec2":
            raise RuntimeError("no EC2 client today")
        return lean.iam

    monkeypatch.setattr(boto3, "client", no_ec2)
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)

    message = str(raised.value)
    assert "Karpenter instances of the cluster (not looked at): RuntimeError" in message
    assert "Karpenter launch templates of the cluster (not looked at): RuntimeError" in message
    assert "aws ec2 describe-launch-templates" in message
    assert lean.profiles() == set(lean.other_profiles)


# --- waiting for termination ----------------------------------------------------------------

def shutting_down_for(looks: int) -> Callable[..., Any]:
    """An ``around`` for describe_instances: moto terminates at once; AWS takes a while."""
    seen = [0]

    def around(real, **request):
        answer = real(**request)
        if looks_by_id(request):
            seen[0] += 1
            if seen[0] <= looks:
                for reservation in answer["Reservations"]:
                    for instance in reservation["Instances"]:
                        if instance["State"]["Name"] == "terminated":
                            instance["State"] = {"Code": 32, "Name": "shutting-down"}
        return answer

    return around


def test_terminates_in_batches_and_waits_until_terminated(lean, provider, monkeypatch):
    provider.batch_size = 1
    described = wrap(monkeypatch, lean.ec2, "describe_instances", shutting_down_for(4))
    terminated = wrap(monkeypatch, lean.ec2, "terminate_instances")
    provider.delete(RESOURCE_ID, PROPS)
    assert terminated == [{"InstanceIds": [i]} for i in lean.ours]
    # Looks at them (a batch a request) until both are terminated.
    looks = [c["Filters"][0]["Values"] for c in described if looks_by_id(c)]
    assert looks == [[i] for i in lean.ours] * 3
    lean.assert_only_ours_are_gone()


def test_gives_up_waiting_after_wait_seconds(lean, provider, monkeypatch):
    # A wait five polls long, on the provider's clock: at least two looks, at most one a poll
    # and the first (six).
    clock = VirtualClock(monkeypatch)
    provider.wait_seconds = 0.5
    provider.poll_seconds = 0.1
    described = wrap(monkeypatch, lean.ec2, "describe_instances", shutting_down_for(10**6))
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)
    # It waited the whole wait, and no longer.
    assert provider.wait_seconds <= clock.now <= provider.wait_seconds + provider.poll_seconds

    message = str(raised.value)
    a, b = lean.ours
    assert f"EC2 instance {a}: termination requested, still shutting-down after 0.5 s" \
           in message
    assert f"aws ec2 wait instance-terminated --region {REGION} --instance-ids {a} {b}" in message
    assert 2 <= len([c for c in described if looks_by_id(c)]) <= 10
    # It went on with the templates and profiles.
    assert lean.templates() == set(lean.other_templates.values())
    assert lean.profiles() == set(lean.other_profiles)


def test_a_failing_look_stops_the_wait_and_is_reported(lean, provider, monkeypatch):
    def denied_by_id(real, **request):
        if looks_by_id(request):
            raise client_error("UnauthorizedOperation", 403)
        return real(**request)

    wrap(monkeypatch, lean.ec2, "describe_instances", denied_by_id)
    with pytest.raises(Exception) as raised:
        provider.delete(RESOURCE_ID, PROPS)
    assert "termination requested, but could not confirm it: UnauthorizedOperation" \
           in str(raised.value)


# --- create, diff, update -------------------------------------------------------------------

def test_create_is_pure(provider, monkeypatch):
    forbid_network(monkeypatch)
    created = provider.create(dict(PROPS))
    assert created.id == RESOURCE_ID
    assert created.outs == PROPS


@pytest.mark.parametrize("change, match", [
    ({"clusterName": ""}, "clusterName"),
    ({"clusterName": "  "}, "clusterName"),
    ({"clusterName": None}, "clusterName"),
    ({"region": ""}, "region"),
    ({"region": 7}, "region"),
])
def test_create_refuses_bad_props(provider, change, match):
    with pytest.raises(ValueError, match=match):
        provider.create({**PROPS, **change})


def test_delete_refuses_bad_props(provider):
    with pytest.raises(ValueError, match="clusterName"):
        provider.delete(RESOURCE_ID, {"region": REGION})


def test_diff_replaces_on_what_to_clean_and_updates_on_new_code(provider):
    olds = {**PROPS, "__provider": "code"}
    for key, value in [("region", OTHER_REGION), ("clusterName", OTHER_CLUSTER)]:
        diff = provider.diff(RESOURCE_ID, olds, {**olds, key: value})
        assert diff.changes and diff.replaces == [key], key
        assert not diff.delete_before_replace
    assert not provider.diff(RESOURCE_ID, olds, dict(olds)).changes
    # New provider code alone is an update, so destroy runs the latest delete().
    diff = provider.diff(RESOURCE_ID, olds, {**olds, "__provider": "new code"})
    assert diff.changes and diff.replaces == []
    assert provider.update(RESOURCE_ID, dict(PROPS), {**PROPS, "__provider": "x"}).outs == PROPS


# --- the pickled provider in a fresh process ------------------------------------------------

def test_pickled_provider_deletes_in_a_fresh_process(moto_server, fake_aws, provider):
    urllib.request.urlopen(urllib.request.Request(f"{moto_server}/moto-api/reset",
                                                  method="POST"), timeout=5).close()
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_server)
    iam = boto3.client("iam", region_name=REGION, endpoint_url=moto_server)
    # What is to go, plus the two decoys closest to it (lean: each call is an HTTP request).
    scenery = plant(ec2, iam, decoys=False)
    scenery.other_instances = {"other cluster": run_instances(
        ec2, karpenter_tags(OTHER_CLUSTER))[0]}
    make_profile(iam, "lab_uswest2", profile_tags(region=OTHER_REGION), NODE_ROLE)
    scenery.other_profiles, scenery.node_role_stays_in = ["lab_uswest2"], {"lab_uswest2"}

    env = {**FAKE_AWS_ENV, "AWS_ENDPOINT_URL_EC2": moto_server,
           "AWS_ENDPOINT_URL_IAM": moto_server}
    done = run_pickled(provider, "delete", RESOURCE_ID, PROPS, env=env, timeout=30)
    assert result_of(done) is None

    scenery.assert_only_ours_are_gone()


# --- the resource ---------------------------------------------------------------------------

def test_resource_registers_public_outputs(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(
        "import pulumi\n"
        "from components.cleanup.karpenter_leftovers import KarpenterLeftoverCleanup\n"
        "res = KarpenterLeftoverCleanup('karpenter-leftovers', region='r',\n"
        "    cluster_name=pulumi.Output.from_input('lab'))\n"
        "pulumi.export('out', pulumi.Output.all(res.region, res.clusterName))\n")
    run = run_program({"aws:region": REGION}, program=program)
    [reg] = run.of_type("pulumi-python:dynamic/cleanup:KarpenterLeftovers")
    assert reg.name == "karpenter-leftovers"
    assert reg.inputs["region"] == "r" and reg.inputs["clusterName"] == "lab"
    assert not isinstance(reg.inputs["__provider"], Secret)
    assert run.outputs["out"] == ["r", "lab"]
