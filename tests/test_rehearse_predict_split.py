"""rehearse predict's port of the Deployment controller's split of a scale across its active
ReplicaSets (kubernetes pkg/controller/deployment/sync.go ``scale``, deployment/util
``GetReplicaSetProportion``; docs/scale-in.md#a-rollout-in-progress-the-deployment-controllers-split).
The real controller's split is checked in tests/test_real_scale_in.py."""

from __future__ import annotations

from typing import Optional

from rehearse.models import deployment as predict


def _rs(name: str, replicas: int, created: str, *, max_replicas: Optional[int] = None,
        desired: Optional[int] = None, available: int = 0) -> dict:
    annotations = {}
    if max_replicas is not None:
        annotations["deployment.kubernetes.io/max-replicas"] = str(max_replicas)
    if desired is not None:
        annotations["deployment.kubernetes.io/desired-replicas"] = str(desired)
    return {"metadata": {"name": name, "creationTimestamp": created, "annotations": annotations},
            "spec": {"replicas": replicas}, "status": {"availableReplicas": available}}


def _deploy(strategy: Optional[dict] = None, status_replicas: int = 0) -> dict:
    return {"spec": {"strategy": strategy or {}}, "status": {"replicas": status_replicas}}


def test_one_active_replicaset_takes_the_whole_size():
    old = _rs("old", 0, "2025-06-01T00:00:00Z")
    new = _rs("new", 15, "2025-06-02T00:00:00Z", max_replicas=19, desired=15)
    assert predict.split_scale(_deploy(), [old, new], new, 12) == {"new": 12}
    assert predict.split_scale(_deploy(), [old, new], new, 15) == {}


def test_a_rollout_in_progress_shares_the_cut_in_proportion():
    """The real controller's split in tests/test_real_scale_in.py: 6 + 4 at max-replicas 10,
    Deployment 8 -> 6 (maxSurge 25% of 6 rounds up to 2): 6 x 8 / 10 = 4.8 -> 5, 4 x 8 / 10 =
    3.2 -> 3."""
    old = _rs("old", 6, "2025-06-01T00:00:00Z", max_replicas=10, desired=8, available=6)
    new = _rs("new", 4, "2025-06-02T00:00:00Z", max_replicas=10, desired=8)
    assert predict.split_scale(_deploy(), [old, new], new, 6) == {"old": 5, "new": 3}


def test_the_split_rounds_half_away_from_zero_largest_first():
    """new 5 and old 3 at max-replicas 10, Deployment to 4 with maxSurge 1: 3 to remove. The
    larger first: 5 x 5 / 10 = 2.5, which Go's math.Round makes 3 (-2); then old: 3 x 5 / 10 =
    1.5 -> 2 (-1), allowed -1: new 3, old 2. Python's round (half to even) would give 2 and 3."""
    deploy = _deploy({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    old = _rs("old", 3, "2025-06-01T00:00:00Z", max_replicas=10)
    new = _rs("new", 5, "2025-06-02T00:00:00Z", max_replicas=10)
    assert predict.split_scale(deploy, [old, new], new, 4) == {"new": 3, "old": 2}


def test_a_saturated_new_replicaset_sends_the_old_ones_to_zero_and_recreate_splits_nothing():
    old = _rs("old", 2, "2025-06-01T00:00:00Z", max_replicas=10)
    new = _rs("new", 8, "2025-06-02T00:00:00Z", max_replicas=10, desired=8, available=8)
    assert predict.split_scale(_deploy(), [old, new], new, 8) == {"old": 0}
    assert predict.split_scale(_deploy({"type": "Recreate"}), [old, new], new, 6) == {}
