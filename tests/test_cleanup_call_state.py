"""One cleanup provider object serves many calls at once (issue 42, item 4).

The dynamic provider host unpickles a provider once per distinct pickle and hands that one
object to every call (pulumi/dynamic/__main__.py: ``get_provider`` keeps it in
``_PROVIDER_CACHE``), and it serves the engine's calls from the worker threads of its gRPC
server (``main``: ``futures.ThreadPoolExecutor(max_workers=4)``). Every cleanup of a class
pickles to the same bytes, so the three Karpenter cleanups of a destroy share one object. What
one call knows (the account it checked, the sessions it made) must therefore never live on that
object, not even per thread: a call that hands part of its work to another thread would find
nothing there and act with the shell's credentials.

AWS is moto in-process with the accounts of tests/test_accounts.py: the ``lab`` profile assumes
a role in ``LAB_ACCOUNT``, the ``keys`` profile and the environment hold keys of their own and act
in moto's default account.
"""

from __future__ import annotations

import base64
import functools
import os
import threading
import urllib.parse
from concurrent import futures
from typing import Any, Callable

import boto3
import pulumi.dynamic
import pytest

from components.cleanup.deletion_cost_ranks import DeletionCostRanksProvider
from components.cleanup.gateway_routes import GatewayRouteCleanupProvider
from components.cleanup.host_token import HostTokenProvider
from components.cleanup.karpenter_leftovers import KarpenterLeftoverCleanupProvider
from components.cleanup.node_objects import NodeObjectCleanupProvider
from components.cleanup.registration_budget import RegistrationBudgetProvider
from components.cleanup.ssm_registrations import SsmRegistrationCleanupProvider
from components.cleanup.stale_nodes import StaleNodeSweepProvider
from tests.test_accounts import (DEFAULT_ACCOUNT, KEYS_KEY, LAB_ACCOUNT, REGION,  # noqa: F401
                                 aws_files, moto, states)
from tests.test_cleanup_karpenter_leftovers import karpenter_tags, run_instances

#: The engine's gRPC server: four worker threads (pulumi/dynamic/__main__.py, ``main``).
ENGINE_WORKERS = 4
#: Longest a test waits for the calls to meet; they meet in well under a second.
MEET_SECONDS = 30


def racing(base: type, method: str, meet: threading.Barrier,
           helpers: futures.Executor | None) -> type:
    """``base`` whose ``method`` first waits until every concurrent call has reached it (so each
    has checked its own props before any acts) and then, with ``helpers``, runs on one of their
    threads instead of the calling one — as a cleanup that fans its work out would."""

    def meeting(self: Any, *args: Any, **kwargs: Any) -> Any:
        meet.wait(timeout=MEET_SECONDS)
        work = functools.partial(getattr(super(subclass, self), method), *args, **kwargs)
        return helpers.submit(work).result() if helpers is not None else work()

    subclass = type(f"Racing{base.__name__}", (base,), {method: meeting})
    return subclass


def at_once(provider: Any, calls: list[tuple[str, dict]]) -> dict[str, Any]:
    """``provider.delete(id, props)`` for every call, all at once on the engine's worker
    threads; {id: None or the exception it raised}."""

    def delete(id_: str, props: dict) -> Any:
        try:
            provider.delete(id_, props)
        except Exception as error:  # noqa: BLE001 - the outcome under test
            return error
        return None

    with futures.ThreadPoolExecutor(max_workers=ENGINE_WORKERS) as engine:
        running = {id_: engine.submit(delete, id_, props) for id_, props in calls}
        return {id_: future.result(timeout=120) for id_, future in running.items()}


WHERE = {"on the calling thread": False, "handed to another thread": True}


@pytest.mark.parametrize("handed_off", list(WHERE.values()), ids=list(WHERE))
def test_concurrent_karpenter_deletes_each_act_in_their_own_account(moto, handed_off):
    # The test's own clients: the lab profile's role, and the environment's keys. Each
    # account has a Karpenter instance of each cluster.
    ec2 = {LAB_ACCOUNT: boto3.session.Session(profile_name="lab").client("ec2", region_name=REGION),
           DEFAULT_ACCOUNT: boto3.client("ec2", region_name=REGION)}
    planted = {(account, cluster): run_instances(ec2[account], karpenter_tags(cluster))[0]
               for account in ec2 for cluster in ("alpha", "beta", "gamma")}
    # alpha: the lab profile, pinned to the lab account. beta: no settings (a state stored
    # before they existed), the environment's credentials. gamma: pinned to the lab account
    # with the environment's credentials, which are for the default account: refused.
    calls = [("alpha", {"awsProfile": "lab", "allowedAccountIds": [LAB_ACCOUNT]}),
             ("beta", {}),
             ("gamma", {"allowedAccountIds": [LAB_ACCOUNT]})]

    with futures.ThreadPoolExecutor(max_workers=2) as helpers:
        provider = racing(KarpenterLeftoverCleanupProvider, "_clean_instances",
                          threading.Barrier(len(calls)), helpers if handed_off else None)()
        provider.poll_seconds = provider.retry_base_seconds = 0
        outcome = at_once(provider, [(cluster, {"region": REGION, "clusterName": cluster,
                                                 **props}) for cluster, props in calls])

    assert outcome["alpha"] is None and outcome["beta"] is None, outcome
    assert f"are for account {DEFAULT_ACCOUNT}, and this stack is pinned to {LAB_ACCOUNT}" \
        in str(outcome["gamma"]), outcome["gamma"]
    now = {account: states(client) for account, client in ec2.items()}
    found = {(account, cluster): now[account][instance]
             for (account, cluster), instance in planted.items()}
    assert found == {(LAB_ACCOUNT, "alpha"): "terminated", (LAB_ACCOUNT, "beta"): "running",
                     (LAB_ACCOUNT, "gamma"): "running",
                     (DEFAULT_ACCOUNT, "alpha"): "running",
                     (DEFAULT_ACCOUNT, "beta"): "terminated",
                     (DEFAULT_ACCOUNT, "gamma"): "running"}


def signing_key(token: str) -> str:
    url = base64.urlsafe_b64decode(token[len("k8s-aws-v1."):] + "==").decode()
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    return query["X-Amz-Credential"].split("/")[0]


def token_recorder(base: type, seen: dict[str, str]) -> type:
    """``base`` whose Kubernetes calls record the bearer token per namespace and find no pods
    (the API server is not what this is about)."""

    def call(self: Any, _opener: Any, _method: str, url: str, token: str,
             **_kwargs: Any) -> dict:
        seen[url.split("/namespaces/", 1)[1].split("/", 1)[0]] = signing_key(token)
        return {"items": []}

    return type(f"Recording{base.__name__}", (base,),
                {"_call": call, "_opener": lambda self, _ca: None})


@pytest.mark.parametrize("handed_off", list(WHERE.values()), ids=list(WHERE))
def test_concurrent_deletes_sign_their_eks_tokens_with_their_own_profile(moto, handed_off):
    seen: dict[str, str] = {}
    calls = [("keys", {"awsProfile": "keys"}), ("environment", {}),
             ("pinned-keys", {"awsProfile": "keys", "allowedAccountIds": [DEFAULT_ACCOUNT]})]
    with futures.ThreadPoolExecutor(max_workers=2) as helpers:
        provider = racing(token_recorder(DeletionCostRanksProvider, seen), "_bearer_token",
                          threading.Barrier(len(calls)), helpers if handed_off else None)()
        outcome = at_once(provider, [(namespace, {
            "clusterName": "lab", "region": REGION, "endpoint": "https://127.0.0.1:9",
            "certificateAuthority": "Y2E=", "namespace": namespace, **props})
            for namespace, props in calls])
    assert outcome == {namespace: None for namespace, _ in calls}
    # The environment's keys: moto's stand-ins (mock_aws puts them there).
    environment = os.environ["AWS_ACCESS_KEY_ID"]
    assert environment != KEYS_KEY
    assert seen == {"keys": KEYS_KEY, "environment": environment, "pinned-keys": KEYS_KEY}


# --- nothing of a call stays on the provider ------------------------------------------------

CA = "Y2E="
KUBE = {"clusterName": "lab", "region": REGION, "endpoint": "https://127.0.0.1:9",
        "certificateAuthority": CA}
#: Each provider class with props its create accepts, and whether its delete runs here (under
#: moto: its Kubernetes calls fail on the CA, then EKS says the cluster does not exist).
PROVIDERS: list[tuple[Callable[[], Any], dict]] = [
    (KarpenterLeftoverCleanupProvider, {"region": REGION, "clusterName": "lab"}),
    (SsmRegistrationCleanupProvider, {"region": REGION, "activationId": "act-1"}),
    (NodeObjectCleanupProvider, {**KUBE, "labelSelector": "a=b", "activationId": "act-1"}),
    (StaleNodeSweepProvider, {**KUBE, "labelSelector": "a=b", "activationId": "act-1",
                              "instanceId": "i-0123456789abcdef0"}),
    (GatewayRouteCleanupProvider, {**KUBE, "routeTableIds": ["rtb-1"],
                                   "podCidrs": ["172.17.0.0/16"],
                                   "vtepConfigName": "hybrid-gateway"}),
    (DeletionCostRanksProvider, {**KUBE, "namespace": "burst"}),
    (HostTokenProvider, {"generation": "g1"}),
    (RegistrationBudgetProvider, {"activationId": "act-1", "activationName": "lab",
                                  "registrationLimit": 6, "activationGeneration": 1,
                                  "region": REGION, "hostNames": ["node-0"],
                                  "hosts": {"node-0": "g1"}}),
]


def test_every_cleanup_provider_is_checked_for_what_it_keeps():
    import importlib
    import pkgutil

    import components.cleanup

    # The providers each module of components/cleanup/ defines (pickled by value, they all
    # say __module__ == "__main__", so they are found in the modules' own namespaces; the
    # dynamic providers elsewhere, such as components/expiry.py's, keep no account).
    found = set()
    for module in pkgutil.iter_modules(components.cleanup.__path__):
        namespace = vars(importlib.import_module(f"components.cleanup.{module.name}"))
        found |= {value for value in namespace.values() if isinstance(value, type)
                  and issubclass(value, pulumi.dynamic.ResourceProvider)
                  and value is not pulumi.dynamic.ResourceProvider}
    assert found == {make for make, _ in PROVIDERS}


def snapshot(provider: Any) -> list[dict[str, Any]]:
    """The provider object's attributes and those of every class it inherits from."""
    return [dict(vars(provider))] + [dict(vars(cls)) for cls in type(provider).__mro__]


@pytest.mark.parametrize("make, props", PROVIDERS, ids=lambda v: getattr(v, "__name__", ""))
def test_no_call_leaves_anything_on_the_provider_or_its_classes(moto, make, props):
    provider = make()
    provider.retry_base_seconds = 0
    before = snapshot(provider)
    account = {"awsProfile": "keys", "allowedAccountIds": [DEFAULT_ACCOUNT]}
    if "generation" in props:
        account = {}
    if type(provider).check is not pulumi.dynamic.ResourceProvider.check:
        provider.check({}, {**props, **account})
    outs = provider.create({**props, **account}).outs
    provider.diff("id", {**outs, "__provider": "a"}, {**props, **account, "__provider": "a"})
    provider.update("id", {**outs, "__provider": "a"}, {**props, **account, "__provider": "a"})
    try:
        provider.delete("id", outs)
    except Exception:  # noqa: BLE001 - what it did is not the question here; what it kept is
        pass
    assert snapshot(provider) == before
