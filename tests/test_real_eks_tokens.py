"""The program's EKS bearer token before the real kube-apiserver, behind the EKS authenticator's
rule (tests/eks_authenticator.py): the token the cleanups mint
(components/cleanup/kubernetes_api.py, ``KubernetesApi._bearer_token``) opens the cluster it
names, and only while it is fresh. Presigning is local: nothing here leaves 127.0.0.1."""

from __future__ import annotations

import datetime
import ssl
import urllib.error
import urllib.request

import botocore.auth
import pytest

from components.cleanup.kubernetes_api import KubernetesApi
from tests.real_cluster import EKS_CLUSTER, EKS_REGION, eks_control_plane  # noqa: F401

ACCESS_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@pytest.fixture
def test_keys(monkeypatch):
    """The environment's credentials are the test keys, and nothing else of AWS's: no
    endpoint (the token names STS itself), no profile, no files, no IMDS."""
    import os

    for name in [n for n in os.environ if n.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name, value in {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                        "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(name, value)


def nodes_status(eks, token: str) -> int:
    context = ssl.create_default_context(cafile=str(eks.plane.ca_file))
    request = urllib.request.Request(eks.endpoint + "/api/v1/nodes",
                                      headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


def program_token(cluster_name: str, region: str) -> str:
    """The token the cleanups mint, with the environment's credentials (no account settings)."""
    api = KubernetesApi()
    return api._bearer_token(cluster_name, region, api._account({}))


def review_of(eks, token: str):
    return [r for r in eks.authenticator.reviews if r.token == token]


def test_the_programs_token_opens_the_cluster_it_names(eks_control_plane, test_keys):  # noqa: F811
    eks = eks_control_plane
    token = program_token(EKS_CLUSTER, EKS_REGION)
    assert nodes_status(eks, token) == 200
    assert [r.authenticated for r in review_of(eks, token)] == [True]
    # The program's own client (the cleanups' CA-pinned opener and retried call) gets through
    # too: the API server's certificate is checked against the CA, hostname included.
    api = KubernetesApi()
    answer = api._call(api._opener(eks.certificate_authority), "GET",
                       eks.endpoint + "/api/v1/nodes", token)
    assert answer["kind"] == "NodeList"
    # Who the API server took it for: the authenticator's user, in system:masters.
    review = eks.plane.call("POST", "/apis/authentication.k8s.io/v1/tokenreviews", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "spec": {"token": token}})
    assert review.status == 201, review.body
    user = review.body["status"]["user"]
    assert user["username"] == "eks-lab-admin" and "system:masters" in user["groups"]


def test_a_token_for_another_cluster_is_refused(eks_control_plane, test_keys):  # noqa: F811
    eks = eks_control_plane
    token = program_token("not-" + EKS_CLUSTER, EKS_REGION)
    assert nodes_status(eks, token) == 401
    [review] = review_of(eks, token)
    assert not review.authenticated and "signature does not match" in review.reason


def test_a_token_signed_by_other_keys_is_refused(eks_control_plane, monkeypatch,
                                                  test_keys):  # noqa: F811
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-" + SECRET_KEY)
    token = program_token(EKS_CLUSTER, EKS_REGION)
    assert nodes_status(eks_control_plane, token) == 401


def test_an_expired_token_is_refused(eks_control_plane, monkeypatch, test_keys):  # noqa: F811
    # Minted 16 minutes ago: past the authenticator's 15 (eks_tokens.LIFETIME), and the
    # webhook's answers are not cached (cache TTL 0), so the API server asks again.
    then = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) \
        - datetime.timedelta(minutes=16)
    with monkeypatch.context() as patched:
        patched.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: then)
        token = program_token(EKS_CLUSTER, EKS_REGION)
    assert nodes_status(eks_control_plane, token) == 401
    [review] = review_of(eks_control_plane, token)
    assert "expired" in review.reason


def test_the_static_admin_token_still_works(eks_control_plane):  # noqa: F811
    # The webhook is one authenticator more: the control plane's own token goes on working
    # and never reaches the webhook.
    before = len(eks_control_plane.authenticator.reviews)
    assert eks_control_plane.plane.call("GET", "/api/v1/nodes").status == 200
    assert len(eks_control_plane.authenticator.reviews) == before
