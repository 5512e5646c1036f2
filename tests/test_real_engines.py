"""The real-engine tier's own ground: the control plane the tier runs on is the pinned one, it
admits and schedules as a cluster does, and it runs only on loopback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stacks.config import SETTINGS_BY_KEY
from tests.conftest import PROJECT_DIR
from tests.real_cluster import control_plane, namespace, refused  # noqa: F401 (fixtures)

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted",
              "pod-security.kubernetes.io/warn": "restricted"}


def pinned_kubernetes() -> str:
    gomod = (PROJECT_DIR / "engines" / "kubernetes" / "go.mod").read_text()
    return re.search(r"^(?:require)?\s*k8s\.io/kubernetes (v\S+)", gomod, re.M).group(1)


def test_the_api_server_is_the_pinned_one_at_the_labs_default_minor(control_plane):
    version = control_plane.call("GET", "/version").body
    assert version["gitVersion"] == pinned_kubernetes()
    default = SETTINGS_BY_KEY["kubernetesVersion"].default
    assert f"{version['major']}.{version['minor']}" == default


def test_every_engine_listens_on_loopback_only(control_plane):
    import sys

    sys.path.insert(0, str(PROJECT_DIR / "engines"))
    from smoke import listeners

    found = listeners(list(control_plane.pids()))
    assert {control_plane.pids()[pid] for pid, _ in found} >= {"etcd", "kube-apiserver"}
    assert [a for _, a in found if not a.startswith(("127.", "::1:"))] == []


def pod(name: str, **security) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                                     **security}]}}


def test_pod_security_admission_judges_a_restricted_namespace(control_plane, namespace):
    ns = namespace(RESTRICTED)
    plain = pod("plain")
    plain["metadata"]["namespace"] = ns
    answer = control_plane.apply(plain)
    assert answer.status == 403
    assert 'violates PodSecurity "restricted:latest"' in refused(answer)
    assert "allowPrivilegeEscalation != false" in refused(answer)
    # Not vacuous: a namespace without the labels admits the same pod.
    plain["metadata"]["namespace"] = namespace()
    assert control_plane.apply(plain).status in (200, 201)
    hardened = pod("hardened", securityContext={
        "allowPrivilegeEscalation": False, "runAsNonRoot": True, "runAsUser": 65532,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}})
    hardened["metadata"]["namespace"] = ns
    answer = control_plane.apply(hardened)
    assert answer.status in (200, 201) and answer.warnings == [], (answer.body, answer.warnings)


def test_a_kwok_node_takes_a_pod_from_the_real_scheduler(control_plane, namespace):
    name = f"kwok-{namespace()}"
    node = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake"},
                         "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                       "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}
    assert control_plane.call("POST", "/api/v1/nodes", node).status == 201
    ns = namespace()
    placed = pod("placed")
    placed["metadata"]["namespace"] = ns
    placed["spec"]["nodeSelector"] = {"kubernetes.io/hostname": name}
    assert control_plane.apply(placed).status in (200, 201)

    def running():
        body = control_plane.call("GET", f"/api/v1/namespaces/{ns}/pods/placed").body
        return (body["spec"].get("nodeName"), body["status"].get("phase")) == (name, "Running")

    control_plane.wait_for("the pod Running on the kwok node", running, timeout=60)


_INTERRUPTED = '''
import os, time
from tests.real_cluster import control_plane  # noqa: F401

def test_waits(control_plane):
    with open(os.environ["PIDS_FILE"], "w") as out:
        out.write(" ".join(str(pid) for pid in control_plane.pids()))
    time.sleep(120)
'''


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGKILL"])
def test_an_interrupted_run_leaves_no_engine_running(control_plane, tmp_path, signal_name):
    """Ctrl-C (SIGINT) ends the run through pytest's teardown, which stops the engines by PID;
    a run killed outright (SIGKILL) takes them with it (they die with their parent)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    # Outside the source tree: other workers' tests read every project file (test_layout
    # lists, then parses), and must not meet one that comes and goes. The project's
    # pytest.ini and folder still make the run.
    test = tmp_path / f"test_interrupted_{signal_name}.py"
    test.write_text(_INTERRUPTED)
    pids_file = tmp_path / "pids"
    run = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         "-c", str(PROJECT_DIR / "pytest.ini"), "--rootdir", str(PROJECT_DIR), str(test)],
        cwd=PROJECT_DIR,
        env={**os.environ, "PIDS_FILE": str(pids_file)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    control_plane.wait_for("the inner run's engines", lambda: pids_file.exists() and
                           pids_file.read_text(), timeout=120)
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 5 and all(_alive(p) for p in pids)
    run.send_signal(getattr(signal, signal_name))
    run.wait(60)
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p for p in pids if _alive(p)] == [], run.stdout.read().decode()[-2000:]
