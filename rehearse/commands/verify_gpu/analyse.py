"""Demo 3's names (what the lab deploys, the event kinds, the checks' names) and its analysis
(pure: events -> report): parsing the kubelet's pull events and the cloud client's log, and
judging the GPU, the vLLM pod, the client's calls and the completion. The collector is
rehearse.gpu."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from rehearse.run import record as rec
from rehearse.run.outcome import mark_unread, not_read
from rehearse.run.report import FAIL, PASS, SKIP, Chart, Check, Measurement, Report


TITLE = "check demo 3: vLLM on the hybrid GPU host, called from the cloud"

# --- what the lab deploys (components/demos.py, stacks/layers/demo.py) -----------------------

GPU_RESOURCE = "nvidia.com/gpu"
#: The GPU host labels itself with it when it joins (stacks/layers/hybrid.py).
GPU_LABEL = "nvidia.com/gpu.present"
HYBRID_LABEL, HYBRID_VALUE = "eks.amazonaws.com/compute-type", "hybrid"
SIDECAR = "istio-proxy"
#: components/nvidia_device_plugin.NAMESPACE (not imported: it would import Pulumi).
DEVICE_PLUGIN_NAMESPACE = "nvidia-device-plugin"
#: Read from the stack's ``demo3`` output; these are the names a stack exported before it
#: carried them.
DEFAULT_NAMES = {"deployment": "vllm", "service": "vllm", "port": 8000,
                 "clientDeployment": "vllm-client"}
#: What the cloud client asks (components/demos.vllm_client), so the one completion here is
#: the same request.
PROMPT, MAX_TOKENS = "EKS Hybrid Nodes are", 16
#: The client calls every 30 s, each call bounded by wget -T 60.
CLIENT_PERIOD_SECONDS, CALL_TIMEOUT_SECONDS = 30, 60

#: The demo guide (docs/demo-guide.md#demo-3-gpu-inference-on-a-hybrid-node): the ~10 GB vLLM image took 4m28s to pull (g6.xlarge, 2026-10-15).
SEED_PULL = "4m28s (268 s) in the demo guide, ~10 GB"
GUIDE_PULL_SECONDS = 4 * 60 + 28

DEFAULT_WINDOW_MINUTES = 10.0
#: 95 %: ten minutes hold about 20 calls, and 19 of 20 passes. One failed call in ten minutes
#: (the call in flight while a pod was replaced, one slow first request) is tolerated; two is
#: a pattern. The latest call must succeed whatever the rate: that is the state on stage.
DEFAULT_MIN_SUCCESS_RATE = 95.0
#: Five calls (two and a half minutes of a running client) before a rate means anything; below
#: 20 calls a 95 % threshold already allows no failure at all.
DEFAULT_MIN_CALLS = 5

# --- event kinds ----------------------------------------------------------------------------

SETTINGS = "gpu.settings"
NODES = "gpu.nodes"
DEPLOYMENT = "gpu.deployment"
SERVER_PODS = "gpu.server_pods"
POD_EVENTS = "gpu.pod_events"
CLIENT_PODS = "gpu.client_pods"
CLIENT_LOG = "gpu.client_log"
COMPLETION = "gpu.completion"

# --- check and measurement names (the tests and report.json readers key on them) -------------

CHECK_GPU = "nvidia.com/gpu allocatable on the hybrid GPU host"
CHECK_POD = "vLLM pod Ready on the GPU host"
CHECK_SIDECAR = "no istio-proxy container in the vLLM pod"
CHECK_HOST_NETWORK = "hostNetwork off on the vLLM pod"
CHECK_CLIENT = "the cloud client's calls succeed"
CHECK_COMPLETION = "one completion through the vLLM Service"
#: What each check reads, and the events the collector records once that read is done (it
#: reads in this order), for a run that ended part-way (rehearse.outcome.mark_unread).
READS = {
    CHECK_GPU: ("the nodes", (NODES,)),
    CHECK_POD: ("the vLLM Deployment, its pods and their events", (CLIENT_PODS, COMPLETION)),
    CHECK_SIDECAR: ("the vLLM pods", (SERVER_PODS,)),
    CHECK_HOST_NETWORK: ("the vLLM pods", (SERVER_PODS,)),
    CHECK_CLIENT: ("the client's pods and logs", (COMPLETION,)),
    CHECK_COMPLETION: ("a completion through the vLLM Service", (COMPLETION,)),
}

M_SUCCESS = "client success rate"
M_P50 = "client latency p50"
M_P95 = "client latency p95"
M_PULL = "vLLM image pull (kubelet)"
M_SCHEDULED_TO_STARTED = "vLLM pod scheduled → container started"
M_COMPLETION = "completion through the API server"

# --- parsing --------------------------------------------------------------------------------

_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|μs|ns)")
_GO_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6,
            "ns": 1e-9}


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration as ``time.Duration.String`` writes it (``4m27.912s``, ``850ms``,
    ``1h2m0s``, ``0s``); ValueError for anything else."""
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    if not body or not re.fullmatch(f"(?:{_GO_PART.pattern})+", body):
        raise ValueError(f"not a Go duration: {text!r}")
    return sign * round(sum(float(n) * _GO_UNIT[u] for n, u in _GO_PART.findall(body)), 9)


_DURATION = r"[0-9.]+(?:h|ms|m|s|us|µs|μs|ns)(?:[0-9.]+(?:h|ms|m|s|us|µs|μs|ns))*"
_PULLED = re.compile(r'Successfully pulled image "(?P<image>[^"]+)" in (?P<pull>' + _DURATION
                     + r')(?: \((?P<total>' + _DURATION + r') including waiting\))?'
                     + r'(?:\. Image size: (?P<size>\d+) bytes)?')
_PRESENT = re.compile(r'Container image "(?P<image>[^"]+)" already present on machine')


@dataclass(frozen=True)
class Pull:
    image: str
    #: The pull itself; ``total`` adds the wait in the kubelet's pull queue (serial pulls).
    seconds: Optional[float]
    total_seconds: Optional[float]
    size_bytes: Optional[int]
    #: The image was on the node already: no pull to time.
    cached: bool = False
    text: str = ""


def parse_pulled(message: str) -> Optional[Pull]:
    """The kubelet's Pulled event message: ``Successfully pulled image "<image>" in 4m27.912s
    (4m28.1s including waiting). Image size: 10123456789 bytes.`` (the size clause and the
    waiting clause are absent in older kubelets), or ``Container image "<image>" already present
    on machine``."""
    match = _PULLED.search(message or "")
    if match:
        return Pull(image=match["image"], seconds=parse_go_duration(match["pull"]),
                    total_seconds=parse_go_duration(match["total"]) if match["total"] else None,
                    size_bytes=int(match["size"]) if match["size"] else None,
                    text=match["pull"])
    match = _PRESENT.search(message or "")
    if match:
        return Pull(image=match["image"], seconds=None, total_seconds=None, size_bytes=None,
                    cached=True)
    return None


_CALL = re.compile(r"^(?P<at>\d{4}-\d\d-\d\dT\S+)\s+(?P<clock>\d\d:\d\d:\d\d)\s+(?P<result>ok|FAIL)"
                   r"\s+in\s+(?P<seconds>\d+(?:\.\d+)?)s\s*$")


@dataclass(frozen=True)
class Call:
    """One call of the cloud client: when the kubelet logged its result line, whether wget
    succeeded, and how long it took by the client's own clock."""

    at: datetime.datetime
    ok: bool
    seconds: float
    #: The completion's text, from the JSON line the client logged before the result.
    answer: Optional[str] = None


def parse_client_log(lines: Iterable[str]) -> list[Call]:
    """The calls in the client's kubelet-timestamped log. Each call logs the completion JSON
    (or nothing, when wget failed), then ``HH:MM:SS ok in 0.42s`` or ``HH:MM:SS FAIL in
    60.01s``; other lines are skipped."""
    calls, previous = [], ""
    for raw in lines:
        line = raw.strip()
        match = _CALL.match(line)
        if match:
            ok = match["result"] == "ok"
            calls.append(Call(rec.parse_time(match["at"]), ok, float(match["seconds"]),
                              _answer(previous) if ok else None))
            previous = ""
        elif line:
            previous = line
    return sorted(calls, key=lambda c: c.at)


def _answer(line: str) -> Optional[str]:
    _, _, rest = line.partition(" ")
    try:
        return json.loads(rest)["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def percentile(values: Iterable[float], p: int) -> Optional[float]:
    """Nearest rank: the smallest value with at least ``p`` % of the values at or below it,
    i.e. the ⌈p·n/100⌉-th smallest (an observed value, no interpolation)."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, -(-p * len(ordered) // 100))
    return ordered[rank - 1]


def go_duration_text(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.1f}s" if minutes else f"{rest:.1f}s"


# --- analyser -------------------------------------------------------------------------------


def analyse(events: list[dict]) -> Report:
    # events.jsonl is written with sorted keys: read the live events the same way, so a run
    # and its replay (`rehearse report`) iterate dicts alike and write the same report.
    events = json.loads(json.dumps(events, sort_keys=True, default=str))
    started = rec.first(events, rec.RUN_STARTED) or {}
    report = Report(command="verify gpu", stack=started.get("stack", "?"),
                    started=started.get("at", "?"), title=TITLE)
    settings = rec.first(events, SETTINGS) or {}
    ns = settings.get("namespace", "demo-gpu")
    app = settings.get("deployment", DEFAULT_NAMES["deployment"])
    nodes_event = rec.first(events, NODES)
    nodes = (nodes_event or {}).get("nodes") or []
    gpu_hosts = [n for n in nodes if n["labels"].get(GPU_LABEL) == "true"
                 and n["labels"].get(HYBRID_LABEL) == HYBRID_VALUE]
    pods = [p for p in (rec.first(events, SERVER_PODS) or {}).get("pods") or []
            if not p.get("deleting")]
    pod_events = {e["pod"]: e.get("events") or [] for e in rec.every(events, POD_EVENTS)}
    deployment = rec.first(events, DEPLOYMENT) or {}

    report.checks.append(_gpu_check(settings, nodes_event, nodes, gpu_hosts))
    report.checks.append(_pod_check(ns, app, deployment, pods, pod_events, gpu_hosts))
    report.checks += _pod_spec_checks(ns, app, pods)
    calls = _calls_in_window(events, settings)
    report.checks.append(_client_check(events, settings, calls))
    completion = rec.first(events, COMPLETION)
    report.checks.append(_completion_check(settings, completion))
    mark_unread(report, events, READS)

    report.measurements += _client_measurements(settings, calls)
    report.measurements += _pull_measurements(pods, pod_events, report.notes)
    report.charts.append(_chart(report, calls))
    if completion and completion.get("status") == 200:
        report.measurements.append(Measurement(
            M_COMPLETION, completion.get("seconds"), "s", "",
            "one POST through the API server's service proxy, timed here: includes the round "
            "trip from this machine to the cluster"))
    answered = [c for c in calls if c.ok and c.answer]
    if answered:
        report.notes.append(f"The client's latest answer ({answered[-1].at:%H:%M:%S} UTC): "
                            f"{PROMPT!r} → {answered[-1].answer!r}")
    for pod in pods:
        restarted = {c: n for c, n in (pod.get("restarts") or {}).items() if n}
        if restarted:
            last = {c: next(iter(s.values()), {}).get("reason")
                    for c, s in (pod.get("last_states") or {}).items()}
            report.notes.append(f"Pod {pod['name']} restarted: " + ", ".join(
                f"{c} {n} time(s) (last: {last.get(c) or 'unknown'})" for c, n in restarted.items())
                + f"; `kubectl -n {ns} logs {pod['name']} --previous` shows why.")
    return report


def _gpu_check(settings: dict, nodes_event: Optional[dict], nodes: list[dict],
               gpu_hosts: list[dict]) -> Check:
    command = settings.get("gpu_allocatable_command") or (
        f"kubectl get nodes -l {GPU_LABEL}=true -o custom-columns=NODE:.metadata.name,"
        "GPU:.status.allocatable.nvidia\\.com/gpu")
    if nodes_event is None:
        return not_read(CHECK_GPU, "the nodes", [], command)
    labelled = [n for n in nodes if n["labels"].get(GPU_LABEL) == "true"]
    if not labelled:
        hybrid = [n["name"] for n in nodes if n["labels"].get(HYBRID_LABEL) == HYBRID_VALUE]
        return Check(CHECK_GPU, FAIL,
                     f"no node is labelled {GPU_LABEL}=true (hybrid nodes: "
                     f"{', '.join(hybrid) or 'none'})",
                     "the GPU host labels itself when it joins: is it built (`pulumi config get "
                     "gpuEnabled`) and joined? `kubectl get nodes -l "
                     f"{HYBRID_LABEL}={HYBRID_VALUE}`; on the host, through SSM, `journalctl -u "
                     "kubelet` says why it has not joined", command)
    if not gpu_hosts:
        return Check(CHECK_GPU, FAIL,
                     f"{', '.join(n['name'] for n in labelled)} carry {GPU_LABEL}=true but none "
                     f"is a hybrid node ({HYBRID_LABEL}={HYBRID_VALUE})",
                     "demo 3 runs on the hybrid GPU host: build it with gpuEnabled and `pulumi up`",
                     command)
    seen = "; ".join(_node_text(n) for n in gpu_hosts)
    if any(n["ready"] and _count(n["gpu_allocatable"]) >= 1 for n in gpu_hosts):
        return Check(CHECK_GPU, PASS, seen, "", command)
    if not any(n["ready"] for n in gpu_hosts):
        fix = (f"the GPU host is NotReady: `kubectl describe node {gpu_hosts[0]['name']}`; on "
               "the host, through SSM, `journalctl -u kubelet`")
    else:
        fix = (f"the NVIDIA device plugin advertises {GPU_RESOURCE} once the host's driver is "
               f"in: `kubectl -n {DEVICE_PLUGIN_NAMESPACE} get pods -o wide` and that pod's "
               "log; on the host, through SSM, `nvidia-smi` must list the GPU")
    return Check(CHECK_GPU, FAIL, seen, fix, command)


def _node_text(node: dict) -> str:
    state = "Ready" if node["ready"] else "NotReady"
    capacity = "" if node["gpu_capacity"] == node["gpu_allocatable"] else (
        f", capacity {node['gpu_capacity'] or 'none'}")
    return (f"{node['name']} (hybrid, {state}): {GPU_RESOURCE} allocatable "
            f"{node['gpu_allocatable'] or 'none'}{capacity}")


def _count(quantity: Any) -> int:
    try:
        return int(float(str(quantity)))
    except (TypeError, ValueError):
        return 0


def _pod_check(ns: str, app: str, deployment: dict, pods: list[dict],
               pod_events: dict[str, list[dict]], gpu_hosts: list[dict]) -> Check:
    command = f"kubectl -n {ns} get pods -l app={app} -o wide"
    hosts = {n["name"] for n in gpu_hosts}
    if not pods:
        if deployment.get("found") is False:
            seen = f"no Deployment {app} in {ns} and no pod labelled app={app}"
            fix = "the demo layer deploys it when gpuEnabled is true: `pulumi up`"
        else:
            seen = (f"no pod labelled app={app} in {ns} (Deployment {app}: "
                    f"{deployment.get('ready_replicas', 0)} of {deployment.get('replicas', '?')} "
                    "ready)")
            fix = f"`kubectl -n {ns} describe deploy {app}` and its ReplicaSet's events say why"
        return Check(CHECK_POD, FAIL, seen, fix, command)
    good = [p for p in pods if p["ready"] and p["node"] in hosts]
    if good:
        return Check(CHECK_POD, PASS, "; ".join(
            f"{p['name']} Ready on {p['node']} (the hybrid GPU host), restarts "
            + ", ".join(f"{c} {n}" for c, n in (p.get("restarts") or {}).items())
            for p in good), "", command)
    pod = pods[0]
    seen, fix = _why_not_ready(ns, app, pod, pod_events.get(pod["name"]) or [], hosts)
    return Check(CHECK_POD, FAIL, seen, fix, command)


def _why_not_ready(ns: str, app: str, pod: dict, events: list[dict],
                   hosts: set[str]) -> tuple[str, str]:
    name = pod["name"]
    if pod["ready"]:
        return (f"{name} is Ready on {pod['node']}, which is not the hybrid GPU host "
                f"({', '.join(sorted(hosts)) or 'none found'})",
                f"the Deployment's node affinity asks for {HYBRID_LABEL}={HYBRID_VALUE} and "
                f"{GPU_LABEL}=true: `pulumi refresh` and `pulumi up` restore it")
    scheduled = next((c for c in pod.get("conditions") or [] if c["type"] == "PodScheduled"), None)
    if not pod.get("node"):
        why = (scheduled or {}).get("message") or "no reason given"
        return (f"{name} is Pending, not scheduled: {why}",
                f"it needs a Ready hybrid GPU host with {GPU_RESOURCE} free (the first check), "
                "and, with strategy Recreate on one GPU, the old pod gone")
    waiting = {c: s["waiting"] for c, s in (pod.get("states") or {}).items() if "waiting" in s}
    reasons = {w.get("reason") for w in waiting.values()}
    state = ", ".join(f"{c} waiting: {w.get('reason')}" + (f" ({w['message']})" if w.get("message") else "")
                      for c, w in waiting.items())
    head = f"{name} on {pod['node']} is {pod.get('phase')}, not Ready" + (f"; {state}" if state else "")
    pulling = [e for e in events if e.get("reason") == "Pulling"]
    pulled = [e for e in events if e.get("reason") == "Pulled"]
    if reasons & {"ErrImagePull", "ImagePullBackOff"}:
        return head, ("the image cannot be pulled: the message above says why; the GPU host "
                      "pulls from Docker Hub through the on-prem VPC's NAT")
    if pulling and not pulled:
        since = pulling[-1].get("first") or pulling[-1].get("event_time") or "?"
        return (f"{head}; pulling the image since {since}",
                f"the ~10 GB image took 4m28s in the demo guide: wait with `kubectl -n {ns} rollout "
                f"status deploy/{app} --timeout=20m` (and pre-pull before the talk)")
    if "CrashLoopBackOff" in reasons:
        return head, (f"vLLM keeps exiting: `kubectl -n {ns} logs {name} --previous` (a model "
                      "too large for the GPU, or out of memory)")
    return head, (f"vLLM is starting (it loads the model and answers /health before it is "
                  f"Ready; up to 15 min): wait, and read `kubectl -n {ns} logs {name}`")


def _pod_spec_checks(ns: str, app: str, pods: list[dict]) -> list[Check]:
    containers_cmd = (f"kubectl -n {ns} get pods -l app={app} -o jsonpath='{{range .items[*]}}"
                      "{.metadata.name}: {.spec.initContainers[*].name} {.spec.containers[*].name}"
                      "{\"\\n\"}{end}'")
    host_cmd = (f"kubectl -n {ns} get pods -l app={app} -o custom-columns="
                "POD:.metadata.name,HOSTNETWORK:.spec.hostNetwork")
    if not pods:
        return [Check(CHECK_SIDECAR, SKIP, f"no vLLM pod to look at (app={app})", "",
                      containers_cmd),
                Check(CHECK_HOST_NETWORK, SKIP, f"no vLLM pod to look at (app={app})", "",
                      host_cmd)]
    listing = "; ".join(f"{p['name']}: " + ", ".join(p["init_containers"] + p["containers"])
                        for p in pods)
    with_sidecar = [p["name"] for p in pods if SIDECAR in p["containers"] + p["init_containers"]]
    sidecar = (Check(CHECK_SIDECAR, FAIL, f"{SIDECAR} in {', '.join(with_sidecar)} ({listing})",
                     f"a mesh injected its sidecar, which puts its proxy in the inference path "
                     f"(the pod template says sidecar.istio.io/inject: \"false\"): stop injection "
                     f"in the namespace (`kubectl label namespace {ns} istio-injection- "
                     f"istio.io/rev-`) and recreate the pod (`kubectl -n {ns} rollout restart "
                     f"deploy/{app}`; Recreate: no inference until the model is loaded again)",
                     containers_cmd)
               if with_sidecar else
               Check(CHECK_SIDECAR, PASS, f"containers: {listing}", "", containers_cmd))
    on_host = [p["name"] for p in pods if p.get("host_network")]
    host = (Check(CHECK_HOST_NETWORK, FAIL, f"hostNetwork: true on {', '.join(on_host)}",
                  "with the host's network the pod takes the host's address, not one from the "
                  "hybrid pod CIDR the demo shows, and opens port 8000 on the host; the lab's "
                  "Deployment has no hostNetwork: `pulumi refresh` then `pulumi up` restores it "
                  f"(or `kubectl -n {ns} patch deploy {app} --type=json -p "
                  "'[{\"op\":\"remove\",\"path\":\"/spec/template/spec/hostNetwork\"}]'`)",
                  host_cmd)
            if on_host else
            Check(CHECK_HOST_NETWORK, PASS,
                  f"hostNetwork off on {', '.join(p['name'] for p in pods)}", "", host_cmd))
    return [sidecar, host]


def _chart(report: Report, calls: list[Call]) -> Chart:
    """The client's call times and the pull beside the demo guide's, from the measurements."""
    values = {m.name: m.value for m in report.measurements}
    return Chart("gpu-latency", "Demo 3: the cloud client's completions and the vLLM image pull",
                 {"calls": [[c.seconds, c.ok] for c in calls], "p50": values.get(M_P50),
                  "p95": values.get(M_P95), "pull_seconds": values.get(M_PULL),
                  "guide_pull_seconds": GUIDE_PULL_SECONDS, "guide_pull": SEED_PULL})


def _calls_in_window(events: list[dict], settings: dict) -> list[Call]:
    start = settings.get("window_start")
    start_at = rec.parse_time(start) if start else None
    calls = []
    for log in rec.every(events, CLIENT_LOG):
        calls += [c for c in parse_client_log(log.get("lines") or [])
                  if start_at is None or c.at >= start_at]
    return sorted(calls, key=lambda c: c.at)


def _client_check(events: list[dict], settings: dict, calls: list[Call]) -> Check:
    ns = settings.get("namespace", "demo-gpu")
    client = settings.get("client_deployment", DEFAULT_NAMES["clientDeployment"])
    window = settings.get("window_minutes", DEFAULT_WINDOW_MINUTES)
    threshold = settings.get("min_success_rate", DEFAULT_MIN_SUCCESS_RATE)
    min_calls = settings.get("min_calls", DEFAULT_MIN_CALLS)
    command = f"kubectl -n {ns} logs deploy/{client} --timestamps --since={window:g}m"
    pods = (rec.first(events, CLIENT_PODS) or {}).get("pods") or []
    if not pods:
        return Check(CHECK_CLIENT, FAIL, f"no client pod (app={client}) in {ns}",
                     f"the demo layer deploys it with gpuEnabled: `pulumi up`; `kubectl -n {ns} "
                     f"describe deploy {client}`", command)
    errors = [f"{e['pod']}: {e['error']}" for e in rec.every(events, CLIENT_LOG) if e.get("error")]
    ok = [c for c in calls if c.ok]
    where = ", ".join(f"{p['name']} on {p['node'] or 'no node'}" for p in pods)
    if len(calls) < min_calls:
        seen = (f"{len(calls)} call(s) in the last {window:g} min ({len(ok)} ok), fewer than "
                f"{min_calls} ({where})" + (f"; log not read: {'; '.join(errors)}" if errors else ""))
        return Check(CHECK_CLIENT, FAIL, seen,
                     f"the client calls every {CLIENT_PERIOD_SECONDS} s: if it just started, wait "
                     f"{min_calls * CLIENT_PERIOD_SECONDS // 60 + 1} min or widen --window; if "
                     f"it is not Running, `kubectl -n {ns} describe pod -l app={client}`", command)
    rate = 100.0 * len(ok) / len(calls)
    latest = calls[-1]
    failed = [c for c in calls if not c.ok]
    seen = (f"{len(ok)} of {len(calls)} calls ok ({round(rate, 1):g} %) in the last {window:g} min; the "
            f"latest at {latest.at:%H:%M:%S} {'ok' if latest.ok else 'FAIL'} in "
            f"{latest.seconds:.2f} s")
    if failed:
        seen += "; failed at " + ", ".join(f"{c.at:%H:%M:%S} ({c.seconds:.2f} s)" for c in failed[-5:])
    if rate >= threshold and latest.ok:
        return Check(CHECK_CLIENT, PASS, seen, "", command)
    timeouts = [c for c in failed if c.seconds >= CALL_TIMEOUT_SECONDS - 1]
    if timeouts and len(timeouts) * 2 >= len(failed):
        fix = (f"calls ran into wget's {CALL_TIMEOUT_SECONDS} s timeout: the cloud pod does not "
               "reach the vLLM pod on the hybrid node, or vLLM does not answer; check the path "
               f"(`python -m rehearse verify gateway`) and vLLM's log (`kubectl -n {ns} logs "
               f"deploy/{settings.get('deployment', 'vllm')} --tail=50`)")
    else:
        fix = ("calls failed fast: vLLM answered with an error or the Service had no endpoint "
               f"(the pod check above); vLLM's log: `kubectl -n {ns} logs "
               f"deploy/{settings.get('deployment', 'vllm')} --tail=50`")
    reason = (f"the success rate is below {threshold:g} %" if rate < threshold
              else "the latest call failed")
    return Check(CHECK_CLIENT, FAIL, f"{seen} ({reason})", fix, command)


def _completion_check(settings: dict, completion: Optional[dict]) -> Check:
    path = (completion or {}).get("path") or "?"
    request = (completion or {}).get("request") or {}
    body = json.dumps({"model": request.get("model") or settings.get("model") or "<model>",
                       "prompt": request.get("prompt", PROMPT),
                       "max_tokens": request.get("max_tokens", MAX_TOKENS)})
    command = f"echo '{body}' | kubectl create --raw {path} -f -"
    ns = settings.get("namespace", "demo-gpu")
    app = settings.get("deployment", DEFAULT_NAMES["deployment"])
    logs = f"`kubectl -n {ns} logs deploy/{app} --tail=50`"
    if completion is None:
        return not_read(CHECK_COMPLETION, "a completion through the vLLM Service", [], command)
    if completion.get("skipped"):
        return Check(CHECK_COMPLETION, FAIL, completion["skipped"],
                     "the stack's demo3 output carries the model after `pulumi up`", command)
    if completion.get("error"):
        return Check(CHECK_COMPLETION, FAIL, completion["error"],
                     "the API server proxies to the vLLM pod's address on the hybrid node: the "
                     "control plane must reach the hybrid pod CIDR (`python -m rehearse verify "
                     f"gateway`); a loaded vLLM answers 16 tokens in well under a second: {logs}",
                     command)
    status, text = completion.get("status"), completion.get("body") or ""
    took = completion.get("seconds")
    if status == 200:
        choices = _json(text).get("choices") if isinstance(_json(text), dict) else None
        if choices:
            answer = (choices[0] or {}).get("text", "")
            return Check(CHECK_COMPLETION, PASS,
                         f"HTTP 200 in {took:.2f} s: {PROMPT!r} → {answer!r}", "", command)
        return Check(CHECK_COMPLETION, FAIL, f"HTTP 200 but no choices in the answer: {text[:200]}",
                     f"the Service answered with something other than vLLM's completion: {logs}",
                     command)
    message = _error_message(text)
    seen = f"HTTP {status} from {path}: {message}"
    if status == 503 and "no endpoints" in message:
        fix = "no Ready vLLM pod behind the Service: see the pod check above"
    elif status == 404 and "model" in message.lower():
        fix = (f"vLLM serves another model than {settings.get('model')!r}: the stack's gpuModel "
               f"and the Deployment's --model must agree (`pulumi up`); GET {path.rsplit('/', 1)[0]}"
               "/models lists what it serves")
    elif status in (401, 403):
        fix = "your identity may not use the service proxy (services/proxy create): ask for that RBAC"
    else:
        fix = f"vLLM could not answer: {logs}"
    return Check(CHECK_COMPLETION, FAIL, seen, fix, command)


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _error_message(text: str) -> str:
    body = _json(text)
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if body.get("message"):
            return str(body["message"])
    return text.strip()[:200] or "(empty body)"


def _client_measurements(settings: dict, calls: list[Call]) -> list[Measurement]:
    window = settings.get("window_minutes", DEFAULT_WINDOW_MINUTES)
    threshold = settings.get("min_success_rate", DEFAULT_MIN_SUCCESS_RATE)
    ok = [c.seconds for c in calls if c.ok]
    rate = round(100.0 * len(ok) / len(calls), 1) if calls else None

    def rank(p: int) -> str:
        if not ok:
            return "no ok call in the window"
        return (f"nearest rank: the {_ordinal(max(1, -(-p * len(ok) // 100)))} smallest of the "
                f"{len(ok)} ok calls' times")

    return [
        Measurement(M_SUCCESS, rate, "%", f"pass at ≥ {threshold:g} % and the latest call ok",
                    f"{len(ok)} of {len(calls)} calls in the last {window:g} min"),
        Measurement(M_P50, percentile(ok, 50), "s", "the demo guide checked it, gave no figure",
                    f"{rank(50)}, by the client's clock (name lookup, ClusterIP, cloud → hybrid, "
                    f"{MAX_TOKENS} tokens)"),
        Measurement(M_P95, percentile(ok, 95), "s", "", rank(95)),
    ]


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _pull_measurements(pods: list[dict], pod_events: dict[str, list[dict]],
                       notes: list[str]) -> list[Measurement]:
    ordered = sorted(pods, key=lambda p: not p["ready"])
    found: Optional[tuple[dict, dict, Pull]] = None
    cached: Optional[tuple[dict, dict, Pull]] = None
    for pod in ordered:
        images = set((pod.get("images") or {}).values())
        for event in reversed(pod_events.get(pod["name"]) or []):
            if event.get("reason") != "Pulled":
                continue
            pull = parse_pulled(event.get("message") or "")
            if pull is None or (images and pull.image not in images):
                continue
            if pull.cached:
                cached = cached or (pod, event, pull)
            elif found is None:
                found = (pod, event, pull)
        if found:
            break
    measurements = []
    if found:
        pod, event, pull = found
        waiting = (f"; {go_duration_text(pull.total_seconds)} including waiting for the "
                   "kubelet's pull queue" if pull.total_seconds is not None else "")
        size = f"; image {pull.size_bytes / 1e9:.1f} GB" if pull.size_bytes else ""
        measurements.append(Measurement(
            M_PULL, pull.seconds, "s", SEED_PULL,
            f"\"in {pull.text}\" in the Pulled event of {pod['name']} on {pod['node']} at "
            f"{event.get('last') or event.get('event_time')}{waiting}{size}"))
    else:
        measurements.append(Measurement(M_PULL, None, "s", SEED_PULL,
                                        "no Pulled event with a time (see the notes)"))
        if cached:
            notes.append(f"The vLLM image was already on {cached[0]['node']} when "
                         f"{cached[0]['name']} started (\"already present on machine\"): no pull "
                         "to time. A fresh GPU host pulls it again.")
        else:
            notes.append("No Pulled event for the vLLM pod: the API server keeps events for "
                         "about an hour (Kubernetes' default --event-ttl; EKS's eventTtl), so a "
                         "pod started earlier has lost them. Run this within the hour after a "
                         "fresh deploy to time the pull; the scheduled → started time below "
                         "outlives the events.")
    for pod in ordered:
        spent = _scheduled_to_started(pod)
        if spent is not None:
            measurements.append(Measurement(
                M_SCHEDULED_TO_STARTED, spent, "s", "an upper bound of the pull",
                f"{pod['name']}: PodScheduled → the vllm container's start, from the pod's "
                "status (kept as long as the pod): the pull plus creating the container"))
            break
    return measurements


def _scheduled_to_started(pod: dict) -> Optional[float]:
    if any(pod.get("restarts", {}).values()):
        return None  # the running state is the latest restart's, not the first start
    scheduled = next((c.get("lastTransitionTime") for c in pod.get("conditions") or []
                      if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
    states = pod.get("states") or {}
    container = "vllm" if "vllm" in states else next(iter(states), None)
    running = (states.get(container) or {}).get("running") if container else None
    if not scheduled or not running or not running.get("startedAt"):
        return None
    return round((rec.parse_time(running["startedAt"]) - rec.parse_time(scheduled)).total_seconds(), 3)
