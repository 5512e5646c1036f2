"""Creation order (tests/creation_order.py): every resource that refers to another by name or id
waits for it, and nothing in the cluster's scope can be created before the cluster. The model
runs over the real stack in every shape it takes, and is shown to catch planted defects — the
Karpenter access entry given the cluster name as a plain string first of all."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from stacks.config import LAYERS
from offline.runner import ProgramRun, Registration
from tests import creation_order
from tests.creation_order import creation_order_problems, outside_cluster_scope, unwaited_references
from tests.graph import DestroyGraph

FULL = [dict(gpuEnabled=gpu, burstScenario=s) for gpu, s in itertools.product((False, True), "ABC")]
PREFIXES = [dict(upToLayer=layer) for layer in LAYERS]


def _id(overrides: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in overrides.items())


@pytest.mark.parametrize("overrides", FULL + PREFIXES, ids=_id)
def test_stack_creates_nothing_before_what_it_refers_to(lab, overrides):
    run = lab(**overrides)
    assert creation_order_problems(run) == []


def test_the_model_sees_the_references_that_matter(dev_run):
    """A model that finds no references proves nothing: it must see the ones the lab has."""
    found = {(r.consumer.name, r.producer.name, r.kind) for r in creation_order.references(dev_run)}
    for expected in [
        ("karpenter-karpenter-node-access", "cluster-eks-cluster", "name"),
        ("karpenter-karpenter-pod-identity", "cluster-eks-cluster", "name"),
        ("karpenter-karpenter-leftovers", "cluster-eks-cluster", "name"),
        ("hybrid-node-role-access", "cluster-eks-cluster", "name"),
        ("karpenter-karpenter-node-access", "karpenter-karpenter-node-role", "arn"),
        ("hybrid-activation-ssm", "hybrid-node-role-iam-role", "name"),
        ("karpenter-karpenter-controller-release", "karpenter-karpenter-interruption", "name"),
        ("demo-burst", "demo-demo-burst", "namespace"),
        ("network-cloud-private-0", "network-cloud-vpc", "id"),
    ]:
        assert expected in found


def test_karpenter_refers_to_the_cluster_through_its_output(dev_run):
    """Defect 2: the access entry, Pod Identity association and leftover cleanup take the
    cluster's name output, so the engine records the cluster as the source of that input."""
    cluster = dev_run.one("aws:eks/cluster:Cluster", "cluster-eks-cluster")
    for name in ("karpenter-karpenter-node-access", "karpenter-karpenter-pod-identity",
                 "karpenter-karpenter-leftovers"):
        reg = dev_run.named(name)
        assert cluster.urn in reg.property_dependencies.get("clusterName", []), name


# --- the model catches planted defects ---------------------------------------------------------

def _without_dependency_on(reg: Registration, urn: str) -> Registration:
    return dataclasses.replace(
        reg,
        dependencies=[d for d in reg.dependencies if d != urn],
        property_dependencies={k: [d for d in v if d != urn]
                               for k, v in reg.property_dependencies.items()})


def _with(run: ProgramRun, *replacements: Registration) -> ProgramRun:
    by_urn = {r.urn: r for r in replacements}
    return ProgramRun(stack=run.stack, config=run.config,
                      registrations=[by_urn.get(r.urn, r) for r in run.registrations],
                      outputs=run.outputs, warnings=[])


def test_catches_the_karpenter_access_entry_with_a_plain_cluster_name(dev_run):
    """The access entry as it was: the cluster name from config, no edge to the cluster."""
    cluster = dev_run.one("aws:eks/cluster:Cluster", "cluster-eks-cluster")
    entry = dev_run.named("karpenter-karpenter-node-access")
    run = _with(dev_run, _without_dependency_on(entry, cluster.urn))

    unwaited = unwaited_references(run)
    assert len(unwaited) == 1
    assert unwaited[0].startswith("karpenter-karpenter-node-access (aws:eks/accessEntry:AccessEntry) "
                                  "refers to cluster-eks-cluster")
    assert f"name {cluster.outputs['name']!r} at clusterName" in unwaited[0]
    scope = outside_cluster_scope(run)
    assert scope == [
        "karpenter-karpenter-node-access (aws:eks/accessEntry:AccessEntry) belongs to the cluster "
        "but has no dependency path to cluster-eks-cluster: it can be created before the cluster "
        "exists"]


def test_catches_a_pod_identity_association_that_reaches_the_cluster_only_by_name(dev_run):
    """Cut every path: the association, and the role policy it waits for, lose the cluster."""
    cluster = dev_run.one("aws:eks/cluster:Cluster", "cluster-eks-cluster")
    association = dev_run.named("karpenter-karpenter-pod-identity")
    policy = dev_run.named("karpenter-karpenter-controller-controller")
    run = _with(dev_run, _without_dependency_on(association, cluster.urn),
                _without_dependency_on(policy, cluster.urn))
    problems = creation_order_problems(run)
    assert any(p.startswith("karpenter-karpenter-pod-identity ") and "refers to cluster-eks-cluster" in p
               for p in problems)
    assert any(p.startswith("karpenter-karpenter-pod-identity ") and "belongs to the cluster" in p
               for p in problems)


def test_catches_a_workload_that_does_not_wait_for_its_namespace(dev_run):
    namespace = dev_run.one("kubernetes:core/v1:Namespace", "demo-demo-burst")
    burst = dev_run.named("demo-burst")
    run = _with(dev_run, _without_dependency_on(burst, namespace.urn))
    assert unwaited_references(run) == [
        "demo-burst (kubernetes:apps/v1:Deployment) refers to demo-demo-burst "
        "(kubernetes:core/v1:Namespace) by its namespace 'demo-burst' at metadata.namespace, but "
        "does not depend on it: pass demo-demo-burst's output, or depend on it"]


def test_catches_a_kubernetes_object_off_the_cluster_provider(dev_run):
    """A Kubernetes object that names nothing but is not made through the cluster's provider."""
    pool = dev_run.named("karpenter-node-pool")
    run = _with(dev_run, dataclasses.replace(pool, provider="", dependencies=[],
                                             property_dependencies={}))
    assert unwaited_references(run) == []
    assert [p.split(" ")[0] for p in outside_cluster_scope(run)] == ["karpenter-node-pool"]


def test_catches_a_cleanup_that_talks_to_the_cluster_without_waiting_for_it(dev_run):
    cleanup = dev_run.named("hybrid-hosts-node-0-node")
    run = _with(dev_run, dataclasses.replace(cleanup, dependencies=[], property_dependencies={}))
    problems = creation_order_problems(run)
    assert {p.split(" ")[0] for p in problems} == {"hybrid-hosts-node-0-node"}
    # The cluster name, the activation id (an input of its own since the cleanup deregisters
    # the activation's managed instances; it was only inside the label selector before), the
    # host's instance id (the cleanup terminates its host) and the scope rule.
    assert len(problems) == 4
    assert any("refers to hybrid-hosts-node-0 " in p and "by its id" in p for p in problems)


# --- what is not a reference -------------------------------------------------------------------

def _lone(dev_run: ProgramRun, type_: str, inputs: dict) -> ProgramRun:
    """The real run plus one resource with no dependencies at all."""
    planted = Registration(
        type=type_, name="planted", urn=f"urn:planted::{type_}", id="planted-id", parent="",
        custom=True, inputs=inputs, dependencies=[], property_dependencies={}, provider="",
        additional_secret_outputs=[], custom_timeouts={}, options={})
    return ProgramRun(stack=dev_run.stack, config=dev_run.config,
                      registrations=[*dev_run.registrations, planted], outputs={}, warnings=[])


def test_tags_and_tag_resources_are_not_references(dev_run):
    cluster_name = dev_run.lab_config.cluster_name
    # The real subnets carry the cluster's name as a tag value and do not wait for it.
    subnet = dev_run.named("network-cloud-private-0")
    assert subnet.inputs["tags"]["karpenter.sh/discovery"] == cluster_name
    assert unwaited_references(_lone(dev_run, "aws:ec2/subnet:Subnet",
                                     {"tags": {"karpenter.sh/discovery": cluster_name}})) == []
    assert unwaited_references(_lone(dev_run, "aws:ec2/tag:Tag",
                                     {"key": "karpenter.sh/discovery", "value": cluster_name})) == []
    # The same string where a reference goes is one.
    assert len(unwaited_references(_lone(dev_run, "aws:ec2/tag:Tag",
                                         {"resourceId": cluster_name}))) == 1


def test_iam_conditions_and_free_text_are_not_references_but_policy_resources_are(dev_run):
    cluster = dev_run.one("aws:eks/cluster:Cluster", "cluster-eks-cluster")
    name, arn = cluster.outputs["name"], cluster.outputs["arn"]
    condition_only = ('{"Statement": [{"Effect": "Allow", "Action": "ec2:CreateTags", "Resource": "*", '
                      f'"Condition": {{"StringEquals": {{"aws:RequestTag/eks:eks-cluster-name": "{name}"}}}}}}]}}')
    assert unwaited_references(_lone(dev_run, "aws:iam/rolePolicy:RolePolicy",
                                     {"policy": condition_only, "description": name})) == []
    on_the_cluster = ('{"Statement": [{"Effect": "Allow", "Action": "eks:DescribeCluster", '
                      f'"Resource": "{arn}"}}]}}')
    problems = unwaited_references(_lone(dev_run, "aws:iam/rolePolicy:RolePolicy",
                                         {"policy": on_the_cluster}))
    assert len(problems) == 1 and "by its arn" in problems[0]


def test_an_echoed_input_is_not_an_identity(dev_run):
    """An EventBridge target's ``arn`` is the queue's: only the queue owns it."""
    queue = dev_run.named("karpenter-karpenter-interruption")
    owners = creation_order.identities(dev_run)[queue.outputs["arn"]]
    assert [(reg.name, kind) for reg, kind in owners] == [("karpenter-karpenter-interruption", "arn")]


# --- hosts boot while EKS creates the control plane ----------------------------------------------

@pytest.mark.parametrize("gpu", [False, True], ids=["gpu=off", "gpu=on"])
def test_no_host_waits_for_the_cluster(lab, gpu):
    """A host needs the network, the role's managed policies and the activation, and nothing the
    cluster makes: it boots and installs while EKS creates the control plane (its join waits
    for the cluster by itself). Its Node cleanup, which talks to the cluster, comes after it."""
    run = lab(gpuEnabled=gpu)
    graph = DestroyGraph(run)
    cluster = run.named("cluster-eks-cluster")
    hosts = [r for r in run.of_type("aws:ec2/instance:Instance") if r.name.startswith("hybrid-hosts-")]
    assert len(hosts) == run.lab_config.hybrid_node_count + gpu
    for host in hosts:
        assert graph.path(host.urn, cluster.urn) is None, \
            f"{host.name} waits for the cluster: {graph.route(host, cluster)}"
        cleanup = run.named(f"{host.name}-node")
        assert graph.path(cleanup.urn, host.urn) and graph.path(cleanup.urn, cluster.urn)
        # It boots with what it needs to register: the activation and the role's policies.
        for needed in ("hybrid-activation-ssm", "network-onprem-private-default-route"):
            assert graph.path(host.urn, run.named(needed).urn), (host.name, needed)
