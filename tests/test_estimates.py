"""The plan's cost and deploy-time estimates."""

from __future__ import annotations

import dataclasses

import pytest

from stacks import costs
from stacks.config import load_config
from offline.timing import (DEPLOYMENT, DURATIONS, INSTANCE, NODE_CLEANUP, SERVICE,
                           estimate_destroy, estimate_layer_by_layer, estimate_up, figure,
                           schedule)


def cfg(region: str = "ap-northeast-2", **raw):
    return load_config({k: str(v) for k, v in raw.items()}, stack="dev", region=region)


def test_one_config_recomputed_by_hand_from_the_table():
    # Defaults in Seoul: every layer, scenario A, no GPU, burst cap 32 vCPUs.
    p = {k: v.usd for k, v in costs.PRICES["ap-northeast-2"].items()}
    month = costs.HOURS_PER_MONTH
    network = 2 * p["natGateway"] + 2 * p["publicIpv4"] + 2 * p["tgwAttachment"]
    cluster = p["eks.cluster"] + p["kms.key"] / month + 2 * (p["ec2.m6i.large"] + 30 * p["ebs.gp3"] / month)
    hybrid = 2 * (p["ec2.m5.xlarge"] + 40 * p["ebs.gp3"] / month + 4 * p["eks.hybridVcpu"])
    gateway = 2 * (p["ec2.m6i.large"] + 30 * p["ebs.gp3"] / month)
    per_vcpu = max(p["ec2.m6i.xlarge"] / 4, p["ec2.m6i.2xlarge"] / 8, p["ec2.m7i.xlarge"] / 4, p["ec2.m7i.2xlarge"] / 8)
    burst = 32 * per_vcpu + (32 / 4) * 30 * p["ebs.gp3"] / month
    layer_costs, book = costs.estimate(cfg())
    assert not book.missing
    low, high = costs.totals(layer_costs)
    # Control-plane logs: 0.5 GB a day at the quiet end, 2 GB at the busy end.
    logs_low, logs_high = 0.5 / 24 * p["logs.ingestion"], 2.0 / 24 * p["logs.ingestion"]
    assert low == pytest.approx(network + cluster + logs_low + hybrid + gateway, abs=1e-3)
    assert high == pytest.approx(network + cluster + logs_high + hybrid + gateway + burst, abs=1e-3)
    # About 1.50 USD an hour in Seoul with nothing bursting.
    assert 1.3 < low < 1.7


def test_gpu_host_and_overrides():
    base, _ = costs.estimate(cfg())
    with_gpu, _ = costs.estimate(cfg(gpuEnabled="true"))
    hybrid = {c.layer: c for c in with_gpu}["hybrid"]
    assert hybrid.low - {c.layer: c for c in base}["hybrid"].low == pytest.approx(
        1.00 + 100 * 0.0912 / 730 + 4 * 0.020, abs=1e-3)
    overridden, _ = costs.estimate(cfg(), {"natGateway": 1.0})
    assert {c.layer: c for c in overridden}["network"].low == pytest.approx(2 * 1.0 + 2 * 0.005 + 2 * 0.07)


def test_unknown_type_is_reported_not_guessed():
    layer_costs, book = costs.estimate(cfg(systemNodeInstanceType="c7i.large"))
    assert "ec2.c7i.large" in book.missing
    assert costs.totals(layer_costs) == (None, None)
    priced, book = costs.estimate(cfg(systemNodeInstanceType="c7i.large"), {"ec2.c7i.large": 0.1})
    assert not book.missing and costs.totals(priced)[0] is not None


def test_region_without_a_table_falls_back_and_says_so():
    _, book = costs.estimate(cfg(region="eu-west-1"))
    assert book.fallback and book.region == "us-east-1"


def test_every_price_says_where_it_comes_from():
    for region, table in costs.PRICES.items():
        assert set(table) == set(costs.PRICES["us-east-1"]), region
        for key, price in table.items():
            assert price.source and price.usd > 0, (region, key)


@pytest.mark.parametrize("name,count", [("m6i.large", 2), ("m5.xlarge", 4), ("m7i.2xlarge", 8), ("g6.12xlarge", 48)])
def test_vcpus(name, count):
    assert costs.vcpus(name) == count


def test_stack_exports_the_hourly_estimate(dev_run):
    layer_costs, _ = costs.estimate(dev_run.lab_config)
    assert dev_run.outputs["estimatedHourlyCostUsd"] == costs.totals(layer_costs)[0]
    assert dev_run.outputs["estimatedMaxHourlyCostUsd"] > dev_run.outputs["estimatedHourlyCostUsd"]


def test_deploy_time_critical_paths(dev_run):
    up, down = estimate_up(dev_run), estimate_destroy(dev_run)
    assert "cluster-eks-cluster" in up.chain and "cluster-eks-cluster" in down.chain
    # The chain is a real dependency path, in creation order.
    names = {r.name: r for r in dev_run.resources()}
    for before, after in zip(up.chain, up.chain[1:]):
        waits = set(names[after].dependencies) | {names[after].provider.rsplit("::", 1)[0]}
        assert names[before].urn in waits, (before, after)
    # Layers are not chained, so the whole up is well under a layer-by-layer apply.
    assert up.seconds < 0.75 * estimate_layer_by_layer(dev_run)
    assert 10 * 60 < up.seconds < 40 * 60
    assert all(d.source for d in DURATIONS.values())


#: The cloud side's chain: cluster, add-ons, system node group, Karpenter, node pool, demo.
CLOUD_CHAIN = ["aws", "cluster-eks-secrets-key", "cluster-eks-iam-secrets-key",
               "cluster-eks-cluster", "cluster-vpc-cni", "cluster-system-ng",
               "karpenter-karpenter-controller-release", "karpenter-node-class",
               "karpenter-node-pool"]


def _with(monkeypatch, phase: str, seconds: float) -> None:
    monkeypatch.setitem(DURATIONS, phase, dataclasses.replace(DURATIONS[phase], create=seconds))


def test_the_dev_up_is_the_cloud_sides_chain_with_no_hybrid_work_on_it(dev_run, monkeypatch):
    # docs/hybrid-nodes.md#when-a-host-boots: the hosts boot and install while EKS creates the
    # control plane, so the cloud side's chain (system nodes, Karpenter, demo 1's Deployments
    # after its node pool) is the whole `up`, about 15 min.
    up = estimate_up(dev_run)
    assert up.chain[:len(CLOUD_CHAIN)] == CLOUD_CHAIN
    assert up.chain[len(CLOUD_CHAIN):] in (["demo-echo-hybrid", "demo-echo-hybrid-svc"],
                                          ["demo-echo-cloud", "demo-echo-cloud-svc"])
    assert not any(name.startswith("hybrid-") for name in up.chain)
    assert 14 * 60 < up.seconds < 16 * 60
    # Not just today's figures: a join that took no time, or an install 4 minutes slower,
    # leaves the `up` as it is.
    for install, init in ((0, 0), (DURATIONS["nodeadm-install"].create + 240,
                                   DURATIONS["nodeadm-init"].create)):
        _with(monkeypatch, "nodeadm-install", install)
        _with(monkeypatch, "nodeadm-init", init)
        assert estimate_up(dev_run) == up
    monkeypatch.undo()
    # Had the hosts waited for the cluster (created after it), their install would be on the
    # path: the model sees it.
    cluster = next(r for r in dev_run.resources() if r.name == "cluster-eks-cluster")
    waiting = dataclasses.replace(dev_run, registrations=[
        dataclasses.replace(r, dependencies=[*r.dependencies, cluster.urn])
        if r.type == "aws:ec2/instance:Instance" and r.name.startswith("hybrid-hosts-") else r
        for r in dev_run.registrations])
    assert estimate_up(waiting).seconds > up.seconds


def test_gpu_up_ends_with_the_vllm_start_within_24_minutes(dev_run, lab):
    run = lab(gpuEnabled=True)
    up = estimate_up(run)
    assert up.seconds <= 24 * 60
    names = {r.name: r for r in run.resources()}
    for before, after in zip(up.chain, up.chain[1:]):
        assert names[before].urn in set(names[after].dependencies) | {names[after].provider.rsplit("::", 1)[0]}
    # Recomputed from the figures: the GPU host installs, its driver and the vLLM image (side by
    # side), then it joins once the cluster side is there; vLLM's pod starts when that and its
    # own dependencies are done, loads the model, and its Service (created after it) sees it.
    slots = schedule(run)
    host_side = (slots[names["hybrid-hosts-gpu"].urn].finish + DURATIONS["nodeadm-install"].create
                 + max(DURATIONS["gpu-driver"].create, DURATIONS["vllm-image-pull"].create))
    cluster_side = (max(slots[names[n].urn].finish for n in ("cluster-eks-cluster",
                    "hybrid-node-role-access", "hybrid-node-role-iam-cluster"))
                    + DURATIONS["join-retry"].create)
    joined = max(host_side, cluster_side) + DURATIONS["nodeadm-init"].create
    vllm_start = slots[names["demo-vllm"].urn].start
    assert up.seconds == pytest.approx(max(joined, vllm_start) + sum(
        DURATIONS[k].create for k in (DEPLOYMENT, "vllm-model-load", SERVICE)))
    assert up.chain[-2:] == ["demo-vllm", "demo-vllm-svc"]
    assert up.seconds > estimate_up(dev_run).seconds


def test_destroy_is_not_longer_than_11_minutes(dev_run, lab):
    for run in (dev_run, lab(gpuEnabled=True)):
        down = estimate_destroy(run)
        assert down.seconds <= 11 * 60, down


def test_a_node_cleanup_terminates_its_host_before_pulumi_deletes_it(lab):
    run = lab(gpuEnabled=True)
    slots = schedule(run, create=False)
    cleanups = {r.name: r for r in run.of_type(NODE_CLEANUP)}
    hosts = [r for r in run.of_type(INSTANCE) if r.name.startswith("hybrid-hosts-")]
    assert hosts and len(cleanups) == len(hosts)
    # The cleanup's delete takes the termination (the instance's own delete figure) and its
    # API calls; Pulumi's delete of the host afterwards finds it terminated: quick.
    assert DURATIONS[NODE_CLEANUP].delete >= DURATIONS[INSTANCE].delete + 15
    for host in hosts:
        cleanup = cleanups[f"{host.name}-node"]
        assert host.urn in cleanup.dependencies
        assert slots[host.urn].start >= slots[cleanup.urn].finish
        assert figure(host).delete < DURATIONS[INSTANCE].delete
        assert slots[host.urn].window == figure(host).delete
    # An instance no cleanup terminates keeps the instance's figure.
    other = dataclasses.replace(hosts[0], name="gateway-node")
    assert figure(other) == DURATIONS[INSTANCE]


def _backwards(run):
    """The run with its resources registered in the opposite order."""
    return dataclasses.replace(run, registrations=list(reversed(run.registrations)))


def test_the_critical_paths_do_not_depend_on_the_registration_order(dev_run):
    """The SDK's threads register resources in a different order from run to run; the plan
    prints the same chains whatever the order (ties are broken by URN)."""
    backwards = _backwards(dev_run)
    assert estimate_up(backwards) == estimate_up(dev_run)
    assert estimate_destroy(backwards) == estimate_destroy(dev_run)


def test_the_unread_chart_values_are_listed_in_one_order(dev_run):
    import io

    from offline import plan

    texts = []
    for run in (dev_run, _backwards(dev_run)):
        out = io.StringIO()
        plan._render_values_not_read(run, out)
        texts.append(out.getvalue())
    assert texts[0] == texts[1]
    assert "  none\n" not in texts[0]  # not vacuous: the dev stack sets documented unread values
