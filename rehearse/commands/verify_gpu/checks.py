"""The checks of `python -m rehearse verify gpu` (pure, over what the collector recorded): the
GPU host, the vLLM pod and its spec, the cloud client's calls, the one completion."""

from __future__ import annotations

import json
from typing import Any, Optional

from rehearse.commands.verify_gpu.demo import (CALL_TIMEOUT_SECONDS, CLIENT_PERIOD_SECONDS, DEFAULT_MIN_CALLS,
                                               DEFAULT_MIN_SUCCESS_RATE, DEFAULT_NAMES, DEFAULT_WINDOW_MINUTES,
                                               DEVICE_PLUGIN_NAMESPACE, GPU_LABEL, GPU_RESOURCE, HYBRID_LABEL,
                                               HYBRID_VALUE, MAX_TOKENS, PROMPT, SIDECAR)
from rehearse.commands.verify_gpu.kinds import (CHECK_CLIENT, CHECK_COMPLETION, CHECK_GPU, CHECK_HOST_NETWORK,
                                                CHECK_POD, CHECK_SIDECAR, CLIENT_LOG, CLIENT_PODS)
from rehearse.commands.verify_gpu.parse import Call
from rehearse.run import record as rec
from rehearse.run.outcome import not_read
from rehearse.run.report import FAIL, PASS, SKIP, Check


def gpu_check(settings: dict, nodes_event: Optional[dict], nodes: list[dict],
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


def pod_check(ns: str, app: str, deployment: dict, pods: list[dict],
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


def pod_spec_checks(ns: str, app: str, pods: list[dict]) -> list[Check]:
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


def client_check(events: list[dict], settings: dict, calls: list[Call]) -> Check:
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


def completion_check(settings: dict, completion: Optional[dict]) -> Check:
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
