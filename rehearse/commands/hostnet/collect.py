"""The collector of `python -m rehearse hostnet`; what the command is and does, its --help, is
its face's docstring (command.py). It records what it reads and makes as events (kinds.py);
the analysis (analyse.py) is pure over them, and manifests.py builds what it creates."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Callable, Optional

from rehearse.run.errors import RunError
from rehearse.lab.leader import not_found
from rehearse.lab.nodes import node_view
from rehearse.lab.route_tables import read_route_tables
from rehearse.commands.hostnet.analyse import analyse, client_results, httpd_sources, nginx_sources
from rehearse.commands.hostnet.kinds import (
    NAMESPACE, REHEARSE_LABEL, RUN_LABEL, STACK_LABEL, BUSYBOX, PORT, ECHO_APP, COMPUTE_TYPE,
    HYBRID_TOLERATION, SERVER, HOST_CLIENT, CLOUD_CLIENT, ATTEMPTS, TIMEOUT, POLL_SECONDS, INPUTS,
    NODES, ROUTE_TABLE, ECHO, CREATED, POD, WAIT, LOG, CLEANUP, SWEPT, HOST_TO_POD, HOST_TO_SVC,
    CLOUD_TO_HOST, CHECK, CHECK_CLEANUP, TGW, GATEWAY)
from rehearse.commands.hostnet.manifests import (
    cloud_client_pod, deadline_seconds, host_client_pod, namespace_manifest, server_pod, stack_label)

#: What the face (command.py) hands on to rehearse.cli, and the names the tests read through
#: this module: the kinds (kinds.py), the manifests (manifests.py) and the log parsers
#: (analyse.py) a run is made of.
__all__ = [
    'collect', 'analyse', 'NAMESPACE', 'REHEARSE_LABEL', 'RUN_LABEL', 'STACK_LABEL', 'BUSYBOX',
    'PORT', 'HYBRID_TOLERATION', 'SERVER', 'HOST_CLIENT', 'CLOUD_CLIENT', 'TIMEOUT',
    'CREATED', 'SWEPT', 'HOST_TO_POD', 'HOST_TO_SVC', 'CLOUD_TO_HOST', 'CHECK',
    'CHECK_CLEANUP', 'TGW', 'GATEWAY', 'client_results', 'httpd_sources', 'nginx_sources',
    'deadline_seconds', 'host_client_pod', 'cloud_client_pod']


def _pod_view(pod: dict) -> dict:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec") or {}, pod.get("status") or {}
    return {"name": meta.get("name"), "nodeName": spec.get("nodeName"),
            "hostNetwork": bool(spec.get("hostNetwork")), "phase": status.get("phase"),
            "podIP": status.get("podIP"), "hostIP": status.get("hostIP"),
            "reason": status.get("reason") or next(
                (((c.get("state") or {}).get("waiting") or {}).get("reason")
                 for c in status.get("containerStatuses") or [] if (c.get("state") or {}).get("waiting")), None)}


def _is_hybrid(node: dict) -> bool:
    return (node.get("labels") or {}).get(COMPUTE_TYPE) == "hybrid"


@dataclass(frozen=True)
class _Target:
    """What the probes aim at, read before anything is created."""

    #: The hybrid node (its view) whose host network is probed.
    node: dict
    #: echo-cloud's first Running pod (``pod IP:target port``) and its Service (``cluster IP:port``).
    echo_pod: str
    echo_service: str
    #: Every Running echo-cloud pod, whose logs say where the requests came from.
    echo_pods: list[str]


def collect(ctx: Any, record: Any) -> None:
    outputs = ctx.outputs
    outputs.require_layer("demo", "echo-cloud, the cloud pod the host-network pod requests")
    options = ctx.options
    port = int(options.get("port") or PORT)
    if not 1024 < port < 65536:
        raise RunError(f"--port {port}: choose a port above 1024 (no NET_BIND_SERVICE is given)")
    attempts = max(1, int(options.get("attempts") or ATTEMPTS))
    timeout = float(options.get("timeout") or TIMEOUT)
    demo1 = outputs.get("demo1")
    demo_ns = demo1["namespace"]
    tables = list(outputs.optional("gatewayRouteTableIds") or outputs.optional("cloudPrivateRouteTableIds") or [])
    token = uuid.uuid4().hex[:10]
    record(INPUTS, region=ctx.region, hybridPodCidr=outputs.get("hybridPodCidr"),
           remoteNodeCidr=outputs.optional("remoteNodeCidr"), cloudVpcCidr=outputs.optional("cloudVpcCidr"),
           transitGatewayId=outputs.optional("transitGatewayId"), routeTables=tables,
           demoNamespace=demo_ns, namespace=NAMESPACE, port=port, attempts=attempts,
           timeout=timeout, token=token)
    ctx.progress("reading the nodes and echo-cloud")
    target = _read_target(ctx.kube.client, record, options.get("node"), demo_ns)

    ctx.progress("reading the cloud route tables")
    if tables:
        for table in read_route_tables(ctx.aws("ec2"), tables):
            record(ROUTE_TABLE, **table)

    stack = stack_label(outputs.optional("clusterName") or ctx.outputs.stack)
    bound = {"stack": stack, "deadline": deadline_seconds(timeout)}
    sweep_leftovers(ctx, record, stack, timeout)
    created: list[str] = []
    namespace_created = False
    try:
        ctx.progress(f"creating namespace {NAMESPACE} (privileged: host network) and the probe pods "
                     f"on {target.node['name']} (each ends by itself {bound['deadline']} s after it starts)")
        namespace = namespace_manifest(stack, token)
        _create(ctx, namespace)
        namespace_created = True
        record(CREATED, object="Namespace", name=NAMESPACE, manifest=namespace)
        _probe(ctx, record, target, token, port, attempts, timeout, bound, created)
        ctx.progress("reading the servers' and clients' logs")
        for name in created:
            _read_log(ctx.kube.client, record, NAMESPACE, name, role=name)
        for pod in target.echo_pods:
            _read_log(ctx.kube.client, record, demo_ns, pod, role=ECHO_APP,
                      since=int(timeout * 3) + 60)
    finally:
        _cleanup(ctx, record, created, namespace_created, timeout)


def _read_target(client: Any, record: Any, wanted: Optional[str], demo_ns: str) -> _Target:
    """The nodes (recorded) and the hybrid node to probe; echo-cloud's Service and pods
    (recorded). No Ready hybrid node, no Service or no Running pod stops the run."""
    from lightkube.resources.core_v1 import Node, Pod, Service

    nodes = [node_view(n.to_dict()) for n in client.list(Node)]
    record(NODES, items=nodes)
    hybrid = [n for n in nodes if _is_hybrid(n) and n["ready"] == "True" and n["internalIP"]
              and (not wanted or n["name"] == wanted)]
    if not hybrid:
        raise RunError(f"no Ready hybrid node{' ' + wanted if wanted else ''} with an InternalIP: "
                       "see `kubectl get nodes -l eks.amazonaws.com/compute-type=hybrid -o wide`")
    try:
        service = client.get(Service, ECHO_APP, namespace=demo_ns).to_dict()
    except Exception as error:  # noqa: BLE001 lightkube's ApiError or httpx's
        if not not_found(error):
            raise
        raise RunError(f"no Service {ECHO_APP} in {demo_ns}: deploy the demo layer") from None
    svc_spec = service.get("spec") or {}
    svc_port = next((p.get("port") for p in svc_spec.get("ports") or []), 80)
    echo_pods = [p.to_dict() for p in client.list(Pod, namespace=demo_ns, labels={"app": ECHO_APP})]
    echo_pods = [p for p in echo_pods if (p["metadata"].get("labels") or {}).get("app") == ECHO_APP]
    running = [p for p in echo_pods if (p.get("status") or {}).get("phase") == "Running"
               and (p.get("status") or {}).get("podIP")]
    target_port = next((c.get("containerPort") for c in ((running[0]["spec"].get("containers") or [{}])[0]
                                                          .get("ports") or [])), 8080) if running else 8080
    record(ECHO, namespace=demo_ns, clusterIP=svc_spec.get("clusterIP"), port=svc_port,
           targetPort=target_port, pods=[_pod_view(p) for p in echo_pods])
    if not running:
        raise RunError(f"no Running {ECHO_APP} pod in {demo_ns}: see `kubectl -n {demo_ns} get pods -l app={ECHO_APP}`")
    return _Target(node=hybrid[0], echo_pod=f"{running[0]['status']['podIP']}:{target_port}",
                   echo_service=f"{svc_spec.get('clusterIP')}:{svc_port}",
                   echo_pods=[p["metadata"]["name"] for p in running])


def _probe(ctx: Any, record: Any, target: _Target, token: str, port: int, attempts: int,
           timeout: float, bound: dict, created: list[str]) -> None:
    """Runs the host-network server, then both clients against it and echo-cloud, adding each
    pod to ``created`` as it is made (the caller's cleanup removes them)."""
    node = target.node
    manifest = server_pod(token, node["name"], port, **bound)
    _create(ctx, manifest)
    created.append(SERVER)
    record(CREATED, object="Pod", name=SERVER, manifest=manifest)
    pods, ok = _wait(ctx, record, [SERVER], lambda p: p["phase"] in ("Running", "Succeeded", "Failed"),
                     timeout, "the host-network server to run")
    server_ip = pods[SERVER]["hostIP"] or node["internalIP"]
    if not (ok and pods[SERVER]["phase"] == "Running"):
        return
    clients = [host_client_pod(token, node["name"], target.echo_pod, target.echo_service, attempts,
                               **bound),
               cloud_client_pod(token, server_ip, port, attempts, **bound)]
    for manifest in clients:
        _create(ctx, manifest)
        created.append(manifest["metadata"]["name"])
        record(CREATED, object="Pod", name=manifest["metadata"]["name"], manifest=manifest)
    _wait(ctx, record, [HOST_CLIENT, CLOUD_CLIENT], lambda p: p["phase"] in ("Succeeded", "Failed"),
          timeout, "the clients to finish their requests")


def _is_ours(metadata: dict, stack: str) -> bool:
    labels = metadata.get("labels") or {}
    return labels.get(REHEARSE_LABEL) == "hostnet" and labels.get(STACK_LABEL) == stack


def sweep_leftovers(ctx: Any, record: Any, stack: str, timeout: float) -> None:
    """Removes what an earlier run of this tool against this stack left (a killed run deletes
    nothing): namespace ``NAMESPACE`` only when it carries this tool's and this stack's labels
    and none of its pods is still active, and of its pods only those with both labels. Anything
    else of that name stops the run with one line and is left as it is."""
    from lightkube.resources.core_v1 import Namespace, Pod

    client = ctx.kube.client
    try:
        found = client.get(Namespace, NAMESPACE).to_dict()
    except Exception as error:  # noqa: BLE001 lightkube's ApiError
        if not_found(error):
            return
        raise
    meta = found.get("metadata") or {}
    if not _is_ours(meta, stack):
        raise RunError(f"namespace {NAMESPACE} already exists and is not a leftover of this tool on "
                       f"this stack (labels {REHEARSE_LABEL}=hostnet and {STACK_LABEL}={stack} are "
                       f"not both set): see `kubectl get all -n {NAMESPACE}`; it is left as it is")
    pods = [p.to_dict() for p in client.list(Pod, namespace=NAMESPACE)]
    ours = [p for p in pods if _is_ours(p.get("metadata") or {}, stack)]
    active = [p for p in ours if (p.get("status") or {}).get("phase") in (None, "Pending", "Running")
              and not (p.get("metadata") or {}).get("deletionTimestamp")]
    if active:
        pod = active[0]
        started = (pod.get("status") or {}).get("startTime")
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        ends = (f", which ends by itself {deadline} s after it started at {started}"
                if started and deadline else "")
        raise RunError(f"another hostnet run is still going (run "
                       f"{(meta.get('labels') or {}).get(RUN_LABEL, '?')}: pod {pod['metadata']['name']} "
                       f"{(pod.get('status') or {}).get('phase') or 'Pending'}{ends}): wait for it, or "
                       f"`kubectl delete namespace {NAMESPACE}`")
    ctx.progress(f"removing namespace {NAMESPACE} left by an earlier run "
                 f"({(meta.get('labels') or {}).get(RUN_LABEL, '?')}) and its {len(ours)} pod(s)")
    deleted, failed = [], []
    _delete_pods(client, [pod["metadata"]["name"] for pod in ours], deleted, failed)
    phases = {p["metadata"]["name"]: {"phase": (p.get("status") or {}).get("phase"),
                                      "reason": (p.get("status") or {}).get("reason")} for p in ours}
    gone, interrupted = _delete_namespace(ctx, min(timeout, 60.0), deleted, failed)
    if interrupted is not None:
        raise interrupted
    record(SWEPT, namespace=NAMESPACE, run=(meta.get("labels") or {}).get(RUN_LABEL),
           pods=phases, deleted=deleted, failed=failed, namespaceGone=gone)
    if not gone or failed:
        raise RunError(f"namespace {NAMESPACE}, left by an earlier run, is still there "
                       f"({', '.join(failed) or 'terminating'}): `kubectl get all -n {NAMESPACE}`")


def _delete_pods(client: Any, names: list[str], deleted: list, failed: list) -> None:
    """Deletes each pod on its own: one failure does not keep the rest."""
    from lightkube.resources.core_v1 import Pod

    for name in names:
        try:
            client.delete(Pod, name, namespace=NAMESPACE, grace_period=0)
            deleted.append(f"pod/{name}")
        except Exception as error:  # noqa: BLE001 keep deleting the rest
            (deleted if not_found(error) else failed).append(f"pod/{name}")


def _delete_namespace(ctx: Any, wait: float, deleted: list,
                      failed: list) -> tuple[bool, Optional[BaseException]]:
    """Deletes the namespace and waits at most ``wait`` seconds for it to go: (gone, the
    Ctrl-C that stopped the waiting). The deletion is made before the wait, so a Ctrl-C only
    stops the waiting; the caller decides what to do with it."""
    from lightkube.resources.core_v1 import Namespace

    client = ctx.kube.client
    try:
        client.delete(Namespace, NAMESPACE)
        deleted.append(f"namespace/{NAMESPACE}")
    except Exception as error:  # noqa: BLE001
        (deleted if not_found(error) else failed).append(f"namespace/{NAMESPACE}")
    started = ctx.monotonic()
    while True:
        try:
            client.get(Namespace, NAMESPACE)
        except KeyboardInterrupt as stop:
            return False, stop
        except Exception as error:  # noqa: BLE001 anything but a 404 leaves it unknown
            return not_found(error), None
        if ctx.monotonic() - started >= wait:
            return False, None
        try:
            ctx.sleep(POLL_SECONDS)
        except KeyboardInterrupt as stop:
            return False, stop


def _create(ctx: Any, manifest: dict) -> None:
    """Creates ``manifest``; a refusal (an existing namespace, an admission policy) stops the run
    with one line, after the finally block has removed what was made."""
    from lightkube import ApiError, codecs

    kind, name = manifest["kind"], manifest["metadata"]["name"]
    try:
        ctx.kube.client.create(codecs.from_dict(manifest))
    except Exception as error:  # noqa: BLE001 lightkube's ApiError, or httpx's for a non-JSON answer
        if isinstance(error, ApiError):
            code, message = getattr(error.status, "code", None), getattr(error.status, "message", None)
        elif type(error).__name__ == "HTTPStatusError":
            code, message = error.response.status_code, error.response.text[:300]
        else:
            raise
        if code == 409 and kind == "Namespace":
            raise RunError(f"namespace {NAMESPACE} already exists (a run still going, or one whose "
                           f"cleanup failed): see `kubectl get all -n {NAMESPACE}`, then "
                           f"`kubectl delete namespace {NAMESPACE}`") from None
        if code in (400, 403, 409, 422):
            raise RunError(f"the cluster refused {kind} {name} (HTTP {code}): "
                           f"{message or error}") from None
        raise


def _wait(ctx: Any, record: Any, names: list[str], done: Callable[[dict], bool], timeout: float,
          what: str) -> tuple[dict, bool]:
    from lightkube.resources.core_v1 import Pod

    started = ctx.monotonic()
    last_said = started
    while True:
        pods = {name: _pod_view(ctx.kube.client.get(Pod, name, namespace=NAMESPACE).to_dict())
                for name in names}
        finished = all(done(p) for p in pods.values())
        waited = ctx.monotonic() - started
        if finished or waited >= timeout:
            for pod in pods.values():
                record(POD, **pod)
            record(WAIT, what=what, pods=names, done=finished, seconds=round(waited, 1))
            return pods, finished
        if ctx.monotonic() - last_said >= 10:
            last_said = ctx.monotonic()
            ctx.progress(f"waiting for {what}: " + ", ".join(
                f"{p['name']} {p['phase'] or 'Pending'}{' (' + p['reason'] + ')' if p['reason'] else ''}"
                for p in pods.values()) + f" ({waited:.0f} of {timeout:g} s)")
        ctx.sleep(POLL_SECONDS)


def _read_log(client: Any, record: Any, namespace: str, pod: str, *, role: str,
              since: Optional[int] = None) -> None:
    try:
        lines = [line.rstrip("\n") for line in client.log(pod, namespace=namespace, timestamps=True,
                                                           since=since)]
        error = None
    except Exception as failure:  # noqa: BLE001 a pod that never started has no log
        lines, error = [], f"{type(failure).__name__}: {str(failure).splitlines()[0] if str(failure) else ''}"
    record(LOG, role=role, namespace=namespace, pod=pod, lines=lines[-2000:], error=error)


def _cleanup(ctx: Any, record: Any, pods: list[str], namespace: bool, timeout: float) -> None:
    """Deletes what the run created, each on its own (one failure does not keep the rest), and
    waits a bounded time for the namespace to go."""
    if not pods and not namespace:
        return
    ctx.progress(f"removing the probe pods and namespace {NAMESPACE}")
    deleted, failed = [], []
    _delete_pods(ctx.kube.client, pods, deleted, failed)
    gone, interrupted = True, None
    if namespace:
        gone, interrupted = _delete_namespace(ctx, min(timeout, 60.0), deleted, failed)
    record(CLEANUP, deleted=deleted, failed=failed, namespaceGone=gone)
    if interrupted is not None:
        # The deletions are made: a second Ctrl-C only stops the waiting.
        ctx.progress(f"stopped waiting for namespace {NAMESPACE} to go: "
                     f"`kubectl get namespace {NAMESPACE}`")
        raise interrupted
    if failed or not gone:
        ctx.progress(f"left behind: {', '.join(failed) or 'namespace ' + NAMESPACE + ' (terminating)'}; "
                     f"remove with `kubectl delete namespace {NAMESPACE}`")
