"""Which path do host-network pods take between hybrid and cloud nodes
(docs/demo-guide.md#open-questions)?

Three probes, each judged from what the server saw, never from what was meant:

- a host-network pod on a hybrid node requests an ``echo-cloud`` pod by its pod IP, and
- the ``echo-cloud`` ClusterIP Service by its cluster IP (a host-network pod resolves no Service
  names): echo-cloud's nginx logs the address each request came from;
- a short-lived cloud pod requests a host-network busybox ``httpd -f -vv`` on the same hybrid
  node by the node's IP: with ``-v`` httpd names each request's peer (``<ip>:<port>:
  response:200``; ``-vv`` adds ``<ip>:<port>: url:<path>``).

A source address that is the hybrid node's own IP means node to node across the Transit Gateway
(the VPC routes the remote node CIDR to it); one in the hybrid pod CIDR means through the
gateway (Cilium's VTEP, VXLAN to the leader, whose ENI the VPC routes the pod CIDR to). The
route each reply or request followed in the cloud route tables (longest prefix) is read with
DescribeRouteTables and shown beside it. The expectation is the lab's reachability model
(``offline/reachability.py``) and docs/networking.md#where-a-hybrid-pods-packets-come-from: a host-network pod has the node's address, so
both ways go node to node across the Transit Gateway; only pod-CIDR addresses use the gateway.

Host-network pods cannot meet Pod Security "baseline", let alone "restricted": they run in their
own namespace ``rehearse-hostnet``, labelled ``enforce: privileged`` and annotated why, with the
least privilege that works (non-root, every capability dropped, no privilege escalation,
read-only root, RuntimeDefault seccomp, a port above 1024). The port defaults to 9443: the
hybrid hosts' security group admits from the cloud VPC only the kubelet's 10250 and the webhook
port 9443 (``components/hybrid_hosts.py``), so any other port is dropped before the server sees
it (``--port`` changes it; a FAIL then says so). The namespace and the pods are deleted when the
run ends, also when it fails or is interrupted.

A run that is killed (SIGKILL, a closed laptop) deletes nothing, so the cluster bounds the pods'
life too: each has ``activeDeadlineSeconds`` (``deadline_seconds``), and at that deadline the
kubelet stops its containers and marks it Failed, reason ``DeadlineExceeded`` (kubernetes
``pkg/kubelet/active_deadline.go``, counted from the pod's ``status.startTime``). The host-network
server's port is then free; the Failed pod objects and the namespace stay (nothing expires a
namespace). So the namespace and every pod carry labels only this tool sets — ``REHEARSE_LABEL:
hostnet`` and ``STACK_LABEL: <the stack's cluster>`` — and the next run removes such a
namespace (``sweep_leftovers``) when none of its pods is still active. A namespace of that name
without both labels, or with a pod still running (another run going on), is never touched.
"""

from __future__ import annotations

import argparse
import ipaddress
import re
import uuid
from typing import Any, Callable, Iterable, Optional

from rehearse.arguments import seconds, whole
from rehearse.errors import RunError
from rehearse.gateway import ROUTE_TABLE, _collect_route_tables, _node_view
from rehearse.leader import not_found
from rehearse.record import RUN_STARTED, every, first
from rehearse.outcome import ending, not_read
from rehearse.report import FAIL, PASS, Chart, Check, Report

TITLE = "which path host-network pods take between hybrid and cloud nodes"

NAMESPACE = "rehearse-hostnet"
#: The label every object the tool creates carries (and the namespace ``=hostnet``).
REHEARSE_LABEL = "eks-hybrid-lab.io/rehearse"
#: The run's token: in the pods' labels, and in every request path, so the servers' logs show
#: this run's requests and no one else's.
RUN_LABEL = "eks-hybrid-lab.io/rehearse-run"
#: Whose leftovers they are: the stack's cluster name (a namespace of another cluster's run, or
#: of someone else, is never removed).
STACK_LABEL = "eks-hybrid-lab.io/stack"
NAMESPACE_WHY = (
    "Created by `python -m rehearse hostnet` for a few minutes, then deleted: hostNetwork pods "
    "are forbidden by Pod Security baseline and restricted, so this namespace enforces "
    "privileged; its pods still run non-root with every capability dropped, no privilege "
    "escalation, a read-only root and RuntimeDefault seccomp.")
#: Pinned as the demos pin it (components/demos.py BUSYBOX).
BUSYBOX = ("busybox:1.37.0@sha256:"
           "9db7b59979c38555a39def84a31fb98b5296952f9e3afd4f6f11f05b07adfab0")
#: nobody: no passwd entry needed by httpd or wget.
UID = 65534
#: The hybrid hosts' security group admits TCP 9443 (WEBHOOK_PORT) and 10250 from the cloud VPC.
PORT = 9443
ECHO_APP = "echo-cloud"
COMPUTE_TYPE = "eks.amazonaws.com/compute-type"
HYBRID_TOLERATION = {"key": COMPUTE_TYPE, "operator": "Equal", "value": "hybrid", "effect": "NoSchedule"}

SERVER, HOST_CLIENT, CLOUD_CLIENT = "hostnet-server", "hostnet-client", "cloud-client"

ATTEMPTS = 3
REQUEST_TIMEOUT = 3
#: Seconds to wait for the pods to run, and for the clients to finish.
TIMEOUT = 180.0
POLL_SECONDS = 2.0
#: Beyond the two waits: creating the pods and reading four logs.
DEADLINE_MARGIN = 60

# Event kinds.
INPUTS = "hostnet.inputs"
NODES = "kube.nodes"
ECHO = "hostnet.echo_cloud"
CREATED = "hostnet.created"
POD = "hostnet.pod"
WAIT = "hostnet.wait"
LOG = "hostnet.log"
CLEANUP = "hostnet.cleanup"
SWEPT = "hostnet.leftovers_removed"

# Probes (direction keys) and their checks.
HOST_TO_POD, HOST_TO_SVC, CLOUD_TO_HOST = "hostToCloudPod", "hostToCloudService", "cloudToHost"
CHECK = {HOST_TO_POD: "hybrid host network → cloud pod",
         HOST_TO_SVC: "hybrid host network → ClusterIP Service",
         CLOUD_TO_HOST: "cloud pod → hybrid host network"}
CHECK_CLEANUP = "namespace and pods removed"

TGW, GATEWAY = "node to node across the Transit Gateway", "through the gateway (VXLAN to the leader)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("the probes")
    group.add_argument("--node", metavar="NAME", help="the hybrid node to probe (default: the "
                       "first Ready one)")
    group.add_argument("--port", type=whole(1025, 65535, "no NET_BIND_SERVICE is given"), default=PORT,
                       metavar="PORT",
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
    nodes = [_node_view(n.to_dict()) for n in client.list(Node)]
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
        _collect_route_tables(ctx.aws("ec2"), tables, record)

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


# --- analysis -------------------------------------------------------------------------------

#: echo-cloud's nginx (the image's ``main`` format): ``<remote_addr> - - [...] "GET <path> ..."``.
_NGINX = re.compile(r'^(?:\S+Z\s+)?(?P<ip>[0-9a-fA-F:.]+) - \S+ \[[^\]]*\] "(?:GET|HEAD) (?P<path>\S+)')
#: busybox httpd -v/-vv: ``<ip>:<port>: url:<path>`` or ``[<ipv6>]:<port>: response:200``.
_HTTPD = re.compile(r'^(?:\S+Z\s+)?(?:\[(?P<ip6>[0-9a-fA-F:.]+)\]|(?P<ip4>[0-9.]+)):\d+: '
                    r'(?P<what>url|response):(?P<value>\S+)')
_CLIENT = re.compile(r'^(?:\S+Z\s+)?client (?P<probe>\w+) (?P<result>ok|FAIL)\s*$')


def nginx_sources(lines: Iterable[str], marker: str) -> list[str]:
    """The peer address of every request whose path carries ``marker``."""
    return [m["ip"] for m in map(_NGINX.match, lines) if m and marker in m["path"]]


def httpd_sources(lines: Iterable[str], marker: str) -> list[str]:
    """The peer address of every request for a path carrying ``marker`` (an IPv4-mapped IPv6
    peer, as httpd listening on ``::`` names it, is given as IPv4)."""
    found = []
    for m in map(_HTTPD.match, lines):
        if m and m["what"] == "url" and marker in m["value"]:
            ip = m["ip4"] or m["ip6"]
            found.append(ip.removeprefix("::ffff:"))
    return found


def client_results(lines: Iterable[str], probe: str) -> tuple[int, int]:
    results = [m["result"] for m in map(_CLIENT.match, lines) if m and m["probe"] == probe]
    return results.count("ok"), results.count("FAIL")


def _in(address: Optional[str], cidr: Optional[str]) -> bool:
    try:
        return bool(address and cidr) and ipaddress.ip_address(address) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


def route_for(tables: list[dict], address: str) -> list[str]:
    """Per route table, the route ``address`` takes (longest prefix), as text."""
    shown = []
    for table in tables:
        best = None
        for route in table.get("routes") or []:
            cidr = route.get("DestinationCidrBlock")
            if cidr and _in(address, cidr) and (best is None or ipaddress.ip_network(cidr).prefixlen
                                                  > ipaddress.ip_network(best["DestinationCidrBlock"]).prefixlen):
                best = route
        if best is None:
            shown.append(f"{table['id']}: no route for {address}")
            continue
        target = (best.get("TransitGatewayId") or best.get("NetworkInterfaceId") or best.get("GatewayId")
                  or best.get("NatGatewayId") or best.get("InstanceId") or "?")
        shown.append(f"{table['id']}: {best['DestinationCidrBlock']} → {target} ({best.get('State', '?')})")
    return shown


def route_kind(tables: list[dict], address: str) -> set[str]:
    kinds = set()
    for text in route_for(tables, address):
        kinds.add("tgw" if "→ tgw-" in text else "eni" if "→ eni-" in text else
                  "local" if "→ local" in text else "none" if "no route" in text else "other")
    return kinds


class _Run:
    def __init__(self, events: list[dict]):
        self.started = first(events, RUN_STARTED) or {}
        self.inputs = first(events, INPUTS) or {}
        self.nodes = {n["name"]: n for n in (first(events, NODES) or {}).get("items", [])}
        self.echo = first(events, ECHO) or {}
        self.tables = list(every(events, ROUTE_TABLE))
        self.pods = {e["name"]: e for e in every(events, POD)}
        self.created = {e["name"]: e for e in every(events, CREATED)}
        self.logs: dict[str, list[dict]] = {}
        for event in every(events, LOG):
            self.logs.setdefault(event["role"], []).append(event)
        self.waits = list(every(events, WAIT))
        self.cleanup = first(events, CLEANUP)
        self.events = events
        #: The path each probe's traffic took, as its check names it (the chart draws them).
        self.paths: dict[str, str] = {}

    def lines(self, role: str) -> list[str]:
        return [line for e in self.logs.get(role, []) for line in e.get("lines", [])]

    def node_of_ip(self, ip: str) -> Optional[str]:
        return next((n["name"] for n in self.nodes.values() if n.get("internalIP") == ip), None)


def _classify_from_hybrid(run: _Run, source: str, node_ip: Optional[str]) -> tuple[str, str]:
    """(path, why) for a request from the hybrid host network, by the source the server saw."""
    pod_cidr = run.inputs.get("hybridPodCidr")
    if source == node_ip:
        return TGW, f"the hybrid node's own IP {source}"
    if _in(source, pod_cidr):
        return GATEWAY, f"{source}, in the hybrid pod CIDR {pod_cidr}"
    if _in(source, run.inputs.get("remoteNodeCidr")):
        return TGW, f"{source}, another address in the remote node CIDR {run.inputs['remoteNodeCidr']}"
    return "unexplained", f"{source}, neither the node's IP nor in {pod_cidr}"


def _reply_route(run: _Run, address: str) -> tuple[str, set[str]]:
    routes = route_for(run.tables, address)
    return "; ".join(routes), route_kind(run.tables, address)


def _check_from_host(run: _Run, probe: str) -> Check:
    name = CHECK[probe]
    token = run.inputs.get("token", "?")
    ns = run.inputs.get("demoNamespace", "demo-gateway")
    server = run.pods.get(SERVER) or {}
    node = server.get("nodeName")
    node_ip = server.get("hostIP") or (run.nodes.get(node) or {}).get("internalIP")
    target = (f"echo-cloud pod {next((p['podIP'] for p in run.echo.get('pods', []) if p.get('podIP')), '?')}"
              if probe == HOST_TO_POD else f"Service echo-cloud {run.echo.get('clusterIP')}:{run.echo.get('port')}")
    command = f"kubectl -n {ns} logs -l app={ECHO_APP} --since=10m | grep {token}-{probe}"
    if HOST_CLIENT not in run.created:
        return Check(name, FAIL, "not probed: the host-network server never ran on the hybrid node "
                     f"({_pod_state(server)})", _not_running_fix(server), command)
    ok, failed = client_results(run.lines(HOST_CLIENT), probe)
    sources = nginx_sources(run.lines(ECHO_APP), f"{token}-{probe}")
    said = f"{HOST_CLIENT} on {node} ({node_ip}) → {target}: {ok} ok, {failed} FAIL"
    if not sources:
        return Check(name, FAIL, said + "; echo-cloud logged none of these requests",
                     "the host network of a hybrid node reaches cloud pods over the Transit Gateway "
                     "with the node's address: the cluster security group must admit the remote node "
                     "CIDR on echo-cloud's port 8080 (stacks/layers/demo.py admit_remote_networks), and "
                     "the on-prem route table must send the VPC CIDR to the Transit Gateway", command)
    return _verdict(run, probe, said, _from_hybrid(run, sources, node_ip), command)


def _from_hybrid(run: _Run, sources: list[str], node_ip: Optional[str]) -> tuple[str, str, bool]:
    paths = []
    for source in dict.fromkeys(sources):
        path, why = _classify_from_hybrid(run, source, node_ip)
        routes, kinds = _reply_route(run, source)
        consistent = (path == TGW and kinds <= {"tgw"}) or (path == GATEWAY and kinds <= {"eni"})
        paths.append((path, f"the server saw {why}; its reply follows {routes or 'no route table read'}"
                      + ("" if consistent or not run.tables else " — which does not match that path")))
    found = {p for p, _ in paths}
    path = found.pop() if len(found) == 1 else "mixed: " + ", ".join(sorted({p for p, _ in paths}))
    return path, "; ".join(text for _, text in paths), path == TGW


def _check_to_host(run: _Run) -> Check:
    name = CHECK[CLOUD_TO_HOST]
    token = run.inputs.get("token", "?")
    port = run.inputs.get("port", PORT)
    server = run.pods.get(SERVER) or {}
    node = server.get("nodeName")
    node_ip = server.get("hostIP") or (run.nodes.get(node) or {}).get("internalIP")
    # The server pod is gone after the run (its log is in events.jsonl): the route stays.
    command = _routes_command(run)
    if CLOUD_CLIENT not in run.created:
        return Check(name, FAIL, "not probed: the host-network server never ran on the hybrid node "
                     f"({_pod_state(server)})", _not_running_fix(server), command)
    client = run.pods.get(CLOUD_CLIENT) or {}
    ok, failed = client_results(run.lines(CLOUD_CLIENT), CLOUD_TO_HOST)
    said = (f"{CLOUD_CLIENT} (pod {client.get('podIP')} on {client.get('nodeName')}) → "
            f"{node_ip}:{port} (host network of {node}): {ok} ok, {failed} FAIL")
    sources = httpd_sources(run.lines(SERVER), f"hostnet-{token}")
    if not sources:
        fix = ("the hybrid hosts' security group admits from the cloud VPC only TCP 10250 and 9443 "
               "(components/hybrid_hosts.py): run again with `--port 9443`" if port != PORT else
               "the cloud route tables must send the remote node CIDR to the Transit Gateway, and the "
               "hybrid hosts' security group admit TCP 9443 from the cloud VPC "
               "(components/hybrid_hosts.py); is another host-network process on the node using the "
               f"port? (`kubectl -n {NAMESPACE} logs {SERVER}` says so while the run lasts)")
        return Check(name, FAIL, said + "; the server logged none of these requests", fix, command)
    routes, kinds = _reply_route(run, node_ip or "")
    path = TGW if kinds == {"tgw"} else GATEWAY if kinds == {"eni"} else "unexplained"
    seen = []
    for source in dict.fromkeys(sources):
        if source == client.get("podIP"):
            seen.append(f"the cloud pod's own IP {source} (not SNATed)")
        elif source == client.get("hostIP"):
            seen.append(f"the cloud node's IP {source} (the VPC CNI SNATs pods' traffic to "
                        "addresses outside the VPC that AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS does not list)")
        elif _in(source, run.inputs.get("hybridPodCidr")):
            seen.append(f"{source}, in the hybrid pod CIDR (not a cloud address)")
            path = "unexplained"
        else:
            owner = run.node_of_ip(source)
            seen.append(f"{source}" + (f" (node {owner})" if owner else ", an address the run cannot place"))
    evidence = (f"the server saw {', '.join(seen)}; the request to {node_ip} follows "
                f"{routes or 'no route table read'}")
    if not run.tables:
        path = "not determined (no route table read)"
    return _verdict(run, CLOUD_TO_HOST, said, (path, evidence, path == TGW), command)


def _routes_command(run: _Run) -> str:
    tables = " ".join(t["id"] for t in run.tables) or "<cloud route table ids>"
    return (f"aws ec2 describe-route-tables --region {run.inputs.get('region', '<region>')} "
            f"--route-table-ids {tables} --query 'RouteTables[].Routes[].[DestinationCidrBlock,"
            f"TransitGatewayId,NetworkInterfaceId,State]' --output table")


def _verdict(run: _Run, probe: str, said: str, found: tuple[str, str, bool], command: str) -> Check:
    name, (path, evidence, expected) = CHECK[probe], found
    run.paths[probe] = path
    seen = f"{said}. Path: {path} — {evidence}. Expected: {TGW} (a host-network pod has the node's address)"
    if expected:
        return Check(name, PASS, seen, command=command)
    return Check(name, FAIL, seen,
                 "the lab's reachability model (offline/reachability.py) and docs/networking.md send the "
                 "hybrid node CIDR over the Transit Gateway and only pod-CIDR addresses through the "
                 "gateway: this cluster does otherwise — tell the presenter, and record it in "
                 "docs/networking.md and the model", command)


def _pod_state(pod: dict) -> str:
    if not pod:
        return "not created"
    return f"{pod.get('name')} {pod.get('phase') or 'Pending'}" + (f", {pod['reason']}" if pod.get("reason") else "")


def _not_running_fix(pod: dict) -> str:
    return (f"see `kubectl -n {NAMESPACE} describe pod {SERVER}` while the run lasts: a host-network "
            "pod needs the hybrid node's taint tolerated and its port free on the node; an admission "
            "policy (Kyverno) may refuse hostNetwork even in a privileged namespace")


def _check_cleanup(run: _Run) -> Check:
    command = f"kubectl get namespace {NAMESPACE}"
    made = [f"{'namespace' if e['object'] == 'Namespace' else 'pod'}/{e['name']}" for e in run.created.values()]
    if run.cleanup is None and not made:
        return not_read(CHECK_CLEANUP, "a cleanup: nothing was created", run.events, command)
    if run.cleanup is None:
        # Something this run created may still be there: a verdict on the cluster, with its fix.
        return Check(CHECK_CLEANUP, FAIL, "no cleanup was recorded after creating " + ", ".join(made),
                     f"`kubectl delete namespace {NAMESPACE}`", command)
    left = [m for m in made if m not in run.cleanup.get("deleted", [])] + list(run.cleanup.get("failed", []))
    if left or not run.cleanup.get("namespaceGone", True):
        return Check(CHECK_CLEANUP, FAIL, "left behind: " + (", ".join(dict.fromkeys(left)) or
                                                              f"namespace {NAMESPACE} still terminating"),
                     f"`kubectl delete namespace {NAMESPACE}`", command)
    return Check(CHECK_CLEANUP, PASS, f"deleted {', '.join(run.cleanup['deleted'])}; the namespace is gone",
                 command=command)


def analyse(events: list[dict]) -> Report:
    run = _Run(events)
    checks = [_check_from_host(run, HOST_TO_POD), _check_from_host(run, HOST_TO_SVC),
              _check_to_host(run), _check_cleanup(run)]
    if ending(events) is not None and run.cleanup is None:
        # The logs the probe checks read are collected just before the cleanup.
        checks[:3] = [c if c.status == PASS else not_read(c.name, "the probe pods' logs", events, c.command)
                      for c in checks[:3]]
    notes = [
        "Evidence, not assumption: each path is named from the source address the server logged "
        "(echo-cloud's nginx for the requests from the hybrid host network; busybox `httpd -vv` on "
        "the hybrid host network for the cloud pod's) and the cloud route table's longest-prefix "
        "route for the hybrid-side address.",
        f"The probe pods ran in namespace {NAMESPACE} (Pod Security enforce: privileged, because "
        "hostNetwork is forbidden by baseline), non-root, every capability dropped, no privilege "
        "escalation, read-only root, RuntimeDefault seccomp, and were deleted after the run.",
    ]
    deadline = next((e["manifest"]["spec"].get("activeDeadlineSeconds") for e in run.created.values()
                     if e.get("object") == "Pod"), None)
    if deadline:
        notes.append(f"Each probe pod had activeDeadlineSeconds {deadline}: had this run been killed "
                     "before its cleanup, the kubelet would have stopped the host-network server "
                     "that long after it started (phase Failed, DeadlineExceeded), and the next run "
                     f"removes namespace {NAMESPACE} by its labels ({REHEARSE_LABEL}=hostnet, "
                     f"{STACK_LABEL}=<the stack's cluster>).")
    swept = first(run.events, SWEPT)
    if swept:
        states = ", ".join(f"{name} {v.get('phase') or 'Pending'}" + (f" ({v['reason']})" if v.get("reason") else "")
                           for name, v in sorted((swept.get("pods") or {}).items()))
        notes.append(f"Before probing, removed the leftovers of an earlier run ({swept.get('run') or '?'}) "
                     f"that did not clean up: {', '.join(swept.get('deleted') or []) or 'nothing'}"
                     + (f" — its pods were {states}" if states else "") + ".")
    for wait in run.waits:
        if not wait.get("done"):
            notes.append(f"Gave up waiting for {wait['what']} after {wait['seconds']:g} s.")
    chart = Chart("hostnet-paths", "Host-network traffic: the path each direction took", {
        "tgw": TGW, "gateway": GATEWAY,
        "paths": [{"label": CHECK[p], "path": run.paths.get(p), "status": c.status} for p, c in zip(CHECK, checks)]})
    return Report(command="hostnet", stack=run.started.get("stack", "?"), started=run.started.get("at", "?"),
                  title="Host-network pods: the path between hybrid and cloud nodes", checks=checks,
                  notes=notes, charts=[chart])
