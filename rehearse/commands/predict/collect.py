"""What `python -m rehearse predict` reads: a pod list from a file, or the Deployment, its
ReplicaSets and their pods from the cluster (read-only), and the ReplicaSets the Deployment
controller resizes. What the command is and does, its --help, is its face's docstring
(command.py); the forecast is rehearse.models.ranking's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rehearse.models.deployment import age_key, controller_of, replicas_of, revision, selector_matches, split_scale
from rehearse.models.ranking import is_active
from rehearse.run.errors import RunError


def read_pod_list(path: Path) -> list[dict]:
    """``kubectl get pods -o json`` (a List) or the API's PodList: its items, each a Pod."""
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise RunError(f"no file {path}: write it with `kubectl get pods -o json > {path}`") from None
    except (OSError, UnicodeDecodeError) as error:
        raise RunError(f"cannot read {path}: {error}") from None
    except ValueError as error:
        raise RunError(f"{path} is not JSON ({error}): write it with `kubectl get pods -o json`") from None
    kind = document.get("kind") if isinstance(document, dict) else None
    if kind not in ("List", "PodList") or not isinstance(document.get("items"), list):
        what = f"a {kind}" if kind else f"a JSON {type(document).__name__}"
        raise RunError(f"{path} is {what}, not a List of Pods: write it with `kubectl get pods -o json`")
    for number, item in enumerate(document["items"], 1):
        if not isinstance(item, dict):
            raise RunError(f"{path}: item {number} is a JSON {type(item).__name__}, not a Pod")
        if item.get("kind", "Pod") != "Pod":
            raise RunError(f"{path}: item {number} is a {item.get('kind')}, not a Pod")
        if not isinstance(item.get("metadata"), dict) or not item["metadata"].get("name"):
            raise RunError(f"{path}: item {number} is a Pod without a name")
    return document["items"]


@dataclass
class LiveState:
    """The Deployment, its ReplicaSets (the current one: its revision), every pod of the
    namespace, and the related pods (``related_pods``)."""
    deploy: dict
    replica_sets: list[dict]
    current: dict
    all_pods: list[dict]
    related: list[dict]

    def pods_of(self, rs: dict) -> list[dict]:
        """The ReplicaSet's pods as its controller claims them: controlled by it and matching
        its selector, or orphans matching it (adopted before it scales)."""
        rs_uid = rs["metadata"].get("uid")
        selector = (rs.get("spec") or {}).get("selector")
        pods = []
        for pod in self.all_pods:
            owner = controller_of(pod)
            labels = (pod.get("metadata") or {}).get("labels")
            if owner is not None and owner.get("uid") == rs_uid and selector_matches(selector, labels):
                pods.append(pod)
            elif owner is None and is_active(pod) and selector_matches(selector, labels):
                pods.append(pod)
        return pods


def live_state(kube: Any, namespace: str, deployment: str) -> LiveState:
    def get(path: str, what: str) -> dict:
        status, body = kube.get_raw(path)
        if status == 404:
            raise RunError(f"{what} not found")
        if status in (401, 403):
            raise RunError(f"the cluster refused to show {what} (HTTP {status}): check your access entry")
        if status >= 300:
            raise RunError(f"the API server answered HTTP {status} for {what}")
        try:
            return json.loads(body)
        except ValueError:
            raise RunError(f"the API server's answer for {what} is not JSON") from None

    deploy = get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{deployment}",
                 f"Deployment {namespace}/{deployment}")
    uid = (deploy.get("metadata") or {}).get("uid")
    replica_sets = [rs for rs in get(f"/apis/apps/v1/namespaces/{namespace}/replicasets",
                                     f"the ReplicaSets in {namespace}").get("items") or []
                    if (controller_of(rs) or {}).get("uid") == uid and uid]
    if not replica_sets:
        raise RunError(f"Deployment {namespace}/{deployment} controls no ReplicaSet yet")
    # The current ReplicaSet carries the Deployment's revision; failing that, the newest.
    wanted = revision(deploy)
    newest = max(replica_sets, key=lambda rs: (revision(rs), (rs.get("metadata") or {}).get("creationTimestamp") or ""))
    current_rs = next((rs for rs in replica_sets if revision(rs) == wanted), newest)
    all_pods = get(f"/api/v1/namespaces/{namespace}/pods", f"the pods in {namespace}").get("items") or []
    related, seen = [], set()
    for rs in replica_sets:
        for pod in all_pods:
            key = (pod.get("metadata") or {}).get("uid") or (pod.get("metadata") or {}).get("name")
            if key not in seen and selector_matches((rs.get("spec") or {}).get("selector"),
                                                    (pod.get("metadata") or {}).get("labels")):
                seen.add(key)
                related.append(pod)
    return LiveState(deploy, replica_sets, current_rs, all_pods, related)


def live_input(kube: Any, namespace: str, deployment: str) -> tuple[list[dict], list[dict], str]:
    """From the cluster, as the controller sees them: the pods of the Deployment's current
    ReplicaSet (controlled by it and matching its selector, or orphans it would adopt), and the
    related pods — every pod matching the selector of a ReplicaSet the Deployment controls,
    once each (getIndirectlyRelatedPods). Returns (pods, related, ReplicaSet name)."""
    state = live_state(kube, namespace, deployment)
    return state.pods_of(state.current), state.related, state.current["metadata"].get("name", "")


def live_parts(state: LiveState, replicas: int, where: str) -> list[tuple[str, list[dict], int]]:
    """(source, the ReplicaSet's pods, its new size) for each ReplicaSet the Deployment
    controller resizes when the Deployment goes to ``replicas`` (``split_scale``); with one
    active ReplicaSet, that one at ``replicas``."""
    sizes = split_scale(state.deploy, state.replica_sets, state.current, replicas)
    active = [rs for rs in state.replica_sets if replicas_of(rs) > 0]
    if not sizes and len(active) <= 1:
        target = active[0] if active else state.current
        sizes = {target["metadata"]["name"]: replicas}
    return [(f"{where} (ReplicaSet {rs['metadata']['name']})", state.pods_of(rs),
             sizes[rs["metadata"]["name"]])
            for rs in sorted(state.replica_sets, key=age_key)
            if rs["metadata"]["name"] in sizes]

