"""What the ReplicaSet controller's rules read from a pod (rehearse.models.ranking): its
deletion cost, whether it is active, its facts, and its rank (pods of the Deployment on its node)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

from rehearse.models.ranking.times import kube_time_ns

#: The annotation rule 4 reads (k8s.io/api/core/v1 PodDeletionCost).
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def deletion_cost(annotations: Optional[dict]) -> int:
    """``controller.kubernetes.io/pod-deletion-cost`` exactly as the controller reads it
    (pkg/apis/core/helper GetDeletionCostFromPodAnnotations): absent = 0; an int32 in decimal
    whose first character is '-' or 1-9, or exactly "0"; anything else ("+10", "008", "",
    "1.5", out of int32 range) counts as 0."""
    value = (annotations or {}).get(POD_DELETION_COST)
    if value is None:
        return 0
    return _parse_cost(value)[0]


def _parse_cost(value: Any) -> tuple[int, bool]:
    """(cost, valid)."""
    if not isinstance(value, str) or not value:
        return 0, False
    if not (value[0] == "-" or value == "0" or "1" <= value[0] <= "9"):
        return 0, False
    # strconv.ParseInt(value, 10, 32): an optional sign, then ASCII digits only.
    if not re.fullmatch(r"[+-]?[0-9]+", value):
        return 0, False
    number = int(value)
    if not -(2**31) <= number <= 2**31 - 1:
        return 0, False
    return number, True


def is_active(pod: dict) -> bool:
    """controller.IsPodActive: not Succeeded, not Failed, no deletionTimestamp."""
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (pod.get("metadata") or {}).get("deletionTimestamp")


@dataclass(frozen=True)
class PodFacts:
    """What the rules read from one pod."""

    name: str
    namespace: str
    uid: str
    node: str
    phase: str
    ready: bool
    #: The Ready condition's lastTransitionTime (ns), None when unset or not Ready.
    ready_time: Optional[int]
    cost: int
    #: The annotation's text when it is set but invalid (it then counts as 0).
    cost_invalid: Optional[str]
    restarts: int
    sidecar_restarts: int
    created: Optional[int]
    rank: int = 0


def pod_facts(pod: dict, rank: int = 0) -> PodFacts:
    """Reads one Pod object (a dict as the API serves it); ValueError names a malformed pod."""
    if not isinstance(pod, dict):
        raise ValueError(f"a pod must be an object, not {type(pod).__name__}")
    name = ((pod.get("metadata") or {}) if isinstance(pod.get("metadata"), dict) else {}).get("name") or ""
    try:
        return _pod_facts(pod, rank)
    except (ValueError, TypeError, AttributeError) as error:
        raise ValueError(f"pod {name or '(unnamed)'}: {error}") from None


def _pod_facts(pod: dict, rank: int) -> PodFacts:
    meta, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, dict)]
    # podutil.IsPodReady: the first Ready condition's status; podReadyTime: the first Ready
    # condition whose status is True.
    ready_conditions = [c for c in conditions if c.get("type") == "Ready"]
    ready = bool(ready_conditions) and ready_conditions[0].get("status") == "True"
    ready_time = None
    if ready:
        first_true = next(c for c in ready_conditions if c.get("status") == "True")
        ready_time = kube_time_ns(first_true.get("lastTransitionTime"))
    created = kube_time_ns(meta.get("creationTimestamp"))
    raw_cost = (meta.get("annotations") or {}).get(POD_DELETION_COST)
    cost, valid = _parse_cost(raw_cost) if raw_cost is not None else (0, True)
    restarts = max([int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []],
                   default=0)
    # Sidecars: init containers whose restartPolicy is Always (compareMaxContainerRestarts).
    sidecars = {c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
    sidecar_restarts = max([int(c.get("restartCount") or 0) for c in status.get("initContainerStatuses") or []
                            if c.get("name") in sidecars], default=0)
    return PodFacts(name=meta.get("name") or "", namespace=meta.get("namespace") or "",
                    uid=meta.get("uid") or "", node=spec.get("nodeName") or "",
                    phase=status.get("phase") or "", ready=ready, ready_time=ready_time, cost=cost,
                    cost_invalid=None if valid else str(raw_cost), restarts=restarts,
                    sidecar_restarts=sidecar_restarts, created=created, rank=rank)


def ranks(pods: Sequence[dict], related: Iterable[dict]) -> list[int]:
    """getPodsRankedByRelatedPodsOnSameNode: each pod's rank is the number of active pods in
    ``related`` on its node (unscheduled pods share the node ""); a pod counts itself only when
    it is in ``related``. An empty ``related`` (a ReplicaSet with no controller) ranks all 0."""
    on_node: dict[str, int] = {}
    for pod in related:
        if isinstance(pod, dict) and is_active(pod):
            node = (pod.get("spec") or {}).get("nodeName") or ""
            on_node[node] = on_node.get(node, 0) + 1
    return [on_node.get((p.get("spec") or {}).get("nodeName") or "", 0) for p in pods]
