"""The emulator held to a real kube-apiserver's answers (issue 30 §4): every request the rehearsal
tools make that both can answer (tests/emulator_contract.py's inventory) is sent, through the
tools' own client (``rehearse.lab.connection.Kube``: lightkube and its raw transport), to the
emulator (tests/kube_emulator.py) and to a real kube-apiserver (engines/, started here), both
holding the same objects, and the status codes and the fields the tools read are compared.

The real control plane is the API server alone: kube-controller-manager and kube-scheduler are
stopped once it is up (and kwok not started), as the emulator has no controllers either — no
Deployment scales a ReplicaSet, no scheduler binds, no kubelet finishes a graceful deletion. The
objects are created on the real server first and the emulator is given what the real server
stored (uids, timestamps, defaults), so any difference is in how the request is served. The real
cluster's own objects (kube-system's) are left out of cross-namespace lists.

Requests only a kubelet or the pod network can answer are in the inventory with the reason and
are not sent; what the API server answers for them before it dials is compared.
"""

from __future__ import annotations

import datetime
import sys
from typing import Any, Callable, Iterator, Optional

import pytest

from tests import emulator_contract as contract
from tests import kube_emulator
from tests.emulator_contract import NS, OTHER_NS, Answer, raw, typed, view
from tests.kube_emulator import (CLUSTERPOLICIES, CONFIGMAPS, DAEMONSETS, DEPLOYMENTS, EVENTS,
                                 LEASES, NAMESPACES, NODECLAIMS, NODEPOOLS, NODES, PODS,
                                 REPLICASETS, SERVICES, VTEP_CONFIGS, Emulator)
from tests.real_cluster import started
from rehearse.lab.connection import Endpoint, Kube

sys.path.insert(0, str(contract.__file__).rsplit("/tests/", 1)[0] + "/engines")
from control_plane import TOKEN, ControlPlane, stop_process  # noqa: E402

HYBRID = "eks.amazonaws.com/compute-type"
POOL = "karpenter.sh/nodepool"
COST = "controller.kubernetes.io/pod-deletion-cost"
NOW = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
STAMP = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
MICRO = NOW.strftime("%Y-%m-%dT%H:%M:%S.000000Z")
#: A kubelet port nothing listens on (loopback): the API server's dial is refused at once.
DEAD_KUBELET = ("127.0.0.1", 1)


def _crd(group: str, version: str, kind: str, plural: str) -> dict:
    """A cluster-scoped CRD that keeps any field (the contract is about how the API server serves
    a custom resource, not its schema)."""
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Cluster",
                     "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
                     "versions": [{"name": version, "served": True, "storage": True, "schema": {
                         "openAPIV3Schema": {"type": "object",
                                             "x-kubernetes-preserve-unknown-fields": True}}}]}}


CRDS = [_crd("karpenter.sh", "v1", "NodePool", "nodepools"),
        _crd("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
        _crd("kyverno.io", "v1", "ClusterPolicy", "clusterpolicies"),
        _crd("cilium.io", "v2", "CiliumVTEPConfig", "ciliumvtepconfigs")]


def _node(name: str, labels: dict, address: Optional[str]) -> tuple[dict, dict]:
    status = {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
              "allocatable": {"cpu": "3920m", "memory": "15Gi", "pods": "110"},
              "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                              "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP}],
              "daemonEndpoints": {"kubeletEndpoint": {"Port": DEAD_KUBELET[1]}}}
    if address:
        status["addresses"] = [{"type": "InternalIP", "address": address}]
    return {"metadata": {"name": name, "labels": labels},
            "spec": {"providerID": f"eks-hybrid:///{name}"}}, status


def _pod(name: str, labels: dict, node: Optional[str], *, ip: Optional[str] = "127.0.0.9",
         containers: tuple[str, ...] = ("app",), annotations: Optional[dict] = None,
         running: bool = True) -> tuple[dict, Optional[dict]]:
    spec: dict[str, Any] = {"containers": [{"name": c, "image": "registry.k8s.io/pause:3.10"}
                                           for c in containers]}
    if node:
        spec["nodeName"] = node
    else:
        spec["schedulerName"] = "nobody"  # stays Pending, as no scheduler runs
    status = None
    if running:
        status = {"phase": "Running", "hostIP": "127.0.0.1", "startTime": STAMP,
                  "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": STAMP}]}
        if ip:
            status["podIP"] = ip
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
            "spec": spec}, status


def _event(name: str, namespace: str, kind: str, about: str, reason: str) -> dict:
    return {"metadata": {"name": name, "namespace": namespace},
            "involvedObject": {"kind": kind, "name": about,
                               "namespace": namespace},
            "reason": reason, "message": f"{reason} {about}", "type": "Normal", "count": 1,
            "firstTimestamp": STAMP, "lastTimestamp": STAMP, "source": {"component": "karpenter"}}


def seeds() -> list[tuple[str, Optional[str], dict, Optional[dict]]]:
    """(emulator resource, namespace, object, status) in the order they are created: not the
    order of their names, so a list's order is the server's, not the creation's."""
    out: list[tuple[str, Optional[str], dict, Optional[dict]]] = []
    for name, labels, address in (("hybrid-2", {HYBRID: "hybrid"}, None),
                                  ("hybrid-1", {HYBRID: "hybrid"}, DEAD_KUBELET[0]),
                                  ("cloud-1", {POOL: "cloud-burst"}, DEAD_KUBELET[0])):
        out.append((NODES, None, *_node(name, labels, address)))
    for namespace, name, labels, node, kw in (
            (NS, "burst-2", {"app": "burst", "pod-template-hash": "h2"}, "cloud-1", {}),
            (NS, "burst-0", {"app": "burst", "pod-template-hash": "h2"}, "hybrid-2", {}),
            (NS, "burst-1", {"app": "burst", "pod-template-hash": "h2"}, "hybrid-1",
             {"annotations": {COST: "1", "keep": "yes"}}),
            (NS, "pending-1", {"app": "burst", "pod-template-hash": "h2"}, None, {"running": False}),
            (NS, "prober-1", {"app": "prober-hybrid"}, "hybrid-1",
             {"containers": ("prober", "sidecar")}),
            (NS, "no-ip-1", {"app": "echo"}, "hybrid-1", {"ip": None}),
            (NS, "ghost-1", {"app": "ghost"}, "gone-node", {}),
            (OTHER_NS, "neighbour-1", {"app": "burst"}, "hybrid-1", {})):
        obj, status = _pod(name, labels, node, **kw)
        out.append((PODS, namespace, obj, status))
    for name, replicas in (("burst", 3), ("scaled", 2)):
        out.append((DEPLOYMENTS, NS, {
            "metadata": {"name": name, "annotations": {"deployment.kubernetes.io/revision": "2"}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "app", "image": "pause"}]}}}},
                    {"replicas": replicas, "readyReplicas": replicas, "observedGeneration": 1}))
    # The burst Deployment's ReplicaSets (the current and an old one) and one of no Deployment.
    owner = [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "burst", "controller": True,
              "uid": "00000000-0000-4000-8000-0000000000b1"}]
    for name, revision, owners in (("burst-h2", "2", owner), ("unrelated-x", "1", []),
                                   ("burst-h1", "1", owner)):
        labels = {"app": "burst", "pod-template-hash": name.rsplit("-", 1)[1]}
        out.append((REPLICASETS, NS, {
            "metadata": {"name": name, "labels": labels, "ownerReferences": owners,
                         "annotations": {"deployment.kubernetes.io/revision": revision}},
            "spec": {"replicas": 0, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "app", "image": "pause"}]}}}},
                    None))
    out.append((DAEMONSETS, NS, {
        "metadata": {"name": "eks-pod-identity-agent"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "agent", "image": "pause"}]}}}},
        {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 3,
         "numberMisscheduled": 0}))
    out.append((CONFIGMAPS, NS, {"metadata": {"name": "cilium-config"},
                                 "data": {"routing-mode": "native", "tunnel-protocol": "vxlan"}}, None))
    out.append((SERVICES, NS, {"metadata": {"name": "echo-cloud"},
                               "spec": {"ports": [{"port": 80, "targetPort": 8080}],
                                        "selector": {"app": "echo"}}}, None))
    out.append((LEASES, NS, {"metadata": {"name": "hybrid-gateway-leader"},
                             "spec": {"holderIdentity": "gw-a_1b2c", "leaseDurationSeconds": 15,
                                      "acquireTime": MICRO, "renewTime": MICRO,
                                      "leaseTransitions": 3}}, None))
    for namespace, name, kind, about, reason in (
            (NS, "burst-2.b", "Pod", "burst-2", "Nominated"),
            (NS, "burst-1.a", "Pod", "burst-1", "Scheduled"),
            (NS, "burst-1.n", "Node", "burst-1", "DisruptionBlocked"),
            (OTHER_NS, "neighbour-1.c", "Pod", "neighbour-1", "Pulled")):
        out.append((EVENTS, namespace, _event(name, namespace, kind, about, reason), None))
    out.append((NODEPOOLS, None, {"metadata": {"name": "cloud-burst"},
                                  "spec": {"disruption": {"consolidationPolicy": "WhenEmpty"},
                                           "limits": {"cpu": "64"}}}, None))
    for name in ("cloud-burst-zz9", "cloud-burst-aa1"):
        out.append((NODECLAIMS, None, {"metadata": {"name": name, "labels": {POOL: "cloud-burst"}},
                                       "spec": {"nodeClassRef": {"name": "default"}}}, None))
    out.append((CLUSTERPOLICIES, None, {"metadata": {"name": "hybrid-pod-deletion-cost"},
                                        "spec": {"background": True, "rules": []}}, None))
    out.append((VTEP_CONFIGS, None, {"metadata": {"name": "hybrid-gateway"},
                                     "spec": {"endpoints": [{"name": "hybrid", "cidr": "10.200.0.0/16",
                                                             "tunnelEndpoint": "10.0.1.4"}]}}, None))
    return out


def _kinds(resource: str) -> tuple[str, str]:
    return kube_emulator._KINDS[resource]


# --- the two servers ------------------------------------------------------------------------------

def _api_server_alone(tmp_path_factory) -> Iterator[ControlPlane]:
    for plane in started(tmp_path_factory, "contract", kwok=False):
        for name, process in list(plane.processes):
            if name in ("kube-controller-manager", "kube-scheduler"):
                plane.processes.remove((name, process))
                stop_process(process)
        yield plane


def _create(plane: ControlPlane, resource: str, namespace: Optional[str], obj: dict,
            status: Optional[dict]) -> dict:
    api_version, kind = _kinds(resource)
    full = {"apiVersion": api_version, "kind": kind, **obj,
            "metadata": {**obj["metadata"], **({"namespace": namespace} if namespace else {})}}
    path = plane.path_of(full)
    answer = plane.call("POST", path.rsplit("/", 1)[0], full)
    assert answer.status == 201, (path, answer.body)
    if status is not None:
        answer = plane.call("PATCH", path + "/status", {"status": status},
                            content_type="application/merge-patch+json")
        assert answer.status == 200, (path, answer.body)
    stored = plane.call("GET", path).body
    stored["metadata"].pop("managedFields", None)
    return stored


class Servers:
    def __init__(self, plane: ControlPlane, emulator: Emulator):
        self.plane, self.emulator = plane, emulator
        self.real = Kube.connect(Endpoint(server=plane.url, token=TOKEN,
                                          certificate_authority=plane.ca_file.read_text()))
        self.emulated = Kube.connect(emulator.endpoint)

    def both(self, send: Callable[[Kube], Answer]) -> tuple[Answer, Answer]:
        return send(self.emulated), send(self.real)


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[Servers]:
    for plane in _api_server_alone(tmp_path_factory):
        for crd in CRDS:
            assert plane.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                              crd).status == 201
        for crd in CRDS:
            plane.wait_for(f"CRD {crd['metadata']['name']} served", lambda crd=crd: plane.call(
                "GET", f"/apis/{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"
                       f"/{crd['spec']['names']['plural']}").status == 200, timeout=60)
        plane.forget_discovery()
        emulator = Emulator()
        try:
            emulator.declare(NODEPOOLS, NODECLAIMS, CLUSTERPOLICIES, VTEP_CONFIGS, NAMESPACES)
            for namespace in (NS, OTHER_NS, "leftover"):
                stored = _create(plane, NAMESPACES, None, {"metadata": {
                    "name": namespace, "labels": {"rehearse": "hostnet"}}}, None)
                emulator.put(NAMESPACES, None, namespace, stored)
                # The ServiceAccount admission wants the namespace's default account (the
                # controller that makes it is stopped).
                plane.call("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                           {"metadata": {"name": "default"}})
            for resource, namespace, obj, status in seeds():
                stored = _create(plane, resource, namespace, obj, status)
                emulator.put(resource, namespace, stored["metadata"]["name"], stored)
            _rbac(plane)
            emulator.access_reviews(_rbac_decides)
            servers = Servers(plane, emulator)
            yield servers
            servers.real.close()
            servers.emulated.close()
        finally:
            emulator.close()


READER = f"system:serviceaccount:{NS}:reader"
READER_REASON = f'RBAC: allowed by RoleBinding "reader/{NS}" of Role "reader" to ServiceAccount "reader/{NS}"'


def _rbac(plane: ControlPlane) -> None:
    """A Role that lets ServiceAccount demo/reader get pods in demo (the SubjectAccessReview cases)."""
    assert plane.call("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/roles", {
        "metadata": {"name": "reader"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}).status == 201
    assert plane.call("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{NS}/rolebindings", {
        "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": NS}]}).status == 201


def _rbac_decides(spec: dict) -> tuple[bool, str]:
    """What the emulator's authorizer (a test's ``decide``) says for the Role above."""
    attributes = spec.get("resourceAttributes") or {}
    if (spec.get("user"), attributes.get("verb"), attributes.get("resource"),
            attributes.get("namespace")) == (READER, "get", "pods", NS):
        return True, READER_REASON
    return False, ""


# --- the requests, as the tools send them ---------------------------------------------------------

def _types() -> dict[str, Any]:
    from lightkube.generic_resource import create_global_resource
    from lightkube.resources.apps_v1 import DaemonSet, Deployment, ReplicaSet
    from lightkube.resources.coordination_v1 import Lease
    from lightkube.resources.core_v1 import ConfigMap, Event, Namespace, Node, Pod, Service

    return {"Node": Node, "Pod": Pod, "Namespace": Namespace, "ConfigMap": ConfigMap,
            "Service": Service, "Event": Event, "DaemonSet": DaemonSet, "Deployment": Deployment,
            "ReplicaSet": ReplicaSet, "Lease": Lease,
            "NodePool": create_global_resource("karpenter.sh", "v1", "NodePool", "nodepools"),
            "NodeClaim": create_global_resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
            # A version of an installed group that is not served (as a CRD not installed).
            "NodeClaim.v1beta1": create_global_resource("karpenter.sh", "v1beta1", "NodeClaim",
                                                        "nodeclaims"),
            "ClusterPolicy": create_global_resource("kyverno.io", "v1", "ClusterPolicy",
                                                    "clusterpolicies"),
            "Vtep": create_global_resource("cilium.io", "v2", "CiliumVTEPConfig", "ciliumvtepconfigs"),
            "Vtep.v2alpha1": create_global_resource("cilium.io", "v2alpha1", "CiliumVTEPConfig",
                                                    "ciliumvtepconfigs")}


T = _types()
SINCE = (NOW - datetime.timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _get(kind: str, name: str, namespace: Optional[str] = None) -> Callable[[Kube], Answer]:
    return lambda kube: typed(lambda: kube.client.get(T[kind], name, namespace=namespace))


def _list(kind: str, namespace: Optional[str] = None, **kw: Any) -> Callable[[Kube], Answer]:
    return lambda kube: typed(lambda: list(kube.client.list(T[kind], namespace=namespace, **kw)))


def _raw_get(path: str) -> Callable[[Kube], Answer]:
    return lambda kube: raw(kube._raw.get(path))


def _log(pod: str, container: Optional[str]) -> Callable[[Kube], Answer]:
    """The typed log call (gateway, gpu, hostnet: timestamps, sinceSeconds, a container)."""
    def send(kube: Kube) -> Answer:
        return typed(lambda: "".join(kube.client.log(pod, namespace=NS, container=container,
                                                      timestamps=True, since=61)))
    return send


def _log_raw(pod: str) -> Callable[[Kube], Answer]:
    """The raw log GET (failover: timestamps, sinceTime, no container)."""
    return _raw_get(f"/api/v1/namespaces/{NS}/pods/{pod}/log?timestamps=true&sinceTime={SINCE}")


def _review(user: str) -> Callable[[Kube], Answer]:
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": ["system:serviceaccounts",
                                              f"system:serviceaccounts:{NS}", "system:authenticated"],
                     "resourceAttributes": {"verb": "get", "group": "", "resource": "pods",
                                            "namespace": NS}}}
    return lambda kube: raw(kube._raw.post("/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                           json=body))


def _created(kind: str, manifest: dict, namespace: Optional[str] = None) -> Callable[[Kube], Answer]:
    def send(kube: Kube) -> Answer:
        obj = T[kind].from_dict(manifest)
        return typed(lambda: kube.client.create(obj, namespace=namespace), created=True)
    return send


def _then(*sends: Callable[[Kube], Answer]) -> Callable[[Kube], list[Answer]]:
    return lambda kube: [send(kube) for send in sends]


MADE_POD = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "made-1", "namespace": NS, "labels": {"rehearse": "throughput"}},
            "spec": {"nodeName": "hybrid-1", "restartPolicy": "Never",
                     "containers": [{"name": "iperf3", "image": "networkstatic/iperf3"}]}}
MADE_NS = {"apiVersion": "v1", "kind": "Namespace",
           "metadata": {"name": "made-ns", "labels": {"rehearse": "hostnet"}}}
UNSET_COST = {"metadata": {"annotations": {COST: None}}}
SCALE = {"spec": {"replicas": 5, "template": {"metadata": {"annotations": {
    "kubectl.kubernetes.io/restartedAt": STAMP}}}}}

#: Each case: what it sends (one request, or a request and the reads that show what it did).
#: The reads come first, then the writes, in this order (a write changes what later cases see).
CASES: dict[str, Callable[[Kube], Any]] = {
    "nodes.list": _list("Node"),
    "nodes.get": _get("Node", "hybrid-1"),
    "nodes.get.missing": _get("Node", "nope"),
    "pods.list": _list("Pod", NS),
    "pods.list.raw": _raw_get(f"/api/v1/namespaces/{NS}/pods"),
    "pods.list.label": _list("Pod", NS, labels={"app": "burst"}),
    "pods.list.label.set": _list("Pod", NS, labels={"app": "burst", "pod-template-hash": "h2"}),
    "pods.list.node": _list("Pod", "*", fields={"spec.nodeName": "hybrid-1"}),
    "pods.list.badfield": _list("Pod", "*", fields={"spec.bogus": "hybrid-1"}),
    "pods.get": _get("Pod", "burst-1", NS),
    "pods.get.missing": _get("Pod", "nope", NS),
    "log.missing-pod": _then(_log("nope", "app"), _log_raw("nope")),
    "log.bad-container": _then(_log("burst-1", "zz"), _log_raw("burst-1")),
    "log.which-container": _then(_log("prober-1", None), _log_raw("prober-1")),
    "log.no-node": _then(_log("pending-1", "app"), _log_raw("pending-1")),
    "log.node-missing": _then(_log("ghost-1", "app"), _log_raw("ghost-1")),
    "log.node-no-address": _then(_log("burst-0", "app"), _log_raw("burst-0")),
    "log.kubelet-unreachable": _then(_log("burst-1", "app"), _log_raw("burst-1")),
    "proxy.missing-pod": _raw_get(f"/api/v1/namespaces/{NS}/pods/nope:10080/proxy/metrics"),
    "proxy.no-ip": _then(_raw_get(f"/api/v1/namespaces/{NS}/pods/no-ip-1:8080/proxy/"),
                         # A loopback pod IP is refused the same way.
                         _raw_get(f"/api/v1/namespaces/{NS}/pods/burst-1:8088/proxy/healthz")),
    "service-proxy.missing": lambda kube: raw(kube._raw.post(
        f"/api/v1/namespaces/{NS}/services/nope:8000/proxy/v1/completions",
        json={"model": "m", "prompt": "hi", "max_tokens": 1})),
    "namespaces.get": _get("Namespace", "leftover"),
    "namespaces.get.missing": _get("Namespace", "nope"),
    "configmaps.get": _get("ConfigMap", "cilium-config", NS),
    "configmaps.get.missing": _get("ConfigMap", "nope", NS),
    "services.get": _get("Service", "echo-cloud", NS),
    "events.list.all": _list("Event", "*"),
    "events.list.object": _list("Event", NS, fields={"involvedObject.kind": "Pod",
                                                     "involvedObject.name": "burst-1"}),
    "daemonsets.get": _get("DaemonSet", "eks-pod-identity-agent", NS),
    "daemonsets.get.missing": _get("DaemonSet", "nope", NS),
    "deployments.get": _get("Deployment", "burst", NS),
    "deployments.get.raw": _raw_get(f"/apis/apps/v1/namespaces/{NS}/deployments/burst"),
    "deployments.get.missing": _then(_get("Deployment", "nope", NS),
                                     _raw_get(f"/apis/apps/v1/namespaces/{NS}/deployments/nope")),
    "replicasets.list": _list("ReplicaSet", NS),
    "replicasets.list.raw": _raw_get(f"/apis/apps/v1/namespaces/{NS}/replicasets"),
    "leases.get": _get("Lease", "hybrid-gateway-leader", NS),
    "leases.get.raw": _raw_get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/hybrid-gateway-leader"),
    "leases.get.missing": _raw_get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/nope"),
    "sar.allowed": _review(READER),
    "sar.denied": _review(f"system:serviceaccount:{NS}:nobody"),
    "vtep.get": _get("Vtep", "hybrid-gateway"),
    "vtep.get.raw": _raw_get("/apis/cilium.io/v2/ciliumvtepconfigs/hybrid-gateway"),
    "vtep.get.missing": _get("Vtep", "nope"),
    "vtep.get.version-not-served": _then(
        _get("Vtep.v2alpha1", "hybrid-gateway"),
        _raw_get("/apis/cilium.io/v2alpha1/ciliumvtepconfigs/hybrid-gateway")),
    "nodepools.get": _get("NodePool", "cloud-burst"),
    "nodepools.list": _list("NodePool"),
    "nodeclaims.list": _list("NodeClaim"),
    "nodeclaims.list.not-installed": _list("NodeClaim.v1beta1"),
    "clusterpolicies.get": _get("ClusterPolicy", "hybrid-pod-deletion-cost"),
    "clusterpolicies.get.missing": _get("ClusterPolicy", "nope"),
    "version": _raw_get("/version"),
    # --- writes ---
    "pods.create": _then(_created("Pod", MADE_POD, NS), _get("Pod", "made-1", NS)),
    "pods.create.again": _created("Pod", MADE_POD, NS),
    "pods.patch.annotation": _then(
        lambda kube: typed(lambda: kube.client.patch(T["Pod"], "burst-1", UNSET_COST, namespace=NS)),
        _get("Pod", "burst-1", NS)),
    "deployments.patch": _then(
        lambda kube: typed(lambda: kube.client.patch(T["Deployment"], "scaled", SCALE, namespace=NS)),
        _get("Deployment", "scaled", NS)),
    "pods.delete.now": _then(
        lambda kube: typed(lambda: kube.client.delete(T["Pod"], "made-1", namespace=NS, grace_period=0)),
        _get("Pod", "made-1", NS)),
    "pods.delete.missing": lambda kube: typed(lambda: kube.client.delete(T["Pod"], "nope", namespace=NS)),
    # A pod on a node is deleted gracefully: Terminating until its kubelet says it stopped.
    "pods.delete": _then(
        lambda kube: typed(lambda: kube.client.delete(T["Pod"], "burst-2", namespace=NS)),
        _get("Pod", "burst-2", NS)),
    "namespaces.create": _created("Namespace", MADE_NS),
    "namespaces.create.again": _created("Namespace", MADE_NS),
    "namespaces.delete": lambda kube: typed(lambda: kube.client.delete(T["Namespace"], "made-ns")),
    "namespaces.delete.missing": lambda kube: typed(lambda: kube.client.delete(T["Namespace"], "nope")),
}

#: The cases that write (what they show of a new object is each server's own uid and time).
WRITES = ("pods.create", "namespaces.create", "pods.delete")

#: The fields a follow-up read (a GET after a write) shows of what the write did; the other
#: follow-ups (the raw twin of a typed call) are read as the request's own shape.
FOLLOW_UP_READS = {
    "pods.create": contract.POD_READS,
    "pods.patch.annotation": contract.POD_READS,
    "pods.delete.now": contract.POD_READS,
    "pods.delete": contract.POD_READS + ("metadata.deletionGracePeriodSeconds",),
    "deployments.patch": contract.WORKLOAD_READS + ("metadata.generation",)}


def _ours(item: dict) -> bool:
    """The contract's objects, not the real cluster's own (kube-system's, default's)."""
    namespace = (item.get("metadata") or {}).get("namespace")
    return namespace in (None, NS, OTHER_NS)


def _normalised(case: str, seen: dict) -> dict:
    """What may differ for a reason outside the API server's rules, made equal, with the reason."""
    error = seen.get("error") or {}
    message = error.get("message") or ""
    if "dial tcp" in message:
        # The dial's own error: here nothing listens on the port (connection refused); the
        # emulator plays a hybrid node the control plane cannot route to (i/o timeout).
        error["message"] = message[:message.index("dial tcp")] + "dial tcp <the dial's error>"
    fields = seen.get("fields") or {}
    for written in ("metadata.uid", "metadata.creationTimestamp"):
        if case in WRITES and fields.get(written):
            # Each server's own: a new uid, its clock.
            fields[written] = "set"
    if fields.get("metadata.deletionTimestamp"):
        # Each server's own clock: now + the grace period. Present is what is compared.
        fields["metadata.deletionTimestamp"] = "set"
    if "Date" in seen:
        seen["Date"] = "set" if seen["Date"] else None
    return seen


def _shape_of(case: str) -> contract.Shape:
    [found] = [s for s in contract.INVENTORY if case in s.cases]
    return found


def _views(case: str, answers: Any) -> list[dict]:
    reads = _shape_of(case).reads
    answers = answers if isinstance(answers, list) else [answers]
    out = []
    for answer in answers:
        fields = reads if not out else FOLLOW_UP_READS.get(case, reads)
        seen = view(answer, fields, keep=_ours)
        if any(r == "header Date" for r in reads):
            seen["Date"] = _rfc1123(answer.headers.get("date"))
        out.append(_normalised(case, seen))
    return out


def _rfc1123(value: Optional[str]) -> Optional[str]:
    import email.utils

    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).isoformat()
    except (TypeError, ValueError):
        return None


def _differences(servers: Servers, cases: dict[str, Callable[[Kube], Any]]) -> dict[str, tuple]:
    found = {}
    for case, send in cases.items():
        emulated, real = servers.both(send)
        seen_emulated, seen_real = _views(case, emulated), _views(case, real)
        if seen_emulated != seen_real:
            found[case] = (seen_emulated, seen_real)
    return found


# --- the tests ------------------------------------------------------------------------------------

def test_the_inventory_names_a_case_for_every_request_both_can_answer():
    """Every request shape both servers can answer is sent (a case), every case belongs to a shape,
    and what is not sent says why."""
    cases = [c for s in contract.INVENTORY for c in s.cases]
    assert sorted(cases) == sorted(CASES), set(cases) ^ set(CASES)
    assert len(cases) == len(set(cases))
    for s in contract.INVENTORY:
        assert (s.answered == "both") == bool(s.cases), s.key
        assert s.answered in ("both", "kubelet", "pod network"), s.key
        assert s.answered == "both" or s.why, s.key
        assert s.reads and s.tools, s.key


def test_every_request_the_tools_make_is_answered_alike(servers):
    """The emulator answers each request as the real API server does: status, the exception the
    client raises, the error's Status (reason, message, details), a list's kind, order and what
    its selectors keep, and the fields the tools read."""
    found = _differences(servers, CASES)
    lines = [f"{case}:\n  emulator: {emulated}\n  real:     {real}"
             for case, (emulated, real) in found.items()]
    assert not found, "the emulator answers otherwise than the real API server:\n" + "\n".join(lines)


def test_a_refused_token_is_answered_alike(servers):
    """A bearer token the API server does not accept: 401 with the Status ``Unauthorized``, for
    a raw GET and a typed list alike (the emulator's ``authenticate``; lightkube's client retries
    once with a renewed token, and the same one is refused again on both)."""
    refusing = Emulator()
    try:
        refusing.authenticate(lambda: NOW, accept=lambda token: "not a token of this cluster",
                              cluster="lab", keys=("AKIDEXAMPLE", "secret"), region="us-east-1")
        refusing.put(NODES, None, "hybrid-1", {"metadata": {"name": "hybrid-1"}})
        clients = [Kube.connect(Endpoint(server=refusing.url, certificate_authority=None,
                                         token="not-a-token")),
                   Kube.connect(Endpoint(server=servers.plane.url, token="not-a-token",
                                         certificate_authority=servers.plane.ca_file.read_text()))]
        try:
            seen = [[view(raw(kube._raw.get("/version")), ()), view(_list("Node")(kube), ())]
                    for kube in clients]
        finally:
            for kube in clients:
                kube.close()
    finally:
        refusing.close()
    assert seen[0] == seen[1]
    assert seen[1][1]["status"] == 401 and seen[1][1]["raised"] == "ApiError"
