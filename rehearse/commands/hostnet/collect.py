"""The collector of `python -m rehearse hostnet`; what the command is and does, its --help, is
its face's docstring (command.py)."""

from __future__ import annotations

import argparse
import re
import uuid
from typing import Any, Callable, Iterable, Optional

from rehearse.run.arguments import seconds, whole
from rehearse.run.errors import RunError
from rehearse.lab.leader import not_found
from rehearse.lab.nodes import node_view
from rehearse.lab.route_tables import read_route_tables
from rehearse.commands.hostnet.analyse import analyse, client_results, httpd_sources, nginx_sources
from rehearse.commands.hostnet.kinds import (
    NAMESPACE, REHEARSE_LABEL, RUN_LABEL, STACK_LABEL, NAMESPACE_WHY, BUSYBOX,
    UID, PORT, ECHO_APP, COMPUTE_TYPE, HYBRID_TOLERATION, SERVER,
    HOST_CLIENT, CLOUD_CLIENT, ATTEMPTS, REQUEST_TIMEOUT, TIMEOUT, POLL_SECONDS,
    DEADLINE_MARGIN, INPUTS, NODES, ROUTE_TABLE, ECHO, CREATED, POD,
    WAIT, LOG, CLEANUP, SWEPT, HOST_TO_POD, HOST_TO_SVC,
    CLOUD_TO_HOST, CHECK, CHECK_CLEANUP, TGW, GATEWAY)

TITLE = "which path host-network pods take between hybrid and cloud nodes"
#: The command's interface (rehearse.cli), and the names its tests read: the collector's
#: kinds and the analysis live in rehearse.hostnet_kinds and rehearse.hostnet_analysis.
__all__ = [
    'TITLE', 'add_arguments', 'check_inputs', 'collect', 'analyse', 'LAYERS',
    'OUTPUTS', 'NAMESPACE', 'REHEARSE_LABEL', 'RUN_LABEL', 'STACK_LABEL', 'BUSYBOX',
    'PORT', 'HYBRID_TOLERATION', 'SERVER', 'HOST_CLIENT', 'CLOUD_CLIENT', 'TIMEOUT',
    'CREATED', 'SWEPT', 'HOST_TO_POD', 'HOST_TO_SVC', 'CLOUD_TO_HOST', 'CHECK',
    'CHECK_CLEANUP', 'TGW', 'GATEWAY', 'client_results', 'httpd_sources', 'nginx_sources']


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the probes")
    group.add_argument("--node", metavar="NAME", help="the hybrid node to probe (default: the "
                       "first Ready one)")
    group.add_argument("--port", type=int, default=PORT, metavar="PORT",
                       help=f"the host-network server's port, above 1024 (default {PORT}: the "
                            "hybrid hosts' security group admits it from the cloud VPC)")
    group.add_argument("--attempts", type=whole(1), default=ATTEMPTS, metavar="N",
                       help=f"requests per probe (default {ATTEMPTS})")
    group.add_argument("--timeout", type=seconds(1.0), default=TIMEOUT, metavar="SECONDS",
                       help=f"how long to wait for the pods to run and finish (default {TIMEOUT:g})")


# --- the pods -------------------------------------------------------------------------------

def stack_label(name: Any) -> str:
    """A label value for the stack's cluster name (at most 63 of [A-Za-z0-9._-], alphanumeric
    at both ends)."""
    text = re.sub(r"[^A-Za-z0-9._-]", "-", str(name or "unknown"))[:63].strip("._-")
    return text or "unknown"


def deadline_seconds(timeout: float) -> int:
    """Every probe pod's activeDeadlineSeconds: the run waits at most ``timeout`` for the server
    and ``timeout`` again for the clients, then reads the logs; past that the pods serve no run."""
    return int(2 * timeout + DEADLINE_MARGIN)


def namespace_manifest(stack: str = "unknown", token: str = "") -> dict:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NAMESPACE,
        "labels": {REHEARSE_LABEL: "hostnet", STACK_LABEL: stack,
                   **({RUN_LABEL: token} if token else {}),
                   "pod-security.kubernetes.io/enforce": "privileged",
                   "pod-security.kubernetes.io/warn": "restricted",
                   "pod-security.kubernetes.io/audit": "restricted"},
        "annotations": {"eks-hybrid-lab.io/why": NAMESPACE_WHY}}}


def container_security() -> dict:
    """Exactly what every container gets: nothing more is needed to serve on a high port or to
    connect out, even in the host's network namespace."""
    return {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID, "privileged": False,
            "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def pod_security() -> dict:
    return {"runAsNonRoot": True, "runAsUser": UID, "runAsGroup": UID,
            "seccompProfile": {"type": "RuntimeDefault"}}


def _pod(name: str, token: str, script: str, *, host_network: bool, node: Optional[str],
         volumes: bool = False, stack: str = "unknown", deadline: int = deadline_seconds(TIMEOUT)) -> dict:
    container: dict[str, Any] = {
        "name": name, "image": BUSYBOX, "command": ["/bin/sh", "-c", script],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                      "limits": {"cpu": "100m", "memory": "32Mi"}},
        "securityContext": container_security()}
    spec: dict[str, Any] = {
        "restartPolicy": "Never", "activeDeadlineSeconds": int(deadline),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False, "terminationGracePeriodSeconds": 1,
        "securityContext": pod_security(), "containers": [container]}
    if host_network:
        spec["hostNetwork"] = True
        # By the node's name (a hybrid node's hostname label need not be its name).
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}}
        spec["tolerations"] = [HYBRID_TOLERATION]
    else:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": COMPUTE_TYPE, "operator": "NotIn", "values": ["hybrid"]}]}]}}}
    if volumes:
        container["volumeMounts"] = [{"name": "www", "mountPath": "/www"}]
        spec["volumes"] = [{"name": "www", "emptyDir": {"sizeLimit": "1Mi"}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": NAMESPACE,
        "labels": {REHEARSE_LABEL: "hostnet", STACK_LABEL: stack, RUN_LABEL: token, "app": name}},
        "spec": spec}


def _requests(label: str, urls: Iterable[tuple[str, str]], attempts: int) -> str:
    """``attempts`` times each URL; one line per request: ``<label> <probe> ok|FAIL``."""
    body = "; ".join(
        f'if wget -q -T {REQUEST_TIMEOUT} -O /dev/null "{url}"; then r=ok; else r=FAIL; fi; '
        f'echo "{label} {probe} $r"' for probe, url in urls)
    return f"for i in $(seq {attempts}); do {body}; sleep 1; done; echo done"


def server_pod(token: str, node: str, port: int, **bound: Any) -> dict:
    path = f"/www/hostnet-{token}"
    script = f"echo {token} > {path} && exec httpd -f -vv -p {port} -h /www"
    return _pod(SERVER, token, script, host_network=True, node=node, volumes=True, **bound)


def host_client_pod(token: str, node: str, pod_ip: str, service: str, attempts: int,
                    **bound: Any) -> dict:
    urls = [(HOST_TO_POD, f"http://{pod_ip}/?rehearse-hostnet={token}-{HOST_TO_POD}"),
            (HOST_TO_SVC, f"http://{service}/?rehearse-hostnet={token}-{HOST_TO_SVC}")]
    return _pod(HOST_CLIENT, token, _requests("client", urls, attempts), host_network=True, node=node,
                **bound)


def cloud_client_pod(token: str, node_ip: str, port: int, attempts: int, **bound: Any) -> dict:
    urls = [(CLOUD_TO_HOST, f"http://{node_ip}:{port}/hostnet-{token}")]
    return _pod(CLOUD_CLIENT, token, _requests("client", urls, attempts), host_network=False, node=None,
                **bound)


# --- collector ------------------------------------------------------------------------------

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


#: What collect reads from the stack, checked before a run starts (rehearse.inputs).
LAYERS = (("demo", "echo-cloud, the cloud pod the host-network pod requests"),)
OUTPUTS = ("demo1", "hybridPodCidr")


def check_inputs(given: Any) -> None:
    port = int(given.options.get("port") or PORT)
    if not 1024 < port < 65536:
        raise RunError(f"--port {port}: choose a port above 1024 (no NET_BIND_SERVICE is given) "
                       "and below 65536")
    demo1 = given.outputs.get("demo1")
    if not isinstance(demo1, dict) or not demo1.get("namespace"):
        raise RunError(f"{given.outputs.origin}: the output demo1 names no namespace: run "
                       f"`pulumi up` with this version of the lab{given.outputs.rewrite()}")


def collect(ctx: Any, record: Any) -> None:
    from lightkube.resources.core_v1 import Node, Pod, Service

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
    client = ctx.kube.client

    ctx.progress("reading the nodes and echo-cloud")
    nodes = [node_view(n.to_dict()) for n in client.list(Node)]
    record(NODES, items=nodes)
    wanted = options.get("node")
    hybrid = [n for n in nodes if _is_hybrid(n) and n["ready"] == "True" and n["internalIP"]
              and (not wanted or n["name"] == wanted)]
    if not hybrid:
        raise RunError(f"no Ready hybrid node{' ' + wanted if wanted else ''} with an InternalIP: "
                       "see `kubectl get nodes -l eks.amazonaws.com/compute-type=hybrid -o wide`")
    node = hybrid[0]
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
    echo = running[0]

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
                     f"on {node['name']} (each ends by itself {bound['deadline']} s after it starts)")
        namespace = namespace_manifest(stack, token)
        _create(ctx, namespace)
        namespace_created = True
        record(CREATED, object="Namespace", name=NAMESPACE, manifest=namespace)
        manifest = server_pod(token, node["name"], port, **bound)
        _create(ctx, manifest)
        created.append(SERVER)
        record(CREATED, object="Pod", name=SERVER, manifest=manifest)
        pods, ok = _wait(ctx, record, [SERVER], lambda p: p["phase"] in ("Running", "Succeeded", "Failed"),
                         timeout, "the host-network server to run")
        server_ip = pods[SERVER]["hostIP"] or node["internalIP"]
        if ok and pods[SERVER]["phase"] == "Running":
            clients = [host_client_pod(token, node["name"], f"{echo['status']['podIP']}:{target_port}",
                                       f"{svc_spec.get('clusterIP')}:{svc_port}", attempts, **bound),
                       cloud_client_pod(token, server_ip, port, attempts, **bound)]
            for manifest in clients:
                _create(ctx, manifest)
                created.append(manifest["metadata"]["name"])
                record(CREATED, object="Pod", name=manifest["metadata"]["name"], manifest=manifest)
            _wait(ctx, record, [HOST_CLIENT, CLOUD_CLIENT], lambda p: p["phase"] in ("Succeeded", "Failed"),
                  timeout, "the clients to finish their requests")
        ctx.progress("reading the servers' and clients' logs")
        for name in created:
            _read_log(client, record, NAMESPACE, name, role=name)
        for pod in running:
            _read_log(client, record, demo_ns, pod["metadata"]["name"], role=ECHO_APP,
                      since=int(timeout * 3) + 60)
    finally:
        _cleanup(ctx, record, created, namespace_created, timeout)


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
