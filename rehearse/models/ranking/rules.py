"""The rules of ActivePodsWithRanks.Less (rehearse.models.ranking): how the ReplicaSet
controller orders two pods, and why, in words."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from rehearse.models.ranking.pods import PodFacts
from rehearse.models.ranking.times import NS, format_ns

# Ported from the controller as EKS 1.32-1.36 runs it: kubernetes pkg/controller/controller_utils.go
# (ActivePodsWithRanks.Less, podReadyTime, logarithmicRankDiff, compareMaxContainerRestarts,
# IsPodActive), pkg/controller/replicaset/replica_set.go (manageReplicas, getPodsToDelete,
# getPodsRankedByRelatedPodsOnSameNode, getIndirectlyRelatedPods) and pkg/apis/core/helper
# (GetDeletionCostFromPodAnnotations), read at mmorel-35/kubernetes@0b0abd6c11b6103e3f00dfe46975d1494c484a11
# (a mirror of upstream between 1.32 and 1.36: LogarithmicScaleDown still gated, sidecar restarts
# counted). Where that source says more than docs/scale-in.md, this follows the source:
# - rule 7 compares the regular containers' highest restartCount, then — only if equal — the
#   sidecars' (init containers with restartPolicy: Always); kubernetes#124952, merged November
#   2024 for 1.32;
# - rule 6 applies only when both Ready times differ; equal times (same second) go on to rule 7.
#   Within one log2 bucket the lower UID wins and rules 7-8 are skipped; equal UIDs then tie;
# - an age of zero or less (a time at or after the controller's clock) is bucket -1, and the
#   bucket is Go's int64(math.Log2(float64(ns))), which is not floor(log2) just below 2^49 ns;
# - a pod with no phase (or any phase but Unknown and Running) sorts as Pending;
# - related pods are those matching the selector of any ReplicaSet with the same controller,
#   counted once each (by UID); a pod not among them does not count itself;
# - at most burstReplicas (500) pods are deleted per sync.
# LogarithmicScaleDown's gate is gone after 1.36 (kubernetes#138711) with no change in behaviour.

#: podPhaseToOrdinal in controller_utils.go: any other phase (or none) counts as Pending.
PHASE_ORDINAL = {"Pending": 0, "Unknown": 1, "Running": 2}

#: What each rule of ActivePodsWithRanks.Less prefers, by number (0: none decides).
RULES = {
    0: "none: random",
    1: "unscheduled first",
    2: "phase Pending < Unknown < Running",
    3: "not Ready first",
    4: "lower pod-deletion-cost first",
    5: "more pods of the Deployment on its node first",
    6: "Ready more recently first, by log2 bucket, then lower UID",
    7: "more container restarts first",
    8: "created more recently first, by log2 bucket, then lower UID",
}

#: Go's math.Log2E (1/Ln2, rounded once at compile time).
_LOG2E = 1.44269504088896340735992468100189214


def log2_bucket(age_ns: int) -> int:
    """One side of logarithmicRankDiff: ``int64(math.Log2(float64(d)))`` for d > 0, else -1.
    Go's Log2 (frexp, then Log(frac)*Log2E + exp) is reproduced rather than taking the exact
    floor: they differ only a few nanoseconds below 2^49 ns (6.5 days) and up, where Go rounds
    to the power of two."""
    if age_ns <= 0:
        return -1
    frac, exp = math.frexp(float(age_ns))
    if frac == 0.5:
        return exp - 1
    return int(math.log(frac) * _LOG2E + exp)


@dataclass(frozen=True)
class Decision:
    """How ``Less`` orders two pods: the deciding rule (0 when none does) and which goes first
    (0: the first argument, 1: the second, None: neither — a tie the controller breaks at
    random)."""

    rule: int
    first: Optional[int]
    #: For rules 6 and 8: True when both ages fell in one log2 bucket (UIDs decided).
    same_bucket: bool = False


def decide(a: PodFacts, b: PodFacts, now: Optional[int], *, pod_deletion_cost: bool = True) -> Decision:
    """``ActivePodsWithRanks.Less`` both ways at once. ``now`` is the controller's clock in ns
    (None: Go's zero ``Now``, no bucketing). ``pod_deletion_cost`` is the PodDeletionCost feature
    gate (beta, on by default through 1.36); LogarithmicScaleDown is locked on since 1.31."""
    def first(a_first: bool, rule: int, same_bucket: bool = False) -> Decision:
        return Decision(rule, 0 if a_first else 1, same_bucket)

    # 1. Unassigned < assigned.
    if a.node != b.node and (not a.node or not b.node):
        return first(not a.node, 1)
    # 2. PodPending < PodUnknown < PodRunning.
    pa, pb = PHASE_ORDINAL.get(a.phase, 0), PHASE_ORDINAL.get(b.phase, 0)
    if pa != pb:
        return first(pa < pb, 2)
    # 3. Not ready < ready.
    if a.ready != b.ready:
        return first(not a.ready, 3)
    # 4. Lower pod-deletion-cost < higher.
    if pod_deletion_cost and a.cost != b.cost:
        return first(a.cost < b.cost, 4)
    # 5. Doubled up < not doubled up.
    if a.rank != b.rank:
        return first(a.rank > b.rank, 5)
    # 6. Been ready for empty time < less time < more time (both Ready, times differ).
    if a.ready and b.ready and a.ready_time != b.ready_time:
        return _by_time(a, b, a.ready_time, b.ready_time, now, 6)
    # 7. Higher restart counts first: regular containers, then sidecars.
    if a.restarts != b.restarts:
        return first(a.restarts > b.restarts, 7)
    if a.sidecar_restarts != b.sidecar_restarts:
        return first(a.sidecar_restarts > b.sidecar_restarts, 7)
    # 8. Empty creation time < newer < older.
    if a.created != b.created:
        return _by_time(a, b, a.created, b.created, now, 8)
    return Decision(0, None)


def _by_time(a: PodFacts, b: PodFacts, ta: Optional[int], tb: Optional[int], now: Optional[int],
             rule: int) -> Decision:
    if now is None or ta is None or tb is None:
        # afterOrZero: a zero time comes first, then the later time.
        if ta is None or tb is None:
            return Decision(rule, 0 if ta is None else 1)
        return Decision(rule, 0 if ta > tb else 1)
    diff = log2_bucket(now - ta) - log2_bucket(now - tb)
    if diff == 0:
        # Same bucket: the lower UID goes first and the later rules are not consulted — equal
        # UIDs (none set) leave the two pods tied.
        if a.uid == b.uid:
            return Decision(rule, None, True)
        return Decision(rule, 0 if a.uid < b.uid else 1, True)
    return Decision(rule, 0 if diff < 0 else 1)


def less(a: PodFacts, b: PodFacts, now: Optional[int], **gates: bool) -> bool:
    """``ActivePodsWithRanks.Less(a, b)``: True when the controller deletes ``a`` first."""
    return decide(a, b, now, **gates).first == 0


def _age(ns: int) -> str:
    if ns < 0:
        return f"{_age(-ns)} in the future"
    seconds = ns // NS
    if seconds < 120:
        return f"{seconds} s" if seconds or not ns else f"{ns / 1e6:.0f} ms"
    if seconds < 7200:
        minutes, rest = divmod(seconds, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    if seconds < 172800:
        hours, rest = divmod(seconds // 60, 60)
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    days, rest = divmod(seconds // 3600, 24)
    return f"{days} d {rest} h" if rest else f"{days} d"


def _short_uid(uid: str) -> str:
    return uid[:8] if uid else "(none)"


def explain(x: PodFacts, y: PodFacts, now: Optional[int], decision: Optional[Decision] = None) -> str:
    """Why ``x`` goes before ``y``, in words (or why neither goes first)."""
    decision = decision or decide(x, y, now)
    if decision.first == 1:
        x, y = y, x
    rule = decision.rule
    if rule == 1:
        return f"not scheduled vs on node {y.node}"
    if rule == 2:
        return f"phase {x.phase or '(none: counts as Pending)'} before {y.phase or '(none)'}"
    if rule == 3:
        return "not Ready vs Ready"
    if rule == 4:
        text = f"pod-deletion-cost {x.cost} < {y.cost}"
        invalid = [f"{p.name}'s {p.cost_invalid!r}" for p in (x, y) if p.cost_invalid is not None]
        return text + (f" ({', '.join(invalid)} is invalid: counts as 0)" if invalid else "")
    if rule == 5:
        return f"{x.rank} pods of this Deployment on its node vs {y.rank}"
    if rule in (6, 8):
        word = "Ready" if rule == 6 else "created"
        tx, ty = (x.ready_time, y.ready_time) if rule == 6 else (x.created, y.created)
        if tx is None or ty is None or now is None:
            def when(t: int) -> str:
                return f"{_age(now - t)} ago" if now is not None else f"at {format_ns(t)}"

            if tx is None:
                missing = "lastTransitionTime" if rule == 6 else "creationTimestamp"
                return f"{word} with no {missing} (a zero time goes first) vs {word} {when(ty)}"
            return f"{word} {when(tx)} vs {when(ty)} (no clock to bucket by: the later goes first)"
        bx, by = log2_bucket(now - tx), log2_bucket(now - ty)
        text = f"{word} {_age(now - tx)} ago vs {_age(now - ty)} ago"
        if not decision.same_bucket:
            return f"{text} (log2 buckets {bx} < {by})"
        if decision.first is None:
            return (f"{text} (same log2 bucket {bx} and the same UID {_short_uid(x.uid)}: "
                    "a tie the controller breaks at random)")
        return (f"{text} (same log2 bucket {bx}: lower UID first, "
                f"{_short_uid(x.uid)} < {_short_uid(y.uid)})")
    if rule == 7:
        if x.restarts != y.restarts:
            return f"{x.restarts} container restarts vs {y.restarts}"
        return f"{x.sidecar_restarts} sidecar restarts vs {y.sidecar_restarts} (containers {x.restarts} each)"
    return (f"every rule ties with {y.name} (cost {x.cost}, {x.rank} pods on its node, "
            f"{'Ready' if x.ready else 'not Ready'}, same times to the second): "
            "the controller picks at random")
