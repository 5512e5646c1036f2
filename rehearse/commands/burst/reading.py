"""Reading the cluster (collect): the summaries of the objects a run records, and the
Kubernetes side of the collector (``Cluster``), which is all that talks to the API server."""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any, Iterable, Optional

from rehearse.commands.burst.kinds import (COST, HYBRID_LABEL, HYBRID_VALUE, KARPENTER_DEPLOYMENT,
                                  KARPENTER_NS, KARPENTER_POD_LABEL, KARPENTER_REASONS,
                                  NODEPOOL_LABEL, RESTARTED_AT, REVISION, SAR_PATH, TEMPLATE_HASH)
from rehearse.commands.burst.settings import Settings


# --- reading the cluster: summaries (what is recorded) ----------------------------------------

def _condition(obj: dict, kind: str) -> Optional[dict]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), None)


def cost_of(value: Optional[str]) -> int:
    """The ReplicaSet controller's reading of a pod-deletion-cost (docs/scale-in.md#the-replicaset-controllers-ranking): absent or
    invalid counts as 0."""
    if value is None or not re.fullmatch(r"-?[1-9][0-9]*|0", value):
        return 0
    number = int(value)
    return number if -2 ** 31 <= number < 2 ** 31 else 0


def pod_summary(pod: dict, places: dict[str, str]) -> dict:
    """What the tables need of a burst pod."""
    md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ready = _condition(pod, "Ready")
    scheduled = _condition(pod, "PodScheduled")
    disruption = _condition(pod, "DisruptionTarget")
    node = spec.get("nodeName")
    return {
        "name": md.get("name"), "uid": md.get("uid"), "node": node,
        "place": places.get(node) if node else None,
        "phase": status.get("phase"),
        "ready": bool(ready and ready.get("status") == "True"),
        "ready_at": ready.get("lastTransitionTime") if ready and ready.get("status") == "True" else None,
        "created": md.get("creationTimestamp"),
        "deleting": bool(md.get("deletionTimestamp")),
        "cost": (md.get("annotations") or {}).get(COST),
        "hash": (md.get("labels") or {}).get(TEMPLATE_HASH),
        "unschedulable": bool(scheduled and scheduled.get("status") == "False"),
        "disruption_target": ({k: disruption.get(k) for k in ("status", "reason", "message",
                                                               "lastTransitionTime")}
                              if disruption and disruption.get("status") == "True" else None),
    }


def active(pod: dict) -> bool:
    return not pod.get("deleting") and pod.get("phase") not in ("Succeeded", "Failed")


def pod_for_forecast(pod: dict) -> dict:
    """The Pod as the API returns it, trimmed to what the ReplicaSet controller reads."""
    md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    keep = ("name", "namespace", "uid", "labels", "annotations", "ownerReferences",
            "creationTimestamp", "deletionTimestamp")
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {k: md[k] for k in keep if md.get(k) is not None},
            "spec": {"nodeName": spec.get("nodeName")} if spec.get("nodeName") else {},
            "status": {"phase": status.get("phase"),
                       "conditions": status.get("conditions") or [],
                       "containerStatuses": [{"name": c.get("name"),
                                              "restartCount": c.get("restartCount", 0),
                                              "ready": c.get("ready")}
                                             for c in status.get("containerStatuses") or []]}}


def node_summary(node: dict, nodepool: str) -> dict:
    md, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    labels = md.get("labels") or {}
    ready = _condition(node, "Ready")
    if labels.get(HYBRID_LABEL) == HYBRID_VALUE:
        place = "hybrid"
    elif labels.get(NODEPOOL_LABEL) == nodepool:
        place = "cloud"
    else:
        place = "other"
    return {"name": md.get("name"), "place": place,
            "nodepool": labels.get(NODEPOOL_LABEL),
            "instance_type": labels.get("node.kubernetes.io/instance-type"),
            "allocatable": {k: (status.get("allocatable") or {}).get(k) for k in ("cpu", "memory")},
            "capacity": {k: (status.get("capacity") or {}).get(k) for k in ("cpu", "memory")},
            "taints": [{k: t.get(k) for k in ("key", "value", "effect")}
                       for t in spec.get("taints") or []],
            "unschedulable": bool(spec.get("unschedulable")),
            "ready": bool(ready and ready.get("status") == "True")}


def _resources(containers: Iterable[dict]) -> list[dict]:
    return [{"name": c.get("name"),
             "resources": {"requests": dict(((c.get("resources") or {}).get("requests") or {}))}}
            for c in containers]


def neighbour_summary(pod: dict) -> dict:
    """A pod sharing a hybrid node with the burst pods: what the scheduler counts of it."""
    md, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return {"name": md.get("name"), "namespace": md.get("namespace"), "node": spec.get("nodeName"),
            "labels": {k: v for k, v in (md.get("labels") or {}).items() if k == "app"},
            "phase": status.get("phase"), "deleting": bool(md.get("deletionTimestamp")),
            "containers": _resources(spec.get("containers") or []),
            "init_containers": _resources(spec.get("initContainers") or [])}


def deployment_summary(deployment: Optional[dict]) -> dict:
    if deployment is None:
        return {"found": False}
    spec = deployment.get("spec") or {}
    template = spec.get("template") or {}
    pod = template.get("spec") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    return {"found": True, "name": (deployment.get("metadata") or {}).get("name"),
            "replicas": spec.get("replicas"),
            "template_cost": annotations.get(COST),
            "restarted_at": annotations.get(RESTARTED_AT),
            "tolerations": pod.get("tolerations") or [],
            "containers": _resources(pod.get("containers") or []),
            "init_containers": _resources(pod.get("initContainers") or [])}


def nodeclaim_summary(claim: dict) -> dict:
    md, status = claim.get("metadata") or {}, claim.get("status") or {}
    ready = _condition(claim, "Ready")
    return {"name": md.get("name"), "created": md.get("creationTimestamp"),
            "nodepool": (md.get("labels") or {}).get(NODEPOOL_LABEL),
            "node": status.get("nodeName"),
            "instance_type": (md.get("labels") or {}).get("node.kubernetes.io/instance-type"),
            "ready": bool(ready and ready.get("status") == "True"),
            "deleting": bool(md.get("deletionTimestamp"))}


def event_summary(event: dict) -> dict:
    """A v1 Event as the consolidation watch records it."""
    md, involved = event.get("metadata") or {}, event.get("involvedObject") or {}
    series = event.get("series") or {}
    return {"key": f"{md.get('namespace')}/{md.get('name')}", "uid": md.get("uid"),
            "kind": involved.get("kind"), "object": involved.get("name"),
            "object_namespace": involved.get("namespace"),
            "reason": event.get("reason"), "message": event.get("message"),
            "type": event.get("type"), "count": event.get("count") or 1,
            "first": event.get("firstTimestamp") or event.get("eventTime"),
            "last": (event.get("lastTimestamp") or series.get("lastObservedTime")
                     or event.get("eventTime") or event.get("firstTimestamp")),
            "source": ((event.get("source") or {}).get("component")
                       or event.get("reportingComponent") or event.get("reportingController"))}


def is_karpenter_event(event: dict, namespace: str) -> bool:
    """Karpenter's, about a Node, a NodeClaim, a NodePool or a burst pod."""
    about = event.get("kind") in ("Node", "NodeClaim", "NodePool") or (
        event.get("kind") == "Pod" and event.get("object_namespace") in (namespace, None))
    source = str(event.get("source") or "").lower()
    return about and ("karpenter" in source or event.get("reason") in KARPENTER_REASONS)


def feature_gates(container: dict) -> tuple[dict[str, bool], Optional[str]]:
    """Karpenter's feature gates as its controller container starts with them: the chart renders
    ``settings.featureGates`` into the ``FEATURE_GATES`` env var (``Name=true,...``); a
    ``--feature-gates`` argument counts too. (gates, where they were read)."""
    text, source = None, None
    for env in container.get("env") or []:
        if env.get("name") == "FEATURE_GATES" and env.get("value") is not None:
            text, source = env["value"], "env FEATURE_GATES"
    args = [str(a) for a in (container.get("args") or []) + (container.get("command") or [])]
    for i, arg in enumerate(args):
        if arg.startswith("--feature-gates="):
            text, source = arg.split("=", 1)[1], "argument --feature-gates"
        elif arg == "--feature-gates" and i + 1 < len(args):
            text, source = args[i + 1], "argument --feature-gates"
    gates = {}
    for item in (text or "").split(","):
        name, _, value = item.strip().partition("=")
        if name:
            gates[name] = value.strip().lower() == "true"
    return gates, source


def image_version(image: Optional[str]) -> Optional[tuple[int, int, int]]:
    """The version in an image reference's tag (``.../controller:1.15.0@sha256:...``)."""
    if not image:
        return None
    name = image.split("@", 1)[0]
    tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)", tag)
    return tuple(int(g) for g in match.groups()) if match else None  # type: ignore[return-value]


def karpenter_summary(pod_or_template: dict, name: Optional[str] = None, ready: bool = True) -> dict:
    containers = pod_or_template.get("containers") or []
    container = next((c for c in containers if c.get("name") == "controller"),
                     containers[0] if containers else {})
    gates, source = feature_gates(container)
    version = image_version(container.get("image"))
    return {"name": name, "ready": ready, "image": container.get("image"),
            "version": ".".join(map(str, version)) if version else None,
            "gates": gates, "gates_source": source,
            "service_account": pod_or_template.get("serviceAccountName")}


# --- the Kubernetes side of the collector -------------------------------------------------------

def _types() -> dict[str, Any]:
    from lightkube.generic_resource import create_global_resource
    from lightkube.resources.apps_v1 import Deployment, ReplicaSet
    from lightkube.resources.core_v1 import ConfigMap, Event, Node, Pod

    return {"Pod": Pod, "Node": Node, "ConfigMap": ConfigMap, "Deployment": Deployment,
            "Event": Event,
            "ReplicaSet": ReplicaSet,
            "NodePool": create_global_resource("karpenter.sh", "v1", "NodePool", "nodepools"),
            "NodeClaim": create_global_resource("karpenter.sh", "v1", "NodeClaim", "nodeclaims"),
            "ClusterPolicy": create_global_resource("kyverno.io", "v1", "ClusterPolicy",
                                                    "clusterpolicies")}


def _not_found(error: BaseException) -> bool:
    from rehearse.lab.leader import not_found

    return not_found(error)


def _http_errors() -> tuple[type[BaseException], ...]:
    import httpx2
    from lightkube import ApiError

    return (ApiError, httpx2.HTTPStatusError)


class Cluster:
    """The reads and writes the runs make, as dicts."""

    def __init__(self, ctx: Any, settings: Settings):
        self.ctx, self.s = ctx, settings
        self.t = _types()
        self.client = ctx.kube.client
        #: Every node seen in this run -> hybrid | cloud | other (a consolidated node keeps its
        #: place in the tables).
        self.places: dict[str, str] = {}
        self.node_summaries: dict[str, dict] = {}

    def get(self, kind: str, name: str, namespace: Optional[str] = None) -> Optional[dict]:
        try:
            if namespace is None:
                found = self.client.get(self.t[kind], name)
            else:
                found = self.client.get(self.t[kind], name, namespace=namespace)
        except _http_errors() as error:
            if _not_found(error):
                return None
            raise
        return found.to_dict() if hasattr(found, "to_dict") else dict(found)

    def list(self, kind: str, namespace: Optional[str] = None, **kwargs: Any) -> Optional[list[dict]]:
        """The objects, or None when the API does not serve the kind (a CRD not installed)."""
        try:
            if namespace is None:
                found = list(self.client.list(self.t[kind], **kwargs))
            else:
                found = list(self.client.list(self.t[kind], namespace=namespace, **kwargs))
        except _http_errors() as error:
            if _not_found(error):
                return None
            raise
        return [f.to_dict() if hasattr(f, "to_dict") else dict(f) for f in found]

    # nodes and pods

    def nodes(self) -> list[dict]:
        found = [node_summary(n, self.s.nodepool) for n in self.list("Node") or []]
        for node in found:
            self.places[node["name"]] = node["place"]
            self.node_summaries[node["name"]] = node
        return sorted(found, key=lambda n: n["name"])

    def burst_pods(self) -> list[dict]:
        """Raw burst pods (the label is sent and applied here again, for a server that ignores it)."""
        app = self.s.app
        found = self.list("Pod", self.s.namespace, labels={"app": app}) or []
        pods = [p for p in found if ((p.get("metadata") or {}).get("labels") or {}).get("app") == app]
        if any((p.get("spec") or {}).get("nodeName") not in self.places
               for p in pods if (p.get("spec") or {}).get("nodeName")):
            self.nodes()
        return sorted(pods, key=lambda p: p["metadata"]["name"])

    def summaries(self, pods: Optional[list[dict]] = None) -> list[dict]:
        return [pod_summary(p, self.places) for p in (pods if pods is not None else self.burst_pods())]

    def workload(self) -> dict:
        """The Deployment, its ReplicaSets, and its pods: those of the newest revision (the ones
        a scale-in chooses from) and those of every ReplicaSet (which set the ranks)."""
        deployment = self.get("Deployment", self.s.deployment, self.s.namespace)
        replica_sets = []
        for rs in self.list("ReplicaSet", self.s.namespace) or []:
            owners = (rs.get("metadata") or {}).get("ownerReferences") or []
            if any(o.get("kind") == "Deployment" and o.get("name") == self.s.deployment for o in owners):
                replica_sets.append(rs)

        def revision(rs: dict) -> int:
            try:
                return int(((rs.get("metadata") or {}).get("annotations") or {}).get(REVISION, 0))
            except ValueError:
                return 0

        def template_hash(rs: dict) -> Optional[str]:
            labels = (rs.get("metadata") or {}).get("labels") or {}
            selector = ((rs.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            return labels.get(TEMPLATE_HASH) or selector.get(TEMPLATE_HASH)

        newest = max(replica_sets, key=revision) if replica_sets else None
        hashes = {template_hash(rs) for rs in replica_sets} - {None}
        pods = self.burst_pods()
        current_hash = template_hash(newest) if newest else None
        current = [p for p in pods if newest is None
                   or ((p["metadata"].get("labels") or {}).get(TEMPLATE_HASH) == current_hash)]
        related = [p for p in pods if not hashes
                   or (p["metadata"].get("labels") or {}).get(TEMPLATE_HASH) in hashes]
        return {"deployment": deployment, "revision": revision(newest) if newest else None,
                "hash": current_hash, "all": pods, "current": current, "related": related}

    def nodeclaims(self) -> Optional[list[dict]]:
        found = self.list("NodeClaim")
        if found is None:
            return None
        return sorted((nodeclaim_summary(c) for c in found
                       if ((c.get("metadata") or {}).get("labels") or {}).get(NODEPOOL_LABEL)
                       == self.s.nodepool), key=lambda c: (c["created"] or "", c["name"]))

    def karpenter_events(self) -> list[dict]:
        """Karpenter's events, every namespace (a Node's or NodeClaim's land in default), in
        the order they last happened."""
        found = [event_summary(e) for e in self.list("Event", "*") or []]
        return sorted((e for e in found if is_karpenter_event(e, self.s.namespace)),
                      key=lambda e: (e["last"] or "", e["key"]))

    def hybrid_neighbours(self, hybrid_nodes: Iterable[str]) -> list[dict]:
        found = []
        for node in hybrid_nodes:
            for pod in self.list("Pod", "*", fields={"spec.nodeName": node}) or []:
                if (pod.get("spec") or {}).get("nodeName") != node:
                    continue  # a server that ignores field selectors lists every pod
                labels = (pod.get("metadata") or {}).get("labels") or {}
                if (pod.get("metadata") or {}).get("namespace") == self.s.namespace \
                        and labels.get("app") == self.s.app:
                    continue
                found.append(neighbour_summary(pod))
        return sorted(found, key=lambda p: (p["node"], p["namespace"], p["name"]))

    def scale(self, replicas: int, restart_at: Optional[str] = None) -> None:
        body: dict[str, Any] = {"spec": {"replicas": replicas}}
        if restart_at is not None:
            body["spec"]["template"] = {"metadata": {"annotations": {RESTARTED_AT: restart_at}}}
        self.client.patch(self.t["Deployment"], self.s.deployment, body, namespace=self.s.namespace)

    # the scenario's machinery

    def review(self, who: str, namespace: str, account: str, verb: str, resource: str,
               in_namespace: Optional[str] = None) -> dict:
        """A SubjectAccessReview: may ``namespace:account`` ``verb`` ``resource``?"""
        import json

        attributes = {"verb": verb, "group": "", "resource": resource}
        if in_namespace:
            attributes["namespace"] = in_namespace
        user = f"system:serviceaccount:{namespace}:{account}"
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": ["system:serviceaccounts",
                                                  f"system:serviceaccounts:{namespace}",
                                                  "system:authenticated"],
                         "resourceAttributes": attributes}}
        seen = {"who": who, "user": user, "verb": verb, "resource": resource,
                "namespace": in_namespace}
        status, text = self.ctx.kube.post_raw(SAR_PATH, body)
        try:
            answer = json.loads(text)
        except ValueError:
            answer = {}
        if status >= 300 or not isinstance(answer, dict):
            message = answer.get("message") if isinstance(answer, dict) else None
            return {**seen, "http": status, "allowed": None,
                    "error": message or text.strip()[:200] or f"HTTP {status}"}
        result = answer.get("status") or {}
        return {**seen, "http": status, "allowed": bool(result.get("allowed")),
                "denied": bool(result.get("denied")), "reason": result.get("reason") or "",
                "error": result.get("evaluationError") or None}

    def service_account(self, namespace: str, deployment: str, default: str) -> str:
        found = self.get("Deployment", deployment, namespace)
        pod = (((found or {}).get("spec") or {}).get("template") or {}).get("spec") or {}
        return pod.get("serviceAccountName") or default

    def karpenter(self) -> dict:
        """The gate as the running controller started with it: its pods' spec (the gate is read
        at start), the Deployment's when no pod runs."""
        key, value = KARPENTER_POD_LABEL
        pods = [p for p in self.list("Pod", KARPENTER_NS, labels={key: value}) or []
                if ((p.get("metadata") or {}).get("labels") or {}).get(key) == value
                and not (p.get("metadata") or {}).get("deletionTimestamp")]
        running = [karpenter_summary(p.get("spec") or {}, p["metadata"]["name"],
                                     ready=bool((_condition(p, "Ready") or {}).get("status") == "True"))
                   for p in sorted(pods, key=lambda p: p["metadata"]["name"])]
        deployment = self.get("Deployment", KARPENTER_DEPLOYMENT, KARPENTER_NS)
        template = (((deployment or {}).get("spec") or {}).get("template") or {}).get("spec")
        return {"deployment_found": deployment is not None,
                "deployment": karpenter_summary(template, KARPENTER_DEPLOYMENT) if template else None,
                "pods": running}


def forecast_event(forecast: Any) -> dict:
    return {"replicas_before": forecast.replicas_before, "replicas_after": forecast.replicas_after,
            "delete": [asdict(v) for v in forecast.delete], "order": list(forecast.order),
            "clock_undecided": list(forecast.clock_undecided), "window": forecast.window}
