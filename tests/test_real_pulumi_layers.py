"""The program's Kubernetes objects made by the real engine and the real pulumi-kubernetes
provider on the real control plane (issue 41, item 3, "The Kubernetes layers for real"): so far
the NVIDIA device plugin (components/nvidia_device_plugin.py), unchanged, with the chart from
../shared/charts. A kwok Node stands in for the GPU host's kubelet, so Helm's wait for the
DaemonSet's pods is a real wait; every object is read back from the API server, not from
Pulumi's answer, present after ``up`` and gone after ``destroy``.

The one seam: a stack transformation gives the Release the local chart file in place of the
chart's repository (nothing here reaches the internet); its values, name, namespace and
timeout are the program's."""

from __future__ import annotations

import json

import pytest

from tests.conftest import PROJECT_DIR
from tests.real_cluster import control_plane  # noqa: F401
from tests.real_pulumi import PulumiProject, pulumi_bindir, pulumi_engine  # noqa: F401

CHARTS = PROJECT_DIR.parent / "shared" / "charts"
DEVICE_PLUGIN_CHART = CHARTS / "nvidia-device-plugin" / "0.18.0" / "nvidia-device-plugin-0.18.0.tgz"
GPU_NODE = "real-pulumi-gpu-host"

PROGRAM = '''
import pulumi
import pulumi_kubernetes as k8s

from components.nvidia_device_plugin import NvidiaDevicePlugin, NvidiaDevicePluginArgs

cfg = pulumi.Config()
chart = cfg.require("chart")


def local_chart(args):
    # The chart's source from ../shared/charts instead of its repository; nothing else changes.
    if args.type_ == "kubernetes:helm.sh/v3:Release":
        props = {k: v for k, v in args.props.items() if k not in ("repository_opts", "repositoryOpts")}
        props["chart"] = chart
        return pulumi.ResourceTransformationResult(props, args.opts)
    return None


pulumi.runtime.register_stack_transformation(local_chart)
# The kubeconfig holds the API server's bearer token: a secret, so the state keeps it encrypted.
plane = k8s.Provider("plane", kubeconfig=cfg.require_secret("kubeconfig"))
plugin = NvidiaDevicePlugin(
    "gpu-device-plugin",
    NvidiaDevicePluginArgs(tolerations=[{"key": "eks.amazonaws.com/compute-type",
                                         "operator": "Equal", "value": "hybrid",
                                         "effect": "NoSchedule"}]),
    opts=pulumi.ResourceOptions(providers=[plane]))
pulumi.export("release", plugin.release.name)
'''


def gpu_node() -> dict:
    from control_plane import KWOK_NODE_ANNOTATION

    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": GPU_NODE, "annotations": dict([KWOK_NODE_ANNOTATION]),
                         "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                                    "kubernetes.io/hostname": GPU_NODE,
                                    "nvidia.com/gpu.present": "true",
                                    "eks.amazonaws.com/compute-type": "hybrid"}},
            "spec": {"taints": [{"key": "eks.amazonaws.com/compute-type", "value": "hybrid",
                                 "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                       "allocatable": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


@pytest.fixture
def plane_with_gpu_host(control_plane):  # noqa: F811
    answer = control_plane.call("POST", "/api/v1/nodes", gpu_node())
    assert answer.status in (201, 409), answer.body
    yield control_plane
    control_plane.call("DELETE", f"/api/v1/nodes/{GPU_NODE}")


def _daemonsets(plane) -> list[dict]:
    answer = plane.call("GET", "/apis/apps/v1/namespaces/nvidia-device-plugin/daemonsets")
    return answer.body.get("items", []) if answer.status == 200 else []


def _pods(plane) -> list[dict]:
    answer = plane.call("GET", "/api/v1/namespaces/nvidia-device-plugin/pods")
    return answer.body.get("items", []) if answer.status == 200 else []


@pytest.mark.skipif(not DEVICE_PLUGIN_CHART.is_file(), reason=f"no chart source at {DEVICE_PLUGIN_CHART}")
def test_the_device_plugin_goes_up_ready_on_the_gpu_host_and_is_gone_after_destroy(
        pulumi_engine, plane_with_gpu_host, tmp_path):
    plane = plane_with_gpu_host
    project = PulumiProject.program(tmp_path / "project", "device-plugin", PROGRAM, source=PROJECT_DIR)
    stack = pulumi_engine.stack(project, "t")
    stack.set_config({"device-plugin:chart": str(DEVICE_PLUGIN_CHART),
                      "device-plugin:kubeconfig": plane.kubeconfig.read_text()},
                     secret=("device-plugin:kubeconfig",))

    up = stack.up()
    assert up.ok, f"{up.error}\n" + "\n".join(up.diagnostics()[-5:])
    # Read from the API server: the chart's DaemonSet, with the program's node selector, and
    # its pod running on the GPU host (Helm waited for it: the release is created only then).
    daemonsets = {d["metadata"]["name"]: d for d in _daemonsets(plane)}
    # The chart's fullname for release "nvidia-device-plugin" (its _helpers.tpl); its MPS
    # control daemon's DaemonSet selects only MPS-capable nodes, and has no pod here.
    daemonset = daemonsets["nvidia-device-plugin"]
    template = daemonset["spec"]["template"]["spec"]
    assert template["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "eks.amazonaws.com/compute-type", "operator": "Equal", "value": "hybrid",
            "effect": "NoSchedule"} in template["tolerations"]
    pods = [p for p in _pods(plane)
            if p["metadata"]["ownerReferences"][0]["name"] == "nvidia-device-plugin"]
    assert [p["spec"].get("nodeName") for p in pods] == [GPU_NODE]
    assert pods[0]["status"]["phase"] == "Running"
    assert daemonset["status"].get("numberReady") == 1
    created = [s.name for s in up.steps() if s.op == "create"]
    assert created.index("plane") < created.index("gpu-device-plugin-release")

    down = stack.destroy()
    assert down.ok, down.error
    assert _daemonsets(plane) == []
    secrets = plane.call("GET", "/api/v1/namespaces/nvidia-device-plugin/secrets").body
    assert [s["metadata"]["name"] for s in secrets.get("items", [])
            if s.get("type") == "helm.sh/release.v1"] == [], json.dumps(secrets)[:500]
    # The engine's order: the release before the provider it was made through.
    deleted = [urn.rsplit("::", 1)[-1] for urn in down.order("delete")]
    assert deleted.index("gpu-device-plugin-release") < deleted.index("plane")
