"""The ReplicaSet controller's scale-in, as pure functions (rehearse predict's analysis): read
the pods' facts, rank them by ActivePodsWithRanks.Less, and forecast which go, each with the rule
that decided it. ``rehearse predict`` (rehearse.predict) reads the pods and prints the forecast;
``rehearse burst`` forecasts each scale-in with it."""

from __future__ import annotations

import calendar
import datetime
import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Optional, Sequence

from rehearse.models import clock_window


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

#: The annotation rule 4 reads (k8s.io/api/core/v1 PodDeletionCost).
POD_DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
#: The controller deletes at most this many pods per sync (replicaset.BurstReplicas).
BURST_REPLICAS = 500
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

_NS = 10**9
#: Go's zero time.Time (0001-01-01T00:00:00Z), which metav1.Time serializes when it is unset.
_GO_ZERO_NS = -62135596800 * _NS
#: Go's math.Log2E (1/Ln2, rounded once at compile time).
_LOG2E = 1.44269504088896340735992468100189214


@dataclass(frozen=True)
class Victim:
    """One pod the controller deletes, in deletion order."""

    name: str
    node: str
    #: Why it goes before the next pod kept (or the next victim): the first rule of
    #: ``ActivePodsWithRanks.Less`` that differs, in words ("pod-deletion-cost 0 < 1",
    #: "4 pods of this Deployment on its node vs 3", "Ready 40 s ago vs 9 min ago").
    #: Here it is against the first pod kept — the closest call; ``Forecast.split`` counts the
    #: rules against all the kept pods.
    rule: str
    #: True when every rule ties with the pod it was compared with: the controller breaks such
    #: ties at random, so this choice is not decided. (Also True in the rarer case where the
    #: rules contradict each other across pods, which leaves the outcome to the list order.)
    tie: bool = False
    cost: int = 0
    rank: int = 0
    #: The pod it was compared with: the first pod kept, or the kept pod it ties with.
    versus: str = ""
    #: The number of the deciding rule (1-8), 0 when none decides.
    rule_number: int = 0
    uid: str = ""
    namespace: str = ""
    #: True when this pod goes at some controller clocks in the forecast's window and stays at
    #: others (a log2 bucket edge falls in it): not decided by the rules (rehearse.clock_window).
    clock: bool = False


@dataclass(frozen=True)
class Forecast:
    replicas_before: int
    replicas_after: int
    delete: list[Victim] = field(default_factory=list)
    #: The active pods sorted in the controller's order (first = deleted first), names only.
    order: list[str] = field(default_factory=list)
    #: False when every active pod goes: the controller then deletes them without sorting.
    sorted: bool = True
    #: Kept pods the controller may delete instead of a tied victim (random, not decided).
    undecided: list[str] = field(default_factory=list)
    #: The controller's clock the forecast used, RFC 3339.
    now: str = ""
    notes: list[str] = field(default_factory=list)
    #: What separates the deleted from the kept: rule number -> how many (deleted, kept) pairs
    #: it decides (0: pairs no rule decides). Each victim's ``rule`` is only its closest call.
    split: dict[int, int] = field(default_factory=dict)
    #: Pods deleted at some controller clocks of the window and kept at others (victims marked
    #: ``clock`` and kept pods that may go instead).
    clock_undecided: list[str] = field(default_factory=list)
    #: The window of controller clocks considered, in words ("" when none was).
    window: str = ""

    @property
    def names(self) -> list[str]:
        """The deleted pods' names, in deletion order."""
        return [v.name for v in self.delete]

    @property
    def decided(self) -> bool:
        """True when the rules alone decide which pods go."""
        return not any(v.tie or v.clock for v in self.delete)

    def to_json(self) -> dict[str, Any]:
        return {"replicas_before": self.replicas_before, "replicas_after": self.replicas_after,
                "now": self.now, "sorted": self.sorted, "decided": self.decided,
                "delete": [asdict(v) for v in self.delete], "order": list(self.order),
                "undecided": list(self.undecided), "clock_undecided": list(self.clock_undecided),
                "window": self.window,
                "split": {str(rule): count for rule, count in sorted(self.split.items())},
                "notes": list(self.notes)}


# --- reading pods --------------------------------------------------------------------------------

_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
                      r"([Zz]|[+-]\d{2}:\d{2})")


def parse_time(value: Any) -> Optional[int]:
    """An RFC 3339 time (or an aware datetime) -> nanoseconds since the epoch, exactly; None for
    an unset time (absent, null, empty, or Go's zero time), which the rules treat as zero."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime.datetime):
        ns = datetime_ns(value)
    else:
        match = _RFC3339.fullmatch(str(value).strip())
        if not match:
            raise ValueError(f"{value!r} is not an RFC 3339 time")
        year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
        digits, zone = match.group(7) or "", match.group(8)
        # datetime validates the calendar (month 13, second 61 and the like).
        moment = datetime.datetime(year, month, day, hour, minute, second)
        offset = 0
        if zone not in ("Z", "z"):
            sign = 1 if zone[0] == "+" else -1
            offset = sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
        seconds = calendar.timegm(moment.timetuple()) - offset
        ns = seconds * _NS + int(digits[:9].ljust(9, "0"))
    return None if ns == _GO_ZERO_NS else ns


def datetime_ns(moment: datetime.datetime) -> int:
    """An aware datetime (a naive one is taken as UTC) -> nanoseconds since the epoch."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * _NS + delta.microseconds * 1000


def format_ns(ns: int) -> str:
    seconds, rest = divmod(ns, _NS)
    moment = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{rest:09d}".rstrip("0") if rest else "") + "Z"


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
        ready_time = parse_time(first_true.get("lastTransitionTime"))
    created = parse_time(meta.get("creationTimestamp"))
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


# --- the rules -----------------------------------------------------------------------------------

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


# --- words ---------------------------------------------------------------------------------------

def _age(ns: int) -> str:
    if ns < 0:
        return f"{_age(-ns)} in the future"
    seconds = ns // _NS
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


# --- the forecast --------------------------------------------------------------------------------

def forecast(pods: Sequence[dict], related: Sequence[dict], replicas: int,
             now: datetime.datetime, window: Optional[tuple[int, int]] = None) -> Forecast:
    """The pods (Pod objects as the API returns them, dicts) the ReplicaSet controller deletes
    when ``pods``' ReplicaSet scales to ``replicas``; ``related`` are the pods of all the
    Deployment's ReplicaSets (they set each pod's rank). ``now`` is the controller's clock;
    ``window`` (early, late) ns, when given, says it may be anywhere in [now + early, now + late]
    (rehearse.clock_window.window: sync lag and measured skew), and every choice that differs
    in it is marked undecided."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ValueError(f"replicas must be a whole number 0 or more, not {replicas!r}")
    if not isinstance(pods, (list, tuple)) or not all(isinstance(p, dict) for p in pods):
        raise ValueError("pods must be a list of Pod objects (dicts)")
    if not isinstance(related, (list, tuple)) or not all(isinstance(p, dict) for p in related):
        raise ValueError("related must be a list of Pod objects (dicts)")
    now_ns = datetime_ns(now) if isinstance(now, datetime.datetime) else now
    if not isinstance(now_ns, int):
        raise ValueError(f"now must be a datetime, not {now!r}")
    try:
        active = [p for p in pods if is_active(p)]
        pod_ranks = ranks(active, related)
    except (TypeError, AttributeError) as error:
        raise ValueError(f"a pod's metadata, spec or status is not an object ({error})") from None
    facts = [pod_facts(p, r) for p, r in zip(active, pod_ranks)]
    result = forecast_facts(facts, replicas, now_ns, inactive=len(pods) - len(active))
    return result if window is None else within_window(result, facts, replicas, now_ns, window)


def within_window(result: Forecast, facts: Sequence[PodFacts], replicas: int, now: int,
                  window: tuple[int, int], *, pod_deletion_cost: bool = True) -> Forecast:
    """``result`` (the forecast at ``now``) with every pod whose fate differs at some controller
    clock of ``window`` marked undecided. The controller's order is constant between bucket
    edges, so the forecasts at ``clock_window.candidate_clocks`` are all it can do. A pod is
    decided only if it is at every one of those clocks: a sure victim at each, or at none a
    possible one — a pod the forecast at some clock calls random (a tied victim, or a kept pod
    that may go instead) may go, though at ``now`` it is sure."""
    from dataclasses import replace

    early, late = window
    times = [t for p in facts for t in (p.ready_time, p.created)]
    sure: list[set[str]] = []
    possible: set[str] = set()
    for clock in clock_window.candidate_clocks(times, now + early, now + late):
        at = forecast_facts(facts, replicas, clock, pod_deletion_cost=pod_deletion_cost)
        sure.append({v.name for v in at.delete if not v.tie})
        possible |= set(at.names) | set(at.undecided)
    random_now = {v.name for v in result.delete if v.tie} | set(result.undecided)
    flips = possible - set.intersection(*sure) - random_now
    words = clock_window.describe(early, late)
    notes = list(result.notes)
    if flips and result.sorted:
        notes.append(f"undecided by the controller's clock: {', '.join(sorted(flips))} go at some "
                     f"clocks of the window ({words}: sync lag and measured skew) and stay at "
                     "others — a pod's age crosses a log2 bucket edge in it")
    delete = [replace(v, clock=v.name in flips) for v in result.delete]
    return replace(result, delete=delete, notes=notes, window=words,
                   clock_undecided=sorted(flips) if result.sorted else [])


def forecast_facts(facts: Sequence[PodFacts], replicas: int, now: int, *, inactive: int = 0,
                   pod_deletion_cost: bool = True) -> Forecast:
    """The forecast over already-read, already-ranked active pods (``facts`` in the order the
    controller would list them: it matters only when everything goes)."""
    notes: list[str] = []
    if inactive:
        notes.append(f"{inactive} pod(s) are not active (Succeeded, Failed or being deleted): "
                     "the controller neither counts nor deletes them")
    diff = len(facts) - replicas
    if diff > BURST_REPLICAS:
        notes.append(f"{diff} pods too many: the controller deletes {BURST_REPLICAS} per sync "
                     "(burstReplicas), the rest on the next syncs")
        diff = BURST_REPLICAS
    base = dict(replicas_before=len(facts), replicas_after=replicas, now=format_ns(now))
    if diff <= 0:
        if diff < 0:
            notes.append(f"{-diff} pod(s) too few: the controller creates pods and deletes none")
        ordered = _sort(facts, now, pod_deletion_cost)
        return Forecast(**base, order=[p.name for p in ordered], notes=notes)
    if diff >= len(facts):
        # getPodsToDelete: no need to sort when every pod goes.
        notes.append(f"all {len(facts)} active pods go: the controller deletes them without "
                     "sorting, in the order it lists them")
        victims = [_victim(p, f"all {len(facts)} active pods go (not sorted)", 0) for p in facts]
        return Forecast(**base, delete=victims, order=[p.name for p in facts], sorted=False,
                        notes=notes)
    blocks = _blocks(facts, now, pod_deletion_cost)
    ordered = [p for block in blocks for p in block]
    goes, kept = ordered[:diff], ordered[diff:]
    # The block the cut falls in: its pods go or stay by the order the controller lists them.
    start = 0
    for block in blocks:
        if start < diff < start + len(block):
            cut = {p.name for p in block}
            break
        start += len(block)
    else:
        cut = set()
    victims, undecided, split = [], [], {}
    for pod in goes:
        against = [(k, decide(pod, k, now, pod_deletion_cost=pod_deletion_cost)) for k in kept]
        for _, decision in against:
            number = decision.rule if decision.first is not None else 0
            split[number] = split.get(number, 0) + 1
        if pod.name not in cut:
            # An earlier block than every kept pod's: the rules put it first against each.
            keep, decision = against[0]
            victims.append(_victim(pod, explain(pod, keep, now, decision), decision.rule,
                                   versus=keep.name))
            continue
        open_ = [(k, d) for k, d in against if k.name in cut]
        for k, _ in open_:
            if k.name not in undecided:
                undecided.append(k.name)
        tie = next(((k, d) for k, d in open_ if d.first is None), None)
        keep, decision = tie or open_[0]
        exact = all(decide(a, b, now, pod_deletion_cost=pod_deletion_cost).first is None
                    for a in goes + kept if a.name in cut for b in goes + kept
                    if b.name in cut and a.name < b.name)
        if exact:
            why = explain(pod, keep, now, decision)
        else:
            why = (f"not decided: against {keep.name} the rules say "
                   f"{explain(pod, keep, now, decision)}; but among {', '.join(sorted(cut))} "
                   "they are not transitive (a tie here, an order there, and round again), so "
                   "the controller's sort leaves their order to the order it lists them in")
        victims.append(_victim(pod, why, decision.rule, versus=keep.name, tie=True))
    tied = [v.name for v in victims if v.tie]
    if tied:
        notes.append(f"{len(tied)} of {', '.join(tied + undecided)} go and the rest stay; which "
                     "ones is not decided by the rules: the controller picks at random")
    return Forecast(**base, delete=victims, order=[p.name for p in ordered],
                    undecided=undecided, notes=notes, split=split)


def _victim(pod: PodFacts, rule: str, number: int, *, versus: str = "", tie: bool = False) -> Victim:
    return Victim(name=pod.name, node=pod.node, rule=rule, tie=tie, cost=pod.cost, rank=pod.rank,
                  versus=versus, rule_number=number, uid=pod.uid, namespace=pod.namespace)


def _blocks(facts: Sequence[PodFacts], now: int, pod_deletion_cost: bool) -> list[list[PodFacts]]:
    """The controller's order, as blocks: ``Less`` puts every pod of a block before every pod
    of the next, and leaves the order within a block to the order the informer lists the pods
    in (no fixed order). A block is an exact tie — or, since ``Less`` is not a strict weak
    ordering (pods Ready in the same second fall through to rule 8 while others go by UID; a
    pod whose age crosses a bucket edge joins a bucket of UID-ordered pods), a set of pods the
    rules order in a circle: a ~ b, b ~ c, yet a before c. Go's sort then places them by where
    they were listed, as the real controller showed (tests/test_real_scale_in.py). The blocks
    are the strongly connected components of "a may be placed before b" (not Less(b, a)),
    which, between them, ``Less`` orders totally."""
    def first(a: PodFacts, b: PodFacts) -> Optional[int]:
        return decide(a, b, now, pod_deletion_cost=pod_deletion_cost).first

    pods = sorted(facts, key=lambda p: (p.namespace, p.name))
    n = len(pods)
    # before[i][j]: i may come before j — unless the rules put j first.
    before = [[i != j and first(pods[j], pods[i]) != 0 for j in range(n)] for i in range(n)]
    # Strongly connected components (Tarjan's, without recursion), O(n^2) over the matrix.
    index: list[Optional[int]] = [None] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    blocks: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] is not None:
            continue
        work = [(root, 0)]
        while work:
            v, j = work.pop()
            if j == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            for w in range(j, n):
                if not before[v][w]:
                    continue
                if index[w] is None:
                    work.append((v, w + 1))
                    work.append((w, 0))
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            else:
                if low[v] == index[v]:
                    block = []
                    while True:
                        w = stack.pop()
                        on_stack[w] = False
                        block.append(w)
                        if w == v:
                            break
                    blocks.append(sorted(block))
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[v])
    # Between blocks every pair goes one way: the block that may precede the most comes first.
    blocks.sort(key=lambda b: -sum(1 for j in range(n) if before[b[0]][j]))
    return [[pods[i] for i in block] for block in blocks]


def _sort(facts: Sequence[PodFacts], now: int, pod_deletion_cost: bool) -> list[PodFacts]:
    """The controller's order, blocks in order, by name within each (``_blocks``)."""
    return [p for block in _blocks(facts, now, pod_deletion_cost) for p in block]
