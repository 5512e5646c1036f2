"""The deletion of DeletionCostRanks strips Karpenter's negative pod-deletion-cost values (and
only those) from the pods of its namespace."""

from __future__ import annotations

import os

import pytest

from components.cleanup.deletion_cost_ranks import DELETION_COST, DeletionCostRanksProvider
from tests.fake_kube_api import CLUSTER, api, assert_authorized, fake_aws, pki  # noqa: F401 (fixtures)
from tests.fake_kube_api import no_eks  # noqa: F401 (fixture)
from tests.pickled_provider import result_of, run_pickled

pytestmark = pytest.mark.usefixtures("no_eks")


@pytest.fixture
def provider() -> DeletionCostRanksProvider:
    provider = DeletionCostRanksProvider()
    provider.retry_base_seconds = 0
    return provider


def props(api, pki, namespace="demo-burst") -> dict:
    # The fake API server's authenticator is this cluster's: a token for another name is refused.
    return {"clusterName": CLUSTER, "region": api.region, "endpoint": api.url,
            "certificateAuthority": pki.ca_b64, "namespace": namespace}


def plant(api) -> None:
    api.plant_pod("demo-burst", "cloud-a", **{DELETION_COST: "-3"})
    api.plant_pod("demo-burst", "cloud-b", **{DELETION_COST: "-1", "other": "x"})
    api.plant_pod("demo-burst", "hybrid-a", **{DELETION_COST: "1"})
    api.plant_pod("demo-burst", "plain")
    api.plant_pod("demo-burst", "odd", **{DELETION_COST: "not-a-number"})
    api.plant_pod("elsewhere", "cloud-z", **{DELETION_COST: "-2"})


def test_strips_only_negative_values_in_the_namespace(api, pki, provider):
    plant(api)
    provider.delete("id", props(api, pki))
    assert api.pods[("demo-burst", "cloud-a")] == {}
    assert api.pods[("demo-burst", "cloud-b")] == {"other": "x"}
    assert api.pods[("demo-burst", "hybrid-a")] == {DELETION_COST: "1"}
    assert api.pods[("demo-burst", "odd")] == {DELETION_COST: "not-a-number"}
    assert api.pods[("elsewhere", "cloud-z")] == {DELETION_COST: "-2"}
    assert sorted(r.path for r in api.of("PATCH")) == [
        "/api/v1/namespaces/demo-burst/pods/cloud-a", "/api/v1/namespaces/demo-burst/pods/cloud-b"]
    assert_authorized(api)


def test_nothing_to_strip_is_success(api, pki, provider):
    api.plant_pod("demo-burst", "hybrid-a", **{DELETION_COST: "1"})
    provider.delete("id", props(api, pki))
    assert api.of("PATCH") == []


def test_failure_names_the_pods_left_and_the_command(api, pki, provider, monkeypatch):
    plant(api)
    original = {k: dict(v) for k, v in api.pods.items()}
    real_call = provider._call

    def patch_fails(opener, method, url, token, **kwargs):
        if method == "PATCH":
            raise RuntimeError("PATCH answered HTTP 500")
        return real_call(opener, method, url, token, **kwargs)

    monkeypatch.setattr(provider, "_call", patch_fails)
    with pytest.raises(Exception) as caught:
        provider.delete("id", props(api, pki))
    message = str(caught.value)
    assert "cloud-a" in message and "cloud-b" in message and "hybrid-a" not in message
    assert "rollout restart" in message
    assert api.pods == original


def test_create_is_pure_and_validates(api, pki, provider):
    result = provider.create(props(api, pki))
    assert result.id == "deletion-cost-ranks-demo-burst"
    assert api.requests == []
    with pytest.raises(ValueError):
        provider.create({**props(api, pki), "namespace": ""})


def test_pickled_provider_strips_in_a_fresh_process(api, pki, provider):
    plant(api)
    # The fake_aws fixture set the credentials the fake API server accepts tokens for.
    env = {key: os.environ[key] for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env["AWS_DEFAULT_REGION"] = api.region
    result_of(run_pickled(provider, "delete", "id", props(api, pki), env=env))
    assert api.pods[("demo-burst", "cloud-a")] == {}
    assert api.pods[("demo-burst", "hybrid-a")] == {DELETION_COST: "1"}
