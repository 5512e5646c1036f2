"""A Kubernetes API emulator on 127.0.0.1 for the rehearsal tools: kmock's KubernetesEmulator
run on a background thread because the tools' client is synchronous.

It answers as a real kube-apiserver does for every request the tools make that both can answer:
tests/test_emulator_contract.py sends each to both and compares, and what kmock answered
otherwise is served here by tests/kube_api_rules.py (errors as the API server's Status objects,
a resource not served as its plain-text 404, lists filtered by label and field selectors and in
the server's order, 201 for a create, a pod deleted gracefully stays Terminating, ...).

Its caveats, which the tools must not depend on: it speaks plain HTTP; it has no controllers
(nothing schedules, scales or finishes a deletion but what a test plays; a deleted Namespace goes
at once, where the namespace controller takes seconds); resourceVersions are a counter of writes
and objects carry none; and it knows no kubelet and no pod network: a pod's log and its proxy
answer what a test declares per pod (``log``, ``proxy``), else what the API server answers when
its dial fails.

``emulator`` is the fixture; ``Emulator.endpoint`` is what ``rehearse.lab.connection.Kube.connect``
takes.
"""

from __future__ import annotations

import asyncio
import functools
import queue
import threading
from typing import Any, Callable, Optional

import pytest

from rehearse.lab.connection import Endpoint
from tests import eks_tokens
from tests import kube_api_rules as rules

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
NAMESPACES, SERVICES = "v1/namespaces", "v1/services"

_KINDS = {PODS: ("v1", "Pod"), NODES: ("v1", "Node"), LEASES: ("coordination.k8s.io/v1", "Lease"),
          CONFIGMAPS: ("v1", "ConfigMap"), EVENTS: ("v1", "Event"),
          DAEMONSETS: ("apps/v1", "DaemonSet"), DEPLOYMENTS: ("apps/v1", "Deployment"),
          REPLICASETS: ("apps/v1", "ReplicaSet"),
          VTEP_CONFIGS: ("cilium.io/v2", "CiliumVTEPConfig"),
          VTEP_CONFIGS_V2ALPHA1: ("cilium.io/v2alpha1", "CiliumVTEPConfig"),
          REPLICASETS: ("apps/v1", "ReplicaSet"), NODEPOOLS: ("karpenter.sh/v1", "NodePool"),
          NODECLAIMS: ("karpenter.sh/v1", "NodeClaim"), CLUSTERPOLICIES: ("kyverno.io/v1", "ClusterPolicy"),
          SUBJECT_ACCESS_REVIEWS: ("authorization.k8s.io/v1", "SubjectAccessReview"),
          NAMESPACES: ("v1", "Namespace"), SERVICES: ("v1", "Service")}


@functools.lru_cache(maxsize=None)
def resource_key(resource: str) -> Any:
    """``resource`` (one of the names above) as kmock keys its objects. ``kmock.objects``
    parses a string key on every access, and the parse is slow (kmock's resource class is a
    runtime-checkable Protocol, checked by isinstance); a parsed key is taken as it is."""
    import kmock

    return kmock.resource(resource)


def status_object(code: int, reason: str, message: str) -> dict:
    """The ``Status`` a real API server answers a refused request with."""
    status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
              "message": message, "code": code}
    if reason:
        status["reason"] = reason
    return status


def json_body(obj: Any) -> bytes:
    import json

    return json.dumps(obj).encode()


def status_response(code: int, reason: str, message: str) -> Any:
    """That Status as kmock sends it, with the API server's exact content type (lightkube
    raises ApiError only for exactly ``application/json``)."""
    import json

    import kmock as km

    return km.Response(status=code, payload=json.dumps(status_object(code, reason, message)).encode(),
                       headers={"Content-Type": "application/json"})


def _sees(view: Any, request: Any, known: Optional[dict] = None, facts: Any = None) -> bool:
    """``request in view`` for the request being served, as kmock's ``View.__contains__``
    answers it, without its walk: kmock iterates the view over every request the root has
    kept, applying each filter's criteria to each, to find this one by identity. For the
    chains the emulator declares (a root, filters, priorities) membership of one request is
    that request's own answers: the root holds it and every filter's criteria accept it,
    checked from the root outwards as kmock's iteration does. Any other view (slices, groups,
    streams, exclusions) is asked kmock's way.

    ``known`` remembers, for a chain whose every criteria read nothing but a request's
    ``facts`` (``_facts``, ``_by_facts``), the criteria's answer by those facts: the same
    path, method and query are judged the same way every time. A chain with any other
    criteria (a callable, headers, a body) is asked for each request. The root's holding of
    this request is checked every time."""
    import kmock

    kind = type(view)
    if known is not None and (kind is kmock.Filter or kind is kmock.Priority):
        root = _fact_root(view, known)
        if root is not None:
            # The entry holds the view, so its id names no other view while it is kept.
            entry = known.get((id(view), facts))
            if entry is None or entry[0] is not view:
                entry = known[id(view), facts] = (view, _criteria_accept(view, request))
            return entry[1] and _sees(root, request)
    if kind is kmock.Filter:
        return _sees(view._source, request, known, facts) and bool(view.criteria(request))
    if kind is kmock.Priority:
        return _sees(view._source, request, known, facts)
    if isinstance(view, kmock.Root) and kind.__iter__ is kmock.Root.__iter__:
        return any(kept is request for kept in reversed(view._requests))
    return request in view


def _fact_root(view: Any, known: dict) -> Any:
    """The plain root under a chain of filters and priorities whose criteria are all
    ``_by_facts``; None for any other chain. Remembered in ``known`` by view."""
    import kmock

    entry = known.get(id(view))
    if entry is not None and entry[0] is view:
        return entry[1]
    root, below = None, view
    while True:
        kind = type(below)
        if kind is kmock.Filter and _by_facts(below.criteria) or kind is kmock.Priority:
            below = below._source
            continue
        if isinstance(below, kmock.Root) and kind.__iter__ is kmock.Root.__iter__:
            root = below
        break
    known[id(view)] = (view, root)
    return root


def _criteria_accept(view: Any, request: Any) -> bool:
    """Whether every filter's criteria in the chain accept the request, from the root
    outwards."""
    import kmock

    if type(view) is kmock.Filter:
        return _criteria_accept(view._source, request) and bool(view.criteria(request))
    if type(view) is kmock.Priority:
        return _criteria_accept(view._source, request)
    return True


def _by_facts(criteria: Any) -> bool:
    """Whether kmock's ``criteria`` read only a request's ``_facts``: Kubernetes criteria
    (method, action, resource, subresource, namespace, name) and HTTP criteria on method, path
    and query alone."""
    from kmock._internal import filtering

    kind = type(criteria)
    if kind is filtering.K8sCriteria:
        return True
    return kind is filtering.HTTPCriteria and all(
        getattr(criteria, field) is ... for field in ("text", "body", "data", "cookies", "headers"))


def _facts(request: Any) -> tuple:
    """What ``_by_facts`` criteria read of a request."""
    return (request.method, request.url.path, tuple(request.params.items()), request.action,
            request.resource, request.subresource, request.namespace, request.name)


def _remembering_kmock() -> None:
    """Two things kmock works out anew for each request, worked out once instead: a
    callable's signature (``inspect.signature``, to know whether to pass it the request — a
    reaction's or a criteria's callable keeps its signature) and the resource a request's
    path names (``references.resource``, a frozen value: the same path gives an equal one,
    and kmock's resource checks compare values). kmock sees the same ``inspect`` and
    ``references`` otherwise."""
    import inspect
    import types
    import weakref

    from kmock._internal import filtering, references, rendering

    signatures: "weakref.WeakKeyDictionary[Any, inspect.Signature]" = weakref.WeakKeyDictionary()

    def signature(fn: Any) -> inspect.Signature:
        try:
            return signatures[fn]
        except (KeyError, TypeError):  # TypeError: not weakly referable, asked each time
            pass
        found = inspect.signature(fn)
        try:
            signatures[fn] = found
        except TypeError:
            pass
        return found

    resource = functools.lru_cache(maxsize=4096)(references.resource)
    remembering_inspect = types.SimpleNamespace(**{**vars(inspect), "signature": signature})
    rendering.inspect = filtering.inspect = remembering_inspect
    rendering.references = types.SimpleNamespace(**{**vars(references), "resource": resource})


@functools.lru_cache(maxsize=None)
def _kubernetes_emulator() -> Any:
    """kmock's KubernetesEmulator, serving each request as kmock's ``RawHandler._handle``
    does — the reactions by priority, the first whose view holds the request and that is not
    depleted answers — at the cost of one check per reaction rather than one per reaction per
    kept request (``_sees``), and with the order by priority kept until a reaction is added
    rather than sorted anew for each request. The class sits between kmock's scaffold and
    RawHandler, so the emulator's own object bookkeeping runs unchanged around it."""
    import kmock
    from kmock._internal import rendering
    from kmock._internal.k8s import KubernetesObjectConflictError

    _remembering_kmock()
    rules.namespaces_as_a_resource()

    class Matching(kmock.RawHandler):
        _order: tuple[tuple[Any, ...], list[Any]] = ((), [])
        #: The answers of criteria that read only a request's facts (see _sees).
        _known: Optional[dict] = None

        def _ordered(self) -> list[Any]:
            payloads = tuple(self._payloads)
            known, order = self._order
            if len(known) == len(payloads) and all(a is b for a, b in zip(known, payloads)):
                return order
            # kmock's ordering: pad the priority tuples to one length with zeros, sort
            # descending, stable for equal priorities (declaration order).
            priorities = [payload.priorities for payload in payloads]
            width = max((len(p) for p in priorities), default=0)
            keys = [tuple(-p for p in priority) + (0,) * (width - len(priority))
                    for priority in priorities]
            order = [payloads[i] for i in sorted(range(len(keys)), key=lambda i: keys[i])]
            self._order = (payloads, order)
            return order

        async def _handle(self, request: Any) -> Any:
            if self._known is None:
                self._known = {}
            known, facts = self._known, _facts(request)
            for payload in self._ordered():
                if _sees(payload._source, request, known, facts) and not payload._disabled.is_set():
                    try:
                        return await payload(request)
                    except rendering.ReactionMismatchError:
                        payload._disabled.set()
                    except NotImplementedError:
                        pass
            raise NotImplementedError(
                'Undefined server behaviour: no reaction matching the request is defined. '
                'Consider adding a catch-all fallback reaction: `kmock.fallback << 404`.')

    class Emulated(kmock.KubernetesEmulator, Matching):
        _declared: tuple[tuple[Any, ...], list[Any]] = ((), [])

        def _declared_resources(self) -> list[Any]:
            # KubernetesScaffold's _get_resources: the resources declared (kmock.resources) or
            # named by a reaction's filter, worked out again only when a reaction or a
            # declaration is added, not for each request (kmock walks every reaction's
            # filters for each list).
            known = (*self._payloads, None, *self._resources)
            if len(known) != len(self._declared[0]) or not all(
                    a is b for a, b in zip(known, self._declared[0])):
                self._declared = (known, kmock.KubernetesScaffold._get_resources(self))
            return self._declared[1]

        def _get_resources(self) -> list[Any]:
            # KubernetesEmulator's: the declared resources and those of the stored objects.
            result = set(self._declared_resources())
            for resource, _, _ in self._objects:
                result.add(resource)
            return list(result)

        def _serves(self, request: Any) -> bool:
            # Whether the API server serves the resource: a built-in one always; a custom one
            # when declared (its CRD installed) or one of its objects is stored.
            return (request.resource.group in rules.BUILT_IN_GROUPS
                    or any(resource == request.resource for resource in self._declared_resources())
                    or any(resource == request.resource for resource, _, _ in self._objects))

        def _live(self, request: Any, namespace: Any, name: str) -> Optional[dict]:
            for (resource, ns, stored_name), obj in self._objects.items():
                if resource == request.resource and ns == namespace and stored_name == name \
                        and not obj.deleted:
                    return obj.raw
            return None

        def _stored(self, resource: str, namespace: Any, name: str) -> Optional[dict]:
            try:
                obj = self._objects[resource_key(resource), namespace, name]
            except KeyError:
                return None
            return None if obj.deleted else obj.raw

        #: The API server's clock (the Emulator's server_clock), for the times it writes.
        clock: Callable[[], Any] = staticmethod(lambda: None)

        def _now(self) -> Any:
            import datetime

            return self.clock() or datetime.datetime.now(datetime.timezone.utc)

        async def _handle(self, request: Any) -> Any:
            # The answers a real kube-apiserver gives where kmock's differ (tests/kube_api_rules.py,
            # found by tests/test_emulator_contract.py).
            resource = request.resource
            if request.action is kmock.action.CREATE and isinstance(request.data, dict):
                rules.on_create(resource.plural, request.data, self._now())
            elif request.action is kmock.action.DELETE and request.name and \
                    resource.plural == "pods" and not request.subresource:
                graceful = self._graceful_delete(request)
                if graceful is not None:
                    return graceful
            elif request.action is kmock.action.UPDATE and request.name and not request.subresource:
                stored = self._live(request, request.namespace, request.name)
                if stored is not None and isinstance(request.data, dict):
                    rules.on_update(stored, request.data)
            try:
                answer = await super()._handle(request)
            except kmock.KubernetesObjectNotFoundError:
                return rules.answer(404, rules.not_found(resource.plural, resource.group,
                                                    rules.base_name(request.name)))
            except KubernetesObjectConflictError:
                name = ((request.data or {}).get("metadata") or {}).get("name")
                return rules.answer(409, rules.already_exists(resource.plural, resource.group, name))
            except kmock.KubernetesEndpointNotFoundError:
                if resource is not None and (request.subresource or "").startswith("proxy"):
                    return rules.answer(*self._proxy_answer(request))
                raise
            if request.action in (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE):
                self._version = getattr(self, "_version", 1) + 1
            return rules.as_written(answer)

        def _graceful_delete(self, request: Any) -> Any:
            # A pod bound to a node is deleted gracefully (pkg/registry/core/pod strategy
            # CheckGracefulDelete): it stays, Terminating, until its kubelet confirms — which
            # here is the test's to play. A declared reaction still answers the request.
            for key, obj in self._objects.items():
                if key[0] == request.resource and key[1] == request.namespace \
                        and key[2] == request.name and not obj.deleted:
                    marked = rules.graceful_deletion(obj.raw, request.params, self._now())
                    if marked is None:
                        return None
                    self._objects[key] = marked
                    self._version = getattr(self, "_version", 1) + 1
                    return None if self._declared_reaction(request) else rules.answer(200, marked)
            return None

        def _declared_reaction(self, request: Any) -> bool:
            # Whether a reaction a test declared would see the request (kmock's own fallbacks
            # are those of priority -inf).
            import math

            return any(not (p.priorities and p.priorities[0] == -math.inf)
                       and _sees(p._source, request) for p in self._payloads)

        def _proxy(self, request: Any) -> Any:
            return rules.reply(*self._proxy_answer(request))

        def _proxy_answer(self, request: Any) -> tuple[int, Any]:
            # The pod or service proxy with no reaction declared: 404 for an object that does
            # not exist, as the real server; else the emulator cannot reach it (503, as the
            # API server's proxy answers a dial error).
            name = rules.base_name(request.name)
            found = self._live(request, request.namespace, name)
            if found is None:
                return 404, rules.not_found(request.resource.plural, request.resource.group, name)
            if request.resource.plural == "pods" and not rules.proxyable(
                    (found.get("status") or {}).get("podIP")):
                return 400, rules.status(400, "BadRequest", "address not allowed")
            return 503, rules.status(503, "ServiceUnavailable", (
                f"error trying to reach service: the emulator proxies only what a test declares "
                f"({request.url.path})"))

        async def _serve_fetch(self, request: Any) -> Any:
            subresource = request.subresource or ""
            if subresource.startswith("proxy"):
                return self._proxy(request)
            if not self._serves(request):
                return rules.reply(404, rules.PAGE_NOT_FOUND)
            obj = self._live(request, request.namespace, request.name)
            if subresource == "log" and request.resource.plural == "pods":
                code, body = rules.log_answer(obj, request.name, dict(request.params),
                                              lambda node: self._stored(NODES, None, node))
                return rules.reply(code, body)
            if obj is None:
                return rules.reply(404, rules.not_found(request.resource.plural, request.resource.group,
                                                    request.name))
            # Always a status: kmock keeps the last status a reaction's Response carried.
            return rules.reply(200, obj)

        async def _serve_create(self, request: Any) -> Any:
            # kmock answers 200; the API server 201 Created.
            return rules.reply(201, await kmock.KubernetesEmulator._serve_create(self, request))

        async def _serve_list(self, request: Any) -> Any:
            # KubernetesEmulator's, as a real list: kind, selectors, order (kube_api_rules).
            if not self._serves(request):
                return rules.reply(404, rules.PAGE_NOT_FOUND)
            async with self._lock:
                objs = [obj.raw for obj in self._KubernetesEmulator__get_objs(request, strict=False)
                        if not obj.deleted]
            resource = request.resource
            kind = next((o.get("kind") for o in objs if o.get("kind")), None) or next(
                (k for (v, k) in _KINDS.values()
                 if f"{resource.group}/{resource.version}".lstrip("/") == v
                 and _KIND_PLURALS.get(k) == resource.plural), resource.plural.capitalize())
            code, body = rules.list_answer(resource.group, resource.version, resource.plural, kind,
                                           objs, dict(request.params),
                                           str(getattr(self, "_version", 1)))
            return rules.reply(code, body)

    return Emulated


#: The plural of each kind in _KINDS (for a list's kind when it has no object yet).
_KIND_PLURALS = {kind: resource.rsplit("/", 1)[1] for resource, (_, kind) in _KINDS.items()}


def _summary(kmock: Any) -> list[tuple[str, str]]:
    return [(str(r.method.value if hasattr(r.method, "value") else r.method).upper(), r.url.path)
            for r in kmock._requests]


class Emulator:
    def __init__(self) -> None:
        self._served: list[tuple[str, str]] = []
        #: Pod logs by path, answered by one reaction per path (``log``).
        self._logs: dict[str, bytes] = {}
        #: Why each request refused by ``authenticate`` was refused.
        self.refused: list[Optional[str]] = []
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
                async with _kubernetes_emulator()() as emulator, kmock.Server(emulator) as server:
                    emulator.clock = lambda: self.server_clock() if self.server_clock else None
                    self.url = str(server.url).rstrip("/")
                    self._ready.put(emulator)
                    await self._stop.wait()
            except BaseException as error:  # noqa: BLE001 reported to the test thread
                self._ready.put(error)

        asyncio.run(main())

    def do(self, action: Callable[[Any], Any]) -> Any:
        """Runs ``action(kmock)`` on the emulator's own thread (its objects are not thread-safe)."""
        import concurrent.futures

        # As run_coroutine_threadsafe would, without a coroutine and a task for each call.
        done: "concurrent.futures.Future[Any]" = concurrent.futures.Future()

        def call() -> None:
            if not done.set_running_or_notify_cancel():
                return
            try:
                done.set_result(action(self.kmock))
            except BaseException as error:  # noqa: BLE001 handed to the waiting thread
                done.set_exception(error)
                if not isinstance(error, Exception):
                    raise

        self._loop.call_soon_threadsafe(call)
        return done.result(timeout=10)

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(server=self.url, certificate_authority=None, token=None)

    # --- planting ---------------------------------------------------------------------------

    def put(self, resource: str, namespace: Optional[str], name: str, obj: dict) -> dict:
        """Stores ``obj`` as ``resource/namespace/name``, with apiVersion, kind and metadata
        filled in as the API server would."""
        [full] = self.write([(resource, namespace, name, obj)])
        return full

    def delete(self, resource: str, namespace: Optional[str], name: str) -> None:
        self.write([(resource, namespace, name, None)])

    def write(self, changes: list[tuple[str, Optional[str], str, Optional[dict]]],
              then: Optional[Callable[[Any], Any]] = None) -> list[Optional[dict]]:
        """Several ``put`` (an object) and ``delete`` (None) in one hand-off to the emulator's
        thread, in order, as that many calls would make them; ``then(kmock)`` runs after them
        in the same hand-off. Returns what ``put`` returns for each (None for a delete)."""
        stored: list[Optional[dict]] = []
        for resource, namespace, name, obj in changes:
            if obj is None:
                stored.append(None)
                continue
            api_version, kind = _KINDS[resource]
            metadata = {**obj.get("metadata", {}), "name": name}
            if namespace:
                metadata["namespace"] = namespace
            stored.append({"apiVersion": api_version, "kind": kind, **obj, "metadata": metadata})

        def store(kmock: Any) -> None:
            for (resource, namespace, name, _), full in zip(changes, stored):
                if full is None:
                    del kmock.objects[resource_key(resource), namespace, name]
                else:
                    self._trim(kmock)
                    kmock.objects[resource_key(resource), namespace, name] = full
            if then is not None:
                then(kmock)

        if changes or then is not None:
            self.do(store)
        return stored

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
                import kmock as km

                body = request.data
                allowed, reason = decide(body.get("spec") or {})
                # 201 Created, and no empty reason (the API server omits empty fields).
                status = {"allowed": allowed, **({"reason": reason} if reason else {})}
                return km.Response(status=201, payload=json.dumps({**body, "status": status}).encode(),
                                   headers={"Content-Type": "application/json"})

            kmock[f"post /apis/{SUBJECT_ACCESS_REVIEWS}"] << answer

        self.do(declare)

    def get(self, resource: str, namespace: Optional[str], name: str) -> Optional[dict]:
        """The stored object (as the tools last wrote it), or None."""
        def read(kmock: Any) -> Optional[dict]:
            try:
                stored = kmock.objects[resource_key(resource), namespace, name]
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

    def authenticate(self, now: Callable[[], Any], accept: Callable[[str], Optional[str]] = None, *,
                     cluster: str, keys: tuple[str, str], region: str) -> None:
        """Refuses every request whose bearer token the EKS authenticator of ``cluster`` would
        refuse, with the 401 Status a real API server answers (``Unauthorized``): an EKS token
        must be a presigned STS GetCallerIdentity URL signed by ``keys`` (access key, secret)
        for ``region`` and the cluster's name, and is refused 15 minutes after its X-Amz-Date
        (tests/eks_tokens.py), judged here by ``now()``. ``accept`` may judge other tokens
        (None = good)."""
        def problem(request: Any) -> Optional[str]:
            header = {k.lower(): v for k, v in request.headers.items()}.get("authorization", "")
            if not header.startswith("Bearer "):
                return "no bearer token"
            token = header[len("Bearer "):]
            if token.startswith(eks_tokens.PREFIX):
                return eks_tokens.problem(token, cluster=cluster, access_key=keys[0],
                                          secret_key=keys[1], region=region, now=now())
            return accept(token) if accept else "not an EKS token"

        def refuse(request: Any) -> Any:
            self.refused.append(problem(request))
            return status_response(401, "Unauthorized", "Unauthorized")

        def declare(kmock: Any) -> None:
            (kmock ** 1000)[lambda request: problem(request) is not None] << refuse

        self.do(declare)

    def truncated(self, path: str) -> None:
        """``GET path`` answers 200 with the start of a JSON body and no more (a connection or
        proxy that cut it short): the client's decoder meets the end of the input."""
        body = json_body({"kind": "List", "apiVersion": "v1", "metadata": {},
                          "items": [{"metadata": {"name": "cut-short"}}]})

        def declare(kmock: Any) -> None:
            import kmock as km

            (kmock ** 100)[f"get {path}"] << km.Response(
                status=200, payload=body[:len(body) // 2], headers={"Content-Type": "application/json"})

        self.do(declare)

    def log_failure(self, namespace: str, pod: str, code: int, reason: str, message: str) -> None:
        """``GET .../pods/<pod>/log`` refused as a real API server refuses it: a ``Status``
        object with that HTTP code (400 BadRequest for a container that has not started, 404
        NotFound for a pod that is gone, 500 for a kubelet the API server cannot dial)."""
        def declare(kmock: Any) -> None:
            kmock[f"get /api/v1/namespaces/{namespace}/pods/{pod}/log"] << status_response(
                code, reason, message)

        self.do(declare)

    def unreachable_kubelet(self, namespace: str, pod: str, container: str, node_ip: str) -> None:
        """The API server cannot open TCP 10250 to the pod's kubelet (a hybrid node whose
        network does not admit the control plane): it answers the log request with the dial
        error as a Status with code 500 and no reason (apimachinery's ErrorToAPIStatus for an
        error that is not an API status)."""
        url = (f"https://{node_ip}:10250/containerLogs/{namespace}/{pod}/{container}"
               "?sinceSeconds=61&timestamps=true")
        self.log_failure(namespace, pod, 500, "",
                         f'Get "{url}": dial tcp {node_ip}:10250: i/o timeout')

    def gateway_metrics(self, namespace: str, pod: str, leader: bool) -> None:
        """What a gateway pod's ``:10080/metrics`` answers through the pod proxy: every replica
        exposes ``hybrid_gateway_leader_is_active`` (a gauge registered at start, so 0 until
        the leader-only setup runs), 1 only on the replica whose setup is running
        (aws/eks-hybrid-nodes-gateway internal/metrics/metrics.go, internal/gateway/setup.go);
        controller-runtime adds ``leader_election_master_status`` on the one that leads."""
        lines = ["# HELP hybrid_gateway_leader_is_active 1 if this gateway instance is the active "
                 "leader, 0 if standby.",
                 "# TYPE hybrid_gateway_leader_is_active gauge",
                 f"hybrid_gateway_leader_is_active {1 if leader else 0}",
                 "# HELP hybrid_gateway_leader_setup_duration_seconds Duration of leader setup "
                 "operations (route tables + CiliumVTEPConfig) in seconds.",
                 "# TYPE hybrid_gateway_leader_setup_duration_seconds histogram",
                 f"hybrid_gateway_leader_setup_duration_seconds_count {1 if leader else 0}"]
        if leader:
            lines += ["# HELP leader_election_master_status Gauge of if the reporting system is "
                      "master of the relevant lease, 0 indicates backup, 1 indicates master. "
                      "'name' is the string used to identify the lease. Please make sure to group "
                      "by name.",
                      "# TYPE leader_election_master_status gauge",
                      'leader_election_master_status{name="hybrid-gateway-leader"} 1']
        self.proxy(namespace, pod, 10080, "metrics", ("\n".join(lines) + "\n").encode())

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
            pods = resource_key(PODS)
            for key in list(kmock.objects.keys()):
                if key[0] != pods:
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
        # kmock keeps every request it served, whole (the matching here no longer walks them,
        # see _sees, but kmock's own views do): keep (method, path) here instead, and let
        # kmock forget.
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
