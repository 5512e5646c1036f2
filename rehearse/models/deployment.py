"""The Deployment and ReplicaSet controllers' view of ownership and scale, as pure functions:
which object controls another, which pods a selector matches, and how the Deployment controller
shares a new size among its ReplicaSets during a rollout (docs/scale-in.md#a-rollout-in-progress-the-deployment-controllers-split).
``rehearse predict`` reads the cluster with them; the ranking itself is rehearse.models.ranking."""

from __future__ import annotations

import math
from typing import Any, Optional

from rehearse.models.ranking import kube_time_ns


def controller_of(obj: dict) -> Optional[dict]:
    """metav1.GetControllerOf: the ownerReference with controller: true."""
    return next((ref for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
                 if isinstance(ref, dict) and ref.get("controller")), None)


def selector_matches(selector: Optional[dict], labels: Optional[dict]) -> bool:
    """metav1.LabelSelectorAsSelector(...).Matches: matchLabels and matchExpressions (In,
    NotIn, Exists, DoesNotExist). An empty selector matches everything; a missing one nothing."""
    if selector is None:
        return False
    labels = labels or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def revision(obj: dict) -> int:
    """The object's deployment.kubernetes.io/revision annotation, -1 when absent or not a number."""
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get("deployment.kubernetes.io/revision")
    try:
        return int(text)
    except (TypeError, ValueError):
        return -1


def replicas_of(rs: dict) -> int:
    """A ReplicaSet's spec.replicas (0 when unset)."""
    return int((rs.get("spec") or {}).get("replicas") or 0)


def _scaled(value: Any, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int as is, "N%" of ``total`` rounded up or
    down."""
    if isinstance(value, str):
        if not value.endswith("%"):
            raise ValueError(f"{value!r} is neither an int nor a percentage")
        exact = int(value[:-1]) * total / 100
        return math.ceil(exact) if round_up else math.floor(exact)
    return int(value)


def max_surge(deploy: dict, replicas: int) -> int:
    """deploymentutil.MaxSurge for a Deployment of ``replicas``: 0 unless RollingUpdate; the
    defaults are 25% and 25% (ResolveFenceposts: surge rounds up, unavailable down, and both 0
    makes unavailable 1 — which leaves surge 0)."""
    strategy = (deploy.get("spec") or {}).get("strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        return 0
    rolling = strategy.get("rollingUpdate") or {}
    return _scaled(rolling.get("maxSurge", "25%"), replicas, True)


def _annotation_int(rs: dict, key: str) -> Optional[int]:
    text = ((rs.get("metadata") or {}).get("annotations") or {}).get(key)
    # strconv.ParseUint(text, 10, 32), at most MaxInt32.
    if text is None or not text.isdigit() or not text.isascii() or int(text) > 2**31 - 1:
        return None
    return int(text)


def age_key(rs: dict) -> tuple:
    """Older first: creation time, then name."""
    meta = rs.get("metadata") or {}
    return (kube_time_ns(meta.get("creationTimestamp")) or 0, meta.get("name") or "")


def split_scale(deploy: dict, replica_sets: list[dict], current: Optional[dict],
                replicas: int) -> dict[str, int]:
    """The Deployment controller's scale (pkg/controller/deployment/sync.go ``scale``) when the
    Deployment's spec.replicas becomes ``replicas``: each ReplicaSet's new spec.replicas, by
    name, for those it changes. ``current`` is the new ReplicaSet (the Deployment's revision).

    - One active ReplicaSet (spec.replicas > 0; none: the new one, else the newest): it takes
      the whole size.
    - Several, and the new one saturated (its size, its desired-replicas annotation and its
      available pods all equal to the Deployment's size): the old ones go to 0.
    - Several, RollingUpdate: the change (``replicas`` + maxSurge less their sum) is shared in
      proportion to each one's size over its max-replicas annotation (rounded half away from
      zero), largest first — the older first among equals when scaling down — and what is
      left over goes to the first. Recreate: nothing changes."""
    olds = sorted((rs for rs in replica_sets if rs is not current), key=age_key, reverse=True)
    active = [rs for rs in ([current] if current else []) + olds if replicas_of(rs) > 0]
    if len(active) <= 1:
        target = active[0] if active else (current or (olds[0] if olds else None))
        if target is None or replicas_of(target) == replicas:
            return {}
        return {target["metadata"]["name"]: replicas}
    if current is not None:
        desired = _annotation_int(current, "deployment.kubernetes.io/desired-replicas")
        available = int((current.get("status") or {}).get("availableReplicas") or 0)
        if replicas_of(current) == replicas and desired == replicas and available == replicas:
            return {rs["metadata"]["name"]: 0 for rs in olds if replicas_of(rs) > 0}
    strategy = ((deploy.get("spec") or {}).get("strategy") or {}).get("type", "RollingUpdate")
    if strategy != "RollingUpdate":
        return {}
    # FilterActiveReplicaSets(append(oldRSs, newRS)): the old ones newest first, then the new.
    ordered = [rs for rs in olds + ([current] if current else []) if replicas_of(rs) > 0]
    total = sum(replicas_of(rs) for rs in ordered)
    surge = max_surge(deploy, replicas)
    allowed = replicas + surge if replicas > 0 else 0
    to_add = allowed - total
    if to_add != 0:
        # ReplicaSetsBySizeNewer (adding) / BySizeOlder (removing): larger first; among equals
        # the newer / the older first (creation time, then name).
        ordered.sort(key=age_key, reverse=to_add > 0)
        ordered.sort(key=lambda rs: -replicas_of(rs))
    status_replicas = int((deploy.get("status") or {}).get("replicas") or 0)
    sizes: dict[str, int] = {}
    added = 0
    for rs in ordered:
        size = replicas_of(rs)
        if to_add == 0:
            sizes[rs["metadata"]["name"]] = size
            continue
        # GetReplicaSetProportion / getReplicaSetFraction.
        if size == 0 or to_add == added:
            proportion = 0
        else:
            if replicas == 0:
                fraction = -size
            else:
                before = _annotation_int(rs, "deployment.kubernetes.io/max-replicas") or status_replicas
                fraction = 0 if not before else _round(size * (replicas + surge) / before) - size
            left = to_add - added
            proportion = min(fraction, left) if to_add > 0 else max(fraction, left)
        sizes[rs["metadata"]["name"]] = size + proportion
        added += proportion
    if ordered and to_add != 0:
        first = ordered[0]["metadata"]["name"]
        sizes[first] = max(0, sizes[first] + to_add - added)
    return {name: size for name, size in sizes.items()
            if size != next(replicas_of(rs) for rs in ordered if rs["metadata"]["name"] == name)}


def _round(value: float) -> int:
    """Go's math.Round: half away from zero (Python's round() rounds half to even)."""
    return int(math.floor(abs(value) + 0.5)) * (1 if value >= 0 else -1)
