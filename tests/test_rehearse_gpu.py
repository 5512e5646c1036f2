"""`python -m rehearse verify gpu` (demo 3) against the Kubernetes API emulator: a healthy lab
passes, each broken thing fails naming its check, a stack without the GPU host cannot run, and
a recorded run gives figures worked out by hand.

The stack's ``demo3`` output comes from the real program (gpuEnabled), so the names the tool
reads are the names the lab deploys. Every connection the tool opens is checked to be loopback.
"""

from __future__ import annotations

import datetime
import json
import shutil
from pathlib import Path
from typing import Any, Optional

import pytest

from rehearse import cli
from rehearse.run import execute as run_execute
from rehearse.commands.verify_gpu import collect as gpu
from rehearse.commands.verify_gpu import analyse as gpu_analysis
from rehearse.commands.verify_gpu import demo as gpu_demo
from rehearse.commands.verify_gpu import parse as gpu_parse
from rehearse.run import record as rec
from rehearse.lab.connection import Kube
from rehearse.run.report import FAIL, PASS, SKIP
from tests.offline_guard import forbid_non_loopback
from tests.kube_checks import as_object
from tests.kube_emulator import DEPLOYMENTS, EVENTS, NODES, PODS, emulator  # noqa: F401 fixture

PROJECT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "rehearse" / "gpu-recorded"
NS = "demo-gpu"
GPU_HOST = "mi-0123456789abcdef0"
IMAGE = "vllm/vllm-openai:v0.11.0"
PULLED = (f'Successfully pulled image "{IMAGE}" in 4m27.912s (4m28.104s including waiting). '
          "Image size: 10123456789 bytes.")
ANSWER = {"id": "cmpl-8f2c41d0b7e94a65", "object": "text_completion", "created": 1760518810,
          "model": "Qwen/Qwen2.5-0.5B-Instruct",
          "choices": [{"index": 0, "text": " a way to run pods on your own servers",
                       "logprobs": None, "finish_reason": "length", "stop_reason": None}],
          "usage": {"prompt_tokens": 5, "total_tokens": 21, "completion_tokens": 16}}


# --- the stack ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_run():
    from tests.conftest import run_lab

    return run_lab(gpuEnabled=True)


@pytest.fixture
def outputs_file(gpu_run, tmp_path):
    """What `pulumi stack output --json --show-secrets` writes for a lab with the GPU host."""
    def write(drop: tuple[str, ...] = ()) -> Path:
        values = {"region": gpu_run.outputs["region"], "layers": gpu_run.outputs["layers"],
                  "demo3": gpu_run.outputs["demo3"], "kubeconfig": "{}"}
        path = tmp_path / "lab.json"
        path.write_text(json.dumps({k: v for k, v in values.items() if k not in drop}))
        return path

    return write


def test_demo3_output_names_what_the_demo_layer_deploys(gpu_run):
    demo3 = gpu_run.outputs["demo3"]
    server = as_object(gpu_run.named("demo-vllm"))
    service = as_object(gpu_run.named("demo-vllm-svc"))
    client = as_object(gpu_run.named("demo-vllm-client"))
    assert server["metadata"] == {"name": demo3["deployment"], "namespace": demo3["namespace"],
                                  "labels": {"app": demo3["deployment"]}}
    assert server["spec"]["selector"]["matchLabels"] == {"app": demo3["deployment"]}
    assert service["metadata"]["name"] == demo3["service"]
    assert [p["port"] for p in service["spec"]["ports"]] == [demo3["port"]]
    assert client["metadata"]["name"] == demo3["clientDeployment"]
    assert client["spec"]["selector"]["matchLabels"] == {"app": demo3["clientDeployment"]}
    [container] = server["spec"]["template"]["spec"]["containers"]
    assert container["args"][container["args"].index("--model") + 1] == demo3["model"]
    [loop] = client["spec"]["template"]["spec"]["containers"]
    assert loop["name"] == "client"
    script = loop["command"][2]
    assert f"http://{demo3['service']}.{demo3['namespace']}.svc:{demo3['port']}/v1/completions" in script
    # The one completion the tool asks is the client's request.
    assert json.dumps({"model": demo3["model"], "prompt": gpu.PROMPT,
                       "max_tokens": gpu.MAX_TOKENS}) in script


def test_device_plugin_namespace_matches_the_component():
    from components.nvidia_device_plugin import GPU_NODE_LABEL, NAMESPACE

    assert (gpu_demo.DEVICE_PLUGIN_NAMESPACE, gpu.GPU_LABEL) == (NAMESPACE, GPU_NODE_LABEL)


# --- the cluster ----------------------------------------------------------------------------


def ts(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def node(name: str, *, gpu_allocatable: Optional[str] = "1", hybrid: bool = True,
         gpu_label: bool = True, ready: bool = True) -> dict:
    labels = {}
    if hybrid:
        labels["eks.amazonaws.com/compute-type"] = "hybrid"
    if gpu_label:
        labels["nvidia.com/gpu.present"] = "true"
    resources = {"cpu": "4", "memory": "16Gi",
                 **({"nvidia.com/gpu": gpu_allocatable} if gpu_allocatable is not None else {})}
    return {"metadata": {"labels": labels},
            "status": {"allocatable": resources, "capacity": resources,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pod(app: str, *, node_name: Optional[str], containers=("vllm",), ready: bool = True,
        host_network: bool = False, scheduled: Optional[datetime.datetime] = None,
        started: Optional[datetime.datetime] = None, phase: str = "Running",
        waiting: Optional[dict] = None, created: Optional[datetime.datetime] = None) -> dict:
    spec: dict[str, Any] = {"containers": [{"name": c, "image": IMAGE if c == "vllm" else "busybox"}
                                           for c in containers]}
    if node_name:
        spec["nodeName"] = node_name
    if host_network:
        spec["hostNetwork"] = True
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled:
        conditions.append({"type": "PodScheduled", "status": "True",
                           "lastTransitionTime": ts(scheduled)})
    state = ({"waiting": waiting} if waiting else
             {"running": {"startedAt": ts(started)}} if started else {"running": {}})
    created = created or scheduled or NOW()
    return {"metadata": {"labels": {"app": app}, "creationTimestamp": ts(created)},
            "spec": spec,
            "status": {"phase": phase, "conditions": conditions,
                       "containerStatuses": [{"name": c, "ready": ready, "restartCount": 0,
                                              "image": "", "imageID": "", "state": state}
                                             for c in containers]}}


def pod_event(pod_name: str, reason: str, message: str, at: datetime.datetime) -> dict:
    return {"involvedObject": {"kind": "Pod", "name": pod_name, "namespace": NS},
            "reason": reason, "message": message, "type": "Normal", "count": 1,
            "firstTimestamp": ts(at), "lastTimestamp": ts(at),
            "source": {"component": "kubelet", "host": GPU_HOST}}


def client_log(calls: list[tuple[float, bool, float]], end: datetime.datetime) -> str:
    """Kubelet-timestamped client lines: each call ``(seconds before end, ok, took)`` logs the
    completion JSON (or an empty line when wget failed), then its result line."""
    lines = []
    for before, ok, took in calls:
        at = end - datetime.timedelta(seconds=before)
        stamp = at.strftime("%Y-%m-%dT%H:%M:%S.%f") + "123Z"
        lines.append(f"{stamp} {json.dumps(ANSWER) if ok else ''}".rstrip())
        lines.append(f"{stamp} {at:%H:%M:%S} {'ok' if ok else 'FAIL'} in {took:.2f}s")
    return "\n".join(lines) + "\n"


def NOW() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


#: 20 calls over the last ten minutes, one every 30 s, all answered in 0.3-0.5 s.
HEALTHY_CALLS = [(15 + 30 * i, True, 0.30 + 0.01 * i) for i in range(20)]


def plant(emulator, *, gpu_allocatable: Optional[str] = "1", server: Optional[dict] = None,
          calls=HEALTHY_CALLS, completion: tuple[int, bytes] = (200, json.dumps(ANSWER).encode()),
          events: Optional[list[dict]] = None, now: Optional[datetime.datetime] = None,
          client_text: Optional[str] = None) -> None:
    """A lab with the GPU host, the vLLM pod on it, and the cloud client, as of ``now``; each
    argument changes one thing."""
    now = now or NOW()
    emulator.put(NODES, None, GPU_HOST, node(GPU_HOST, gpu_allocatable=gpu_allocatable))
    emulator.put(NODES, None, "mi-0aaaaaaaaaaaaaaa1", node("mi-0aaaaaaaaaaaaaaa1", gpu_allocatable=None,
                                                           gpu_label=False))
    emulator.put(NODES, None, "ip-10-0-1-10.ap-northeast-2.compute.internal",
                 node("ip-10-0-1-10", gpu_allocatable=None, gpu_label=False, hybrid=False))
    scheduled = now - datetime.timedelta(minutes=40)
    emulator.put(DEPLOYMENTS, NS, "vllm", {"spec": {
        "replicas": 1, "strategy": {"type": "Recreate"}, "selector": {"matchLabels": {"app": "vllm"}},
        "template": {"spec": {"containers": [{"name": "vllm", "image": IMAGE,
                                              "args": ["--model", "Qwen/Qwen2.5-0.5B-Instruct"]}]}}},
        "status": {"readyReplicas": 1}})
    emulator.put(PODS, NS, "vllm-6d8f7c9b5-x2k4p", server or pod(
        "vllm", node_name=GPU_HOST, scheduled=scheduled,
        started=scheduled + datetime.timedelta(minutes=4, seconds=31)))
    for i, event in enumerate(events if events is not None else [
            pod_event("vllm-6d8f7c9b5-x2k4p", "Pulling", f'Pulling image "{IMAGE}"', scheduled),
            pod_event("vllm-6d8f7c9b5-x2k4p", "Pulled", PULLED,
                      scheduled + datetime.timedelta(minutes=4, seconds=28))]):
        emulator.put(EVENTS, NS, f"vllm-6d8f7c9b5-x2k4p.{i}", event)
    # Another pod's event in the namespace: the field selector keeps it out of the tool's list
    # (the emulator applies it as the API server does).
    emulator.put(EVENTS, NS, "vllm-client-1.0", pod_event(
        "vllm-client-7b4c8d6f9-q9w8e", "Pulled", 'Successfully pulled image "busybox" in 1.2s', now))
    emulator.put(PODS, NS, "vllm-client-7b4c8d6f9-q9w8e", pod(
        "vllm-client", node_name="ip-10-0-1-10.ap-northeast-2.compute.internal",
        containers=("client",), created=scheduled))
    emulator.log(NS, "vllm-client-7b4c8d6f9-q9w8e",
                 client_text if client_text is not None else client_log(calls, now))
    status, body = completion

    def declare(kmock: Any) -> None:
        import kmock as km

        kmock[f"post /api/v1/namespaces/{NS}/services/vllm:8000/proxy/v1/completions"] << (
            km.Response(status=status, payload=body) if status != 200 else body)

    emulator.do(declare)


@pytest.fixture
def loopback_only(monkeypatch):
    """Any connection to an address other than this machine's fails the test."""
    forbid_non_loopback(monkeypatch)


@pytest.fixture
def verify(emulator, outputs_file, tmp_path, monkeypatch, loopback_only, capsys):
    """Runs `python -m rehearse verify gpu` in-process against the emulator: (exit code, run
    folder or None, report.json or None, stdout, stderr)."""
    monkeypatch.setattr(run_execute, "_connect", lambda args, outputs: Kube.connect(emulator.endpoint))

    def run(*args: str, drop: tuple[str, ...] = ()):
        out = tmp_path / "rehearsals"
        code = cli.main(["verify", "gpu", "--outputs", str(outputs_file(drop)), "--out", str(out),
                         *args])
        captured = capsys.readouterr()
        folders = sorted(out.glob("*-lab-verify-gpu")) if out.exists() else []
        folder = folders[-1] if folders else None
        report = (json.loads((folder / "report.json").read_text())
                  if folder and (folder / "report.json").exists() else None)
        return code, folder, report, captured.out, captured.err

    return run


def statuses(report: dict) -> dict[str, str]:
    return {c["name"]: c["status"] for c in report["checks"]}


def failed(report: dict) -> dict[str, dict]:
    return {c["name"]: c for c in report["checks"] if c["status"] == FAIL}


def measured(report: dict) -> dict[str, Any]:
    return {m["name"]: m["value"] for m in report["measurements"]}


# --- a healthy lab --------------------------------------------------------------------------


def test_a_healthy_lab_passes_and_the_report_replays(emulator, verify):
    plant(emulator)
    code, folder, report, out, err = verify()
    assert code == 0, out + err
    assert set(statuses(report).values()) == {PASS}
    assert list(statuses(report)) == [gpu_analysis.CHECK_GPU, gpu_analysis.CHECK_POD, gpu_analysis.CHECK_SIDECAR,
                                      gpu_analysis.CHECK_HOST_NETWORK, gpu_analysis.CHECK_CLIENT, gpu_analysis.CHECK_COMPLETION]
    numbers = measured(report)
    # 20 ok calls of 0.30 .. 0.49 s: the 10th and the 19th smallest.
    assert numbers[gpu_analysis.M_SUCCESS] == 100.0
    assert numbers[gpu_analysis.M_P50] == pytest.approx(0.39) and numbers[gpu_analysis.M_P95] == pytest.approx(0.48)
    assert numbers[gpu_analysis.M_PULL] == pytest.approx(267.912)
    assert numbers[gpu_analysis.M_SCHEDULED_TO_STARTED] == 271.0
    assert numbers[gpu_analysis.M_COMPLETION] >= 0
    checks = {c["name"]: c for c in report["checks"]}
    assert checks[gpu_analysis.CHECK_GPU]["seen"] == f"{GPU_HOST} (hybrid, Ready): nvidia.com/gpu allocatable 1"
    assert "20 of 20 calls ok" in checks[gpu_analysis.CHECK_CLIENT]["seen"]
    assert "a way to run pods on your own servers" in checks[gpu_analysis.CHECK_COMPLETION]["seen"]
    # Every check says how to see it yourself.
    assert all(c["command"].startswith(("kubectl", "echo")) for c in report["checks"])
    assert "kubectl create --raw /api/v1/namespaces/demo-gpu/services/vllm:8000/proxy/v1/completions -f -" \
        in checks[gpu_analysis.CHECK_COMPLETION]["command"]

    # What was asked, and how: selectors sent for a real server, logs with the kubelet's times.
    requests = emulator.requests()
    assert ("POST", "/api/v1/namespaces/demo-gpu/services/vllm:8000/proxy/v1/completions") in requests
    assert ("GET", "/api/v1/namespaces/demo-gpu/pods/vllm-client-7b4c8d6f9-q9w8e/log") in requests
    events = rec.read_events(folder)
    [settings] = [e for e in events if e["kind"] == gpu.SETTINGS]
    assert settings["model"] == "Qwen/Qwen2.5-0.5B-Instruct" and settings["window_minutes"] == 10
    [log] = [e for e in events if e["kind"] == gpu.CLIENT_LOG]
    assert log["since_seconds"] == 600 and log["container"] == "client"
    [pod_events] = [e for e in events if e["kind"] == gpu.POD_EVENTS]
    assert [e["reason"] for e in pod_events["events"]] == ["Pulling", "Pulled"]
    [completion] = [e for e in events if e["kind"] == gpu.COMPLETION]
    assert completion["request"] == {"model": "Qwen/Qwen2.5-0.5B-Instruct",
                                     "prompt": "EKS Hybrid Nodes are", "max_tokens": 16}

    # `python -m rehearse report <folder>` rewrites the same report from events.jsonl alone
    # (its main, in-process: test_rehearse_failover runs the command in a fresh interpreter).
    markdown = (folder / "report.md").read_text()
    as_json = (folder / "report.json").read_text()
    (folder / "report.md").unlink()
    (folder / "report.json").unlink()
    assert cli.main(["report", str(folder)]) == 0
    assert (folder / "report.md").read_text() == markdown
    assert (folder / "report.json").read_text() == as_json
    assert "Result: **PASS** (6 of 6 checks passed)" in markdown


# --- each broken thing fails naming its check -----------------------------------------------


def _pulling_pod() -> dict:
    return pod("vllm", node_name=GPU_HOST, ready=False, phase="Pending",
               waiting={"reason": "ContainerCreating"})


BROKEN = {
    "no GPU allocatable": (dict(gpu_allocatable="0"), gpu_analysis.CHECK_GPU,
                           "nvidia.com/gpu allocatable 0", "nvidia-device-plugin"),
    "no nvidia.com/gpu at all": (dict(gpu_allocatable=None), gpu_analysis.CHECK_GPU,
                                 "allocatable none", "device plugin"),
    "an istio-proxy container": (
        dict(server=pod("vllm", node_name=GPU_HOST, containers=("vllm", "istio-proxy"))),
        gpu_analysis.CHECK_SIDECAR, "istio-proxy in vllm-6d8f7c9b5-x2k4p", "istio-injection-"),
    "hostNetwork on": (dict(server=pod("vllm", node_name=GPU_HOST, host_network=True)),
                       gpu_analysis.CHECK_HOST_NETWORK, "hostNetwork: true on vllm-6d8f7c9b5-x2k4p",
                       "pulumi refresh"),
    "client calls timing out": (
        dict(calls=[(15 + 30 * i, i >= 12, 0.4 if i >= 12 else 60.01) for i in range(20)]),
        gpu_analysis.CHECK_CLIENT, "8 of 20 calls ok (40 %)", "verify gateway"),
    "the latest client call failed": (
        dict(calls=[(15 + 30 * i, i > 0, 0.4 if i else 0.05) for i in range(20)]),
        gpu_analysis.CHECK_CLIENT, "(the latest call failed)", "failed fast"),
    "too few client calls": (dict(calls=HEALTHY_CALLS[:3]), gpu_analysis.CHECK_CLIENT,
                             "3 call(s) in the last 10 min (3 ok), fewer than 5", "--window"),
    "the completion answers 500": (
        dict(completion=(500, b'{"object":"error","message":"EngineCore encountered an issue",'
                              b'"type":"InternalServerError","code":500}')),
        gpu_analysis.CHECK_COMPLETION, "HTTP 500 from /api/v1/namespaces/demo-gpu/services/vllm:8000/proxy"
                              "/v1/completions: EngineCore encountered an issue", "logs deploy/vllm"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_each_broken_thing_fails_naming_its_check(emulator, verify, case):
    changes, check, seen, fix = BROKEN[case]
    plant(emulator, **changes)
    code, _, report, out, _ = verify()
    assert code == 1
    assert set(failed(report)) == {check}
    assert seen in failed(report)[check]["seen"]
    assert fix in failed(report)[check]["fix"]
    assert f"FAIL {check}: " in out


def test_a_pod_still_pulling_its_image_fails_the_pod_check_and_says_wait(emulator, verify):
    scheduled = NOW() - datetime.timedelta(minutes=2)
    plant(emulator, server=_pulling_pod(), calls=[], completion=(
        503, b'{"kind":"Status","apiVersion":"v1","status":"Failure","message":'
             b'"no endpoints available for service \\"vllm\\"","reason":"ServiceUnavailable","code":503}'),
        events=[pod_event("vllm-6d8f7c9b5-x2k4p", "Pulling", f'Pulling image "{IMAGE}"', scheduled)])
    code, _, report, _, _ = verify()
    assert code == 1
    problems = failed(report)
    assert set(problems) == {gpu_analysis.CHECK_POD, gpu_analysis.CHECK_CLIENT, gpu_analysis.CHECK_COMPLETION}
    assert f"pulling the image since {ts(scheduled)}" in problems[gpu_analysis.CHECK_POD]["seen"]
    assert "rollout status deploy/vllm --timeout=20m" in problems[gpu_analysis.CHECK_POD]["fix"]
    assert problems[gpu_analysis.CHECK_COMPLETION]["fix"].startswith("no Ready vLLM pod behind the Service")
    assert statuses(report)[gpu_analysis.CHECK_SIDECAR] == PASS
    assert measured(report)[gpu_analysis.M_PULL] is None


def test_no_vllm_pod_skips_what_cannot_be_seen(emulator, verify):
    plant(emulator)
    emulator.delete(PODS, NS, "vllm-6d8f7c9b5-x2k4p")
    _, _, report, _, _ = verify()
    assert statuses(report)[gpu_analysis.CHECK_POD] == FAIL
    assert "no pod labelled app=vllm in demo-gpu (Deployment vllm: 1 of 1 ready)" in \
        failed(report)[gpu_analysis.CHECK_POD]["seen"]
    assert statuses(report)[gpu_analysis.CHECK_SIDECAR] == statuses(report)[gpu_analysis.CHECK_HOST_NETWORK] == SKIP


def test_a_window_option_reaches_the_log_request_and_the_analysis(emulator, verify):
    plant(emulator)
    code, folder, report, _, _ = verify("--window", "5", "--min-calls", "3")
    assert code == 0
    [log] = [e for e in rec.read_events(folder) if e["kind"] == gpu.CLIENT_LOG]
    assert log["since_seconds"] == 300
    # The emulator answers the whole log; the analysis keeps the last five minutes: 10 calls.
    assert "10 of 10 calls ok" in {c["name"]: c for c in report["checks"]}[gpu_analysis.CHECK_CLIENT]["seen"]


def test_a_stack_without_the_gpu_host_cannot_run(emulator, verify):
    code, folder, report, out, err = verify(drop=("demo3",))
    assert code == 2
    # Input the command cannot use stops before a run starts: no folder, one line.
    assert folder is None and report is None
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "gpuEnabled" in err and "pulumi up" in err
    assert err.startswith("error: the outputs file ") and "has no GPU host (no output demo3)" in err


# --- a recorded run -------------------------------------------------------------------------


def test_recorded_run_gives_the_figures_worked_out_by_hand(tmp_path):
    """tests/fixtures/rehearse/gpu-recorded/events.jsonl (recorded with ``--window 15`` at
    2026-12-01 18:35:00Z, tests/rehearsal_evening.py, so the window opens at 18:20:00Z),
    worked out by hand from its lines:

    The client's log holds 32 result lines. Two are before the window (18:19:10 ok in 9.99 s,
    18:19:40 ok in 7.77 s) and must not count. Of the 30 inside it, one is ``FAIL in 60.01s``
    (18:22:10): 29 of 30 succeed, 96.7 %, at least 95 %, and the latest (18:34:40) is ok: PASS.

    The 29 ok times, sorted, with their ranks: 0.35 (1), 0.36 (2-3), 0.37 (4-5), 0.38 (6-8),
    0.39 (9-11), 0.40 (12-14), 0.41 (15-17), 0.42 (18-19), 0.43 (20-21), 0.44 (22-23),
    0.45 (24), 0.46 (25), 0.47 (26), 0.48 (27), 0.52 (28), 1.12 (29). Nearest rank: p50 is the
    ⌈0.50·29⌉ = 15th = 0.41 s; p95 is the ⌈0.95·29⌉ = 28th = 0.52 s. (Counting the two calls
    before the window, p95 would be the 30th of 31: 7.77 s.)

    The Pulled event says ``in 4m27.912s (4m28.104s including waiting)``: 4·60 + 27.912 =
    267.912 s. The pod was scheduled at 17:37:00Z and its container started at 17:41:31Z:
    271 s. The completion took 100.512 − 100.0 = 0.512 s on the recorder's monotonic clock.
    """
    folder = tmp_path / "run"
    shutil.copytree(FIXTURE, folder)
    report = gpu_analysis.analyse(rec.read_events(folder))
    numbers = {m.name: m.value for m in report.measurements}
    assert numbers[gpu_analysis.M_SUCCESS] == 96.7
    assert numbers[gpu_analysis.M_P50] == 0.41
    assert numbers[gpu_analysis.M_P95] == 0.52
    assert numbers[gpu_analysis.M_PULL] == 267.912
    assert numbers[gpu_analysis.M_SCHEDULED_TO_STARTED] == 271.0
    assert numbers[gpu_analysis.M_COMPLETION] == 0.512
    assert report.passed
    pull = next(m for m in report.measurements if m.name == gpu_analysis.M_PULL)
    assert pull.reference == gpu_analysis.SEED_PULL
    assert "4m28.1s including waiting" in pull.note and "image 10.1 GB" in pull.note

    assert cli.main(["report", str(folder)]) == 0
    markdown = (folder / "report.md").read_text()
    assert markdown == report.to_markdown()
    assert "| client latency p95 | 0.52 s |" in markdown
    assert "| vLLM image pull (kubelet) | 267.912 s | 4m28s (268 s) in the demo guide, ~10 GB |" in markdown


# --- the parsers ----------------------------------------------------------------------------


@pytest.mark.parametrize("text,seconds", [
    ("4m27.912s", 267.912), ("850ms", 0.85), ("1h2m0s", 3720.0), ("0s", 0.0), ("0", 0.0),
    ("1.5µs", 1.5e-6), ("2us", 2e-6), ("15.981s", 15.981), ("-1.5h", -5400.0)])
def test_go_durations(text, seconds):
    assert gpu_parse.parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "4m27", "4 m", "1d", "m", "4m27.9s (x)"])
def test_not_go_durations(text):
    with pytest.raises(ValueError):
        gpu_parse.parse_go_duration(text)


def test_pulled_messages_of_each_kubelet_generation():
    # Kubernetes 1.30+: with the image size.
    pull = gpu_analysis.parse_pulled(PULLED)
    assert (pull.image, pull.seconds, pull.total_seconds, pull.size_bytes) == (
        IMAGE, 267.912, 268.104, 10123456789)
    # 1.28-1.29: no size.
    pull = gpu_analysis.parse_pulled(f'Successfully pulled image "{IMAGE}" in 850ms (1.2s including waiting)')
    assert (pull.seconds, pull.total_seconds, pull.size_bytes) == (0.85, 1.2, None)
    # Older: the pull alone.
    assert gpu_analysis.parse_pulled(f'Successfully pulled image "{IMAGE}" in 4.5s').seconds == 4.5
    cached = gpu_analysis.parse_pulled(f'Container image "{IMAGE}" already present on machine')
    assert cached.cached and cached.seconds is None
    assert gpu_analysis.parse_pulled(f'Pulling image "{IMAGE}"') is None


def test_client_log_lines():
    lines = [
        '2026-10-15T09:00:00.100000000Z {"choices": [{"text": " fast"}]}',
        "2026-10-15T09:00:00.100000001Z 09:00:00 ok in 0.42s",
        "2026-10-15T09:00:30.000000000Z ",
        "2026-10-15T09:01:30.000000000Z 09:01:30 FAIL in 60.01s",
        "2026-10-15T09:01:31.000000000Z wget: server returned error: HTTP/1.1 500",
        "2026-10-15T09:02:00.000000000Z 09:02:00 ok in 0.40s",
    ]
    calls = gpu_analysis.parse_client_log(lines)
    assert [(c.ok, c.seconds, c.answer) for c in calls] == [
        (True, 0.42, " fast"), (False, 60.01, None), (True, 0.40, None)]
    assert calls[0].at == rec.parse_time("2026-10-15T09:00:00.100000001Z")


@pytest.mark.parametrize("values,p,expected", [
    ([0.5], 50, 0.5), ([0.5], 95, 0.5), ([3, 1, 2], 50, 2), ([1, 2, 3, 4], 50, 2),
    (list(range(1, 21)), 95, 19), (list(range(1, 21)), 50, 10), (list(range(1, 101)), 95, 95),
    ([], 50, None)])
def test_nearest_rank_percentiles(values, p, expected):
    assert gpu_analysis.percentile(values, p) == expected


def _recorded_events() -> list[dict]:
    return rec.read_events(FIXTURE)


def test_a_completion_that_times_out_points_at_the_path_to_the_hybrid_pod():
    events = [e if e["kind"] != gpu.COMPLETION else
              {**e, "status": None, "body": "", "seconds": 60.004,
               "error": "no answer in 60 s (ReadTimeout)"} for e in _recorded_events()]
    report = gpu_analysis.analyse(events)
    [problem] = report.failures
    assert (problem.name, problem.seen) == (gpu_analysis.CHECK_COMPLETION, "no answer in 60 s (ReadTimeout)")
    assert "verify gateway" in problem.fix
    assert gpu_analysis.M_COMPLETION not in {m.name for m in report.measurements}


def test_a_cached_image_is_no_pull_to_time():
    def cached(event: dict) -> dict:
        if event["kind"] != gpu.POD_EVENTS:
            return event
        return {**event, "events": [
            {**e, "message": f'Container image "{IMAGE}" already present on machine'}
            if e["reason"] == "Pulled" else e for e in event["events"]]}

    report = gpu_analysis.analyse([cached(e) for e in _recorded_events()])
    assert {m.name: m.value for m in report.measurements}[gpu_analysis.M_PULL] is None
    assert any("already present on machine" in note for note in report.notes)
    assert report.passed


def test_a_stack_without_the_demo_layer_says_to_build_it():
    from rehearse.lab.outputs import StackOutputs

    with pytest.raises(gpu.RunError, match="no demo layer.*upToLayer to demo.*gpuEnabled"):
        gpu.names_from_outputs(StackOutputs("dev", {"layers": ["network", "cluster"]}))
    # A stack exported before demo3 named its objects still finds them.
    names = gpu.names_from_outputs(StackOutputs("dev", {"demo3": {"namespace": "demo-gpu"}}))
    assert (names["deployment"], names["service"], names["port"], names["clientDeployment"]) == (
        "vllm", "vllm", 8000, "vllm-client")
