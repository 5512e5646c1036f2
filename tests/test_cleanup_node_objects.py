"""The hybrid Node-object cleanup against a fake Kubernetes API server on 127.0.0.1 over HTTPS.

The fake server (tests/fake_kube_api.py) checks the bearer token is an EKS token (a presigned
STS GetCallerIdentity URL signing the ``x-k8s-aws-id`` header), answers node list/delete like the
real API server, and records every request, so the tests can say exactly which nodes were deleted
and how.
"""

from __future__ import annotations

import socket

import pytest

from components.cleanup.node_objects import NodeObjectCleanupProvider
from offline.runner import Secret, run_program
from tests.fake_kube_api import (CLUSTER, FAKE_AWS_ENV, REGION, FakeApiServer, Pki,
                                 assert_authorized)
from tests.fake_kube_api import api, fake_aws, other_pki, pki  # noqa: F401 (fixtures)
from tests.fake_kube_api import no_eks  # noqa: F401 (fixture)
from tests.fake_ssm import FakeSsm, install
from tests.offline_guard import forbid_network
from tests.pickled_provider import result_of, run_pickled
from tests.test_cleanup_gateway_routes import aws_session, quick_boto  # noqa: F401 (fixtures)
from tests.virtual_clock import VirtualClock

pytestmark = pytest.mark.usefixtures("no_eks")

SELECTOR = "eks-hybrid-lab.io/stack=eks-hybrid-lab.dev"
ACTIVATION = "3f1c2a7e-5b8d-4c21-9e0f-6a7b8c9d0e1f"
OTHER_ACTIVATION = "9d8c7b6a-0f1e-4d2c-8b3a-1e2f3a4b5c6d"
HYBRID = {"eks.amazonaws.com/compute-type": "hybrid"}
OURS = {"eks-hybrid-lab.io/stack": "eks-hybrid-lab.dev"}
THEIRS = {"eks-hybrid-lab.io/stack": "eks-hybrid-lab.prod"}


@pytest.fixture
def provider() -> NodeObjectCleanupProvider:
    # Instance attributes, so they also travel with the pickled provider.
    p = NodeObjectCleanupProvider()
    p.retry_base_seconds = 0
    p.poll_seconds = 0.5
    p.poll_interval_seconds = 0.01
    p.request_timeout_seconds = 3
    return p


@pytest.fixture(autouse=True)
def ssm(monkeypatch) -> FakeSsm:
    """SSM for the cleanup: no registrations unless a test plants them."""
    return install(monkeypatch, REGION)


def props_for(api: FakeApiServer, pki: Pki, selector: str = SELECTOR) -> dict[str, str]:
    return {"clusterName": CLUSTER, "region": REGION, "endpoint": api.url,
            "certificateAuthority": pki.ca_b64, "labelSelector": selector,
            "activationId": ACTIVATION}


def plant_mixed(api: FakeApiServer) -> None:
    """Two of our hybrid nodes, another stack's hybrid node and a cloud node."""
    api.nodes.update({
        "mi-0aaa": {**HYBRID, **OURS},
        "mi-0bbb": {**HYBRID, **OURS},
        "mi-0ccc": {**HYBRID, **THEIRS},
        "ip-10-0-1-5.ec2.internal": {"eks.amazonaws.com/compute-type": "ec2"},
    })


# --- cases ----------------------------------------------------------------------------------

def test_deletes_exactly_this_stacks_hybrid_nodes(api, pki, provider):
    plant_mixed(api)
    provider.delete(f"node-objects-{CLUSTER}", props_for(api, pki))

    assert sorted(api.deleted) == ["mi-0aaa", "mi-0bbb"]
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "mi-0ccc"]
    assert {r.query.get("labelSelector") for r in api.of("GET")} == {SELECTOR}
    assert all(r.path == "/api/v1/nodes" for r in api.of("GET"))
    assert_authorized(api)


def test_no_nodes_is_success_without_delete(api, pki, provider):
    api.plant("mi-0ccc", **HYBRID, **THEIRS)
    provider.delete("x", props_for(api, pki))
    assert api.of("DELETE") == []
    assert len(api.of("GET")) == 1
    assert_authorized(api)


def test_follows_list_pagination(api, pki, provider):
    provider.page_size = 2
    for i in range(5):
        api.plant(f"mi-{i:04d}", **HYBRID, **OURS)
    provider.delete("x", props_for(api, pki))

    assert sorted(api.deleted) == [f"mi-{i:04d}" for i in range(5)]
    first_pages = [r.query for r in api.of("GET")][:3]
    assert [q.get("continue") for q in first_pages] == [None, "2", "4"]
    assert {q["limit"] for q in first_pages} == {"2"}
    assert api.nodes == {}


def test_node_already_gone_is_success(api, pki, provider):
    api.plant("mi-0aaa", **HYBRID, **OURS)
    api.plant("mi-0bbb", **HYBRID, **OURS)
    api.vanish_on_delete = {"mi-0aaa"}
    provider.delete("x", props_for(api, pki))

    assert {r.path.rsplit("/", 1)[1]: r.status for r in api.of("DELETE")} == \
        {"mi-0aaa": 404, "mi-0bbb": 200}
    assert api.nodes == {}


def test_labelled_node_that_is_not_hybrid_is_left_alone(api, pki, provider):
    api.plant("mi-0aaa", **HYBRID, **OURS)
    api.plant("ip-10-0-1-5.ec2.internal", **OURS, **{"eks.amazonaws.com/compute-type": "ec2"})
    api.plant("unlabelled-compute-type", **OURS)
    provider.delete("x", props_for(api, pki))

    assert api.deleted == ["mi-0aaa"]
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "unlabelled-compute-type"]


def test_selector_is_rechecked_when_the_server_ignores_it(api, pki, provider):
    plant_mixed(api)
    api.ignore_selector = True
    provider.delete("x", props_for(api, pki))
    assert sorted(api.deleted) == ["mi-0aaa", "mi-0bbb"]


@pytest.mark.parametrize("selector", ["", "   ", None])
def test_empty_selector_is_refused(api, pki, provider, selector):
    plant_mixed(api)
    props = props_for(api, pki, selector=selector)
    with pytest.raises(ValueError, match="labelSelector"):
        provider.create(props)
    with pytest.raises(ValueError, match="labelSelector"):
        provider.delete("x", props)
    assert api.requests == []


def test_untrusted_server_certificate_fails_with_kubectl_hint(api, pki, other_pki, provider):
    plant_mixed(api)
    with pytest.raises(Exception) as raised:
        provider.delete("x", props_for(api, other_pki))

    message = str(raised.value)
    assert f"kubectl delete node -l {SELECTOR}" in message
    assert "certificate" in message.lower()
    # No request got past the handshake, so the token never left.
    assert api.requests == [] and api.of("DELETE") == []
    # A certificate failure is not worth retrying: one connection, not `attempts` of them
    # (counted, not timed: the retries' backoff is 0 s in these tests).
    assert api.connections == 1, "a certificate failure is not worth retrying"


def test_retries_after_a_503(api, pki, provider):
    plant_mixed(api)
    api.fail_next = [503]
    provider.delete("x", props_for(api, pki))

    assert [r.status for r in api.requests][:2] == [503, 200]
    assert sorted(api.deleted) == ["mi-0aaa", "mi-0bbb"]


def test_persistent_errors_name_the_nodes_left(api, pki, provider):
    plant_mixed(api)
    api.fail_deletes = 503
    with pytest.raises(Exception) as raised:
        provider.delete("x", props_for(api, pki))

    message = str(raised.value)
    assert "mi-0aaa, mi-0bbb" in message and "mi-0ccc" not in message
    assert f"kubectl delete node -l {SELECTOR}" in message
    assert len(api.of("DELETE")) == provider.attempts
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "mi-0aaa", "mi-0bbb", "mi-0ccc"]


def test_node_that_stays_listed_fails_after_the_poll(api, pki, provider, monkeypatch):
    plant_mixed(api)
    api.sticky = {"mi-0bbb"}
    # On the provider's clock: a 0.5 s window looked at every 0.25 s is three rounds of
    # deletes, however busy the machine.
    clock = VirtualClock(monkeypatch)
    provider.poll_seconds = 0.5
    provider.poll_interval_seconds = 0.25
    with pytest.raises(Exception, match="still listed") as raised:
        provider.delete("x", props_for(api, pki))
    # It gave up once the window had passed, not before and not an interval later.
    assert provider.poll_seconds <= clock.now < provider.poll_seconds + provider.poll_interval_seconds

    message = str(raised.value)
    assert "Nodes left: mi-0bbb (as last listed)" in message
    assert f"kubectl delete node -l {SELECTOR}" in message
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "mi-0bbb", "mi-0ccc"]
    # It kept deleting what was still listed (a re-registered node would go that way).
    assert api.deleted.count("mi-0bbb") >= 2 and api.deleted.count("mi-0aaa") == 1


def test_rejected_token_fails_with_kubectl_hint(api, pki, provider):
    plant_mixed(api)
    api.fail_next = [401] * provider.attempts
    with pytest.raises(Exception, match="401") as raised:
        provider.delete("x", props_for(api, pki))
    assert "unknown" in str(raised.value)
    assert f"kubectl delete node -l {SELECTOR}" in str(raised.value)
    assert api.of("DELETE") == []


def test_unreachable_server_fails_with_kubectl_hint(pki, provider):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    props = {"clusterName": CLUSTER, "region": REGION, "endpoint": f"https://127.0.0.1:{port}",
             "certificateAuthority": pki.ca_b64, "labelSelector": SELECTOR,
             "activationId": ACTIVATION}
    with pytest.raises(Exception, match="kubectl delete node -l"):
        provider.delete("x", props)


def test_create_is_pure_and_diff_replaces_only_on_identity(api, pki, provider, monkeypatch):
    forbid_network(monkeypatch)
    props = props_for(api, pki)
    created = provider.create(props)
    assert created.id == f"node-objects-{CLUSTER}"
    # Without a token label there is no token: it selects by its labels alone.
    assert created.outs == {**props, "nodeSelector": SELECTOR}
    assert api.requests == []

    olds = {**props, "__provider": "code"}
    # A new activation is another set of registrations (and so of nodes) to clean up; a new
    # instance or token is another host.
    for key, value in [("clusterName", "other"), ("labelSelector", "a=b"),
                       ("activationId", OTHER_ACTIVATION), ("token", "f" * 32),
                       ("instanceId", "i-0123456789abcdef0"),
                       ("tokenLabel", "example.com/cleanup")]:
        diff = provider.diff(created.id, olds, {**olds, key: value})
        assert diff.changes and diff.replaces == [key]
    for key, value in [("endpoint", "https://example.invalid"), ("certificateAuthority", "Q0E="),
                       ("region", "us-west-2")]:
        diff = provider.diff(created.id, olds, {**olds, key: value})
        assert diff.changes and diff.replaces == [], key
    assert not provider.diff(created.id, olds, dict(olds)).changes
    # New provider code alone is an update, so destroy runs the latest delete().
    assert provider.diff(created.id, olds, {**olds, "__provider": "new code"}).changes

    news = {**props, "endpoint": "https://new.example.invalid"}
    assert provider.update(created.id, props, news).outs == {**news, "nodeSelector": SELECTOR}


TOKEN_LABEL = "eks-hybrid-lab.io/cleanup"
HOST_SELECTOR = f"{SELECTOR},eks-hybrid-lab.io/host=node-0"


TOKEN = "0123456789abcdef0123456789abcdef"


def tokened(api: FakeApiServer, pki: Pki) -> dict[str, str]:
    return {**props_for(api, pki, selector=HOST_SELECTOR), "tokenLabel": TOKEN_LABEL,
            "token": TOKEN}


def test_its_selector_requires_the_hosts_token(api, pki, provider, monkeypatch):
    forbid_network(monkeypatch)
    created = provider.create(tokened(api, pki))
    assert created.outs["nodeSelector"] == f"{HOST_SELECTOR},{TOKEN_LABEL}={TOKEN}"
    # An update (new provider code, a new endpoint) keeps it.
    olds = {**created.outs, "__provider": "code"}
    news = {**tokened(api, pki), "__provider": "new code", "endpoint": "https://new.invalid"}
    diff = provider.diff(created.id, olds, news)
    assert diff.changes and diff.replaces == []
    assert provider.update(created.id, olds, news).outs["nodeSelector"] == \
        created.outs["nodeSelector"]


def test_delete_selects_only_the_node_carrying_its_token(api, pki, provider):
    created = provider.create(tokened(api, pki)).outs
    host = {**HYBRID, **OURS, "eks-hybrid-lab.io/host": "node-0"}
    # The host it came with, and the same host of the same generation created again with
    # another cleanup (a reverted change): same labels but for the token.
    api.plant("mi-0aaa", **host, **{TOKEN_LABEL: created["token"]})
    api.plant("mi-0bbb", **host, **{TOKEN_LABEL: "f" * 32})
    api.plant("mi-0ccc", **host)
    provider.delete("x", created)
    assert api.deleted == ["mi-0aaa"] and sorted(api.nodes) == ["mi-0bbb", "mi-0ccc"]


def test_a_cleanup_stored_before_tokens_selects_by_its_labels(api, pki, provider):
    # Its outputs have neither token nor nodeSelector; its hosts carry no token either.
    old = props_for(api, pki, selector=OLD_SELECTOR)
    api.plant(MI_OLD, **HYBRID, **OURS, **GEN_OLD)
    api.plant(MI_NEW, **HYBRID, **OURS, **GEN_NEW)
    provider.delete("x", old)
    assert api.deleted == [MI_OLD]


def test_pickled_provider_deletes_in_a_fresh_process(api, pki, provider):
    api.nodes.update({"mi-0a1b2c3d4e5f60001": {**HYBRID, **OURS},
                      "mi-0a1b2c3d4e5f60002": {**HYBRID, **OURS},
                      "mi-0ccc": {**HYBRID, **THEIRS},
                      "ip-10-0-1-5.ec2.internal": {"eks.amazonaws.com/compute-type": "ec2"}})
    # SSM in the child is a Stubber (ordered: the nodes are listed by name): the first registered
    # through this activation and deregistered, the other no longer registered.
    def describe(name: str) -> dict:
        return {"Filters": [{"Key": "InstanceIds", "Values": [name]},
                            {"Key": "ActivationIds", "Values": [ACTIVATION]}]}
    prelude = f"""
        import atexit, boto3
        from botocore.stub import Stubber
        client = boto3.client("ssm", region_name={REGION!r}, endpoint_url="http://127.0.0.1:9")
        stubber = Stubber(client)
        stubber.add_response("describe_instance_information", {{"InstanceInformationList": [
            {{"InstanceId": "mi-0a1b2c3d4e5f60001", "ActivationId": {ACTIVATION!r}}}]}}, {describe("mi-0a1b2c3d4e5f60001")!r})
        stubber.add_response("deregister_managed_instance", {{}}, {{"InstanceId": "mi-0a1b2c3d4e5f60001"}})
        stubber.add_response("describe_instance_information", {{"InstanceInformationList": []}},
                             {describe("mi-0a1b2c3d4e5f60002")!r})
        stubber.activate()
        real_client = boto3.client

        def client_for(service, *args, **kwargs):
            if service != "ssm":
                return real_client(service, *args, **kwargs)
            assert kwargs.get("region_name") == {REGION!r}, kwargs
            return client

        boto3.client = client_for

        def no_pending_responses():
            stubber.assert_no_pending_responses()
            print("NO PENDING RESPONSES")

        atexit.register(no_pending_responses)
    """
    done = run_pickled(provider, "delete", f"node-objects-{CLUSTER}", props_for(api, pki),
                       prelude=prelude, env=FAKE_AWS_ENV, timeout=30)
    assert result_of(done) is None
    assert "NO PENDING RESPONSES" in done.stdout.splitlines(), done.stderr
    assert sorted(api.deleted) == ["mi-0a1b2c3d4e5f60001", "mi-0a1b2c3d4e5f60002"]
    assert sorted(api.nodes) == ["ip-10-0-1-5.ec2.internal", "mi-0ccc"]
    assert_authorized(api)


def test_resource_registers_public_outputs(tmp_path):
    program = tmp_path / "program.py"
    program.write_text(
        "import pulumi\n"
        "from components.cleanup.node_objects import NodeObjectCleanup\n"
        "res = NodeObjectCleanup('nodes', cluster_name='c', region='r',\n"
        "    endpoint='https://e', certificate_authority=pulumi.Output.secret('Q0E='),\n"
        "    label_selector='k=v', activation_id='act')\n"
        "pulumi.export('out', pulumi.Output.all(res.clusterName, res.region, res.endpoint,\n"
        "    res.certificateAuthority, res.labelSelector, res.activationId))\n")
    run = run_program({"aws:region": REGION}, program=program)
    [reg] = run.of_type("pulumi-python:dynamic/cleanup:HybridNodeObjects")
    assert reg.name == "nodes"
    assert reg.inputs["certificateAuthority"] == "Q0E="
    assert not isinstance(reg.inputs["__provider"], Secret)
    assert run.outputs["out"] == ["c", "r", "https://e", "Q0E=", "k=v", "act"]


def test_a_cluster_deleted_outside_pulumi_leaves_nothing_to_clean(pki, provider, monkeypatch):
    # The API server does not answer, and EKS says the cluster is gone: the Nodes went with it.
    asked = []
    monkeypatch.setattr(provider, "_cluster_is_gone",
                        lambda name, region, _account: asked.append(name) or True)
    provider.attempts = 1
    props = {"clusterName": CLUSTER, "region": "ap-northeast-2", "endpoint": "https://127.0.0.1:9",
             "certificateAuthority": pki.ca_b64, "labelSelector": SELECTOR,
             "activationId": ACTIVATION}
    provider.delete("id", props)
    assert asked == [CLUSTER]


@pytest.mark.parametrize("answer,gone", [
    ({"cluster": {"name": "lab", "status": "ACTIVE"}}, False),
    ("ResourceNotFoundException", True),
    ("AccessDeniedException", False),
])
def test_cluster_is_gone_only_when_eks_says_not_found(provider, monkeypatch, answer, gone):
    import boto3
    from botocore.stub import Stubber

    eks = boto3.client("eks", region_name="ap-northeast-2", endpoint_url="http://127.0.0.1:9",
                       aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="fake")
    stubber = Stubber(eks)
    if isinstance(answer, dict):
        stubber.add_response("describe_cluster", answer, {"name": "lab"})
    else:
        stubber.add_client_error("describe_cluster", service_error_code=answer,
                                 expected_params={"name": "lab"})
    stubber.activate()
    monkeypatch.setattr(boto3, "client", lambda *a, **k: eks)
    assert provider._cluster_is_gone("lab", "ap-northeast-2", provider._account({})) is gone
    stubber.assert_no_pending_responses()


# --- the SSM registrations of the selected nodes ---------------------------------------------

GEN_OLD = {"eks-hybrid-lab.io/host": "node-0", "eks-hybrid-lab.io/generation": "0123456789ab"}
GEN_NEW = {"eks-hybrid-lab.io/host": "node-0", "eks-hybrid-lab.io/generation": "ba9876543210"}
# Managed instance ids as SSM writes them (mi- and 17 hex digits; botocore checks the length).
MI_A, MI_B, MI_C = "mi-0a1b2c3d4e5f60001", "mi-0a1b2c3d4e5f60002", "mi-0a1b2c3d4e5f60003"
MI_OLD, MI_NEW = "mi-0a1b2c3d4e5f6000a", "mi-0a1b2c3d4e5f6000b"
OLD_SELECTOR = ("eks-hybrid-lab.io/stack=eks-hybrid-lab.dev,eks-hybrid-lab.io/host=node-0,"
                "eks-hybrid-lab.io/generation=0123456789ab")


def plant_registered(api: FakeApiServer) -> None:
    """plant_mixed with managed-instance names."""
    api.nodes.update({MI_A: {**HYBRID, **OURS}, MI_B: {**HYBRID, **OURS},
                      MI_C: {**HYBRID, **THEIRS},
                      "ip-10-0-1-5.ec2.internal": {"eks.amazonaws.com/compute-type": "ec2"}})


def test_old_generations_cleanup_removes_only_the_old_node_and_registration(api, pki, provider,
                                                                             ssm):
    # A replaced host: create-before-delete leaves the old generation's cleanup to run once
    # the new host exists and may have joined, through the same activation.
    api.plant(MI_OLD, **HYBRID, **OURS, **GEN_OLD)
    api.plant(MI_NEW, **HYBRID, **OURS, **GEN_NEW)
    ssm.registrations.update({MI_OLD: ACTIVATION, MI_NEW: ACTIVATION})
    provider.delete("x", props_for(api, pki, selector=OLD_SELECTOR))

    assert api.deleted == [MI_OLD] and sorted(api.nodes) == [MI_NEW]
    assert ssm.deregistered == [MI_OLD] and ssm.registrations == {MI_NEW: ACTIVATION}
    assert ssm.of("DescribeInstanceInformation") == [
        {"Filters": [{"Key": "InstanceIds", "Values": [MI_OLD]},
                     {"Key": "ActivationIds", "Values": [ACTIVATION]}]}]


def test_registration_is_gone_before_its_node(api, pki, provider, ssm):
    plant_registered(api)
    ssm.registrations.update({MI_A: ACTIVATION, MI_B: ACTIVATION})
    ssm.watch = lambda: sorted(api.nodes)
    provider.delete("x", props_for(api, pki))

    assert sorted(ssm.deregistered) == [MI_A, MI_B]
    for operation, params, nodes in ssm.calls:
        if operation == "DeregisterManagedInstance":
            assert params["InstanceId"] in nodes, "the Node went before its registration"
    assert sorted(api.deleted) == [MI_A, MI_B] and ssm.registrations == {}


def test_registration_of_another_activation_is_left_but_the_node_goes(api, pki, provider, ssm):
    plant_registered(api)
    # MI_C is another stack's node: not selected, so SSM is not even asked about it.
    ssm.registrations.update({MI_A: OTHER_ACTIVATION, MI_C: ACTIVATION})
    provider.delete("x", props_for(api, pki))

    assert ssm.deregistered == []
    assert {p["Filters"][0]["Values"][0] for p in ssm.of("DescribeInstanceInformation")} == \
        {MI_A, MI_B}
    assert sorted(api.deleted) == [MI_A, MI_B]


def test_registration_already_gone_is_success(api, pki, provider, ssm):
    plant_registered(api)
    # SSM answers InvalidInstanceId for an instance it no longer knows; mi-0bbb is listed as
    # registered but is deregistered (by the activation's cleanup, say) before we get to it.
    ssm.failures[("DescribeInstanceInformation", MI_A)] = ["InvalidInstanceId"]
    ssm.registrations[MI_B] = ACTIVATION
    ssm.failures[("DeregisterManagedInstance", MI_B)] = ["InvalidInstanceId"]
    provider.delete("x", props_for(api, pki))
    assert sorted(api.deleted) == [MI_A, MI_B]


def test_node_not_named_after_a_registration_is_not_looked_up(api, pki, provider, ssm):
    api.plant("onprem-host-1", **HYBRID, **OURS)
    provider.delete("x", props_for(api, pki))
    assert api.deleted == ["onprem-host-1"] and ssm.calls == []


def test_throttled_ssm_is_retried(api, pki, provider, ssm):
    api.plant(MI_A, **HYBRID, **OURS)
    ssm.registrations[MI_A] = ACTIVATION
    ssm.failures[("DescribeInstanceInformation", MI_A)] = ["ThrottlingException"]
    ssm.failures[("DeregisterManagedInstance", MI_A)] = ["InternalServerError"]
    provider.delete("x", props_for(api, pki))
    assert ssm.deregistered == [MI_A, MI_A] and api.deleted == [MI_A]


def test_ssm_failure_keeps_the_node_and_says_how_to_finish(api, pki, provider, ssm):
    plant_registered(api)
    ssm.registrations.update({MI_A: ACTIVATION, MI_B: ACTIVATION})
    ssm.failures[("DeregisterManagedInstance", MI_A)] = ["AccessDeniedException"] * 10
    with pytest.raises(Exception) as raised:
        provider.delete("x", props_for(api, pki))

    message = str(raised.value)
    assert MI_A in message and "AccessDeniedException" in message and MI_B not in message
    assert ACTIVATION in message and REGION in message
    assert "aws ssm deregister-managed-instance" in message and "kubectl delete node" in message
    # MI_B is done; MI_A keeps its Node, so a retried delete finds it again.
    assert api.deleted == [MI_B] and MI_A in api.nodes
    assert ssm.registrations == {MI_A: ACTIVATION}
    assert ssm.deregistered.count(MI_A) == 1, "access denied is not worth retrying"

    ssm.failures.clear()
    provider.delete("x", props_for(api, pki))
    assert MI_A not in api.nodes and ssm.registrations == {}


def test_create_refuses_a_missing_activation(api, pki, provider):
    with pytest.raises(ValueError, match="activationId"):
        provider.create({**props_for(api, pki), "activationId": ""})


# --- the host goes first ---------------------------------------------------------------------

TAG = ("eks-hybrid-lab:stack", "eks-hybrid-lab/dev")


@pytest.fixture
def ec2(monkeypatch):
    """EC2 in moto, in this process (nothing leaves it), with one of this stack's hosts and one
    instance that carries another stack's tag."""
    from moto import mock_aws

    with mock_aws():
        # moto sets keys of its own as it starts; the fake API server checks its token was
        # signed with these.
        for key, value in FAKE_AWS_ENV.items():
            monkeypatch.setenv(key, value)
        import boto3

        client = boto3.client("ec2", region_name=REGION)
        image = "ami-0123456789abcdef0"  # moto runs any image id

        def launch(tag_value: str) -> str:
            return client.run_instances(
                ImageId=image, MinCount=1, MaxCount=1, InstanceType="t3.small",
                TagSpecifications=[{"ResourceType": "instance",
                                    "Tags": [{"Key": TAG[0], "Value": tag_value}]}],
            )["Instances"][0]["InstanceId"]

        client.launch = launch
        yield client


def _state(ec2, instance: str) -> str:
    [reservation] = ec2.describe_instances(InstanceIds=[instance])["Reservations"]
    return reservation["Instances"][0]["State"]["Name"]


def with_host(api: FakeApiServer, pki: Pki, instance: str) -> dict[str, str]:
    return {**tokened(api, pki), "instanceId": instance, "hostTagKey": TAG[0],
            "hostTagValue": TAG[1]}


def test_delete_terminates_its_host_before_it_deletes_the_node(api, pki, provider, ssm, ec2):
    instance = ec2.launch(TAG[1])
    props = provider.create(with_host(api, pki, instance)).outs
    api.plant(MI_OLD, **HYBRID, **OURS, **{"eks-hybrid-lab.io/host": "node-0", TOKEN_LABEL: TOKEN})
    ssm.registrations[MI_OLD] = ACTIVATION
    ssm.watch = lambda: _state(ec2, instance)
    seen = []
    delete_node = provider._delete_node

    def recorded(opener, props, token, name):
        seen.append((name, _state(ec2, instance)))
        delete_node(opener, props, token, name)

    provider._delete_node = recorded
    provider.delete("x", props)
    # The host was terminated when its registration was deregistered and its Node deleted.
    assert [state for op, _, state in ssm.calls if op == "DeregisterManagedInstance"] == \
        ["terminated"]
    assert seen == [(MI_OLD, "terminated")] and api.deleted == [MI_OLD]


def test_an_instance_without_this_stacks_tag_is_not_terminated(api, pki, provider, ssm, ec2):
    instance = ec2.launch("eks-hybrid-lab/prod")
    props = provider.create(with_host(api, pki, instance)).outs
    api.plant(MI_OLD, **HYBRID, **OURS, **{"eks-hybrid-lab.io/host": "node-0", TOKEN_LABEL: TOKEN})
    with pytest.raises(RuntimeError) as raised:
        provider.delete("x", props)
    assert f"does not carry this stack's tag {TAG[0]}={TAG[1]}" in str(raised.value)
    assert _state(ec2, instance) == "running"
    assert api.deleted == [] and ssm.of("DeregisterManagedInstance") == []


def test_a_host_already_terminated_or_forgotten_is_not_asked_again(api, pki, provider, ssm, ec2):
    instance = ec2.launch(TAG[1])
    ec2.terminate_instances(InstanceIds=[instance])
    api.plant(MI_OLD, **HYBRID, **OURS, **{"eks-hybrid-lab.io/host": "node-0", TOKEN_LABEL: TOKEN})
    provider.delete("x", provider.create(with_host(api, pki, instance)).outs)
    assert api.deleted == [MI_OLD]
    # An id EC2 no longer knows (it forgets a terminated instance after about an hour).
    api.plant(MI_NEW, **HYBRID, **OURS, **{"eks-hybrid-lab.io/host": "node-0", TOKEN_LABEL: TOKEN})
    provider.delete("x", provider.create(with_host(api, pki, "i-0123456789abcdef0")).outs)
    assert api.deleted == [MI_OLD, MI_NEW]


def test_a_cleanup_that_terminates_needs_the_stacks_tag(api, pki, provider):
    props = {**tokened(api, pki), "instanceId": "i-0123456789abcdef0"}
    with pytest.raises(ValueError, match="needs the stack's tag"):
        provider.create(props)


def test_a_later_instance_of_the_same_generation_keeps_its_node(api, pki, provider, ssm, ec2):
    """A host terminated outside Pulumi and dropped by a refresh is created anew with the same
    user data, so the same token; its old cleanup, replaced create-first for the new instance
    id, is deleted at the end of that update. It must remove its own instance's Node only."""
    instance_label = "eks-hybrid-lab.io/instance"
    old = ec2.launch(TAG[1])
    ec2.terminate_instances(InstanceIds=[old])
    new = ec2.launch(TAG[1])
    props = provider.create({**with_host(api, pki, old), "instanceLabel": instance_label}).outs
    assert props["nodeSelector"].endswith(f",{instance_label}={old}")
    host = {"eks-hybrid-lab.io/host": "node-0", TOKEN_LABEL: TOKEN}
    api.plant(MI_OLD, **HYBRID, **OURS, **host, **{instance_label: old})
    api.plant(MI_NEW, **HYBRID, **OURS, **host, **{instance_label: new})
    provider.delete("x", props)
    assert api.deleted == [MI_OLD] and _state(ec2, new) == "running"
