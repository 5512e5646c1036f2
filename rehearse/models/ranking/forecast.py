"""The ReplicaSet controller's scale-in forecast (rehearse.models.ranking): which of a
ReplicaSet's active pods go when it scales to a size, in order, each with the rule that decided
it, and which choices the rules (or the controller's clock) leave undecided."""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional, Sequence

from rehearse.models import clock_window
from rehearse.models.ranking.pods import PodFacts, is_active, pod_facts, ranks
from rehearse.models.ranking.rules import decide, explain
from rehearse.models.ranking.times import datetime_ns, format_ns

#: The controller deletes at most this many pods per sync (replicaset.BurstReplicas).
BURST_REPLICAS = 500


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
    #: others (a log2 bucket edge falls in it): not decided by the rules (rehearse.models.clock_window).
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





def forecast(pods: Sequence[dict], related: Sequence[dict], replicas: int,
             now: datetime.datetime, window: Optional[tuple[int, int]] = None) -> Forecast:
    """The pods (Pod objects as the API returns them, dicts) the ReplicaSet controller deletes
    when ``pods``' ReplicaSet scales to ``replicas``; ``related`` are the pods of all the
    Deployment's ReplicaSets (they set each pod's rank). ``now`` is the controller's clock;
    ``window`` (early, late) ns, when given, says it may be anywhere in [now + early, now + late]
    (rehearse.models.clock_window.window: sync lag and measured skew), and every choice that differs
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
