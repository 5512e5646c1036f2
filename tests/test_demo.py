"""Demo layer: every core object validates for the cluster's Kubernetes version, every demo pod
is restricted-compliant field by field, the scenario matrix of demo 2, the GPU demo only when
enabled, and the dependencies that make the workloads wait for (and go before) what they run on."""

from __future__ import annotations

import copy

import pytest

from components import demos
from offline.runner import ProgramRun, Registration
from tests.conftest import BURST, HOST_SETTINGS
from tests.kube_checks import (CRD_DIR, as_object, core_problems, crd_problems, pod_problems,
                               pod_spec_of)

needs_crds = pytest.mark.skipif(not CRD_DIR.is_dir(), reason=f"no CRDs at {CRD_DIR} (../shared/crds)")
CORE_KINDS = {"kubernetes:core/v1:Namespace", "kubernetes:apps/v1:Deployment", "kubernetes:core/v1:Service"}


def named(run: ProgramRun, name: str) -> Registration:
    return run.named(name)


def demo_objects(run: ProgramRun) -> list[dict]:
    return [as_object(r) for r in run.registrations if r.type in CORE_KINDS]


@pytest.mark.parametrize("overrides", [{}, {"gpuEnabled": True, "kubernetesVersion": "1.36"},
                                       {"kubernetesVersion": "1.36", "burstScenario": "C"}])
def test_core_objects_validate_strictly_for_the_cluster_version(lab, overrides):
    run = lab(**overrides)
    version = run.config["eks-hybrid-lab:kubernetesVersion"]
    objects = demo_objects(run)
    assert len(objects) >= 9
    problems = {f"{o['kind']}/{o['metadata']['name']}": p for o in objects
                if (p := core_problems(o, version))}
    assert problems == {}


def test_kubernetes_validate_catches_a_bad_object(dev_run):
    deployment = copy.deepcopy(next(o for o in demo_objects(dev_run) if o["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["unknownField"] = 1
    assert core_problems(deployment, "1.35")


@pytest.mark.parametrize("overrides", [{}, {"gpuEnabled": True}])
def test_every_demo_pod_is_restricted_and_hardened(lab, overrides):
    run = lab(**overrides)
    pods = {o["metadata"]["name"]: pod_spec_of(o) for o in demo_objects(run) if pod_spec_of(o)}
    assert len(pods) >= (7 if overrides else 5)
    problems = {name: p for name, spec in pods.items() if (p := pod_problems(spec, name))}
    assert problems == {}
    for ns in (o for o in demo_objects(run) if o["kind"] == "Namespace"):
        assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


@pytest.mark.parametrize("break_it", [
    lambda p: p["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True),
    lambda p: p["containers"][0]["securityContext"].update(capabilities={"drop": []}),
    lambda p: p["containers"][0]["securityContext"].update(runAsNonRoot=False),
    lambda p: p["containers"][0]["securityContext"].update(runAsUser=0),
    lambda p: p["securityContext"].pop("seccompProfile") and p["containers"][0]["securityContext"].pop("seccompProfile"),
    lambda p: p.update(hostNetwork=True),
    lambda p: p["containers"][0]["securityContext"].update(readOnlyRootFilesystem=False),
    lambda p: p["containers"][0]["resources"].pop("limits"),
    lambda p: p["containers"][0].pop("readinessProbe"),
    lambda p: p["containers"][0].update(image="nginx:latest"),
    lambda p: p["volumes"].append({"name": "host", "hostPath": {"path": "/"}}),
])
def test_pod_check_catches(break_it):
    pod = copy.deepcopy(demos.echo_server("echo", on_hybrid=False)["template"]["spec"])
    assert pod_problems(pod, "echo") == []
    break_it(pod)
    assert pod_problems(pod, "echo")


def test_demo_1_echo_servers_on_both_sides_with_cluster_ip_services(dev_run):
    cloud = as_object(named(dev_run, "demo-echo-cloud"))["spec"]["template"]["spec"]
    hybrid = as_object(named(dev_run, "demo-echo-hybrid"))["spec"]["template"]["spec"]
    assert cloud["affinity"] == demos.required_affinity(demos.OFF_HYBRID)
    assert hybrid["affinity"] == demos.required_affinity(demos.ON_HYBRID)
    assert demos.HYBRID_TAINT_TOLERATION in hybrid["tolerations"]
    for name in ("demo-echo-cloud-svc", "demo-echo-hybrid-svc"):
        service = as_object(named(dev_run, name))
        assert service["spec"]["type"] == "ClusterIP"
        assert service["spec"]["ports"] == [{"name": "http", "port": 80, "targetPort": 8080}]
    prober = as_object(named(dev_run, "demo-prober-cloud"))["spec"]["template"]["spec"]
    assert "http://echo-hybrid.demo-gateway.svc" in prober["containers"][0]["command"][2]


def test_demo_2_burst_deployment(lab):
    run = lab(**BURST)
    spec = as_object(named(run, "demo-burst"))["spec"]
    assert spec["replicas"] == BURST["burstReplicas"] == 5
    pod = spec["template"]["spec"]
    [container] = pod["containers"]
    # (3920m allocatable - 200m daemons - 110m of demo 1's pods) / 4, rounded down to 10m: four
    # per default hybrid node wherever demo 1's pods land (the demo guide's 930m assumed none there,
    # docs/capacity.md#930m-versus-900m).
    assert container["resources"]["requests"]["cpu"] == "900m"
    assert run.outputs["demo2"]["cpuRequestPerPod"] == "900m"
    assert pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == [
        {"weight": 100, "preference": {"matchExpressions": [demos.ON_HYBRID]}}]
    assert demos.HYBRID_TAINT_TOLERATION in pod["tolerations"]
    # Required: a hybrid node, or a node of the burst NodePool as registered — nothing else,
    # so no system or gateway node takes a burst pod whatever room it has. Hybrid's term first:
    # Karpenter tries the terms in order (components/demos.py ``burst_affinity``).
    pool_name = named(run, "karpenter-node-pool").inputs["metadata"]["name"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "eks.amazonaws.com/compute-type", "operator": "In",
                                   "values": ["hybrid"]}]},
            {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "In",
                                   "values": [pool_name]}]}]}
    # The default pool name components/demos.py falls back to is the layer's.
    assert demos.BURST_POOL == pool_name
    # Only burst may go onto the cloud-burst pool's nodes.
    [pool_taint] = named(run, "karpenter-node-pool").inputs["spec"]["template"]["spec"]["taints"]
    assert {**pool_taint, "operator": "Equal"} in pod["tolerations"]
    assert run.outputs["demo2"]["scaleSequence"] == [3, 15, 12, 10, 3]


@pytest.mark.parametrize("scenario,policy,gate", [("A", False, False), ("B", True, False), ("C", True, True)])
def test_scenario_matrix(lab, scenario, policy, gate):
    run = lab(burstScenario=scenario)
    policies = run.of_type("kubernetes:kyverno.io/v1:ClusterPolicy")
    assert bool(policies) is policy
    values = named(run, "karpenter-karpenter-controller-release").inputs["values"]
    assert values["settings"]["featureGates"]["podDeletionCostManagement"] is gate
    assert named(run, "karpenter-node-pool").inputs["spec"]["disruption"]["budgets"] == [{"nodes": "100%"}]
    burst = named(run, "demo-burst")
    if policy:
        assert policies[0].urn in burst.explicit_dependencies
    assert "rollout restart" in run.outputs["demo2"]["beforeEachRun"]
    # Switching away from C deletes this resource, which strips Karpenter's negative costs.
    ranks = run.of_type("pulumi-python:dynamic/cleanup:DeletionCostRanks")
    assert bool(ranks) is gate
    if gate:
        assert ranks[0].inputs["namespace"] == "demo-burst"
        assert named(run, "karpenter-karpenter-controller-release").urn in ranks[0].explicit_dependencies


def test_deletion_cost_policy(lab):
    run = lab(burstScenario="B")
    [policy] = run.of_type("kubernetes:kyverno.io/v1:ClusterPolicy")
    spec = as_object(policy)["spec"]
    assert spec["webhookConfiguration"] == {"failurePolicy": "Ignore"}
    [rule] = spec["rules"]
    assert rule["match"] == {"any": [{"resources": {"kinds": ["Pod/binding"], "namespaces": ["demo-burst"]}}]}
    assert rule["context"][0]["apiCall"]["urlPath"] == "/api/v1/nodes/{{request.object.target.name}}"
    assert rule["preconditions"]["all"][0]["value"] == "hybrid"
    assert rule["mutate"]["patchStrategicMerge"] == {"metadata": {"annotations": {
        "controller.kubernetes.io/pod-deletion-cost": "1"}}}
    assert named(run, "demo-kyverno-release").urn in policy.explicit_dependencies


@needs_crds
def test_deletion_cost_policy_validates_against_the_crd(lab):
    [policy] = lab(burstScenario="C").of_type("kubernetes:kyverno.io/v1:ClusterPolicy")
    assert crd_problems(as_object(policy)) == []


def test_kyverno_release(dev_run):
    release = named(dev_run, "demo-kyverno-release")
    assert release.inputs["chart"] == "kyverno" and release.inputs["version"].startswith("3.9.")
    assert release.inputs["repositoryOpts"] == {"repo": "https://kyverno.github.io/kyverno/"}
    values = release.inputs["values"]
    assert values["config"]["resourceFiltersExclude"] == ["[Pod/binding,*,*]", "[Binding,*,*]"]
    nodes_get = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
    for controller in ("admissionController", "backgroundController"):
        assert nodes_get in values[controller]["rbac"]["clusterRole"]["extraResources"]
        assert values[controller]["nodeSelector"] == {"role": "system"}


def test_gpu_off_registers_no_gpu_workload(dev_run):
    assert not [r for r in dev_run.registrations if "vllm" in r.name or "demo-gpu" in r.name]
    assert "demo3" not in dev_run.outputs


def test_demo_3_vllm(lab):
    run = lab(hybridNodeCount=3, gpuEnabled=True, **HOST_SETTINGS)
    assert HOST_SETTINGS["gpuModel"] == "Qwen/Qwen2.5-1.5B-Instruct"
    spec = as_object(named(run, "demo-vllm"))["spec"]
    assert spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert spec["template"]["metadata"]["annotations"] == {"sidecar.istio.io/inject": "false"}
    assert not pod.get("hostNetwork")
    [container] = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "Qwen/Qwen2.5-1.5B-Instruct" in container["args"]
    assert container["startupProbe"]["periodSeconds"] * container["startupProbe"]["failureThreshold"] >= 600
    expressions = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert demos.ON_HYBRID in expressions
    assert {"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]} in expressions
    assert {demos.HYBRID_TAINT_TOLERATION["key"], "gpu"} <= {t["key"] for t in pod["tolerations"]}
    service = as_object(named(run, "demo-vllm-svc"))
    assert service["spec"]["type"] == "ClusterIP"
    client = as_object(named(run, "demo-vllm-client"))["spec"]["template"]["spec"]
    assert client["affinity"] == demos.required_affinity(demos.OFF_HYBRID)
    assert "http://vllm.demo-gpu.svc:8000/v1/completions" in client["containers"][0]["command"][2]
    assert "pull" in run.outputs["demo3"]["prePull"]


def test_workloads_depend_on_what_they_run_on(lab):
    run = lab(gpuEnabled=True, burstScenario="C")
    hosts = {h.urn for h in run.of_type("aws:ec2/instance:Instance") if h.name.startswith("hybrid-hosts-")}
    gpu = named(run, "hybrid-hosts-gpu").urn
    for name in ("demo-echo-hybrid", "demo-prober-hybrid", "demo-burst"):
        assert hosts <= named(run, name).explicit_dependencies, name
    assert gpu in named(run, "demo-vllm").explicit_dependencies
    assert named(run, "hybrid-nvidia-release").urn in named(run, "demo-vllm").explicit_dependencies
    burst = named(run, "demo-burst")
    assert named(run, "karpenter-node-pool").urn in burst.explicit_dependencies
    for reg in run.registrations:
        if run.layer_of(reg) == "demo" and reg.type == "kubernetes:apps/v1:Deployment":
            ns = as_object(reg)["metadata"]["namespace"]
            assert named(run, f"demo-{ns}").urn in reg.explicit_dependencies


def test_loop_liveness_fails_once_the_loop_stops_touching_its_file(tmp_path):
    import os
    import subprocess
    import time

    container = demos._loop_container("x", "true", period_seconds=1, stale_minutes=1,
                                      startup_period=2, startup_failures=15,
                                      readiness_period=10)
    shell, flag, script = container["livenessProbe"]["exec"]["command"]
    alive = tmp_path / "alive"
    script = script.replace("/tmp/alive", str(alive))
    alive.touch()
    assert subprocess.run([shell, flag, script]).returncode == 0
    stale = time.time() - 180
    os.utime(alive, (stale, stale))
    assert subprocess.run([shell, flag, script]).returncode != 0


def test_demo_1_exports_name_its_probers(dev_run):
    """`python -m rehearse` reads each direction's traffic from these Deployments' logs."""
    probers = dev_run.outputs["demo1"]["probers"]
    assert set(probers) == {"cloudToHybrid", "hybridToCloud"}
    on_hybrid = {}
    for direction, name in probers.items():
        spec = as_object(named(dev_run, f"demo-{name}"))["spec"]["template"]["spec"]
        on_hybrid[direction] = spec["affinity"] == demos.required_affinity(demos.ON_HYBRID)
        assert spec["containers"][0]["name"] == "prober"
    # cloud -> hybrid probes from a cloud pod; hybrid -> cloud from a hybrid pod.
    assert on_hybrid == {"cloudToHybrid": False, "hybridToCloud": True}
