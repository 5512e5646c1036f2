"""Containers start: what each image needs when its process starts — a user name for its UID,
writable paths under a read-only root, shared memory — is provided by the workload that runs it.
Each need comes from what the image is known to do; an image with no entry here fails the test,
so a new image cannot slip in unexamined. And the demo loops do what their logs promise."""

from __future__ import annotations

import getpass
import os
import pwd
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pytest

from components import demos
from offline import chart_render
from tests.helm_engine import needs_helm
from tests.kube_checks import as_object, pod_spec_of


@dataclass(frozen=True)
class ImageFacts:
    #: UIDs that have a passwd entry in the image.
    passwd_uids: frozenset[int]
    #: The process asks for its user name at start (getpass.getuser()).
    asks_user_name: bool = False
    #: Paths the process writes at start ($VARS expanded from the container's env).
    writes: tuple[str, ...] = ()
    #: Shared memory it needs in /dev/shm, MiB (the runtime's default is 64).
    shm_mib: int = 0
    why: str = ""


IMAGE_FACTS = {
    "nginxinc/nginx-unprivileged": ImageFacts(
        passwd_uids=frozenset({0, 101}),
        # The unprivileged build keeps its pid file and temp paths under /tmp.
        writes=("/tmp/nginx.pid", "/tmp/client_temp"),
        why="nginx user 101 exists; pid and client bodies in /tmp"),
    "busybox": ImageFacts(
        passwd_uids=frozenset({0, 1, 2, 3, 8, 33, 37, 65534}),
        writes=("/tmp/alive",),
        why="sh, wget and date never ask for a user name; the loop touches /tmp/alive"),
    "vllm/vllm-openai": ImageFacts(
        passwd_uids=frozenset({0, 65534}),
        # torch's compile cache calls getpass.getuser() when it loads, whatever
        # TORCHINDUCTOR_CACHE_DIR says (docs/models.md#containers-start).
        asks_user_name=True,
        writes=("$HF_HOME/hub", "$VLLM_CACHE_ROOT", "$TRITON_CACHE_DIR",
                "$TORCHINDUCTOR_CACHE_DIR", "$HOME/.config", "/tmp"),
        # PyTorch and NCCL use /dev/shm between processes; 64 MiB is not enough.
        shm_mib=1024,
        why="UID 1000 has no passwd entry; Hugging Face, vLLM, Triton and torch caches"),
}


#: The charts' images (as Helm renders them, offline/chart_render.py): Go programs that never ask
#: for a user name (so their passwd entries do not matter) and, by their charts' own design,
#: write only to the volumes the chart mounts. What is checked for them is that the rendered pod
#: gives each container what this says; a chart that brings a new image fails until it is added.
_CHART_GO_BINARY = ImageFacts(
    passwd_uids=frozenset(),
    why="a chart's Go binary: no user-name lookup; writes only where its chart mounts volumes")
IMAGE_FACTS.update({repo: _CHART_GO_BINARY for repo in (
    "quay.io/cilium/cilium", "quay.io/cilium/operator-generic",
    "public.ecr.aws/karpenter/controller",
    "reg.kyverno.io/kyverno/kyvernopre", "reg.kyverno.io/kyverno/kyverno",
    "reg.kyverno.io/kyverno/background-controller", "reg.kyverno.io/kyverno/cleanup-controller",
    "reg.kyverno.io/kyverno/reports-controller",
    "public.ecr.aws/eks/eks-hybrid-nodes-gateway", "nvcr.io/nvidia/k8s-device-plugin")})


def repository(image: str) -> str:
    return image.split("@", 1)[0].rsplit(":", 1)[0]


def container_env(container: dict) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}


def user_name_problem(facts: ImageFacts, uid: int, env: dict[str, str]) -> str | None:
    """Runs the real getpass.getuser() against the container's environment and the image's
    passwd file."""
    if not facts.asks_user_name:
        return None

    def getpwuid(wanted: int):
        if wanted in facts.passwd_uids:
            return pwd.struct_passwd(("user", "x", wanted, wanted, "", "/", "/bin/sh"))
        raise KeyError(f"getpwuid(): uid not found: {wanted}")

    with mock.patch.dict(os.environ, env, clear=True), \
            mock.patch.object(os, "getuid", return_value=uid), \
            mock.patch.object(pwd, "getpwuid", getpwuid):
        try:
            getpass.getuser()
        except (KeyError, OSError) as error:
            return f"getpass.getuser() fails as UID {uid}: {error}"
    return None


def _expand(path: str, env: dict[str, str]) -> str:
    for name, value in env.items():
        path = path.replace(f"${name}", value)
    return path


def container_problems(pod: dict, container: dict) -> list[str]:
    name = container["name"]
    facts = IMAGE_FACTS.get(repository(container["image"]))
    if facts is None:
        return [f"{name}: no facts for image {container['image']}: add them to IMAGE_FACTS"]
    problems = []
    security = {**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})}
    uid = security.get("runAsUser", 0)
    env = container_env(container)
    problem = user_name_problem(facts, uid, env)
    if problem:
        problems.append(f"{name}: {problem}")
    mounts = {m["mountPath"]: m for m in container.get("volumeMounts") or []}
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    if security.get("readOnlyRootFilesystem"):
        for path in facts.writes:
            path = _expand(path, env)
            if "$" in path:
                problems.append(f"{name}: writes {path}, and the variable is not set")
                continue
            writable = [m for m in mounts if (path + "/").startswith(m.rstrip("/") + "/")
                        and not mounts[m].get("readOnly")]
            if not writable:
                problems.append(f"{name}: writes {path} under a read-only root filesystem")
    if facts.shm_mib:
        shm = mounts.get("/dev/shm")
        volume = volumes.get(shm["name"]) if shm else None
        empty_dir = (volume or {}).get("emptyDir") or {}
        size = empty_dir.get("sizeLimit", "0Mi")
        size_mib = int(size[:-2]) * (1024 if size.endswith("Gi") else 1)
        if empty_dir.get("medium") != "Memory" or size_mib < facts.shm_mib:
            problems.append(f"{name}: needs {facts.shm_mib} MiB of /dev/shm in memory")
    return problems


def workload_problems(run) -> list[str]:
    problems = []
    for reg in run.of_type("kubernetes:apps/v1:Deployment"):
        pod = pod_spec_of(as_object(reg))
        for container in (pod.get("initContainers") or []) + pod["containers"]:
            problems += [f"{reg.name}/{p}" for p in container_problems(pod, container)]
    return problems


@pytest.mark.parametrize("overrides", [{}, {"gpuEnabled": True}, {"gpuEnabled": True,
                                                                  "burstScenario": "C"}])
def test_every_container_gets_what_its_image_needs_to_start(lab, overrides):
    assert workload_problems(lab(**overrides)) == []


def chart_workload_problems(run) -> list[str]:
    """The same check over each chart's pods as Helm renders the registered values."""
    problems = []
    for release in chart_render.registered_releases(run):
        for obj in chart_render.render_workloads(release):
            pod = pod_spec_of(obj)
            for container in (pod.get("initContainers") or []) + pod["containers"]:
                problems += [f"{release.name}/{obj['metadata']['name']}/{p}"
                             for p in container_problems(pod, container)]
    return problems


@needs_helm
@pytest.mark.parametrize("overrides", [{}, {"gpuEnabled": True}])
def test_every_chart_container_gets_what_its_image_needs_to_start(lab, overrides):
    run = lab(**overrides)
    assert chart_workload_problems(run) == []


@needs_helm
def test_a_chart_image_without_facts_fails(dev_run, monkeypatch):
    monkeypatch.delitem(IMAGE_FACTS, "quay.io/cilium/operator-generic")
    [problem] = chart_workload_problems(dev_run)
    assert problem.startswith("cilium/cilium-operator/cilium-operator: no facts for image")


def test_vllm_without_a_user_name_would_crash_loop(lab):
    """Defect 5: the vLLM container as it was, without USER and LOGNAME."""
    run = lab(gpuEnabled=True)
    pod = pod_spec_of(as_object(run.named("demo-vllm")))
    [container] = pod["containers"]
    stripped = {**container, "env": [e for e in container["env"]
                                     if e["name"] not in ("USER", "LOGNAME")]}
    [problem] = container_problems(pod, stripped)
    assert "getpass.getuser() fails as UID 1000" in problem
    assert container_problems(pod, container) == []


def test_the_model_catches_a_missing_cache_volume_and_small_shm(lab):
    run = lab(gpuEnabled=True)
    pod = pod_spec_of(as_object(run.named("demo-vllm")))
    [container] = pod["containers"]
    no_cache = {**container, "volumeMounts": [m for m in container["volumeMounts"]
                                              if m["mountPath"] != "/cache"]}
    assert any("read-only root" in p for p in container_problems(pod, no_cache))
    small_shm = {**pod, "volumes": [v if v["name"] != "shm" else
                                    {"name": "shm", "emptyDir": {"medium": "Memory",
                                                                 "sizeLimit": "64Mi"}}
                                    for v in pod["volumes"]]}
    assert any("/dev/shm" in p for p in container_problems(small_shm, container))
    unknown = {**container, "image": "example/unknown:1.0"}
    assert "no facts for image" in container_problems(pod, unknown)[0]


# --- the demo loops, run once with stand-ins for the network commands ---------------------------

def _stub(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def run_one_turn(script: str, tmp_path: Path, wget: str) -> list[str]:
    """Runs a demo loop until its first sleep, with wget, touch and sleep replaced."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    _stub(bin_dir, "wget", wget)
    _stub(bin_dir, "touch", f'echo touch >> "{tmp_path}/calls"')
    # The loop's first sleep ends the run: it stops its shell.
    _stub(bin_dir, "sleep", f'echo sleep >> "{tmp_path}/calls"; kill -TERM $PPID')
    result = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True,
                            env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=20)
    calls = (tmp_path / "calls").read_text().split() if (tmp_path / "calls").exists() else []
    return result.stdout.strip().splitlines() + [f"calls: {' '.join(calls)}"]


def test_the_prober_is_alive_before_its_first_request_and_bounds_a_hung_one(tmp_path):
    # The lab's bound is a second a request; the test's is shorter, to time it quickly.
    bound = 0.2
    pod = demos.prober("p", "http://echo.invalid", "http://echo-pods.invalid:8080",
                       on_hybrid=False, probe_timeout_seconds=bound)["template"]["spec"]
    script = pod["containers"][0]["command"][2]
    assert f"timeout {bound} wget" in script
    # A request that hangs (a DNS lookup nobody answers) is cut off by `timeout`, both of them:
    # at the bound, not before it and not at the end of the hang.
    started = time.monotonic()
    lines = run_one_turn(script, tmp_path, wget="exec /bin/sleep 30")
    took = time.monotonic() - started
    # Not before the bound; and far from the 30 s hang (the ceiling leaves a loaded machine room
    # to start the shell's few processes; which bound the script uses is checked above).
    assert 2 * bound <= took < 10, took
    assert lines[-1] == "calls: touch touch sleep", "alive before the requests, and after them"
    assert [line.split()[1:] for line in lines[:-1]] == [["svc", "FAIL"], ["pod", "FAIL"]]
    # The lab's own pod says the lab's bound.
    lab = demos.prober("p", "http://echo.invalid", "http://echo-pods.invalid:8080", on_hybrid=False)
    assert f"timeout {demos.PROBE_TIMEOUT_SECONDS} wget" in lab["template"]["spec"]["containers"][0]["command"][2]


def test_the_prober_logs_each_path_it_probed(tmp_path):
    pod = demos.prober("p", "http://echo.svc", "http://echo-pods.svc:8080",
                       on_hybrid=False)["template"]["spec"]
    script = pod["containers"][0]["command"][2]
    # Only the pod-to-pod request answers.
    lines = run_one_turn(script, tmp_path, wget='case "$*" in *echo-pods*) exit 0;; esac; exit 1')
    assert [line.split()[1:] for line in lines[:-1]] == [["svc", "FAIL"], ["pod", "ok"]]


def test_the_vllm_client_logs_sub_second_latencies(tmp_path):
    pod = demos.vllm_client("c", "http://vllm:8000", "m/m")["template"]["spec"]
    script = pod["containers"][0]["command"][2]
    lines = run_one_turn(script, tmp_path, wget='echo "{}"; exec /bin/sleep 0.1')
    result = next(line for line in lines if " in " in line)
    seconds = float(result.rsplit(" in ", 1)[1].rstrip("s"))
    # The request took 0.1 s: whole seconds would read 0 or 1.
    assert result.split()[1] == "ok" and 0.08 <= seconds < 1.0, result
