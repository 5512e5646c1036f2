"""The destroy order, proved on the graph Pulumi destroys by, for the full lab with and without
the GPU host and in every demo-2 scenario: nothing is deleted while something that needs it
still runs, and every cleanup runs at the moment it is safe."""

from __future__ import annotations

import itertools

import pytest

from stacks.config import LAYERS
from offline.runner import ProgramRun
from tests.graph import DestroyGraph

VARIANTS = [dict(gpuEnabled=gpu, burstScenario=s) for gpu, s in itertools.product((False, True), "ABC")]


def ids(o: dict) -> str:
    return f"gpu={'on' if o['gpuEnabled'] else 'off'},scenario={o['burstScenario']}"


@pytest.fixture(params=VARIANTS, ids=ids)
def full(request, lab) -> tuple[ProgramRun, DestroyGraph]:
    run = lab(**request.param)
    return run, DestroyGraph(run)


def hosts(run: ProgramRun):
    return [r for r in run.of_type("aws:ec2/instance:Instance") if r.name.startswith("hybrid-hosts-")]


def test_demo_workloads_go_before_the_node_pool(full):
    run, graph = full
    pool = run.named("karpenter-node-pool")
    workloads = [r for r in run.registrations
                 if run.layer_of(r) == "demo" and r.type == "kubernetes:apps/v1:Deployment"]
    assert workloads
    for workload in workloads:
        graph.assert_deleted_before(workload, pool)


def test_karpenter_order(full):
    run, graph = full
    pool, node_class = run.named("karpenter-node-pool"), run.named("karpenter-node-class")
    controller = run.named("karpenter-karpenter-controller-release")
    cleanup = run.named("karpenter-karpenter-leftovers")
    for custom in (pool, node_class):
        graph.assert_deleted_before(custom, controller)
    graph.assert_deleted_before(pool, node_class)
    graph.assert_deleted_before(controller, cleanup)
    # Karpenter calls AWS until its instances are terminated: the internet stays until then.
    for needs_egress in (controller, pool, node_class):
        graph.assert_deleted_before(needs_egress, run.named("network-cloud-private-default-route"))
    graph.assert_deleted_before(cleanup, run.named("karpenter-karpenter-node-role"))
    for subnet in (r for r in run.of_type("aws:ec2/subnet:Subnet") if r.name.startswith("network-cloud-private-")):
        graph.assert_deleted_before(cleanup, subnet)


def test_gateway_order(full):
    run, graph = full
    release = run.named("gateway-gateway-release")
    cleanup = run.named("gateway-gateway-route-cleanup")
    graph.assert_deleted_before(release, cleanup)
    graph.assert_deleted_before(cleanup, run.named("network-cloud-private-rt"))
    graph.assert_deleted_before(release, run.named("hybrid-cilium-release"))
    graph.assert_deleted_before(cleanup, run.named("cluster-eks-cluster"))


def test_hybrid_order(full):
    run, graph = full
    # Everything that runs a pod on a hybrid node: the demo's hybrid workloads, Cilium on every
    # host, the device plugin on the GPU host (tests/test_real_pulumi_lab.py sees which ones on
    # the real engine).
    hybrid_workloads = [run.named(n) for n in ("demo-echo-hybrid", "demo-prober-hybrid", "demo-burst",
                                               "hybrid-cilium-release")]
    if run.config["eks-hybrid-lab:gpuEnabled"] == "true":
        hybrid_workloads += [run.named("demo-vllm"), run.named("hybrid-nvidia-release")]
    ssm_cleanup = run.named("hybrid-activation-registrations")
    activation = run.named("hybrid-activation-ssm")
    for host in hosts(run):
        for workload in hybrid_workloads:
            graph.assert_deleted_before(workload, host)
            # The host dies in its Node cleanup's delete, before its instance's: what runs a
            # pod on it must be gone by then.
            graph.assert_deleted_before(workload, run.named(f"{host.name}-node"))
        graph.assert_deleted_before(host, ssm_cleanup)
        # The Node goes after its host inside the cleanup: deleted before the host, its delete
        # terminates that host (by the id it takes, only with this stack's tag) and then deletes
        # the Node (components/cleanup/node_objects.py; tests/test_cleanup_node_objects.py).
        cleanup = run.named(f"{host.name}-node")
        graph.assert_deleted_before(cleanup, host)
        assert cleanup.inputs["instanceId"] == host.outputs["id"]
        key, value = next(iter(run.lab_config.lab_tag.items()))
        assert (cleanup.inputs["hostTagKey"], cleanup.inputs["hostTagValue"]) == (key, value)
        assert host.inputs["tags"][key] == value
        graph.assert_deleted_before(cleanup, run.named("hybrid-node-role-access"))
        for route in ("network-transit-cloud-to-onprem", "network-transit-onprem-to-cloud",
                      "network-transit-to-cloud", "network-transit-to-onprem",
                      "network-onprem-private-default-route"):
            graph.assert_deleted_before(host, run.named(route))
    graph.assert_deleted_before(ssm_cleanup, activation)
    for host in hosts(run):
        graph.assert_deleted_before(run.named(f"{host.name}-node"), run.named("cluster-eks-cluster"))


def test_kubernetes_resources_before_the_cluster_and_the_cluster_before_its_network(full):
    run, graph = full
    cluster = run.named("cluster-eks-cluster")
    kube = [r for r in run.resources() if r.type.startswith("kubernetes:")]
    assert len(kube) > 10
    for reg in kube:
        graph.assert_deleted_before(reg, cluster)
    for subnet in (r for r in run.of_type("aws:ec2/subnet:Subnet") if r.name.startswith("network-cloud-private-")):
        graph.assert_deleted_before(cluster, subnet)
    graph.assert_deleted_before(cluster, run.named("cluster-eks-logs"))
    graph.assert_deleted_before(run.named("cluster-system-ng"), run.named("network-cloud-private-default-route"))


def test_no_dependency_points_from_an_earlier_layer_into_a_later_one(full):
    run, graph = full
    order = {layer: i for i, layer in enumerate(LAYERS)}
    for urn, targets in graph.edges.items():
        own = run.layer_of(run.by_urn[urn])
        for target in targets:
            other = run.layer_of(run.by_urn[target])
            if own is None or other is None:
                continue
            assert order[other] <= order[own], f"{run.by_urn[urn].name} ({own}) -> {run.by_urn[target].name} ({other})"


@pytest.mark.parametrize("variant", VARIANTS[::3], ids=ids)
def test_lowering_up_to_layer_step_by_step(lab, variant):
    runs = [lab(upToLayer=layer, **variant) for layer in LAYERS]
    for lower, higher in zip(runs, runs[1:]):
        lower_urns = {r.urn for r in lower.resources()}
        higher_urns = {r.urn for r in higher.resources()}
        assert lower_urns < higher_urns, "each layer down must remove resources and rename none"
        kept = {r.urn: r for r in higher.registrations}
        for reg in lower.registrations:
            assert kept[reg.urn].inputs == reg.inputs, f"{reg.name} changes when a layer is added"


def test_the_graph_helper_names_the_missing_path(dev_run):
    graph = DestroyGraph(dev_run)
    with pytest.raises(AssertionError) as caught:
        # Backwards on purpose: the cluster does not depend on the Cilium release.
        graph.assert_deleted_before(dev_run.named("cluster-eks-cluster"), dev_run.named("hybrid-cilium-release"))
    assert "cluster-eks-cluster must be deleted before hybrid-cilium-release" in str(caught.value)
    assert graph.route(dev_run.named("hybrid-cilium-release"), dev_run.named("cluster-eks-cluster"))
