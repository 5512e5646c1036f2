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
from offline.timing import (COVERS, DURATIONS, SAFETY_FACTOR, await_limit, await_problems, awaits,
                           estimate_up, go_duration_seconds, schedule)

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
    # With the margin, the create (after the device plugin: the image and the model) and the
    # Recreate update exceed 10 minutes; in the worst case (a reboot after the join, the
    # plugin's longest back-off) the create does even without it.
    assert any("create typically takes" in p for p in found), found
    assert any("update typically takes" in p for p in found), found
    typical = {a.operation: a.typical for a in awaits(gpu_run) if a.name == "demo-vllm"}
    worst = next(a.worst for a in awaits(gpu_run) if a.name == "demo-vllm" and a.operation == "create")
    assert 600 < typical["create"] * SAFETY_FACTOR <= 30 * 60
    assert 600 < worst <= 30 * 60
    assert 600 < typical["update"] * SAFETY_FACTOR <= 30 * 60


def test_the_device_plugin_release_at_helms_default_is_reported(gpu_run):
    release = gpu_run.named("hybrid-nvidia-release")
    inputs = {k: v for k, v in release.inputs.items() if k != "timeout"}
    broken = planted(gpu_run, "hybrid-nvidia-release", inputs=inputs)
    assert await_limit(broken.named("hybrid-nvidia-release")).seconds == 300
    found = problems_of(broken, "hybrid-nvidia-release")
    # Typically Helm's wait returns at once (no GPU node yet: nothing desired), so it is the
    # worst case that Helm's default cannot hold.
    assert found and "takes up to" in found[0] and not any("typically" in p for p in found), found
    # What the timeout allows for, after the Cilium release it waits for: the driver and the
    # join, a reboot, the longest restart delay.
    worst = next(a.worst for a in awaits(gpu_run) if a.name == "hybrid-nvidia-release")
    phases = ("gpu-driver", "gpu-reboot", "crashloop-backoff-cap")
    assert worst >= sum(DURATIONS[p].create for p in phases)
    assert worst <= await_limit(release).seconds


def test_the_cilium_release_covers_the_hosts_join(variant):
    cilium = variant.named("hybrid-cilium-release")
    assert await_limit(cilium).seconds == 1200
    slots = schedule(variant)
    hosts = [r for r in variant.of_type(timing.INSTANCE) if r.name.startswith("hybrid-hosts-")]
    # The join happens inside this await, not the instances': they are done once they run.
    for host in hosts:
        assert slots[host.urn].window == DURATIONS[timing.INSTANCE].create
    joined = max(slots[h.urn].finish for h in hosts) + DURATIONS["host-join"].create
    assert slots[cilium.urn].finish == joined + DURATIONS[timing.RELEASE].create
    assert slots[cilium.urn].window * SAFETY_FACTOR <= 1200
    broken = planted(variant, "hybrid-cilium-release", inputs={**cilium.inputs, "timeout": 300})
    assert problems_of(broken, "hybrid-cilium-release")


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
    # The plugin's release installs after Cilium's, while the GPU host is still installing its
    # driver: Helm v3 finds nothing desired and returns at once (its own create only).
    assert slots[plugin.urn].start == slots[cilium.urn].finish
    assert slots[plugin.urn].window == DURATIONS[timing.RELEASE].create
    # The driver is installed before the join, so the plugin's pod serves from its first start
    # (no restart phase): vLLM's pod waits for the driver and the join, then pulls and loads.
    figures = ("gpu-driver", "host-join")
    own = (DURATIONS[timing.DEPLOYMENT].create + DURATIONS["vllm-image-pull"].create
           + DURATIONS["vllm-model-load"].create)
    assert slots[vllm.urn].finish == (slots[gpu.urn].finish
                                      + sum(DURATIONS[p].create for p in figures) + own)
    assert slots[vllm.urn].via == gpu.urn
    # Worst case: a reboot and the longest restart delay; it must fit without the margin.
    worst = next(a.worst for a in awaits(gpu_run) if a.name == "demo-vllm" and a.operation == "create")
    assert worst > slots[vllm.urn].window
    assert worst <= await_limit(vllm).seconds


def test_the_estimate_reads_the_same_figures(gpu_run, monkeypatch):
    before_up = estimate_up(gpu_run).seconds
    before = {a.name: a.typical for a in awaits(gpu_run) if a.operation == "create"}
    monkeypatch.setitem(DURATIONS, "vllm-image-pull",
                        dataclasses.replace(DURATIONS["vllm-image-pull"], create=268 + 900))
    after = {a.name: a.typical for a in awaits(gpu_run) if a.operation == "create"}
    assert estimate_up(gpu_run).seconds == before_up + 900
    assert after["demo-vllm"] == before["demo-vllm"] + 900
    assert problems_of(gpu_run, "demo-vllm")


def test_covers_names_resources_that_exist(gpu_run):
    for name, covers in COVERS.items():
        reg = gpu_run.named(name)
        assert timing.waits(gpu_run, reg), f"{name} waits for nothing: {covers.after_prefix}?"
        for phase in (*covers.before, *covers.then, *(covers.worst or ())):
            assert DURATIONS[phase].source, phase


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
