"""The whole lab, every layer, up and destroyed by the real Pulumi engine (issue 41, item 3:
"The Kubernetes layers for real" and "Order"): this repository's project and stack settings,
the real pulumi-kubernetes provider onto the real kube-apiserver (tests/real_pulumi_lab.py has
the seams: the charts from ../shared/charts, AWS through tests/pulumi_aws_standin.py), the
cleanups in the engine's dynamic provider host calling moto and that API server with EKS
tokens the EKS authenticator's rule accepts, the kubeconfig's ``aws eks get-token`` the real
AWS CLI.

kwok's Nodes stand in for the kubelets (tests/real_pulumi_lab.py ``NodesJoin``), registered
while ``pulumi up`` runs, as each resource that brings machines up is created: each managed node
group's nodes with its labels and taints, and one per hybrid host, named and labelled and
tainted as that host's user data tells nodeadm to register it — so the scheduler places the charts' and
the demo's pods by the program's own selectors and tolerations, and every Helm and Deployment
readiness wait is a real wait.

What is checked is read from the API server and moto, and the destroy order from the engine's
event log: the rule (docs/architecture.md) that nothing that runs a pod on a hybrid node is
deleted after that node's host is terminated."""

from __future__ import annotations

import json
import re

import boto3
import pytest

from tests.real_cluster import EKS_CLUSTER, EKS_REGION, eks_control_plane  # noqa: F401
from tests.real_pulumi import moto_url, pulumi_bindir  # noqa: F401
from tests.real_pulumi_lab import (LOCAL_CHARTS, NodesJoin, journal_of, lab_engine, lab_project,
                                   pods_by_resource, read_journal, state_resources)
from offline.fake_cloud import FakeCloud
from tests.conftest import PROJECT_DIR

#: moto's account for any credentials; the stand-in's sts:GetCallerIdentity answers it too.
ACCOUNT = "123456789012"


def stack_file(layer: str) -> str:
    text = (PROJECT_DIR / "Pulumi.dev.yaml").read_text()
    text = text.replace("aws:region: ap-northeast-2", f"aws:region: {EKS_REGION}")
    text = re.sub(r"upToLayer: \w+", f"upToLayer: {layer}", text)
    return text.replace("config:\n", f"config:\n  aws:allowedAccountIds: ['{ACCOUNT}']\n"
                                     f"  eks-hybrid-lab:clusterName: {EKS_CLUSTER}\n", 1)


def resources(state: dict, type_: str) -> list[dict]:
    return [r for r in state_resources(state) if r["type"] == type_]


def made_objects(plane, state: dict) -> list[str]:
    """The API paths of the Kubernetes objects the program made itself (not through a chart),
    by the API server's own discovery."""
    paths = []
    for r in state_resources(state):
        kind = r["type"].split(":")
        if kind[0] != "kubernetes" or "helm.sh" in kind[1] or kind[1] == "providers":
            continue
        outputs = r.get("outputs", {})
        paths.append(plane.path_of({k: outputs[k] for k in ("apiVersion", "kind", "metadata")}))
    return paths


def running(ec2) -> list[str]:
    return [i["InstanceId"] for r in ec2.describe_instances()["Reservations"]
            for i in r["Instances"] if i["State"]["Name"] != "terminated"]


@pytest.mark.skipif(not all(p.is_file() for p in LOCAL_CHARTS.values()),
                    reason="a chart source is missing from ../shared/charts")
def test_every_layer_goes_up_and_destroy_takes_hybrid_pods_before_their_hosts(
        pulumi_bindir, eks_control_plane, moto_url, monkeypatch, tmp_path):  # noqa: F811
    from tests import moto_ssm_instances

    ssm = moto_ssm_instances.install(monkeypatch)
    eks = eks_control_plane
    plane = eks.plane
    ec2 = boto3.client("ec2", region_name=EKS_REGION, endpoint_url=moto_url,
                       aws_access_key_id="testing", aws_secret_access_key="testing")

    with eks.authenticator.trusted_sts(moto_url), \
            lab_engine(pulumi_bindir, tmp_path, eks, aws_endpoint=moto_url,
                       account_id=ACCOUNT, deadline=600) as engine, \
            NodesJoin(plane, journal_of(tmp_path), EKS_REGION, ssm) as boots:
        stack = engine.stack(lab_project(tmp_path / "project"), "t")
        stack.write_stack_file(stack_file("demo"))
        up = stack.up()
        assert up.ok, f"{up.error}\n" + "\n".join(up.diagnostics()[-8:])
        assert boots.errors == []
        hybrid = boots.hybrid
        assert len(hybrid) == 2, boots.joined

        state_text = stack.state()
        state = json.loads(state_text)
        # The activation code (FakeCloud's, through the stand-in) is in every host's user
        # data: the state keeps it encrypted, never in plain text.
        code = FakeCloud(EKS_REGION)._computed("aws:ssm/activation:Activation",
                                               "hybrid-activation-ssm", "", {})["activationCode"]
        assert code not in state_text
        assert any(code in call.get("userData", "") for call in read_journal(journal_of(tmp_path)))
        # Every Kubernetes object the program made itself is on the API server.
        objects = made_objects(plane, state)
        assert len(objects) > 10
        missing = [path for path in objects if plane.call("GET", path).status != 200]
        assert missing == []
        placed = pods_by_resource(plane, state, hybrid)
        # Every hybrid host runs Cilium and demo pods, all made by the program.
        for node, owners in placed.items():
            assert "hybrid-cilium-release" in owners, (node, owners)
            assert not [o for o in owners if o.startswith("(not")], (node, owners)
        cleanups = {r["outputs"].get("instanceId"): r["urn"].rsplit("::", 1)[-1]
                    for r in state_resources(state)
                    if r["type"].startswith("pulumi-python:dynamic")
                    and r.get("outputs", {}).get("instanceId")}
        hosts = {r["id"]: r["urn"].rsplit("::", 1)[-1]
                 for r in resources(state, "aws:ec2/instance:Instance")}

        down = stack.destroy()
        assert down.ok, f"{down.error}\n" + "\n".join(down.diagnostics()[-8:])

    # The rule, on the engine's own event sequence: each resource with a pod on a hybrid node
    # has finished deleting before that node's host starts to die — in its Node cleanup's
    # delete (which terminates it), and in its instance's.
    steps = {s.name: s for s in down.steps() if s.op == "delete"}
    late = []
    for node, owners in placed.items():
        instance = boots.joined[node]
        for killer in (cleanups[instance], hosts[instance]):
            late += [f"{owner} (finished at {steps[owner].finished}) after {killer} started "
                     f"(at {steps[killer].started})" for owner in sorted(owners)
                     if steps[owner].finished > steps[killer].started]
    assert late == [], "deleted after their node's host was terminated:\n" + "\n".join(late)

    # Nothing left: no instance the stack made still running in moto (the moto server of this
    # test process also holds other tests' instances), no registration in SSM, no hybrid Node,
    # none of the program's namespaces.
    made = {call.get("id") for call in read_journal(journal_of(tmp_path))
            if call["type"] == "aws:ec2/instance:Instance"} - {None}
    assert made == set(hosts) and len(made) == 2
    assert set(running(ec2)) & made == set()
    assert ssm.ids() == set()
    nodes = {n["metadata"]["name"] for n in plane.call("GET", "/api/v1/nodes").body["items"]}
    assert nodes & hybrid == set()
    namespaces = {n["metadata"]["name"] for n in plane.call("GET", "/api/v1/namespaces").body["items"]}
    assert {n for n in namespaces if n.startswith("demo-")} == set()
    left = [path for path in objects if plane.call("GET", path).status != 404]
    assert left == []
    # What the charts made (their workloads) is gone with their releases.
    assert [p["metadata"]["name"] for p in plane.call("GET", "/api/v1/pods").body["items"]
            if p["spec"].get("nodeName") in hybrid] == []
