"""What ``hostnet`` creates: its privileged namespace and its three busybox pods (the
host-network server, the host-network client, the cloud client), each bounded in time and
least privileged, and labelled so the next run can tell its leftovers (pure: manifests)."""

from __future__ import annotations

import re
from typing import Any, Iterable, Optional

from rehearse.commands.hostnet.kinds import (
    BUSYBOX, CLOUD_CLIENT, CLOUD_TO_HOST, COMPUTE_TYPE, DEADLINE_MARGIN, HOST_CLIENT,
    HOST_TO_POD, HOST_TO_SVC, HYBRID_TOLERATION, NAMESPACE, NAMESPACE_WHY, REHEARSE_LABEL,
    REQUEST_TIMEOUT, RUN_LABEL, SERVER, STACK_LABEL, TIMEOUT, UID)


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
