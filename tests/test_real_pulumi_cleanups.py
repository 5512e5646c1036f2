"""Destroy-time cleanups run by the real engine (issue 41, item 3, "Destroy-time cleanups"): so
far the Karpenter leftover cleanup (components/cleanup/karpenter_leftovers.py), in this
program's own resource class, created by ``pulumi up`` and deleted by ``pulumi destroy`` with
the engine's parallel deletes, its boto3 calls going to a moto server on 127.0.0.1 the way a
user's environment points boto3 (``AWS_ENDPOINT_URL``). What it did is read from moto, not from
Pulumi's answer.

Three cleanups delete at once: clusters "alpha" and "beta" in moto's account, and "gamma"
pinned (``aws:allowedAccountIds``) to an account the credentials are not for. Each must act on
its own inputs only: alpha's and beta's Karpenter instances terminated, gamma's refused with
nothing done, and the decoys (another cluster's node, an instance without Karpenter's tag)
left running. A provider whose per-call state (the account it checked, its sessions) leaked
between concurrent deletes would terminate gamma's instances or refuse alpha's."""

from __future__ import annotations

import boto3
import pytest

from tests.conftest import PROJECT_DIR
from tests.real_pulumi import PulumiEngine, PulumiProject, moto_url, pulumi_bindir  # noqa: F401

REGION = "ap-northeast-2"
#: moto's account for any credentials.
MOTO_ACCOUNT = "123456789012"
OTHER_ACCOUNT = "210987654321"

PROGRAM = '''
import pulumi

from components.aws_account import AwsAccount
from components.cleanup.karpenter_leftovers import KarpenterLeftoverCleanup

cfg = pulumi.Config()
region = cfg.require("region")
for cluster, account in (("alpha", cfg.require("alphaAccount")), ("beta", cfg.require("betaAccount")),
                         ("gamma", cfg.require("gammaAccount"))):
    KarpenterLeftoverCleanup(f"{cluster}-karpenter-leftovers", region=region, cluster_name=cluster,
                             account=AwsAccount(allowed_account_ids=(account,)))
'''


def karpenter_node(ec2, cluster: str, *, karpenter: bool = True) -> str:
    tags = [{"Key": f"kubernetes.io/cluster/{cluster}", "Value": "owned"},
            {"Key": "eks:eks-cluster-name", "Value": cluster}]
    if karpenter:
        tags.append({"Key": "karpenter.sh/nodepool", "Value": "burst"})
    answer = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1,
                               InstanceType="m5.large",
                               TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
    return answer["Instances"][0]["InstanceId"]


def states(ec2) -> dict[str, str]:
    return {i["InstanceId"]: i["State"]["Name"]
            for r in ec2.describe_instances()["Reservations"] for i in r["Instances"]}


def test_parallel_deletes_each_clean_up_their_own_cluster_in_their_own_account(
        pulumi_bindir, moto_url, tmp_path):  # noqa: F811
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url,
                       aws_access_key_id="testing", aws_secret_access_key="testing")
    mine = {c: [karpenter_node(ec2, c), karpenter_node(ec2, c)] for c in ("alpha", "beta", "gamma")}
    decoys = [karpenter_node(ec2, "delta"), karpenter_node(ec2, "alpha", karpenter=False)]

    project = PulumiProject.program(tmp_path / "project", "cleanups", PROGRAM, source=PROJECT_DIR)
    with PulumiEngine(pulumi_bindir, tmp_path / "engine", aws_endpoint=moto_url,
                      deadline=180) as engine:
        stack = engine.stack(project, "t")
        stack.set_config({"cleanups:region": REGION, "cleanups:alphaAccount": MOTO_ACCOUNT,
                          "cleanups:betaAccount": MOTO_ACCOUNT,
                          "cleanups:gammaAccount": OTHER_ACCOUNT})
        up = stack.up()
        assert up.ok, up.error
        # create() is pure: nothing was touched by ``up``.
        assert set(states(ec2).values()) == {"running"}

        down = stack.destroy(parallel=8)

    after = states(ec2)
    for cluster in ("alpha", "beta"):
        assert [after[i] for i in mine[cluster]] == ["terminated", "terminated"], cluster
    assert [after[i] for i in mine["gamma"]] == ["running", "running"]
    assert [after[i] for i in decoys] == ["running", "running"]
    # gamma's delete failed, naming the account, and so did the destroy.
    assert not down.ok
    failed = [s.name for s in down.steps() if s.op == "delete" and s.failed]
    assert failed == ["gamma-karpenter-leftovers"], down.steps()
    assert any(OTHER_ACCOUNT in d and MOTO_ACCOUNT in d for d in down.diagnostics()), down.diagnostics()
    # The three deletes were under way at once: each started before any of them ended.
    deletes = [s for s in down.steps() if s.op == "delete" and "leftovers" in s.urn]
    assert len(deletes) == 3
    assert max(s.started for s in deletes) < min(s.finished for s in deletes)
