"""Commands the stack exports for the presenter, run in bash against a fake kubectl
(tests/fake_kubectl.py) over a planted cluster, so what they list is what they claim to list.
The arguments each command passes to kubectl are then checked against the real kubectl's flag
parser, pointed at a closed loopback port."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stacks.exports import HYBRID_NODE_SELECTOR
from stacks.layers.demo import BURST_NS, GATEWAY_NS

FAKE_KUBECTL = Path(__file__).resolve().parent / "fake_kubectl.py"
HYBRID = dict([HYBRID_NODE_SELECTOR.split("=")])
REAL_KUBECTL = shutil.which("kubectl")
CLOSED_PORT = "http://127.0.0.1:9"


def pod(name: str, node, namespace: str = BURST_NS, app: str = "burst") -> dict:
    return {"namespace": namespace, "name": name, "labels": {"app": app}, "node": node}


#: Demo 2 at its peak: 8 burst pods on the two hybrid nodes, 7 on burst nodes, one pending;
#: demo 1's pods share the hybrid nodes; a pod in the burst namespace that is not a burst pod.
CLUSTER = {
    "nodes": [
        {"name": "mi-0aaaaaaaaaaaaaaa1", "labels": {**HYBRID, "eks-hybrid-lab.io/stack": "x"}},
        {"name": "mi-0aaaaaaaaaaaaaaa2", "labels": {**HYBRID}},
        {"name": "ip-10-0-1-10.ap-northeast-2.compute.internal", "labels": {"role": "system"}},
        {"name": "ip-10-0-2-20.ap-northeast-2.compute.internal",
         "labels": {"karpenter.sh/nodepool": "cloud-burst"}},
        {"name": "ip-10-0-2-21.ap-northeast-2.compute.internal",
         "labels": {"karpenter.sh/nodepool": "cloud-burst"}},
    ],
    "pods": [
        *[pod(f"burst-h1-{i}", "mi-0aaaaaaaaaaaaaaa1") for i in range(4)],
        *[pod(f"burst-h2-{i}", "mi-0aaaaaaaaaaaaaaa2") for i in range(4)],
        *[pod(f"burst-c1-{i}", "ip-10-0-2-20.ap-northeast-2.compute.internal") for i in range(4)],
        *[pod(f"burst-c2-{i}", "ip-10-0-2-21.ap-northeast-2.compute.internal") for i in range(3)],
        pod("burst-pending", None),
        pod("echo-hybrid-1", "mi-0aaaaaaaaaaaaaaa1", namespace=GATEWAY_NS, app="echo-hybrid"),
        pod("notes-1", "mi-0aaaaaaaaaaaaaaa2", app="notes"),
    ],
}
ON_HYBRID = {f"burst-h{n}-{i}" for n in (1, 2) for i in range(4)}


def run_command(command: str, tmp_path: Path, state: dict) -> tuple[subprocess.CompletedProcess, list]:
    """Runs ``command`` in bash with the fake kubectl first on PATH; returns the result and the
    argument lists kubectl was called with."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    kubectl = bin_dir / "kubectl"
    kubectl.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_KUBECTL}" "$@"\n')
    kubectl.chmod(0o755)
    (tmp_path / "state.json").write_text(json.dumps(state))
    log = tmp_path / "calls.jsonl"
    log.write_text("")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path),
           "FAKE_KUBECTL_STATE": str(tmp_path / "state.json"), "FAKE_KUBECTL_LOG": str(log)}
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True,
                          timeout=60)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    return done, calls


def listed_pods(stdout: str) -> list[str]:
    return [line.split()[0] for line in stdout.splitlines()
            if line.strip() and not line.startswith("NAME ")]


def test_hybrid_pods_lists_exactly_the_burst_pods_on_hybrid_nodes(dev_run, tmp_path):
    command = dev_run.outputs["demo2"]["hybridPods"]
    done, calls = run_command(command, tmp_path, CLUSTER)
    assert done.returncode == 0, done.stderr
    assert "fake kubectl:" not in done.stderr
    pods = listed_pods(done.stdout)
    assert sorted(pods) == sorted(ON_HYBRID), done.stdout
    # The nodes are chosen by EKS's hybrid label, not by name.
    assert ["get", "nodes", "-l", HYBRID_NODE_SELECTOR, "-o", "name"] in calls


def test_hybrid_pods_lists_nothing_without_hybrid_nodes(dev_run, tmp_path):
    state = {**CLUSTER, "nodes": [n for n in CLUSTER["nodes"] if "eks.amazonaws.com/compute-type" not in n["labels"]]}
    done, _ = run_command(dev_run.outputs["demo2"]["hybridPods"], tmp_path, state)
    assert done.returncode == 0, done.stderr
    assert listed_pods(done.stdout) == []


def test_the_fake_kubectl_refuses_what_it_does_not_know(tmp_path):
    done, _ = run_command("kubectl get pods --sort-by=.metadata.name", tmp_path, CLUSTER)
    assert done.returncode == 2 and "unsupported argument --sort-by" in done.stderr
    done, _ = run_command("kubectl get pods --field-selector spec.schedulerName=x", tmp_path, CLUSTER)
    assert done.returncode == 2 and "field label not supported" in done.stderr


@pytest.mark.skipif(REAL_KUBECTL is None, reason="kubectl is not installed")
def test_the_real_kubectl_accepts_every_call_the_command_makes(dev_run, tmp_path):
    """Each argument list the command passed to the fake is valid for kubectl itself: run at a
    closed loopback port, kubectl gets as far as connecting (a flag it did not know would stop
    it before)."""
    _, calls = run_command(dev_run.outputs["demo2"]["hybridPods"], tmp_path, CLUSTER)
    assert calls
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": os.devnull}
    # All at once: each is a Go start-up and a refused connection, nothing to wait for in turn.
    running = [subprocess.Popen([REAL_KUBECTL, f"--server={CLOSED_PORT}", "--request-timeout=5s", *call],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for call in sorted({tuple(c) for c in calls})]
    for process in running:
        _, stderr = process.communicate(timeout=60)
        assert "unknown flag" not in stderr and "unknown shorthand" not in stderr, stderr
        assert "refused" in stderr, stderr
