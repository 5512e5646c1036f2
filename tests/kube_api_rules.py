"""What a real kube-apiserver answers where kmock's emulator answered otherwise: the rules, as
functions of plain objects, and at the end how the emulator (tests/kube_emulator.py) writes
them through kmock. Each rule was found by the contract tests
(tests/test_emulator_contract.py), which send the tools' requests to the emulator and to a real
kube-apiserver (engines/, v1.35) and compare; the engine's answer is the one kept here.

- Errors are the API server's ``Status`` objects: ``pods "x" not found`` (reason NotFound,
  details name/group/kind), ``... already exists`` (AlreadyExists, 409), and a resource the
  server does not serve (a CRD not installed, a version not served) is the mux's plain-text
  ``404 page not found`` (not JSON: lightkube raises httpx's HTTPStatusError, not ApiError).
- Lists are ``<Kind>List`` objects, items sorted by namespace then name (etcd's key order),
  filtered by ``labelSelector`` and ``fieldSelector``; a field the resource does not index is
  refused with 400 ``field label not supported: <field>``. Items of built-in kinds carry no
  apiVersion/kind (a custom resource's do).
- A pod's ``log`` is judged by the API server before any kubelet is asked (pkg/registry/core/pod
  LogLocation): the pod (404), the container (400), no node yet (204, empty), the node (404 as
  the server words it, 500 without an address), then the kubelet, which the emulator cannot dial.
- The pod and service proxy of an object that does not exist is 404 like a GET of it; a pod with
  no IP, or a loopback or link-local one, is refused (400 ``address not allowed``).
- Writes: a create answers 201 and gets a uid, a creationTimestamp, a pod phase Pending, a
  namespace phase Active and its ``kubernetes.io/metadata.name`` label; a change of spec is a new
  generation; a pod bound to a node is deleted gracefully (Terminating, 30 s by default); a
  SubjectAccessReview answers 201 and omits an empty reason; JSON is ``application/json`` with no
  charset, and a 204 has no Content-Type.
- ``/api/v1/namespaces[/<name>]`` is the Namespace resource (kmock parsed it as a namespace).
"""

from __future__ import annotations

import datetime
import json
import ipaddress
import re
import urllib.parse
import uuid
from typing import Any, Callable, Optional

#: The groups of the kinds built into kube-apiserver: their list items carry no apiVersion/kind.
BUILT_IN_GROUPS = ("", "apps", "coordination.k8s.io", "authorization.k8s.io", "events.k8s.io")

#: The fields each resource's field selector may name, beyond metadata.name and
#: metadata.namespace (kubernetes pkg/registry/core/pod/strategy.go ToSelectableFields,
#: pkg/registry/core/event/strategy.go, pkg/registry/core/node/strategy.go).
SELECTABLE_FIELDS = {
    "pods": ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
             "spec.serviceAccountName", "spec.hostNetwork", "status.phase", "status.podIP",
             "status.nominatedNodeName"),
    "events": ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
               "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
               "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type"),
    "nodes": ("spec.unschedulable",),
}

PAGE_NOT_FOUND = b"404 page not found\n"


def status(code: int, reason: str, message: str, details: Optional[dict] = None) -> dict:
    """A Status as the API server writes it (no reason for an error that is not an API error)."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                            "status": "Failure", "message": message}
    if reason:
        body["reason"] = reason
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def qualified(plural: str, group: str) -> str:
    """``pods``, ``leases.coordination.k8s.io``: how the API server names a resource in errors."""
    return f"{plural}.{group}" if group else plural


def not_found(plural: str, group: str, name: str) -> dict:
    details = {"name": name, **({"group": group} if group else {}), "kind": plural}
    return status(404, "NotFound", f'{qualified(plural, group)} "{name}" not found', details)


def already_exists(plural: str, group: str, name: str) -> dict:
    details = {"name": name, **({"group": group} if group else {}), "kind": plural}
    return status(409, "AlreadyExists", f'{qualified(plural, group)} "{name}" already exists', details)


# --- selectors ------------------------------------------------------------------------------------

_SET = re.compile(r"^\s*(!?)([^\s!=(),]+)\s*(?:(in|notin)\s*\(([^)]*)\)|(==|=|!=)\s*([^\s,]*))?\s*$")


def _split_requirements(selector: str) -> list[str]:
    """Splits on the commas outside parentheses (``a in (x,y),b``)."""
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        parts.append(current)
    return parts


def label_matcher(selector: str) -> Callable[[dict], bool]:
    """A ``labelSelector`` (apimachinery labels.Parse syntax) as a test of an object's labels."""
    tests = []
    for requirement in _split_requirements(selector or ""):
        match = _SET.match(requirement)
        if match is None:
            raise ValueError(f"unable to parse requirement: {requirement!r}")
        negated, key, set_op, values, op, value = match.groups()
        if set_op:
            allowed = {v.strip() for v in values.split(",") if v.strip()}
            if set_op == "in":
                tests.append(lambda l, k=key, a=allowed: l.get(k) in a)
            else:
                tests.append(lambda l, k=key, a=allowed: l.get(k) not in a)
        elif op in ("=", "=="):
            tests.append(lambda l, k=key, v=value: k in l and l[k] == v)
        elif op == "!=":
            tests.append(lambda l, k=key, v=value: l.get(k) != v)
        elif negated:
            tests.append(lambda l, k=key: k not in l)
        else:
            tests.append(lambda l, k=key: k in l)
    return lambda obj: all(t(((obj.get("metadata") or {}).get("labels") or {})) for t in tests)


def _field(obj: dict, path: str) -> str:
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def field_matcher(plural: str, selector: str) -> Callable[[dict], bool]:
    """A ``fieldSelector`` (``a=b``, ``a==b``, ``a!=b``, comma-separated) as a test of an object;
    raises LookupError naming a field the resource does not let one select on."""
    allowed = ("metadata.name", "metadata.namespace") + SELECTABLE_FIELDS.get(plural, ())
    tests = []
    for requirement in _split_requirements(selector or ""):
        key, op, value = re.match(r"^\s*([^=!]+?)\s*(==|=|!=)\s*(.*?)\s*$", requirement).groups()
        if key not in allowed:
            raise LookupError(key)
        if op == "!=":
            tests.append(lambda o, k=key, v=value: _field(o, k) != v)
        else:
            tests.append(lambda o, k=key, v=value: _field(o, k) == v)
    return lambda obj: all(t(obj) for t in tests)


def list_answer(group: str, version: str, plural: str, kind: str, objects: list[dict],
                params: dict, resource_version: str) -> tuple[int, Any]:
    """(status, body) of a LIST of ``objects`` (the resource's live objects, any order)."""
    try:
        by_field = field_matcher(plural, params.get("fieldSelector", ""))
    except LookupError as error:
        return 400, status(400, "BadRequest", f"field label not supported: {error.args[0]}")
    try:
        by_label = label_matcher(params.get("labelSelector", ""))
    except ValueError as error:
        return 400, status(400, "BadRequest", str(error))
    built_in = group in BUILT_IN_GROUPS
    items = []
    for obj in sorted(objects, key=lambda o: ((o.get("metadata") or {}).get("namespace") or "",
                                              (o.get("metadata") or {}).get("name") or "")):
        if by_label(obj) and by_field(obj):
            items.append({k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
                         if built_in else obj)
    return 200, {"kind": f"{kind}List", "apiVersion": f"{group}/{version}" if group else version,
                 "metadata": {"resourceVersion": resource_version}, "items": items}


# --- the pod log, before the kubelet ----------------------------------------------------------

def log_answer(pod: Optional[dict], name: str, params: dict,
               node: Callable[[str], Optional[dict]]) -> tuple[int, Any]:
    """(status, body) the API server gives ``GET pods/<name>/log`` with no kubelet that answers:
    ``node(name)`` is the Node object or None. Body: a Status, or bytes."""
    if pod is None:
        return 404, not_found("pods", "", name)
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    container = params.get("container")
    if not container:
        if len(containers) != 1:
            return 400, status(400, "BadRequest", f"a container name must be specified for pod "
                               f"{name}, choose one of: [{' '.join(containers)}]")
        container = containers[0]
    elif container not in containers:
        return 400, status(400, "BadRequest", f"container {container} is not valid for pod {name}")
    node_name = (pod.get("spec") or {}).get("nodeName")
    if not node_name:
        return 204, b""  # no node yet: nothing to stream
    found = node(node_name)
    if found is None:
        # The server's wording (the node getter's NotFound is reported against pods).
        return 404, not_found("pods", "", node_name)
    status_ = found.get("status") or {}
    addresses = status_.get("addresses") or []
    address = next((a.get("address") for kind in ("Hostname", "InternalDNS", "InternalIP",
                                                   "ExternalDNS", "ExternalIP")
                    for a in addresses if a.get("type") == kind), None)
    if not address:
        return 500, status(500, "", f"no preferred addresses found; known addresses: "
                                    f"[{' '.join('{%s %s}' % (a.get('type'), a.get('address')) for a in addresses)}]")
    port = (((status_.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
            or 10250)
    # LogLocation's query to the kubelet: the flags only when true, url.Values.Encode's sorted,
    # escaped form (a sinceTime's colons are %3A).
    query = urllib.parse.urlencode([(k, params[k]) for k in sorted(params)
                                    if k in ("limitBytes", "sinceSeconds", "sinceTime", "tailLines")
                                    or k in ("follow", "previous", "timestamps")
                                    and params[k] == "true"])
    namespace = (pod.get("metadata") or {}).get("namespace")
    url = f"https://{address}:{port}/containerLogs/{namespace}/{name}/{container}" + (
        f"?{query}" if query else "")
    # The emulator has no kubelet to dial: the answer of one that does not answer.
    return 500, status(500, "", f'Get "{url}": dial tcp {address}:{port}: i/o timeout')


# --- writes -----------------------------------------------------------------------------------------

def _stamp(now: datetime.datetime) -> str:
    return now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def on_create(plural: str, obj: dict, now: datetime.datetime) -> None:
    """What the API server adds to an object it creates (in place): a uid and a creationTimestamp
    (its clock, whole seconds); a pod starts Pending; a namespace Active, labelled with its name."""
    meta = obj.setdefault("metadata", {})
    meta.setdefault("uid", str(uuid.uuid4()))
    meta.setdefault("creationTimestamp", _stamp(now))
    if plural == "pods":
        obj.setdefault("status", {}).setdefault("phase", "Pending")
    elif plural == "namespaces":
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name")
        obj.setdefault("status", {}).setdefault("phase", "Active")


def on_update(stored: dict, patch: dict) -> None:
    """A change of ``spec`` is a new generation (for an object that counts them)."""
    meta = stored.get("metadata") or {}
    if "spec" in patch and isinstance(meta.get("generation"), int):
        patch.setdefault("metadata", {})["generation"] = meta["generation"] + 1


def graceful_deletion(pod: dict, params: dict, now: datetime.datetime) -> Optional[dict]:
    """A DELETE of a pod as the API server makes it (pkg/registry/core/pod/strategy.go
    CheckGracefulDelete, rest.BeforeDelete): a pod bound to a node and not finished is marked
    Terminating — deletionTimestamp = now + grace, deletionGracePeriodSeconds = grace (the
    request's gracePeriodSeconds, else the pod's terminationGracePeriodSeconds, else 30) — and
    stays until its kubelet confirms; None when it goes at once (grace 0, no node, finished)."""
    spec, status_ = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status_.get("phase") in ("Succeeded", "Failed"):
        return None
    asked = params.get("gracePeriodSeconds")
    grace = int(asked) if asked not in (None, "") else spec.get("terminationGracePeriodSeconds", 30)
    if grace <= 0:
        return None
    meta = pod.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return pod  # already Terminating
    when = now + datetime.timedelta(seconds=grace)
    return {**pod, "metadata": {**meta, "deletionTimestamp": _stamp(when),
                                "deletionGracePeriodSeconds": grace}}


def proxyable(ip: Optional[str]) -> bool:
    """apimachinery's proxyutil.IsProxyableIP: the pod proxy refuses no IP, loopback and
    link-local addresses ("address not allowed")."""
    try:
        address = ipaddress.ip_address(ip or "")
    except ValueError:
        return False
    return not (address.is_loopback or address.is_link_local or address.is_multicast
                and str(address).startswith(("ff01", "ff02")))


# --- serving: kmock's parsing and answers, as the API server's ---------------------------------

def namespaces_as_a_resource() -> None:
    """kmock reads ``/api/v1/namespaces[/<name>[/status|/finalize]]`` as a namespace with no
    resource in it (a GET of a Namespace failed with 500, a POST could not be parsed): those
    paths are the cluster-scoped resource ``v1/namespaces``, as on the API server. Every other
    path is parsed as kmock does."""
    from kmock._internal import parsing

    parse = getattr(parsing.parse_path, "_kmock_parse", parsing.parse_path)

    def parse_path(path: str) -> Any:
        parts = path.strip("/").split("/")
        if parts[:3] == ["api", "v1", "namespaces"] and (
                len(parts) <= 4 or len(parts) == 5 and parts[4] in ("status", "finalize")):
            return parsing.ParsedPath("", "v1", "namespaces", None,
                                      parts[3] if len(parts) >= 4 else None,
                                      parts[4] if len(parts) == 5 else None)
        return parse(path)

    parse_path._kmock_parse = parse  # type: ignore[attr-defined]
    parsing.parse_path = parse_path


def base_name(name: Any) -> Any:
    """``pod`` of ``pod:port`` (the proxy's name)."""
    return name.split(":", 1)[0] if isinstance(name, str) else name


def answer(code: int, body: Any) -> Any:
    """An answer as the API server writes it: JSON (a Status, an object) or plain text."""
    from aiohttp import web

    if isinstance(body, bytes):
        return web.Response(status=code, body=body or None,
                            content_type="text/plain", charset="utf-8")
    return web.Response(status=code, body=json.dumps(body).encode(), content_type="application/json")


def as_written(response: Any) -> Any:
    """kmock's JSON answers say ``application/json; charset=utf-8``; the API server's say
    ``application/json`` (and lightkube reads an error's Status only then). A 204 has no body and
    no Content-Type."""
    try:
        if response.status == 204:
            response.headers.pop("Content-Type", None)
        elif response.content_type == "application/json" and response.charset:
            response.charset = None
    except (AttributeError, RuntimeError):  # a stream already under way
        pass
    return response


def reply(code: int, body: Any) -> Any:
    """``answer`` as a reaction returns it (kmock renders it)."""
    import kmock as km

    if isinstance(body, bytes):
        return km.Response(status=code, payload=body,
                           headers={"Content-Type": "text/plain; charset=utf-8"})
    return km.Response(status=code, payload=json.dumps(body).encode(),
                       headers={"Content-Type": "application/json"})
