"""The collector of `python -m rehearse verify gpu`; what the command is and does, its --help, is
its face's docstring (command.py)."""

from __future__ import annotations

import datetime
import math
from typing import Any

from rehearse.run import record as rec
from rehearse.run.errors import RunError, first_line, status_code
from rehearse.commands.verify_gpu.demo import (CALL_TIMEOUT_SECONDS, DEFAULT_MIN_CALLS, DEFAULT_MIN_SUCCESS_RATE,
                                               DEFAULT_NAMES, DEFAULT_WINDOW_MINUTES, GPU_LABEL, GPU_RESOURCE,
                                               HYBRID_LABEL, MAX_TOKENS, PROMPT)
from rehearse.commands.verify_gpu.kinds import (CLIENT_LOG, CLIENT_PODS, COMPLETION, DEPLOYMENT, NODES, POD_EVENTS,
                                                SERVER_PODS, SETTINGS)


def names_from_outputs(outputs: Any) -> dict[str, Any]:
    """The stack's ``demo3`` block with defaults filled in; a stack without it cannot run demo 3."""
    demo3 = outputs.optional("demo3")
    if not demo3:
        if outputs.layers and "demo" not in outputs.layers:
            raise RunError(f"{outputs.origin} has no demo layer and no GPU host (no "
                           "output demo3): set upToLayer to demo and `pulumi config set "
                           f"gpuEnabled true`, then run `pulumi up`{outputs.rewrite()}")
        raise RunError(f"{outputs.origin} has no GPU host (no output demo3): "
                       "`pulumi config set gpuEnabled true` and run `pulumi up` (about 15 min: "
                       f"the host joins, then the ~10 GB vLLM image is pulled){outputs.rewrite()}")
    names = {**DEFAULT_NAMES, **{k: v for k, v in demo3.items() if v is not None}}
    names["namespace"] = demo3.get("namespace") or "demo-gpu"
    return names


def collect(ctx: Any, record: Any) -> None:
    from lightkube.resources.apps_v1 import Deployment
    from lightkube.resources.core_v1 import Event, Node, Pod

    names = names_from_outputs(ctx.outputs)
    ns = names["namespace"]
    window = float(ctx.options.get("window") or DEFAULT_WINDOW_MINUTES)
    since_seconds = math.ceil(window * 60)
    now = ctx.clock()
    record(SETTINGS, namespace=ns, deployment=names["deployment"], service=names["service"],
           port=int(names["port"]), client_deployment=names["clientDeployment"],
           model=names.get("model"), gpu_allocatable_command=names.get("gpuAllocatable"),
           window_minutes=window,
           window_start=rec.iso(now - datetime.timedelta(seconds=since_seconds)),
           min_success_rate=float(_option(ctx, "min_success_rate", DEFAULT_MIN_SUCCESS_RATE)),
           min_calls=int(_option(ctx, "min_calls", DEFAULT_MIN_CALLS)))
    client = ctx.kube.client

    ctx.progress("reading the nodes")
    record(NODES, nodes=[node_summary(n.to_dict()) for n in client.list(Node)])

    ctx.progress(f"reading {ns}/{names['deployment']}, its pods and their events")
    deployment = _get_or_none(client, Deployment, names["deployment"], ns)
    record(DEPLOYMENT, name=names["deployment"], found=deployment is not None,
           **(deployment_summary(deployment.to_dict()) if deployment is not None else {}))
    server = _pods(client, Pod, ns, names["deployment"])
    record(SERVER_PODS, selector=f"app={names['deployment']}",
           pods=[pod_summary(p) for p in server])
    for pod in server:
        name = pod["metadata"]["name"]
        listed = client.list(Event, namespace=ns,
                             fields={"involvedObject.kind": "Pod", "involvedObject.name": name})
        events = [event_summary(e.to_dict()) for e in listed
                  if (e.involvedObject.name, e.involvedObject.kind or "Pod") == (name, "Pod")]
        record(POD_EVENTS, pod=name, events=events)

    ctx.progress(f"reading the cloud client's log over the last {window:g} min")
    clients = _pods(client, Pod, ns, names["clientDeployment"])
    record(CLIENT_PODS, selector=f"app={names['clientDeployment']}",
           pods=[pod_summary(p) for p in clients])
    for pod in clients:
        name = pod["metadata"]["name"]
        containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        container = "client" if "client" in containers else (containers[0] if containers else None)
        try:
            lines = [line.rstrip("\n") for line in client.log(
                name, namespace=ns, container=container, timestamps=True, since=since_seconds)]
        except Exception as error:  # noqa: BLE001 a container not started yet answers 400
            if not _is_http_error(error):
                raise
            # ``since_seconds`` is the field as recorded (replays read it); the API's own
            # parameter is ``sinceSeconds``, which lightkube's ``since`` sends.
            record(CLIENT_LOG, pod=name, container=container, since_seconds=since_seconds,
                   lines=[], error=first_line(error))
            continue
        record(CLIENT_LOG, pod=name, container=container, since_seconds=since_seconds,
               lines=lines)

    _complete(ctx, record, names, deployment)


def _complete(ctx: Any, record: Any, names: dict[str, Any], deployment: Any) -> None:
    """One completion through the vLLM Service (the API server's service proxy), as the cloud
    client asks it; recorded skipped when neither the stack nor the Deployment names a model."""
    import httpx2

    ns = names["namespace"]
    model = names.get("model") or (deployment_summary(deployment.to_dict()).get("model")
                                   if deployment is not None else None)
    path = (f"/api/v1/namespaces/{ns}/services/{names['service']}:{names['port']}"
            "/proxy/v1/completions")
    if not model:
        record(COMPLETION, path=path, skipped="no model name: neither the stack's demo3 output "
               f"nor Deployment {names['deployment']} names one")
        return
    body = {"model": model, "prompt": PROMPT, "max_tokens": MAX_TOKENS}
    ctx.progress(f"asking vLLM for one completion through Service {names['service']}:"
                 f"{names['port']} (up to {CALL_TIMEOUT_SECONDS} s)")
    started = ctx.monotonic()
    try:
        status, text = ctx.kube.post_raw(path, body, timeout=CALL_TIMEOUT_SECONDS)
    except httpx2.TimeoutException as error:
        record(COMPLETION, path=path, request=body, status=None, body="",
               seconds=round(ctx.monotonic() - started, 3),
               error=f"no answer in {CALL_TIMEOUT_SECONDS} s ({type(error).__name__})")
        return
    record(COMPLETION, path=path, request=body, status=status, body=text[:4000],
           seconds=round(ctx.monotonic() - started, 3))


def _option(ctx: Any, key: str, default: Any) -> Any:
    value = ctx.options.get(key)
    return default if value is None else value


def _pods(client: Any, pod_type: Any, namespace: str, app: str) -> list[dict]:
    """The pods labelled app=<app>: the selector is sent, and applied here again (a server that
    ignores it must not widen the list)."""
    found = [p.to_dict() for p in client.list(pod_type, namespace=namespace, labels={"app": app})]
    return sorted((p for p in found if (p["metadata"].get("labels") or {}).get("app") == app),
                  key=lambda p: p["metadata"]["name"])


def _get_or_none(client: Any, resource: Any, name: str, namespace: str) -> Any:
    try:
        return client.get(resource, name, namespace=namespace)
    except Exception as error:  # noqa: BLE001 lightkube's ApiError, or httpx's for a bare 404
        if status_code(error) == 404:
            return None
        raise


def _is_http_error(error: BaseException) -> bool:
    code = status_code(error)
    return code is not None and 400 <= code < 600


def node_summary(node: dict) -> dict:
    labels = node.get("metadata", {}).get("labels") or {}
    status = node.get("status") or {}
    ready = next((c.get("status") == "True" for c in status.get("conditions") or []
                  if c.get("type") == "Ready"), False)
    return {"name": node["metadata"]["name"],
            "labels": {k: labels[k] for k in (GPU_LABEL, HYBRID_LABEL,
                                              "node.kubernetes.io/instance-type") if k in labels},
            "gpu_allocatable": (status.get("allocatable") or {}).get(GPU_RESOURCE),
            "gpu_capacity": (status.get("capacity") or {}).get(GPU_RESOURCE),
            "ready": ready,
            "unschedulable": bool((node.get("spec") or {}).get("unschedulable"))}


def deployment_summary(deployment: dict) -> dict:
    spec = deployment.get("spec") or {}
    status = deployment.get("status") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    args = (containers[0].get("args") or []) if containers else []
    model = args[args.index("--model") + 1] if "--model" in args[:-1] else None
    return {"replicas": spec.get("replicas"), "ready_replicas": status.get("readyReplicas") or 0,
            "strategy": (spec.get("strategy") or {}).get("type"), "model": model}


def pod_summary(pod: dict) -> dict:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    return {
        "name": pod["metadata"]["name"],
        "node": spec.get("nodeName"),
        "phase": status.get("phase"),
        "ready": any(c.get("type") == "Ready" and c.get("status") == "True"
                     for c in status.get("conditions") or []),
        "deleting": bool(pod["metadata"].get("deletionTimestamp")),
        "host_network": bool(spec.get("hostNetwork")),
        "containers": [c["name"] for c in spec.get("containers") or []],
        "init_containers": [c["name"] for c in spec.get("initContainers") or []],
        "images": {c["name"]: c.get("image") for c in spec.get("containers") or []},
        "restarts": {c["name"]: c.get("restartCount", 0) for c in statuses},
        "states": {c["name"]: c.get("state") or {} for c in statuses},
        "last_states": {c["name"]: c.get("lastState") or {} for c in statuses if c.get("lastState")},
        "conditions": [{k: c.get(k) for k in ("type", "status", "reason", "message",
                                              "lastTransitionTime")}
                       for c in status.get("conditions") or []],
        "created": pod["metadata"].get("creationTimestamp"),
    }


def event_summary(event: dict) -> dict:
    source = event.get("source") or {}
    return {"reason": event.get("reason"), "type": event.get("type"),
            "message": event.get("message"), "count": event.get("count"),
            "first": event.get("firstTimestamp"), "last": event.get("lastTimestamp"),
            "event_time": event.get("eventTime"),
            "from": source.get("component") or event.get("reportingComponent"),
            "host": source.get("host")}
