"""The analysis (pure: events -> results): the scale-in steps against the forecast and the
scenario's rule, the scale-up measurements, and each scenario's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

from rehearse.run.record import iso, parse_time
from rehearse.run.outcome import not_read
from rehearse.run.report import FAIL, NOT_READ, PASS, SKIP, Check, Measurement
from rehearse.commands.burst.kinds import (ABORTED, COSTS_SETTLED, C_COMPLETED, C_COSTS_SETTLED, C_FORECAST,
                                  C_IN_PLACE, C_RESTART, C_RULE, C_SCALEUP, C_SWITCH, DONE,
                                  FORECAST, M_NODECLAIM, M_READY, PRECONDITIONS, REFUSED, RESTARTED,
                                  ROLLOUT, SCALED, SCALEUP, SEED_NODECLAIM, SEED_READY, SNAPSHOT,
                                  STEP, SWITCHED, WATCH_DONE, WATCH_SKIPPED, WATCH_STARTED,
                                  check_name)
from rehearse.commands.burst.reading import active, cost_of, forecast_event
from rehearse.commands.burst.preconditions import _final_pods, _pods_text, in_place, scenario_checks
from rehearse.commands.burst.watch import consolidation_answer, consolidation_check


# --- the analysis (pure: events -> report) ---------------------------------------------------------

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


def _counts(pods: Iterable[dict]) -> tuple[int, int]:
    live = [p for p in pods if active(p)]
    return (len([p for p in live if p.get("place") == "hybrid"]),
            len([p for p in live if p.get("place") == "cloud"]))


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


@dataclass
class ScenarioResult:
    scenario: str
    checks: list[Check] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    rows: list[StepRow] = field(default_factory=list)
    start: Optional[tuple[int, int]] = None
    refused: list[str] = field(default_factory=list)
    aborted: Optional[str] = None
    nodeclaim_s: Optional[float] = None
    ready_s: Optional[float] = None
    #: The consolidation watch's answer (consolidation_answer), None when not reached.
    consolidation: Optional[dict] = None

    @property
    def states(self) -> list[tuple[str, int, int]]:
        """(label, hybrid, cloud) at the start and after each step: the chart's bars."""
        out = []
        if self.start is not None:
            out.append(("start", *self.start))
        for row in self.rows:
            out.append((str(row.after), row.hybrid[1], row.cloud[1]))
        return out


def _whole(seconds: float) -> float:
    return round(seconds, 3)


def _scaleup_measurements(scenario: str, done: dict, scaled: dict
                          ) -> tuple[list[Measurement], Optional[float], Optional[float]]:
    """The scale to the peak: to the first NodeClaim and to all Ready, on the cluster's clock
    (the scale's moment is the first pod it created)."""
    pods = done.get("pods") or []
    before = set(scaled.get("pods_before") or [])
    created = sorted(parse_time(p["created"]) for p in pods if p["name"] not in before and p.get("created"))
    claims = sorted((c for c in done.get("nodeclaims") or [] if c.get("created")),
                    key=lambda c: c["created"])
    sent = parse_time(scaled["sent"])
    if not created:
        return ([Measurement(check_name(scenario, M_NODECLAIM), None, "s", SEED_NODECLAIM,
                             "no pod was created by the scale"),
                 Measurement(check_name(scenario, M_READY), None, "s", SEED_READY, "")], None, None)
    origin = created[0]
    nodeclaim_s = ready_s = None
    ms = []
    if claims:
        first_claim = claims[0]
        nodeclaim_s = _whole((parse_time(first_claim["created"]) - origin).total_seconds())
        local = (f"; this machine saw it {(parse_time(done['first_nodeclaim_seen']) - sent).total_seconds():.1f} s "
                 "after sending the scale" if done.get("first_nodeclaim_seen") else "")
        ms.append(Measurement(check_name(scenario, M_NODECLAIM), nodeclaim_s, "s", SEED_NODECLAIM,
                              f"NodeClaim {first_claim['name']} created {first_claim['created']} − the "
                              f"scale (the first new pod created {iso(origin)}); the API server's "
                              f"clock, whole seconds (±1 s){local}"))
    else:
        ms.append(Measurement(check_name(scenario, M_NODECLAIM), None, "s", SEED_NODECLAIM,
                              "no NodeClaim of the pool was created: did the overflow fit elsewhere?"))
    ready = [parse_time(p["ready_at"]) for p in pods if active(p) and p.get("ready_at")]
    if done.get("done") and ready:
        ready_s = _whole((max(ready) - origin).total_seconds())
        local = (f"; this machine saw all Ready {(parse_time(done['all_ready_seen']) - sent).total_seconds():.1f} s "
                 "after sending the scale" if done.get("all_ready_seen") else "")
        ms.append(Measurement(check_name(scenario, M_READY), ready_s, "s", SEED_READY,
                              f"the last Ready condition ({iso(max(ready))}) − the scale; the "
                              f"pods' own conditions, whole seconds{local}"))
    else:
        ms.append(Measurement(check_name(scenario, M_READY), None, "s", SEED_READY,
                              f"not all {done.get('replicas')} Ready (see the checks)"))
    return ms, nodeclaim_s, ready_s


def _victim_text(pod: dict) -> str:
    cost = "no cost" if pod.get("cost") is None else f"cost {pod['cost']}"
    return f"{pod['name']} ({pod.get('place') or '?'}, {pod.get('node') or 'no node'}, {cost})"


def _rule_check(scenario: str, rows: list[StepRow], snapshots: dict[int, list[dict]],
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


def _scenario_events(events: list[dict], scenario: str) -> list[dict]:
    return [e for e in events if e.get("scenario") == scenario]


def analyse_scenario(scenario: str, events: list[dict], settings: dict) -> ScenarioResult:
    result = ScenarioResult(scenario)
    mine = _scenario_events(events, scenario)

    def kinds(kind: str) -> list[dict]:
        return [e for e in mine if e["kind"] == kind]

    switched = next(iter(kinds(SWITCHED)), None)
    if switched is not None:
        result.checks.append(Check(
            check_name(scenario, C_SWITCH), PASS if switched.get("ok") else FAIL,
            (f"burstScenario {switched.get('previous')} → {scenario}, pulumi up took "
             f"{switched.get('seconds')} s") if switched.get("ok") else
            f"pulumi up for burstScenario {scenario} failed: {switched.get('error')}",
            "" if switched.get("ok") else "run `pulumi up` yourself to see the error; the stack's "
            "original scenario was put back", "pulumi config get burstScenario"))
    rollout = next(iter(kinds(ROLLOUT)), None)
    restarted = next(iter(kinds(RESTARTED)), None)
    observed = next(iter(kinds(PRECONDITIONS)), None)
    if observed is not None:
        checks = scenario_checks(observed)
        restart = _restart_check(scenario, restarted, rollout, observed)
        if restart is not None:
            checks.insert(0, restart)
        result.checks.append(in_place(scenario, checks))
        result.checks.extend(checks)
        result.start = _counts(_final_pods(observed))
    refused = next(iter(kinds(REFUSED)), None)
    if refused is not None:
        result.refused = list(refused.get("reasons") or [])
        if observed is None:
            if rollout is not None and not rollout.get("done"):
                result.checks.append(_restart_check(scenario, restarted, rollout, None))
            result.checks.append(Check(check_name(scenario, C_IN_PLACE), FAIL,
                                       "not in place, not measured: " + "; ".join(result.refused),
                                       "fix what the reason says, then run again"))
        return result
    aborted = next(iter(kinds(ABORTED)), None)
    result.aborted = aborted.get("reason") if aborted else None

    scaled = {e["step"]: e for e in kinds(SCALED)}
    snapshots = {e["step"]: e.get("pods") or [] for e in kinds(SNAPSHOT)}
    forecasts = {e["step"]: e for e in kinds(FORECAST)}
    for e in kinds(SNAPSHOT):
        if e["step"] in forecasts and not forecasts[e["step"]].get("ok"):
            forecasts[e["step"]] = _forecast_again(e, forecasts[e["step"]])
    settled = next(iter(kinds(COSTS_SETTLED)), None)
    previous = list(_final_pods(observed)) if observed else []
    for up in kinds(SCALEUP):
        ms, result.nodeclaim_s, result.ready_s = _scaleup_measurements(
            scenario, up, scaled.get(up["step"]) or {"sent": up["sent"]})
        result.measurements.extend(ms)
        pods = up.get("pods") or []
        row = StepRow(up["step"], len([p for p in previous if active(p)]), up["replicas"],
                      (_counts(previous)[0], _counts(pods)[0]), (_counts(previous)[1], _counts(pods)[1]),
                      done=bool(up.get("done")))
        result.rows.append(row)
        hybrid, cloud = _counts(pods)
        expected_h = settings.get("on_hybrid", 8)
        expected_c = up["replicas"] - expected_h
        status = PASS if up.get("done") and (hybrid, cloud) == (expected_h, expected_c) else FAIL
        result.checks.append(Check(
            check_name(scenario, C_SCALEUP), status,
            f"{len([p for p in pods if active(p) and p['ready']])} of {up['replicas']} Ready: "
            f"{hybrid} on hybrid nodes, {cloud} on {settings.get('nodepool')} nodes"
            + (f", {pending} Pending" if (pending := len([p for p in pods if active(p) and not p['node']]))
               else "")
            + ("" if up.get("done") else f" after {settings.get('timeout'):g} s"),
            "" if status == PASS else "the capacity check says how many fit on the hybrid nodes; "
            "pending pods: `kubectl -n {0} get pods --field-selector=status.phase=Pending` and "
            "`kubectl get nodeclaims`".format(settings.get("namespace")),
            f"kubectl -n {settings.get('namespace')} get pods -o wide"))
        previous = pods
    if settled is not None:
        ok = settled.get("settled")
        what = "every pod on a hybrid node carries \"1\"" + (
            " and every cloud pod Karpenter's negative rank" if scenario == "C" else "")
        result.checks.append(Check(
            check_name(scenario, C_COSTS_SETTLED), PASS if ok else FAIL,
            f"{what} after {settled.get('waited'):g} s" if ok else
            f"not after {settled.get('waited'):g} s: {_pods_text([p for p in settled.get('pods') or [] if active(p)])}",
            "" if ok else ("Karpenter re-ranks at most once a minute after its nodes initialize; "
                           "raise --rank-timeout, or check the gate (`kubectl -n kube-system logs "
                           "deploy/karpenter | grep -i deletioncost`)" if scenario == "C" else
                           "Kyverno is slow or failing: its background controller's log")))
    for done in kinds(STEP):
        step = done["step"]
        snapshot = snapshots.get(step) or []
        removed = done.get("removed") or []
        victims = [p for p in removed if not p.get("disruption_target")]
        evicted = [p for p in removed if p.get("disruption_target")]
        forecast = forecasts.get(step)
        row = StepRow(step, len([p for p in snapshot if active(p)]), done["replicas"],
                      (_counts(snapshot)[0], _counts(done.get("after") or [])[0]),
                      (_counts(snapshot)[1], _counts(done.get("after") or [])[1]),
                      removed=victims, evicted=evicted, done=bool(done.get("done")),
                      snapshot=snapshot,
                      cloud_nodes=len({p["node"] for p in done.get("after") or []
                                       if active(p) and p.get("place") == "cloud"}))
        if forecast is not None and forecast.get("ok"):
            row.forecast = forecast.get("delete") or []
            row.forecast_note = forecast.get("note")
        elif forecast is not None:
            row.forecast_error = forecast.get("error")
        row.verdict, row.explanation = compare(snapshot, victims, forecast, evicted,
                                               done.get("after") or [])
        result.rows.append(row)
    unexplained = [r for r in result.rows if r.verdict == "unexplained"]
    scaleins = [r for r in result.rows if r.after < r.before]
    if scaleins:
        compared = [r for r in scaleins if r.verdict]
        if unexplained:
            result.checks.append(Check(
                check_name(scenario, C_FORECAST), FAIL,
                "; ".join(f"{r.before} → {r.after}: {r.explanation}" for r in unexplained),
                "the measured outcome differs from the forecast: see the step table"))
        elif not compared:
            result.checks.append(Check(check_name(scenario, C_FORECAST), SKIP,
                                       "no forecast to compare with: " + "; ".join(
                                           sorted({r.explanation for r in scaleins}))))
        else:
            explained = [r for r in compared if r.verdict == "explained"]
            result.checks.append(Check(
                check_name(scenario, C_FORECAST), PASS,
                f"{len(compared) - len(explained)} of {len(compared)} scale-ins exactly as forecast"
                + ("; " + "; ".join(f"{r.before} → {r.after}: {r.explanation}" for r in explained)
                   if explained else "")))
        result.checks.append(_rule_check(scenario, result.rows, snapshots, settled))
    result.consolidation = consolidation_answer(next(iter(kinds(WATCH_STARTED)), None),
                                                next(iter(kinds(WATCH_DONE)), None),
                                                next(iter(kinds(WATCH_SKIPPED)), None))
    if result.consolidation is not None:
        check = consolidation_check(scenario, result.consolidation)
        if check.status == NOT_READ:
            check = not_read(check.name, "the consolidation watch to its end", events, check.command)
        result.checks.append(check)
    completed = next(iter(kinds(DONE)), None) is not None
    if not completed and not result.aborted:
        result.checks.append(not_read(check_name(scenario, C_COMPLETED),
                                      f"scenario {scenario}'s scale sequence to its end", events))
        return result
    result.checks.append(Check(check_name(scenario, C_COMPLETED), PASS if completed else FAIL,
                               " → ".join(map(str, settings.get("sequence") or []))
                               if completed else f"stopped: {result.aborted or 'not recorded'}",
                               "" if completed else "the step that stopped says what it waited for"))
    return result


def _forecast_again(snapshot: dict, failed: dict) -> dict:
    """A forecast that failed when the run was made (e.g. before ``rehearse.predict`` was
    implemented), made again from the recorded snapshot: the same pods, the same clock."""
    from rehearse.commands.predict import collect as predict

    try:
        forecast = predict.forecast(snapshot.get("raw_pods") or [],
                                    snapshot.get("raw_related") or snapshot.get("raw_pods") or [],
                                    snapshot["replicas"], parse_time(snapshot["now"]))
    except Exception:  # noqa: BLE001 still not available: keep the recorded failure
        return failed
    return {**failed, "ok": True, **forecast_event(forecast),
            "note": f"made at report time from the snapshot (the run's failed: {failed.get('error')})"}


def _restart_check(scenario: str, restarted: Optional[dict], rollout: Optional[dict],
                   observed: Optional[dict]) -> Optional[Check]:
    if restarted is None:
        return None
    name = check_name(scenario, C_RESTART)
    if rollout is None or not rollout.get("done"):
        return Check(name, FAIL, "the restart did not finish: " + (_pods_text(
            (rollout or {}).get("pods") or []) if rollout else "not recorded"),
                     "`kubectl -n <ns> rollout status deploy/burst` says what holds it")
    pods = rollout.get("pods") or []
    old = [p for p in pods if p.get("hash") != rollout.get("hash")]
    if old:
        return Check(name, FAIL, f"pods of an older revision remain: {_pods_text(old)}",
                     "wait for them to terminate, or delete them")
    return Check(name, PASS, f"revision {restarted.get('revision_before')} → {rollout.get('revision')}: "
                 f"{len(pods)} fresh pod(s) of {rollout.get('hash')}")
