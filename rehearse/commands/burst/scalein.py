"""A scale-in judged (pure): the pods it removed against the forecast (``compare``) and against
what the scenario's rule says should go (``rule_check``), on a step's row of the report."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from rehearse.run.report import FAIL, PASS, SKIP, Check
from rehearse.commands.burst.kinds import C_RULE, check_name
from rehearse.commands.burst.reading import active, cost_of
from rehearse.commands.burst.preconditions import _pods_text


def rank_of(pods: list[dict], pod: dict) -> int:
    """Related active pods on the pod's node, itself included (docs/scale-in.md#the-replicaset-controllers-ranking, rule 5)."""
    return len([p for p in pods if active(p) and p.get("node") == pod.get("node")])


@dataclass
class StepRow:
    step: int
    before: int
    after: int
    hybrid: tuple[int, int]
    cloud: tuple[int, int]
    removed: list[dict] = field(default_factory=list)
    evicted: list[dict] = field(default_factory=list)
    forecast: Optional[list[dict]] = None
    forecast_error: Optional[str] = None
    forecast_note: Optional[str] = None
    verdict: str = ""  # "", "same", "explained", "unexplained"
    explanation: str = ""
    done: bool = True
    #: The pods before the scale-in (the snapshot the forecast was made from).
    snapshot: list[dict] = field(default_factory=list)
    #: Cloud-burst nodes still holding burst pods after the step.
    cloud_nodes: int = 0


def compare(snapshot: list[dict], victims: list[dict], forecast: Optional[dict],
            evicted: list[dict], after: Sequence[dict] = ()) -> tuple[str, str]:
    """The scale-in's victims against the forecast: (verdict, explanation). A divergence is
    explained when Karpenter evicted pods during the step (the ReplicaSet then had fewer pods to
    remove), when a cost changed between the snapshot and the scale-in (Karpenter re-ranks), or
    when the forecast marked the choice a tie (the controller breaks those at random) and the
    pods removed instead have the same cost and rank; otherwise it is unexplained."""
    if forecast is None:
        return "", "no forecast recorded"
    if not forecast.get("ok", True):
        return "", f"no forecast: {forecast.get('error')}"
    predicted = {v["name"] for v in forecast.get("delete") or []}
    measured = {v["name"] for v in victims}
    missing, extra = sorted(predicted - measured), sorted(measured - predicted)
    if not missing and not extra:
        return "same", ""
    by_name = {p["name"]: p for p in snapshot}
    later = {p["name"]: p.get("cost") for p in after}
    later.update({v["name"]: v.get("cost_at_deletion") for v in victims if v.get("seen_terminating")})

    def key(name: str) -> tuple[int, int]:
        pod = by_name.get(name) or {}
        return cost_of(pod.get("cost")), rank_of(snapshot, pod)

    reasons = []
    if evicted:
        reasons.append(f"Karpenter evicted {', '.join(p['name'] for p in evicted)} during the "
                       "step (DisruptionTarget): an eviction is not the scale-in's choice, and "
                       "the ReplicaSet had that many fewer pods to remove")
    changed = [n for n in missing + extra if n in later and n in by_name
               and later[n] != by_name[n].get("cost")]
    if changed:
        reasons.append("costs changed between the snapshot and the scale-in: " + ", ".join(
            f"{n} {by_name[n].get('cost')!r} → {later[n]!r}" for n in changed) +
                       " (Karpenter re-ranks at most once a minute)")
    clock = set(forecast.get("clock_undecided") or [])
    if (missing or extra) and set(missing) | set(extra) <= clock:
        reasons.append(f"the controller's clock: {', '.join(sorted(clock))} were undecided, each "
                       "going at some controller clocks of the window "
                       f"({forecast.get('window') or 'sync lag and skew'}) and staying at others "
                       "(an age crossing a log2 bucket edge)")
    ties = {v["name"] for v in forecast.get("delete") or [] if v.get("tie")}
    if missing and len(missing) == len(extra) and set(missing) <= ties \
            and sorted(key(n) for n in missing) == sorted(key(n) for n in extra):
        reasons.append(f"a tie: the forecast marked {', '.join(missing)} as chosen at random "
                       f"among equal pods, and {', '.join(extra)} (same cost and rank) went instead")
    if reasons:
        return "explained", "; ".join(reasons)
    detail = (f"forecast {', '.join(missing) or 'no other pod'}, the cluster removed "
              f"{', '.join(extra) or 'no other pod'} — " + ", ".join(
                  f"{n} (cost {key(n)[0]}, rank {key(n)[1]})" for n in missing + extra))
    return "unexplained", (detail + ": no tie, eviction or cost change explains it; check the "
                           "cluster's kube-controller-manager against docs/scale-in.md#the-replicaset-controllers-ranking, and the "
                           "predictor")


def rule_check(scenario: str, rows: list[StepRow], snapshots: dict[int, list[dict]],
                settled: Optional[dict]) -> Check:
    """What the scenario should show (docs/scale-in.md#what-each-scenario-should-show): A — nobody writes costs and rule 5
    decides (the pods on the nodes holding the most burst pods go first); B — every cost-0
    cloud pod goes before any cost-1 hybrid pod; C — Karpenter's negative-cost cloud pods
    first, then cost 0, then hybrid (1)."""
    name = check_name(scenario, C_RULE)
    problems, facts = [], []
    for row in rows:
        if not row.removed and not row.evicted:
            continue
        snapshot = snapshots.get(row.step) or []
        live = [p for p in snapshot if active(p)]
        victims = {v["name"] for v in row.removed}
        kept = [p for p in live if p["name"] not in victims and p["name"] not in {e["name"] for e in row.evicted}]
        gone = [p for p in live if p["name"] in victims]
        if not gone or not kept:
            continue
        label = f"{row.before} → {row.after}"
        if scenario == "A":
            costs = [p for p in live if p.get("cost") is not None]
            if costs:
                problems.append(f"{label}: pods carried costs in A ({_pods_text(costs)})")
            low = min(rank_of(live, p) for p in gone)
            high = max(rank_of(live, p) for p in kept)
            if low < high:
                problems.append(f"{label}: a pod on a node with {low} burst pods went while one on "
                                f"a node with {high} stayed")
            else:
                facts.append(f"{label}: removed from nodes holding ≥ {low} burst pods")
        else:
            top = max(cost_of(p.get("cost")) for p in gone)
            bottom = min(cost_of(p.get("cost")) for p in kept)
            if top > bottom:
                problems.append(f"{label}: a pod with cost {top} went while one with cost {bottom} "
                                "stayed")
            hybrid_gone = [p for p in gone if p.get("place") == "hybrid"]
            cloud_kept = [p for p in kept if p.get("place") == "cloud"]
            if hybrid_gone and cloud_kept:
                problems.append(f"{label}: hybrid pods went ({', '.join(p['name'] for p in hybrid_gone)}) "
                                f"while cloud pods stayed ({', '.join(p['name'] for p in cloud_kept)})")
            facts.append(f"{label}: removed cost ≤ {top}, kept ≥ {bottom}"
                         + (f" ({len(hybrid_gone)} hybrid pods went, no cloud pod left)"
                            if hybrid_gone else ""))
    if scenario == "C":
        pods = (settled or {}).get("pods") or []
        cloud = [p for p in pods if active(p) and p.get("place") == "cloud"]
        ranked = [p for p in cloud if cost_of(p.get("cost")) < 0]
        if cloud and not ranked:
            problems.append(f"no cloud pod carried Karpenter's negative cost before the first "
                            f"scale-in (waited {(settled or {}).get('waited', 0):g} s): C looked like B")
        elif cloud:
            facts.append(f"Karpenter ranked {len(ranked)} of {len(cloud)} cloud pods "
                         f"({', '.join(sorted({str(p['cost']) for p in ranked}))})")
    if problems:
        return Check(name, FAIL, "; ".join(problems),
                     "see the step table: the scenario's writers or the controller did not act as "
                     "docs/scale-in.md#what-each-scenario-should-show says")
    if not facts:
        return Check(name, SKIP, "no scale-in measured")
    return Check(name, PASS, "; ".join(facts))
