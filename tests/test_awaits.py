"""The awaits model: every resource Pulumi waits for outlasts, with a margin, what happens inside
its await — on the figures the deploy-time estimate uses (offline/timing.py).

Each planted defect below is a copy of a real run with one registration changed back to what
broke `pulumi up` with gpuEnabled, or to another await that is too short.
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from offline import timing
from offline.runner import ProgramRun, Registration
import components.hybrid_user_data as user_data
from components.eks_cluster import CREATE_TIMEOUT_MINUTES
from offline.timing import (COVERS, DURATIONS, JOIN_NEEDS, SAFETY_FACTOR, await_limit,
                           await_problems, awaits, estimate_up, go_duration_seconds, join_needs,
                           phase_names, schedule)

VARIANTS = [dict(gpuEnabled=False, burstScenario="A")] + [
    dict(gpuEnabled=gpu, burstScenario=s) for gpu, s in itertools.product((True, False), "ABC")
    if (gpu, s) != (False, "A")]


def ids(o: dict) -> str:
    return f"gpu={'on' if o['gpuEnabled'] else 'off'},scenario={o['burstScenario']}"


@pytest.fixture(params=VARIANTS, ids=ids)
def variant(request, lab) -> ProgramRun:
    return lab(**request.param)


@pytest.fixture(scope="module")
def gpu_run() -> ProgramRun:
    from tests.conftest import run_lab
    return run_lab(gpuEnabled=True)


def planted(run: ProgramRun, name: str, **changes) -> ProgramRun:
    """A copy of ``run`` in which the resource ``name`` registered with ``changes``."""
    target = run.named(name)
    registrations = [dataclasses.replace(r, **changes) if r is target else r
                     for r in run.registrations]
    return dataclasses.replace(run, registrations=registrations)


def problems_of(run: ProgramRun, name: str) -> list[str]:
    return [p for p in await_problems(run) if p.startswith(f"{name}:")]


def figure(name: str) -> float:
    return DURATIONS[name].create


def joined(run: ProgramRun, slots, host, *host_side: float) -> float:
    """When ``host``'s join ends, recomputed from the figures: nodeadm init starts once the host
    has done ``host_side`` after its instance runs and the cluster, the access entry and the
    role's cluster policy exist (and the script's next try comes), then takes its time."""
    needs = [run.named(name) for _, name in JOIN_NEEDS]
    cluster_side = max(slots[r.urn].finish for r in needs) + user_data.JOIN_RETRY_SECONDS
    return max(slots[host.urn].finish + sum(host_side), cluster_side) + figure("nodeadm-init")


def test_every_await_outlasts_what_it_covers(variant):
    assert await_problems(variant) == []


def test_every_awaited_resource_is_in_the_model(variant):
    # The model cannot pass by skipping: each resource type that Pulumi awaits is checked.
    checked = {(a.name, a.operation) for a in awaits(variant)}
    awaited = (timing.DEPLOYMENT, timing.SERVICE, timing.RELEASE, *timing.AWS_DEFAULT_CREATE)
    for reg in variant.resources():
        if reg.type in awaited:
            assert (reg.name, "create") in checked, reg.name
        if reg.type == timing.DEPLOYMENT:
            assert (reg.name, "update") in checked, reg.name


def test_the_vllm_deployment_at_pulumis_default_is_reported(gpu_run):
    vllm = gpu_run.named("demo-vllm")
    assert await_limit(vllm).seconds == 30 * 60
    broken = planted(gpu_run, "demo-vllm", custom_timeouts={})
    assert await_limit(broken.named("demo-vllm")).seconds == 600
    found = problems_of(broken, "demo-vllm")
    # The host pulls the image while its driver installs, so the create (after the join: the
    # model) fits 10 minutes; the Recreate rollout, which may bring an image the host has not
    # pulled, does not, with the margin.
    assert len(found) == 1 and "update typically takes" in found[0], found
    typical = {a.operation: a.typical for a in awaits(gpu_run) if a.name == "demo-vllm"}
    worst = next(a.worst for a in awaits(gpu_run) if a.name == "demo-vllm" and a.operation == "create")
    assert typical["create"] * SAFETY_FACTOR <= 600 and worst <= 30 * 60
    assert 600 < typical["update"] * SAFETY_FACTOR <= 30 * 60
    grace = vllm.inputs["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert typical["update"] == (DURATIONS[timing.DEPLOYMENT].create + figure("vllm-image-pull")
                                 + figure("vllm-model-load") + grace)


def test_the_device_plugin_release_at_helms_default_is_reported(gpu_run):
    release = gpu_run.named("hybrid-nvidia-release")
    inputs = {k: v for k, v in release.inputs.items() if k != "timeout"}
    broken = planted(gpu_run, "hybrid-nvidia-release", inputs=inputs)
    assert await_limit(broken.named("hybrid-nvidia-release")).seconds == 300
    found = problems_of(broken, "hybrid-nvidia-release")
    # Typically Helm's wait returns at once (no GPU node yet: nothing desired), so it is the
    # worst case that Helm's default cannot hold.
    assert found and "takes up to" in found[0] and not any("typically" in p for p in found), found
    # What the timeout allows for, after the Cilium release it waits for: the GPU host's
    # install, its driver (the image pulled beside it), the join, a reboot, the longest restart
    # delay, then the release's own work.
    slots = schedule(gpu_run)
    gpu = gpu_run.named("hybrid-hosts-gpu")
    end = (joined(gpu_run, slots, gpu, figure("nodeadm-install"),
                  max(figure("gpu-driver"), figure("vllm-image-pull")))
           + figure("gpu-reboot") + figure("crashloop-backoff-cap") + DURATIONS[timing.RELEASE].create)
    worst = next(a.worst for a in awaits(gpu_run) if a.name == "hybrid-nvidia-release")
    assert worst == pytest.approx(end - slots[release.urn].start)
    assert worst <= await_limit(release).seconds


def test_the_cilium_release_covers_the_hosts_join(variant):
    cilium = variant.named("hybrid-cilium-release")
    assert await_limit(cilium).seconds == 1200
    slots = schedule(variant)
    hosts = [r for r in variant.of_type(timing.INSTANCE) if r.name.startswith("hybrid-hosts-node-")]
    # The join happens inside this await, not the instances': they are done once they run.
    for host in hosts:
        assert slots[host.urn].window == timing.figure(host).create
    # A host installs as soon as it runs; nodeadm init succeeds once the cluster side exists.
    end = max(joined(variant, slots, h, figure("nodeadm-install")) for h in hosts)
    assert slots[cilium.urn].finish == end + DURATIONS[timing.RELEASE].create
    # The hosts install while EKS creates the control plane: typically the access entry, not
    # the install, is what the join waits for.
    entry = variant.named("hybrid-node-role-access")
    assert all(slots[h.urn].finish + figure("nodeadm-install") < slots[entry.urn].finish
               for h in hosts)
    assert slots[cilium.urn].via == entry.urn
    assert slots[cilium.urn].window * SAFETY_FACTOR <= 1200
    broken = planted(variant, "hybrid-cilium-release", inputs={**cilium.inputs, "timeout": 60})
    assert problems_of(broken, "hybrid-cilium-release")


def test_a_slow_install_moves_the_join_past_the_cluster_side(lab, monkeypatch):
    # With an install that outlasts the control plane, the join waits for the host instead.
    run = lab()
    slow = 20 * 60
    monkeypatch.setitem(DURATIONS, "nodeadm-install",
                        dataclasses.replace(DURATIONS["nodeadm-install"], create=slow))
    slots = schedule(run)
    cilium = run.named("hybrid-cilium-release")
    hosts = [r for r in run.of_type(timing.INSTANCE) if r.name.startswith("hybrid-hosts-node-")]
    end = max(slots[h.urn].finish for h in hosts) + slow + figure("nodeadm-init")
    assert slots[cilium.urn].finish == end + DURATIONS[timing.RELEASE].create
    assert run.by_urn[slots[cilium.urn].via].name.startswith("hybrid-hosts-node-")


def test_the_join_deadline_outlasts_the_clusters_create_timeout(variant):
    """A host boots while EKS creates the control plane and tries nodeadm init until its
    script's deadline: that must outlast the control plane's create timeout (Pulumi fails the
    `up` beyond it) plus what the join needs after it, the script's pause included."""
    joins = {a.name: a for a in awaits(variant) if a.operation == "join"}
    hosts = {r.name for r in variant.of_type(timing.INSTANCE) if r.name.startswith("hybrid-hosts-")}
    assert set(joins) == hosts and hosts
    cluster = variant.named("cluster-eks-cluster")
    assert await_limit(cluster).seconds == CREATE_TIMEOUT_MINUTES * 60
    slots = schedule(variant)
    after = max(slots[r.urn].finish for r in join_needs(variant)) - slots[cluster.urn].finish
    for join in joins.values():
        assert join.limit.seconds == user_data.JOIN_DEADLINE_SECONDS
        assert join.worst >= CREATE_TIMEOUT_MINUTES * 60 + after + user_data.JOIN_RETRY_SECONDS
        assert join.worst <= join.limit.seconds and join.problem is None


def test_a_join_deadline_shorter_than_the_control_planes_worst_case_is_reported(gpu_run, monkeypatch):
    hosts = sorted(r.name for r in gpu_run.of_type(timing.INSTANCE) if r.name.startswith("hybrid-hosts-"))
    # A deadline of the create timeout alone leaves no time for the access entry and a try.
    monkeypatch.setattr(user_data, "JOIN_DEADLINE_SECONDS", CREATE_TIMEOUT_MINUTES * 60)
    found = [p for p in await_problems(gpu_run) if ": join takes up to" in p]
    assert sorted(p.split(":")[0] for p in found) == hosts, found
    monkeypatch.undo()
    assert not [p for p in await_problems(gpu_run) if ": join " in p]
    # The cluster's create timeout raised past the deadline: reported too.
    cluster = gpu_run.named("cluster-eks-cluster")
    longer = planted(gpu_run, "cluster-eks-cluster",
                     custom_timeouts={**cluster.custom_timeouts, "create": "40m"})
    assert [p for p in await_problems(longer) if ": join takes up to" in p]


def test_the_cilium_release_waits_for_the_plain_hosts_only(gpu_run):
    # The GPU host joins only after its driver is in; Cilium's operator does not tolerate its
    # GPU taint, so Helm's wait is met by the plain hosts and the model waits for those alone.
    cilium = gpu_run.named("hybrid-cilium-release")
    tolerated = {t.get("key") for t in cilium.inputs["values"]["operator"]["tolerations"]}
    assert "gpu" not in tolerated and None not in tolerated
    anchors = sorted(w.anchor.name for w in timing.waits(gpu_run, cilium))
    plain = sorted(r.name for r in gpu_run.of_type(timing.INSTANCE)
                   if r.name.startswith("hybrid-hosts-") and r.name != "hybrid-hosts-gpu")
    assert plain and anchors == plain


def test_a_service_created_before_its_pods_waits_for_them(gpu_run):
    # Pulumi awaits a Service until its Endpoints target a pod. Created with its namespace only,
    # vLLM's would wait through the GPU host's join, driver and the vLLM start: over 10 min.
    service = gpu_run.named("demo-vllm-svc")
    namespace = gpu_run.named("demo-demo-gpu")
    assert gpu_run.named("demo-vllm").urn in service.dependencies
    broken = planted(gpu_run, "demo-vllm-svc", dependencies=[namespace.urn],
                     property_dependencies={})
    found = problems_of(broken, "demo-vllm-svc")
    assert found and "create typically takes" in found[0], found
    for name in ("demo-echo-cloud-svc", "demo-echo-hybrid-svc", "demo-vllm-svc"):
        svc = gpu_run.named(name)
        workload = gpu_run.named(name.removesuffix("-svc"))
        assert [w.anchor.name for w in timing.waits(gpu_run, svc)] == [workload.name]


def test_the_gpu_work_lands_in_vllms_await_and_the_device_plugin_release_returns_at_once(gpu_run):
    slots = schedule(gpu_run)
    gpu = gpu_run.named("hybrid-hosts-gpu")
    plugin = gpu_run.named("hybrid-nvidia-release")
    cilium = gpu_run.named("hybrid-cilium-release")
    vllm = gpu_run.named("demo-vllm")
    # The GPU host installs, then its driver and toolkit with the vLLM image pulled beside
    # them (the longer of the two counts), then joins.
    gpu_joined = joined(gpu_run, slots, gpu, figure("nodeadm-install"),
                        max(figure("gpu-driver"), figure("vllm-image-pull")))
    # The plugin's release installs after Cilium's, while the GPU host has not joined yet:
    # Helm v3 finds nothing desired and returns at once (its own create only).
    assert slots[plugin.urn].start == slots[cilium.urn].finish
    assert slots[plugin.urn].window == DURATIONS[timing.RELEASE].create
    assert slots[plugin.urn].finish < gpu_joined
    # The driver is installed before the join, so the plugin's pod serves from its first start
    # (no restart phase), and the image is in containerd: vLLM's pod starts, then loads the
    # model, once both its dependencies and the GPU host's join are done.
    own = DURATIONS[timing.DEPLOYMENT].create + figure("vllm-model-load")
    assert slots[vllm.urn].finish == max(slots[vllm.urn].start, gpu_joined) + own
    # Worst case: a reboot and the longest restart delay; it must fit without the margin.
    worst = next(a.worst for a in awaits(gpu_run) if a.name == "demo-vllm" and a.operation == "create")
    assert worst == pytest.approx(gpu_joined + figure("gpu-reboot") + figure("crashloop-backoff-cap")
                                  + own - slots[vllm.urn].start)
    assert worst <= await_limit(vllm).seconds


def test_the_image_pull_runs_beside_the_driver(gpu_run, monkeypatch):
    slots = schedule(gpu_run)
    gpu = gpu_run.named("hybrid-hosts-gpu")
    vllm = gpu_run.named("demo-vllm")
    own = DURATIONS[timing.DEPLOYMENT].create + figure("vllm-model-load")
    # A pull 15 minutes longer than the driver: the join waits for it, not for their sum.
    pull = figure("gpu-driver") + 900
    monkeypatch.setitem(DURATIONS, "vllm-image-pull",
                        dataclasses.replace(DURATIONS["vllm-image-pull"], create=pull))
    after = schedule(gpu_run)
    host_side = slots[gpu.urn].finish + figure("nodeadm-install") + pull + figure("nodeadm-init")
    assert after[vllm.urn].finish == host_side + own
    assert estimate_up(gpu_run).chain[-3:] == ["hybrid-hosts-gpu", "demo-vllm", "demo-vllm-svc"]


def test_the_estimate_reads_the_same_figures(gpu_run, monkeypatch):
    before_up = estimate_up(gpu_run).seconds
    before = {a.name: a.typical for a in awaits(gpu_run) if a.operation == "create"}
    monkeypatch.setitem(DURATIONS, "vllm-model-load",
                        dataclasses.replace(DURATIONS["vllm-model-load"], create=150 + 900))
    after = {a.name: a.typical for a in awaits(gpu_run) if a.operation == "create"}
    assert estimate_up(gpu_run).seconds == before_up + 900
    assert after["demo-vllm"] == before["demo-vllm"] + 900
    assert problems_of(gpu_run, "demo-vllm")


def test_covers_names_resources_that_exist(gpu_run):
    for name, covers in COVERS.items():
        reg = gpu_run.named(name)
        assert timing.waits(gpu_run, reg), f"{name} waits for nothing: {covers.after_prefix}?"
        paths = [covers.typical, *([covers.worst] if covers.worst else [])]
        for phase in (*(p for path in paths for p in phase_names(path)), *covers.then,
                      *covers.update_then):
            assert DURATIONS[phase].source, phase
    # What a join needs of the cluster side: one resource each.
    for type_, prefix in JOIN_NEEDS:
        assert len([r for r in gpu_run.of_type(type_) if r.name.startswith(prefix)]) == 1, prefix


def reg(type_: str, *, inputs=None, custom_timeouts=None) -> Registration:
    return Registration(type=type_, name="r", urn="urn:r", id="r", parent="", custom=True,
                        inputs=inputs or {}, dependencies=[], property_dependencies={},
                        provider="", additional_secret_outputs=[],
                        custom_timeouts=custom_timeouts or {}, options={})


def test_await_limits_follow_the_providers_rules():
    annotated = {"metadata": {"annotations": {"pulumi.com/timeoutSeconds": "900"}}}
    skipped = {"metadata": {"annotations": {"pulumi.com/skipAwait": "true"}}}
    for kind in (timing.DEPLOYMENT, timing.SERVICE):
        assert await_limit(reg(kind)).seconds == 600
        assert await_limit(reg(kind, inputs=annotated)).seconds == 900
        # customTimeouts come before the annotation.
        assert await_limit(reg(kind, inputs=annotated, custom_timeouts={"create": "20m"})).seconds == 1200
        assert await_limit(reg(kind, inputs=skipped, custom_timeouts={"create": "20m"})) is None
    assert await_limit(reg(timing.RELEASE)).seconds == 300
    assert await_limit(reg(timing.RELEASE, inputs={"timeout": 900})).seconds == 900
    assert await_limit(reg(timing.RELEASE, inputs={"skipAwait": True, "timeout": 900})) is None
    assert await_limit(reg("aws:eks/cluster:Cluster")).seconds == 1800
    assert await_limit(reg("aws:eks/nodeGroup:NodeGroup")).seconds == 3600
    assert await_limit(reg("aws:eks/addon:Addon")).seconds == 1200
    assert await_limit(reg(timing.INSTANCE)).seconds == 600
    assert await_limit(reg(timing.INSTANCE, custom_timeouts={"create": "15m"})).seconds == 900
    # Custom resources and namespaces: pulumi-kubernetes does not await their create.
    assert await_limit(reg("kubernetes:karpenter.sh/v1:NodePool")) is None
    assert await_limit(reg("kubernetes:core/v1:Namespace")) is None


@pytest.mark.parametrize("text,seconds", [("30m", 1800), ("1h30m", 5400), ("90s", 90),
                                          ("1.5h", 5400), ("500ms", 0.5)])
def test_go_durations(text, seconds):
    assert go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "30", "30 m", "m", "10d"])
def test_go_durations_reject_what_pulumi_rejects(text):
    with pytest.raises(ValueError):
        go_duration_seconds(text)


def test_every_figure_says_where_it_comes_from():
    assert all(d.source and d.create >= 0 for d in DURATIONS.values())
    assert SAFETY_FACTOR > 1
