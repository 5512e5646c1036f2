"""The contract between the Kubernetes emulator (tests/kube_emulator.py) and a real kube-apiserver
(engines/, v1.35), for every request the rehearsal tools (rehearse/) send: the inventory, as data,
and how each request is sent and its answer read. tests/test_emulator_contract.py sends each to
both and compares.

The inventory was made by running the tools' tests (tests/test_rehearse_*.py) with every request
the emulator served logged (method, path, query, content type, body kind: 5001 requests, 58
distinct shapes once names are generalised) and by reading the tools' calls (``ctx.kube.client.*``, ``get_raw``,
``get_raw_dated``, ``post_raw``). The tools make no watch request (they poll) and send no
``limit``/``continue``/``resourceVersion``: lightkube lists in one page.

``reads`` names the fields the tools read of the answer (the union over the tools that send the
request; ``items[].`` for each item of a list). ``answered`` is who can answer it here: ``both``
(compared), or ``kubelet`` / ``pod network`` for what only a kubelet or a pod behind the API
server's proxy can answer (a loopback API server has neither: no kubelet to dial, and the proxy
refuses loopback pod IPs); the API server's own answers before it dials (a pod that does not
exist, a container not in the pod, a pod with no node or no IP, a node with no address) are
compared as shapes of their own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

#: The namespaces the contract seeds (a real cluster's own namespaces hold objects the emulator
#: does not; lists across namespaces are compared on these).
NS, OTHER_NS = "demo", "other"

POD_READS = ("metadata.name", "metadata.namespace", "metadata.labels", "metadata.annotations",
             "metadata.ownerReferences", "metadata.deletionTimestamp", "metadata.creationTimestamp",
             "metadata.uid", "spec.nodeName", "spec.containers[].name", "spec.containers[].image",
             "spec.containers[].ports", "spec.hostNetwork",
             "spec.activeDeadlineSeconds", "status.phase", "status.reason", "status.podIP",
             "status.hostIP", "status.startTime", "status.conditions", "status.containerStatuses")
NODE_READS = ("metadata.name", "metadata.labels", "metadata.creationTimestamp", "spec.providerID",
              "spec.taints", "spec.unschedulable", "status.addresses", "status.allocatable",
              "status.capacity", "status.conditions")
EVENT_READS = ("metadata.name", "metadata.namespace", "involvedObject", "reason", "message",
               "type", "count", "firstTimestamp", "lastTimestamp", "eventTime", "source",
               "reportingComponent", "reportingController", "series")
WORKLOAD_READS = ("metadata.name", "metadata.uid", "metadata.labels", "metadata.annotations",
                  "metadata.ownerReferences", "metadata.creationTimestamp", "spec.replicas",
                  "spec.selector", "spec.strategy", "spec.template", "status")


@dataclass(frozen=True)
class Shape:
    key: str
    method: str
    #: The path as the tools send it ({ns}, {name} where they vary).
    path: str
    #: The query parameters the tools send (values as sent, or "*" where they vary).
    query: tuple[tuple[str, str], ...] = ()
    #: The body's kind (a POST/PATCH), or None.
    body: Optional[str] = None
    tools: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    answered: str = "both"
    #: Why only a kubelet or the pod network can answer it.
    why: str = ""
    #: The cases tests/test_emulator_contract.py sends for it (keys of its CASES: the call the
    #: tools make, through rehearse.lab.connection.Kube); none where it is not compared.
    cases: tuple[str, ...] = ()


def shape(key: str, method: str, path: str, query: dict = None, **kw: Any) -> Shape:
    return Shape(key, method, path, tuple(sorted((query or {}).items())), **kw)


KUBELET = "the API server streams the container's log from the node's kubelet (:10250); a loopback API server has none to dial"
POD_NETWORK = "the API server proxies to the pod's IP (or a Service's endpoint); it refuses loopback addresses and there is no pod network here"

INVENTORY: tuple[Shape, ...] = (
    # --- nodes -----------------------------------------------------------------------------------
    shape("nodes.list", "GET", "/api/v1/nodes",
          tools=("burst/reading.Cluster.nodes", "gateway.collect", "gpu.collect", "hostnet.collect",
                 "leader.node_for", "throughput._nodes"),
          reads=tuple(f"items[].{f}" for f in NODE_READS), cases=("nodes.list",)),
    shape("nodes.get", "GET", "/api/v1/nodes/{name}", tools=("leader.node_for",),
          reads=NODE_READS, cases=("nodes.get", "nodes.get.missing")),
    # --- pods ------------------------------------------------------------------------------------
    shape("pods.list", "GET", "/api/v1/namespaces/{ns}/pods",
          tools=("leader.gateway_pods", "hostnet.sweep_leftovers", "gateway.collect",
                 "predict.live_input (raw)"),
          reads=("kind",) + tuple(f"items[].{f}" for f in POD_READS),
          cases=("pods.list", "pods.list.raw")),
    shape("pods.list.label", "GET", "/api/v1/namespaces/{ns}/pods", {"labelSelector": "app=*"},
          tools=("burst/reading.Cluster.burst_pods", "gateway.collect", "gpu._pods",
                 "hostnet.collect", "failover._pods"),
          reads=tuple(f"items[].{f}" for f in POD_READS),
          cases=("pods.list.label", "pods.list.label.set")),
    shape("pods.list.node", "GET", "/api/v1/pods", {"fieldSelector": "spec.nodeName=*"},
          tools=("burst/reading.Cluster.hybrid_neighbours",),
          reads=tuple(f"items[].{f}" for f in POD_READS),
          cases=("pods.list.node", "pods.list.badfield")),
    shape("pods.get", "GET", "/api/v1/namespaces/{ns}/pods/{name}",
          tools=("throughput._pod", "hostnet._pods", "failover.restart"), reads=POD_READS,
          cases=("pods.get", "pods.get.missing")),
    shape("pods.create", "POST", "/api/v1/namespaces/{ns}/pods", {"fieldManager": "rehearse"},
          body="Pod", tools=("throughput.create", "hostnet._create"),
          reads=("code", "Status.message"), cases=("pods.create", "pods.create.again")),
    shape("pods.delete.now", "DELETE", "/api/v1/namespaces/{ns}/pods/{name}",
          {"gracePeriodSeconds": "0"}, tools=("throughput.delete", "hostnet._delete_pods"),
          reads=("code",), cases=("pods.delete.now", "pods.delete.missing")),
    shape("pods.delete", "DELETE", "/api/v1/namespaces/{ns}/pods/{name}",
          tools=("failover.restart",), reads=("code",), cases=("pods.delete",)),
    shape("pods.patch.annotation", "PATCH", "/api/v1/namespaces/{ns}/pods/{name}",
          {"fieldManager": "rehearse"}, body="strategic merge: metadata.annotations.<cost>: null",
          tools=("burst/switching.clear_costs",), reads=("code", "metadata.annotations"),
          cases=("pods.patch.annotation",)),
    # --- a pod's log and proxy --------------------------------------------------------------------
    shape("pods.log", "GET", "/api/v1/namespaces/{ns}/pods/{name}/log",
          {"container": "*", "follow": "false", "sinceSeconds": "*", "timestamps": "true"},
          tools=("gateway.collect (prober)", "gpu.collect (client)", "hostnet._logs",
                 "throughput (iperf3, timestamps=false)"),
          reads=("code", "text", "Status.message"), answered="kubelet", why=KUBELET),
    shape("pods.log.raw", "GET", "/api/v1/namespaces/{ns}/pods/{name}/log",
          {"sinceTime": "*", "timestamps": "true"}, tools=("failover._logs",),
          reads=("code", "text"), answered="kubelet", why=KUBELET),
    shape("pods.log.refused", "GET", "/api/v1/namespaces/{ns}/pods/{name}/log",
          {"container": "*", "follow": "false", "sinceSeconds": "*", "timestamps": "true"},
          tools=("the same calls, answered by the API server before any kubelet",),
          reads=("code", "raised", "Status.reason", "Status.message"),
          cases=("log.missing-pod", "log.bad-container", "log.which-container", "log.no-node",
                 "log.node-missing", "log.node-no-address", "log.kubelet-unreachable")),
    shape("pods.proxy", "GET", "/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/{path}",
          tools=("gateway._collect_metrics (:10080/metrics)", "failover (:8088/healthz)",
                 "hostnet (:8080/)"),
          reads=("code", "text"), answered="pod network", why=POD_NETWORK),
    shape("pods.proxy.refused", "GET", "/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/{path}",
          tools=("the same, answered by the API server before it dials",),
          reads=("code", "Status.reason", "Status.message"),
          cases=("proxy.missing-pod", "proxy.no-ip")),
    shape("services.proxy", "POST", "/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/{path}",
          body="JSON (an OpenAI completion request)", tools=("gpu._complete",),
          reads=("code", "text"), answered="pod network", why=POD_NETWORK),
    shape("services.proxy.refused", "POST",
          "/api/v1/namespaces/{ns}/services/{name}:{port}/proxy/{path}",
          tools=("the same, for a Service that does not exist",),
          reads=("code", "Status.reason", "Status.message"), cases=("service-proxy.missing",)),
    # --- namespaces ------------------------------------------------------------------------------
    shape("namespaces.get", "GET", "/api/v1/namespaces/{name}", tools=("hostnet.sweep_leftovers",),
          reads=("metadata.name", "metadata.labels", "metadata.deletionTimestamp", "status.phase"),
          cases=("namespaces.get", "namespaces.get.missing")),
    shape("namespaces.create", "POST", "/api/v1/namespaces", {"fieldManager": "rehearse"},
          body="Namespace", tools=("hostnet._create",), reads=("code", "Status.message"),
          cases=("namespaces.create", "namespaces.create.again")),
    shape("namespaces.delete", "DELETE", "/api/v1/namespaces/{name}",
          tools=("hostnet._delete_namespace",), reads=("code",),
          cases=("namespaces.delete", "namespaces.delete.missing")),
    # --- other core kinds ------------------------------------------------------------------------
    shape("configmaps.get", "GET", "/api/v1/namespaces/{ns}/configmaps/{name}",
          tools=("throughput.cilium_config", "burst/preconditions (kyverno)"),
          reads=("metadata.name", "data"), cases=("configmaps.get", "configmaps.get.missing")),
    shape("services.get", "GET", "/api/v1/namespaces/{ns}/services/{name}",
          tools=("hostnet.collect",), reads=("spec.clusterIP", "spec.ports"),
          cases=("services.get",)),
    shape("events.list.all", "GET", "/api/v1/events", tools=("burst/reading.karpenter_events",),
          reads=tuple(f"items[].{f}" for f in EVENT_READS), cases=("events.list.all",)),
    shape("events.list.object", "GET", "/api/v1/namespaces/{ns}/events",
          {"fieldSelector": "involvedObject.kind=Pod,involvedObject.name=*"},
          tools=("gpu.collect",), reads=tuple(f"items[].{f}" for f in EVENT_READS),
          cases=("events.list.object",)),
    # --- apps ------------------------------------------------------------------------------------
    shape("daemonsets.get", "GET", "/apis/apps/v1/namespaces/{ns}/daemonsets/{name}",
          tools=("gateway.collect (eks-pod-identity-agent)",), reads=WORKLOAD_READS,
          cases=("daemonsets.get", "daemonsets.get.missing")),
    shape("deployments.get", "GET", "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
          tools=("burst/reading.Cluster.get", "gpu.collect", "predict.live_input (raw)"),
          reads=WORKLOAD_READS,
          cases=("deployments.get", "deployments.get.raw", "deployments.get.missing")),
    shape("deployments.patch", "PATCH", "/apis/apps/v1/namespaces/{ns}/deployments/{name}",
          {"fieldManager": "rehearse"},
          body="strategic merge: spec.replicas, spec.template.metadata.annotations",
          tools=("burst/reading.Cluster.scale",), reads=("code", "spec.replicas",
                                                         "spec.template.metadata.annotations"),
          cases=("deployments.patch",)),
    shape("replicasets.list", "GET", "/apis/apps/v1/namespaces/{ns}/replicasets",
          tools=("burst/reading.Cluster.workload", "predict.live_input (raw)"),
          reads=tuple(f"items[].{f}" for f in WORKLOAD_READS),
          cases=("replicasets.list", "replicasets.list.raw")),
    # --- coordination, authorization -------------------------------------------------------------
    shape("leases.get", "GET", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
          tools=("leader.read_lease", "gateway._read_lease (raw, with the Date header)"),
          reads=("spec.holderIdentity", "spec.acquireTime", "spec.renewTime",
                 "spec.leaseTransitions", "spec.leaseDurationSeconds", "header Date"),
          cases=("leases.get", "leases.get.raw", "leases.get.missing")),
    shape("subjectaccessreviews.create", "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
          body="SubjectAccessReview", tools=("burst/reading.Cluster.review",),
          reads=("code", "status.allowed", "status.denied", "status.reason",
                 "status.evaluationError"), cases=("sar.allowed", "sar.denied")),
    # --- custom resources ------------------------------------------------------------------------
    shape("ciliumvtepconfigs.get", "GET", "/apis/cilium.io/{v2,v2alpha1}/ciliumvtepconfigs/{name}",
          tools=("leader.read_vtep (raw, v2)", "gateway._collect_vtep (v2, then v2alpha1)"),
          reads=("spec.endpoints",),
          cases=("vtep.get", "vtep.get.raw", "vtep.get.missing", "vtep.get.version-not-served")),
    shape("nodepools.get", "GET", "/apis/karpenter.sh/v1/nodepools/{name}",
          tools=("burst/preconditions", "burst/run.watch"),
          reads=("metadata.name", "spec.disruption", "spec.template", "spec.limits"),
          cases=("nodepools.get",)),
    shape("nodepools.list", "GET", "/apis/karpenter.sh/v1/nodepools",
          tools=("burst/preconditions",), reads=("items[].metadata.name",),
          cases=("nodepools.list",)),
    shape("nodeclaims.list", "GET", "/apis/karpenter.sh/v1/nodeclaims",
          tools=("burst/reading.Cluster.nodeclaims",),
          reads=("items[].metadata.name", "items[].metadata.labels",
                 "items[].metadata.creationTimestamp", "items[].status"),
          cases=("nodeclaims.list", "nodeclaims.list.not-installed")),
    shape("clusterpolicies.get", "GET", "/apis/kyverno.io/v1/clusterpolicies/{name}",
          tools=("burst/preconditions",), reads=("metadata.name", "spec", "status"),
          cases=("clusterpolicies.get", "clusterpolicies.get.missing")),
    # --- the server ------------------------------------------------------------------------------
    shape("version", "GET", "/version", tools=("Kube.check_reachable", "clock_window (Date)"),
          reads=("code", "header Date"), cases=("version",)),
)


def both() -> list[Shape]:
    return [s for s in INVENTORY if s.answered == "both"]


# --- reading an answer -----------------------------------------------------------------------------

@dataclass
class Answer:
    status: int
    #: The body: a dict or list (JSON), or text.
    body: Any
    headers: dict = field(default_factory=dict)
    #: The exception a typed (lightkube) call raised: ApiError, HTTPStatusError, or "".
    raised: str = ""


def typed(call: Callable[[], Any], created: bool = False) -> Answer:
    """A lightkube call as the tools make it: what it returned (200, or 201 for a create), or the
    error it raised (ApiError carries the Status; HTTPStatusError a non-JSON answer)."""
    from lightkube import ApiError

    try:
        found = call()
    except ApiError as error:
        body = error.status.to_dict() if hasattr(error.status, "to_dict") else dict(error.status)
        return Answer(error.status.code, body, raised="ApiError")
    except Exception as error:  # noqa: BLE001 httpx's, for an answer that is not JSON
        response = getattr(error, "response", None)
        if type(error).__name__ != "HTTPStatusError" or response is None:
            raise
        return Answer(response.status_code, response.text, dict(response.headers),
                      raised="HTTPStatusError")
    if found is None:
        return Answer(201 if created else 200, None)
    if hasattr(found, "__iter__") and not hasattr(found, "to_dict") and not isinstance(found, dict):
        found = [f.to_dict() if hasattr(f, "to_dict") else dict(f) for f in found]
        return Answer(200, found)
    return Answer(201 if created else 200,
                  found.to_dict() if hasattr(found, "to_dict") else dict(found))


def raw(response: Any) -> Answer:
    """An httpx response of a raw request (``Kube._raw``), as ``get_raw``/``post_raw`` see it."""
    text = response.text
    kind = response.headers.get("content-type", "")
    body: Any = text
    if kind == "application/json":
        try:
            body = json.loads(text)
        except ValueError:
            pass
    return Answer(response.status_code, body, {"content-type": kind,
                                               "date": response.headers.get("date")})


def pick(obj: Any, path: str) -> Any:
    """The value at dotted ``path`` (None where absent); ``a[].b``: b of each item of list a."""
    head, _, rest = path.partition("[].")
    for part in head.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    if rest:
        return None if obj is None else [pick(item, rest) for item in obj]
    return obj


def view(answer: Answer, reads: tuple[str, ...], keep: Optional[Callable[[dict], bool]] = None) -> dict:
    """What the tools can tell of an answer: its status, the exception a typed call raised, an
    error's Status (reason, message, details) or text, and of a success the fields in
    ``reads``; of a list, the names of its items in order (those ``keep`` accepts: a real
    cluster's own objects are not the contract's) and each item's fields."""
    seen: dict[str, Any] = {"status": answer.status, "raised": answer.raised}
    body = answer.body
    if answer.status >= 400 or isinstance(body, str):
        if isinstance(body, dict):
            seen["error"] = {k: body.get(k) for k in ("kind", "reason", "message", "details", "code")}
        else:
            seen["text"] = body
            seen["content-type"] = answer.headers.get("content-type")
        return seen
    if isinstance(body, dict) and "items" in body:  # a raw list: its envelope, then the items
        seen["kind"], seen["apiVersion"] = body.get("kind"), body.get("apiVersion")
        version = (body.get("metadata") or {}).get("resourceVersion")
        seen["resourceVersion is a number"] = isinstance(version, str) and version.isdigit()
        seen["items carry apiVersion/kind"] = sorted({("apiVersion" in i, "kind" in i)
                                                      for i in body["items"]})
        body = body["items"]
    if isinstance(body, list):
        items = [i for i in body if keep is None or keep(i)]
        seen["names"] = [f"{pick(i, 'metadata.namespace') or ''}/{pick(i, 'metadata.name')}"
                         for i in items]
        fields = [r[len("items[]."):] for r in reads if r.startswith("items[].")]
        seen["items"] = [{f: pick(i, f) for f in fields} for i in items]
        return seen
    if isinstance(body, dict):
        seen["fields"] = {r: pick(body, r) for r in reads if not r.startswith(("code", "header"))}
    return seen
