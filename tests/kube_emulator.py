"""A Kubernetes API emulator on 127.0.0.1 for the rehearsal tools: kmock's KubernetesEmulator
(REFERENCE §10), run on a background thread because the tools' client is synchronous.

Its caveats, which the tools must not depend on: it ignores label and field selectors (the
tools filter what they list themselves), sets no resourceVersion, speaks plain HTTP, and knows
no subresources but what a test declares — pod logs and the pod proxy are declared per pod with
``log`` and ``proxy``.

``emulator`` is the fixture; ``Emulator.endpoint`` is what ``rehearse.connection.Kube.connect``
takes.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from typing import Any, Callable, Optional

import pytest

from rehearse.connection import Endpoint

#: API paths of the resources the tools read, as kmock names them (group/version/plural).
PODS, NODES, LEASES = "v1/pods", "v1/nodes", "coordination.k8s.io/v1/leases"
CONFIGMAPS, EVENTS = "v1/configmaps", "v1/events"
DAEMONSETS, DEPLOYMENTS = "apps/v1/daemonsets", "apps/v1/deployments"
REPLICASETS = "apps/v1/replicasets"
VTEP_CONFIGS = "cilium.io/v2/ciliumvtepconfigs"
#: The version upstream Cilium serves the CRD at; the tools fall back to it.
VTEP_CONFIGS_V2ALPHA1 = "cilium.io/v2alpha1/ciliumvtepconfigs"
#: Demo 2: the burst Deployment's ReplicaSets, Karpenter's NodePools and NodeClaims, Kyverno's
#: ClusterPolicies, and the SubjectAccessReviews the tools POST (``access_reviews``).
REPLICASETS = "apps/v1/replicasets"
NODEPOOLS, NODECLAIMS = "karpenter.sh/v1/nodepools", "karpenter.sh/v1/nodeclaims"
CLUSTERPOLICIES = "kyverno.io/v1/clusterpolicies"
SUBJECT_ACCESS_REVIEWS = "authorization.k8s.io/v1/subjectaccessreviews"

_KINDS = {PODS: ("v1", "Pod"), NODES: ("v1", "Node"), LEASES: ("coordination.k8s.io/v1", "Lease"),
          CONFIGMAPS: ("v1", "ConfigMap"), EVENTS: ("v1", "Event"),
          DAEMONSETS: ("apps/v1", "DaemonSet"), DEPLOYMENTS: ("apps/v1", "Deployment"),
          REPLICASETS: ("apps/v1", "ReplicaSet"),
          VTEP_CONFIGS: ("cilium.io/v2", "CiliumVTEPConfig"),
          VTEP_CONFIGS_V2ALPHA1: ("cilium.io/v2alpha1", "CiliumVTEPConfig"),
          REPLICASETS: ("apps/v1", "ReplicaSet"), NODEPOOLS: ("karpenter.sh/v1", "NodePool"),
          NODECLAIMS: ("karpenter.sh/v1", "NodeClaim"), CLUSTERPOLICIES: ("kyverno.io/v1", "ClusterPolicy"),
          SUBJECT_ACCESS_REVIEWS: ("authorization.k8s.io/v1", "SubjectAccessReview")}


def _summary(kmock: Any) -> list[tuple[str, str]]:
    return [(str(r.method.value if hasattr(r.method, "value") else r.method).upper(), r.url.path)
            for r in kmock._requests]


class Emulator:
    def __init__(self) -> None:
        self._served: list[tuple[str, str]] = []
        #: Pod logs by path, answered by one reaction per path (``log``).
        self._logs: dict[str, bytes] = {}
        self._ready: "queue.Queue[Any]" = queue.Queue()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None
        self.url = ""
        #: The API server's clock, for its ``Date`` header (None: this machine's), so a test on
        #: a simulated clock gets the answers a real server on that clock would give.
        self.server_clock: Optional[Callable[[], Any]] = None
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        started = self._ready.get(timeout=20)
        if isinstance(started, BaseException):
            raise started
        self.kmock = started

    def _serve(self) -> None:
        async def main() -> None:
            import kmock

            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            _date_from(self)
            try:
                async with kmock.KubernetesEmulator() as emulator, kmock.Server(emulator) as server:
                    self.url = str(server.url).rstrip("/")
                    self._ready.put(emulator)
                    await self._stop.wait()
            except BaseException as error:  # noqa: BLE001 reported to the test thread
                self._ready.put(error)

        asyncio.run(main())

    def do(self, action: Callable[[Any], Any]) -> Any:
        """Runs ``action(kmock)`` on the emulator's own thread (its objects are not thread-safe)."""
        async def call() -> Any:
            return action(self.kmock)

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(timeout=10)

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(server=self.url, certificate_authority=None, token=None)

    # --- planting ---------------------------------------------------------------------------

    def put(self, resource: str, namespace: Optional[str], name: str, obj: dict) -> dict:
        """Stores ``obj`` as ``resource/namespace/name``, with apiVersion, kind and metadata
        filled in as the API server would."""
        api_version, kind = _KINDS[resource]
        metadata = {**obj.get("metadata", {}), "name": name}
        if namespace:
            metadata["namespace"] = namespace
        full = {"apiVersion": api_version, "kind": kind, **obj, "metadata": metadata}

        def store(kmock: Any) -> None:
            self._trim(kmock)
            kmock.objects[resource, namespace, name] = full

        self.do(store)
        return full

    def delete(self, resource: str, namespace: Optional[str], name: str) -> None:
        def remove(kmock: Any) -> None:
            del kmock.objects[resource, namespace, name]

        self.do(remove)

    def declare(self, *resources: str) -> None:
        """Serves ``resources`` even with no object in them (an installed CRD lists ``[]``;
        undeclared, the emulator answers 404 as for a CRD that is not installed)."""
        def declare(kmock: Any) -> None:
            for resource in resources:
                kmock.resources[resource].kind = _KINDS[resource][1]

        self.do(declare)

    def access_reviews(self, decide: Callable[[dict], tuple[bool, str]]) -> None:
        """Answers ``POST .../subjectaccessreviews`` as the API server's authorizer would:
        ``decide(spec)`` -> (allowed, reason). A review is not stored (the emulator would refuse
        the next one as a duplicate of an object without a name)."""
        import json

        def declare(kmock: Any) -> None:
            kmock.resources[SUBJECT_ACCESS_REVIEWS].kind = "SubjectAccessReview"

            def answer(request: Any) -> bytes:
                try:
                    del kmock.objects[SUBJECT_ACCESS_REVIEWS, None, None]
                except KeyError:
                    pass
                body = request.data
                allowed, reason = decide(body.get("spec") or {})
                return json.dumps({**body, "status": {"allowed": allowed, "reason": reason}}).encode()

            kmock[f"post /apis/{SUBJECT_ACCESS_REVIEWS}"] << answer

        self.do(declare)

    def get(self, resource: str, namespace: Optional[str], name: str) -> Optional[dict]:
        """The stored object (as the tools last wrote it), or None."""
        def read(kmock: Any) -> Optional[dict]:
            try:
                stored = kmock.objects[resource, namespace, name]
            except KeyError:
                return None
            return None if stored.deleted else stored.raw

        return self.do(read)

    def log(self, namespace: str, pod: str, text: str) -> None:
        """What ``GET .../pods/<pod>/log`` answers (the tools ask for ``timestamps=true``). A
        later call replaces the text, as a new pod of the same name has a log of its own."""
        path = f"/api/v1/namespaces/{namespace}/pods/{pod}/log"

        def declare(kmock: Any) -> None:
            known = path in self._logs
            self._logs[path] = text.encode()
            if not known:
                kmock[f"get {path}"] << (lambda request: self._logs[path])

        self.do(declare)

    def proxy(self, namespace: str, pod: str, port: int, path: str, body: bytes,
              status: int = 200) -> None:
        """What the API server's pod proxy answers for ``<pod>:<port>/<path>``."""
        def declare(kmock: Any) -> None:
            import kmock as km

            url = f"get /api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy/{path.lstrip('/')}"
            kmock[url] << (km.Response(status=status, payload=body) if status != 200 else body)

        self.do(declare)

    def kubelet_deadlines(self, now: "datetime.datetime") -> list[str]:
        """What each kubelet does to a pod past its ``activeDeadlineSeconds`` (kubernetes
        ``pkg/kubelet/active_deadline.go``): counted from ``status.startTime`` on the kubelet's
        clock (``now`` here), a pod not yet started is left alone; a pod past it has its
        containers stopped and is marked phase Failed, reason DeadlineExceeded. The pod object
        stays until someone deletes it. Returns the names of the pods it failed."""
        import datetime as _datetime

        def enforce(kmock: Any) -> list[str]:
            failed = []
            for key in list(kmock.objects.keys()):
                if key[0] != PODS:
                    continue
                stored = kmock.objects[key]
                if stored.deleted:
                    continue
                pod = stored.raw
                spec, status = pod.get("spec") or {}, pod.get("status") or {}
                deadline, started = spec.get("activeDeadlineSeconds"), status.get("startTime")
                if deadline is None or not started or status.get("phase") in ("Succeeded", "Failed"):
                    continue
                start = _datetime.datetime.fromisoformat(started.replace("Z", "+00:00"))
                if now - start < _datetime.timedelta(seconds=int(deadline)):
                    continue
                stopped = [{"name": c.get("name"), "image": c.get("image"), "imageID": "",
                            "ready": False, "restartCount": 0,
                            "state": {"terminated": {"exitCode": 137, "reason": "Error"}}}
                           for c in spec.get("containers") or []]
                kmock.objects[key] = {**pod, "status": {
                    **status, "phase": "Failed", "reason": "DeadlineExceeded",
                    "message": "Pod was active on the node longer than the specified deadline",
                    "containerStatuses": stopped}}
                failed.append(key[2])
            return failed

        return self.do(enforce)

    def requests(self) -> list[tuple[str, str]]:
        """(METHOD, path) of every request served so far, in order."""
        return self.do(lambda kmock: self._served + _summary(kmock))

    def _trim(self, kmock: Any) -> None:
        # kmock matches each request against everything it has kept, so a long run slows down
        # quadratically: keep (method, path) here instead, and let kmock forget.
        self._served.extend(_summary(kmock))
        kmock._requests.clear()

    def close(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=10)


def _date_from(server: "Emulator") -> None:
    """aiohttp writes each answer's ``Date`` from ``rfc822_formatted_time``: from the emulator's
    ``server_clock`` when a test sets one (this process runs one emulator at a time)."""
    import email.utils

    from aiohttp import web_response

    real = getattr(web_response, "_real_rfc822", web_response.rfc822_formatted_time)
    web_response._real_rfc822 = real

    def formatted() -> str:
        if server.server_clock is None:
            return real()
        return email.utils.format_datetime(server.server_clock(), usegmt=True)

    web_response.rfc822_formatted_time = formatted


@pytest.fixture
def emulator():
    server = Emulator()
    try:
        yield server
    finally:
        server.close()
