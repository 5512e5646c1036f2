"""The stale-node sweep: when its host is re-created with the same user data (`pulumi up
--replace`), its update removes the Node the old host left, and only that one.

The Kubernetes side is the fake API server on 127.0.0.1 over HTTPS (tests/fake_kube_api.py),
SSM the stateful fake on a real botocore client (tests/fake_ssm.py), EC2 a botocore Stubber
answering DescribeInstances with the new instance's launch time.
"""

from __future__ import annotations

import datetime

import pytest

from components.cleanup.stale_nodes import StaleNodeSweepProvider
from tests.fake_kube_api import CLUSTER, REGION, FakeApiServer, Pki
from tests.fake_kube_api import api, fake_aws, pki  # noqa: F401 (fixtures)
from tests.fake_kube_api import no_eks  # noqa: F401 (fixture)
from tests.fake_ssm import FakeSsm, install
from tests.offline_guard import forbid_network

pytestmark = pytest.mark.usefixtures("no_eks")

ACTIVATION = "3f1c2a7e-5b8d-4c21-9e0f-6a7b8c9d0e1f"
HOST = {"eks.amazonaws.com/compute-type": "hybrid", "eks-hybrid-lab.io/stack": "eks-hybrid-lab.dev",
        "eks-hybrid-lab.io/host": "node-0", "eks-hybrid-lab.io/cleanup": "a" * 32}
SELECTOR = ",".join(f"{k}={v}" for k, v in HOST.items() if k != "eks.amazonaws.com/compute-type")
OLD_INSTANCE, NEW_INSTANCE = "i-0aaaaaaaaaaaaaaa1", "i-0aaaaaaaaaaaaaaa2"
MI_OLD, MI_NEW, MI_OTHER = "mi-0a1b2c3d4e5f6000a", "mi-0a1b2c3d4e5f6000b", "mi-0a1b2c3d4e5f6000c"
LAUNCHED = datetime.datetime(2026, 12, 4, 10, 0, tzinfo=datetime.timezone.utc)


@pytest.fixture
def provider() -> StaleNodeSweepProvider:
    p = StaleNodeSweepProvider()
    p.retry_base_seconds = 0
    p.request_timeout_seconds = 3
    return p


@pytest.fixture
def ssm(monkeypatch) -> FakeSsm:
    return install(monkeypatch, REGION)


@pytest.fixture
def ec2(monkeypatch):
    """DescribeInstances answers the new instance's launch time (asked for by id)."""
    import boto3
    from botocore.stub import Stubber

    client = boto3.client("ec2", region_name=REGION, endpoint_url="http://127.0.0.1:9",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    stubber = Stubber(client)
    stubber.add_response("describe_instances", {"Reservations": [{"Instances": [
        {"InstanceId": NEW_INSTANCE, "LaunchTime": LAUNCHED}]}]},
        {"InstanceIds": [NEW_INSTANCE]})
    stubber.activate()
    patched = boto3.client

    def client_for(service, *args, **kwargs):
        return client if service == "ec2" else patched(service, *args, **kwargs)

    monkeypatch.setattr(boto3, "client", client_for)
    yield stubber
    stubber.assert_no_pending_responses()


def props(api: FakeApiServer, pki: Pki, instance: str) -> dict:
    return {"clusterName": CLUSTER, "region": REGION, "endpoint": api.url,
            "certificateAuthority": pki.ca_b64, "labelSelector": SELECTOR,
            "activationId": ACTIVATION, "instanceId": instance}


def test_a_re_created_host_leaves_no_node_behind(api, pki, provider, ssm, ec2):
    # The old host's Node registered before the new instance was launched; the new host's
    # after it; a Node of another host of the stack is not selected at all.
    api.plant(MI_OLD, **HOST)
    api.plant(MI_NEW, **HOST)
    api.plant(MI_OTHER, **{**HOST, "eks-hybrid-lab.io/host": "node-1"})
    ssm.registrations.update({MI_OLD: ACTIVATION, MI_NEW: ACTIVATION, MI_OTHER: ACTIVATION})
    ssm.registered_at.update({MI_OLD: LAUNCHED - datetime.timedelta(days=2),
                              MI_NEW: LAUNCHED + datetime.timedelta(minutes=4),
                              MI_OTHER: LAUNCHED - datetime.timedelta(days=2)})
    olds = props(api, pki, OLD_INSTANCE)
    result = provider.update("x", olds, props(api, pki, NEW_INSTANCE))

    assert result.outs["instanceId"] == NEW_INSTANCE
    assert api.deleted == [MI_OLD] and sorted(api.nodes) == [MI_NEW, MI_OTHER]
    assert ssm.deregistered == [MI_OLD]


def test_nothing_is_swept_while_the_instance_stays(api, pki, provider, ssm, monkeypatch):
    forbid_network(monkeypatch)
    api.plant(MI_OLD, **HOST)
    same = props(api, pki, OLD_INSTANCE)
    provider.update("x", same, {**same, "endpoint": api.url})
    assert api.deleted == [] and ssm.calls == [] and api.requests == []


def test_its_diff_updates_and_never_replaces(provider, api, pki):
    """Replaced, it would be deleted ahead of the host's delete-first replacement and created
    anew, where nothing tells an old Node from the new host's."""
    olds = {**props(api, pki, OLD_INSTANCE), "__provider": "code"}
    diff = provider.diff("x", olds, {**olds, "instanceId": NEW_INSTANCE})
    assert diff.changes and diff.replaces == []
    assert not provider.diff("x", olds, dict(olds)).changes


def test_create_and_delete_touch_nothing(api, pki, provider, monkeypatch):
    forbid_network(monkeypatch)
    api.plant(MI_OLD, **HOST)
    created = provider.create(props(api, pki, NEW_INSTANCE))
    assert created.outs["instanceId"] == NEW_INSTANCE
    provider.delete(created.id, created.outs)
    assert api.requests == [] and sorted(api.nodes) == [MI_OLD]


def test_a_registration_it_cannot_remove_fails_the_update_and_keeps_the_node(api, pki, provider,
                                                                            ssm, ec2):
    api.plant(MI_OLD, **HOST)
    ssm.registrations[MI_OLD] = ACTIVATION
    ssm.registered_at[MI_OLD] = LAUNCHED - datetime.timedelta(days=2)
    ssm.failures[("DeregisterManagedInstance", MI_OLD)] = ["AccessDeniedException"]
    with pytest.raises(RuntimeError, match=f"{MI_OLD}: deregistering failed"):
        provider.update("x", props(api, pki, OLD_INSTANCE), props(api, pki, NEW_INSTANCE))
    assert api.deleted == [] and sorted(api.nodes) == [MI_OLD]
