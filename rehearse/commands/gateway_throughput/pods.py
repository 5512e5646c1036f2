"""The measurement pods of `python -m rehearse gateway-throughput`: an iperf3 server and client
that meet Pod Security "restricted", each bounded in time, created and deleted by name."""

from __future__ import annotations

from typing import Any, Optional

from rehearse.commands.gateway_throughput.kinds import LABEL, LABEL_VALUE, POD_CREATED, POD_DELETED
from rehearse.run.errors import first_line, status_code

#: iperf3 3.16 on Alpine, whose image runs as a non-root user (``USER iperf``, michellabbe/
#: docker-iperf3's Dockerfile). Pinned by version tag only, since the project records no digest
#: of it: pin it with ``crane digest docker.io/mlabbe/iperf3:3.16-r0`` and append
#: ``@sha256:...``, or pass ``--image`` with a digest. iperf3 needs no capability: it
#: listens on 5201 (above 1024) and uses plain TCP sockets.
IMAGE = "docker.io/mlabbe/iperf3:3.16-r0"
PORT = 5201
#: Any UID works: iperf3 reads no file of the image's user; it writes its buffer file in /tmp
#: (``/tmp/iperf3.XXXXXX``), an emptyDir here since the root filesystem is read-only.
RUN_AS = 10001
HYBRID_KEY, HYBRID_VALUE = "eks.amazonaws.com/compute-type", "hybrid"
POLL_SECONDS = 2.0


def pod_manifest(name: str, namespace: str, *, on_hybrid: bool, args: list[str], image: str,
                 deadline_seconds: int, role: str) -> dict:
    expression = {"key": HYBRID_KEY, "operator": "In" if on_hybrid else "NotIn",
                  "values": [HYBRID_VALUE]}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "activeDeadlineSeconds": int(deadline_seconds),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [expression]}]}}},
        "containers": [{
            "name": "iperf3", "image": image, "args": args,
            "ports": [{"containerPort": PORT, "protocol": "TCP"}] if role == "server" else [],
            "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                                "readOnlyRootFilesystem": True, "runAsNonRoot": True,
                                "capabilities": {"drop": ["ALL"]},
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                          "limits": {"cpu": "2", "memory": "256Mi"}},
            "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}]}],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
    }
    if on_hybrid:
        spec["tolerations"] = [{"key": HYBRID_KEY, "operator": "Equal", "value": HYBRID_VALUE,
                                "effect": "NoSchedule"}]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {LABEL: LABEL_VALUE, "eks-hybrid-lab.io/role": role}},
            "spec": spec}


def server_args() -> list[str]:
    # One test, then the server exits (the pod Succeeds).
    return ["-s", "-1", "-p", str(PORT)]


def client_args(server_ip: str, seconds: int, streams: int) -> list[str]:
    return ["-c", server_ip, "-p", str(PORT), "-t", str(seconds), "-P", str(streams),
            "--connect-timeout", "5000", "--json"]


class Pods:
    """Creates the measurement pods and remembers them, to delete every one by name."""

    def __init__(self, ctx: Any, record: Any, namespace: str):
        self.ctx, self.record, self.ns = ctx, record, namespace
        self.created: list[str] = []
        self.serial = 0

    def name(self, role: str, where: str) -> str:
        self.serial += 1
        stamp = self.ctx.clock().strftime("%H%M%S")
        return f"rehearse-iperf3-{stamp}-{self.serial}-{role}-{where}"

    def create(self, manifest: dict) -> None:
        from lightkube.resources.core_v1 import Pod

        name = manifest["metadata"]["name"]
        self.ctx.kube.client.create(Pod.from_dict(manifest), namespace=self.ns)
        self.created.append(name)
        self.record(POD_CREATED, name=name, namespace=self.ns, spec=manifest["spec"],
                    labels=manifest["metadata"]["labels"])

    def delete_all(self) -> None:
        from lightkube.resources.core_v1 import Pod

        while self.created:
            name = self.created.pop(0)
            try:
                self.ctx.kube.client.delete(Pod, name, namespace=self.ns, grace_period=0)
                self.record(POD_DELETED, name=name, ok=True)
            except Exception as error:  # noqa: BLE001 recorded; the next pod is still deleted
                gone = status_code(error) == 404
                self.record(POD_DELETED, name=name, ok=gone,
                            **({} if gone else {"error": first_line(error)}))

    def read(self, name: str) -> Optional[dict]:
        from lightkube.resources.core_v1 import Pod

        try:
            return self.ctx.kube.client.get(Pod, name, namespace=self.ns).to_dict()
        except Exception as error:  # noqa: BLE001 lightkube's ApiError
            if status_code(error) == 404:
                return None
            raise

    def wait(self, name: str, done: Any, seconds: float) -> Optional[dict]:
        """Polls the pod until ``done(pod)`` or ``seconds`` pass: the last pod seen."""
        deadline = self.ctx.monotonic() + seconds
        while True:
            pod = self.read(name)
            if pod is not None and done(pod):
                return pod
            if self.ctx.monotonic() >= deadline:
                return pod
            self.ctx.sleep(POLL_SECONDS)


def phase(pod: Optional[dict]) -> Optional[str]:
    return ((pod or {}).get("status") or {}).get("phase")


def why(pod: Optional[dict]) -> str:
    if pod is None:
        return "the pod is gone"
    status = pod.get("status") or {}
    parts = [f"phase {status.get('phase') or 'unknown'}"]
    for c in status.get("conditions") or []:
        if c.get("status") != "True" and c.get("message"):
            parts.append(f"{c.get('type')}: {c['message']}")
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting")
        if waiting:
            parts.append(f"waiting: {waiting.get('reason')}")
    return ", ".join(parts)
