"""The analysis (pure: events -> results): each scenario's events read once (``ScenarioRun``),
its checks, the scale-up measurements and the step table's rows (a scale-in judged in
scalein.py), and each scenario's result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

from rehearse.models import ranking
from rehearse.run.record import iso, parse_time
from rehearse.run.outcome import not_read
from rehearse.run.report import FAIL, NOT_READ, PASS, SKIP, Check, Measurement
from rehearse.commands.burst.kinds import (ABORTED, COSTS_SETTLED, C_COMPLETED, C_COSTS_SETTLED,
                                           C_FORECAST, C_IN_PLACE, C_RESTART, C_SCALEUP, C_SWITCH,
                                           DONE, FORECAST, M_NODECLAIM, M_READY, PRECONDITIONS,
                                           REFUSED, RESTARTED, ROLLOUT, SCALED, SCALEUP,
                                           SEED_NODECLAIM, SEED_READY, SNAPSHOT, STEP, SWITCHED,
                                           WATCH_DONE, WATCH_SKIPPED, WATCH_STARTED, check_name)
from rehearse.commands.burst.reading import active, forecast_event
from rehearse.commands.burst.preconditions import _final_pods, _pods_text, in_place, scenario_checks
from rehearse.commands.burst.scalein import StepRow, compare, rule_check
from rehearse.commands.burst.watch import consolidation_answer, consolidation_check


# --- the analysis (pure: events -> report) ---------------------------------------------------------

def _counts(pods: Iterable[dict]) -> tuple[int, int]:
    live = [p for p in pods if active(p)]
    return (len([p for p in live if p.get("place") == "hybrid"]),
            len([p for p in live if p.get("place") == "cloud"]))


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


@dataclass
class ScenarioRun:
    """One scenario's events, read once: the first event of each kind that happens once, the
    steps' events by step (the last of a step's kind, should one be recorded twice), and the
    scale-ups, snapshots and scale-ins in the order recorded."""
    scenario: str
    switched: Optional[dict] = None
    restarted: Optional[dict] = None
    rollout: Optional[dict] = None
    observed: Optional[dict] = None
    refused: Optional[dict] = None
    aborted: Optional[dict] = None
    settled: Optional[dict] = None
    watch_started: Optional[dict] = None
    watch_done: Optional[dict] = None
    watch_skipped: Optional[dict] = None
    done: Optional[dict] = None
    scaled: dict[int, dict] = field(default_factory=dict)
    forecasts: dict[int, dict] = field(default_factory=dict)
    scaleups: list[dict] = field(default_factory=list)
    snapshots: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)


#: The kinds a scenario records once -> the ScenarioRun field that holds the first of each.
_ONCE = {SWITCHED: "switched", RESTARTED: "restarted", ROLLOUT: "rollout",
         PRECONDITIONS: "observed", REFUSED: "refused", ABORTED: "aborted",
         COSTS_SETTLED: "settled", WATCH_STARTED: "watch_started", WATCH_DONE: "watch_done",
         WATCH_SKIPPED: "watch_skipped", DONE: "done"}
#: The kinds recorded per step -> the ScenarioRun field that holds them by step.
_BY_STEP = {SCALED: "scaled", FORECAST: "forecasts"}
#: The kinds kept in order -> the ScenarioRun field that lists them.
_IN_ORDER = {SCALEUP: "scaleups", SNAPSHOT: "snapshots", STEP: "steps"}


def read_scenario(events: list[dict], scenario: str) -> ScenarioRun:
    run = ScenarioRun(scenario)
    for e in events:
        if e.get("scenario") != scenario:
            continue
        kind = e["kind"]
        if kind in _ONCE and getattr(run, _ONCE[kind]) is None:
            setattr(run, _ONCE[kind], e)
        elif kind in _BY_STEP:
            getattr(run, _BY_STEP[kind])[e["step"]] = e
        elif kind in _IN_ORDER:
            getattr(run, _IN_ORDER[kind]).append(e)
    return run


def analyse_scenario(scenario: str, events: list[dict], settings: dict) -> ScenarioResult:
    run = read_scenario(events, scenario)
    result = ScenarioResult(scenario)
    if run.switched is not None:
        result.checks.append(_switch_check(scenario, run.switched))
    if run.observed is not None:
        result.checks.extend(_in_place_checks(run))
        result.start = _counts(_final_pods(run.observed))
    if run.refused is not None:
        result.refused = list(run.refused.get("reasons") or [])
        if run.observed is None:
            result.checks.extend(_refusal_checks(run, result.refused))
        return result
    result.aborted = run.aborted.get("reason") if run.aborted else None
    previous = list(_final_pods(run.observed)) if run.observed else []
    for up in run.scaleups:
        _scaleup(run, up, previous, settings, result)
        previous = up.get("pods") or []
    if run.settled is not None:
        result.checks.append(_costs_settled_check(scenario, run.settled))
    forecasts = _forecasts(run)
    snapshots = {e["step"]: e.get("pods") or [] for e in run.snapshots}
    result.rows.extend(_step_row(done, snapshots, forecasts) for done in run.steps)
    if any(r.after < r.before for r in result.rows):
        result.checks.append(_forecast_check(scenario, result.rows))
        result.checks.append(rule_check(scenario, result.rows, snapshots, run.settled))
    result.consolidation = consolidation_answer(run.watch_started, run.watch_done,
                                                run.watch_skipped)
    if result.consolidation is not None:
        check = consolidation_check(scenario, result.consolidation)
        if check.status == NOT_READ:
            check = not_read(check.name, "the consolidation watch to its end", events, check.command)
        result.checks.append(check)
    result.checks.append(_completed_check(run, result.aborted, events, settings))
    return result


def _switch_check(scenario: str, switched: dict) -> Check:
    return Check(
        check_name(scenario, C_SWITCH), PASS if switched.get("ok") else FAIL,
        (f"burstScenario {switched.get('previous')} → {scenario}, pulumi up took "
         f"{switched.get('seconds')} s") if switched.get("ok") else
        f"pulumi up for burstScenario {scenario} failed: {switched.get('error')}",
        "" if switched.get("ok") else "run `pulumi up` yourself to see the error; the stack's "
        "original scenario was put back", "pulumi config get burstScenario")


def _in_place_checks(run: ScenarioRun) -> list[Check]:
    """The verdict, then the restart's check and the scenario's own."""
    checks = scenario_checks(run.observed)
    restart = _restart_check(run.scenario, run.restarted, run.rollout, run.observed)
    if restart is not None:
        checks.insert(0, restart)
    return [in_place(run.scenario, checks), *checks]


def _refusal_checks(run: ScenarioRun, reasons: list[str]) -> list[Check]:
    """A scenario refused before its preconditions were read: the restart that did not finish,
    and why it was not measured."""
    checks = []
    if run.rollout is not None and not run.rollout.get("done"):
        checks.append(_restart_check(run.scenario, run.restarted, run.rollout, None))
    checks.append(Check(check_name(run.scenario, C_IN_PLACE), FAIL,
                        "not in place, not measured: " + "; ".join(reasons),
                        "fix what the reason says, then run again"))
    return checks


def _scaleup(run: ScenarioRun, up: dict, previous: list[dict], settings: dict,
             result: ScenarioResult) -> None:
    """The scale to the peak: its timings, its row of the step table and its check."""
    scenario = run.scenario
    ms, result.nodeclaim_s, result.ready_s = _scaleup_measurements(
        scenario, up, run.scaled.get(up["step"]) or {"sent": up["sent"]})
    result.measurements.extend(ms)
    pods = up.get("pods") or []
    result.rows.append(StepRow(up["step"], len([p for p in previous if active(p)]), up["replicas"],
                               (_counts(previous)[0], _counts(pods)[0]),
                               (_counts(previous)[1], _counts(pods)[1]),
                               done=bool(up.get("done"))))
    hybrid, cloud = _counts(pods)
    expected_h = settings.get("on_hybrid", 8)
    expected_c = up["replicas"] - expected_h
    status = PASS if up.get("done") and (hybrid, cloud) == (expected_h, expected_c) else FAIL
    pending = len([p for p in pods if active(p) and not p['node']])
    result.checks.append(Check(
        check_name(scenario, C_SCALEUP), status,
        f"{len([p for p in pods if active(p) and p['ready']])} of {up['replicas']} Ready: "
        f"{hybrid} on hybrid nodes, {cloud} on {settings.get('nodepool')} nodes"
        + (f", {pending} Pending" if pending else "")
        + ("" if up.get("done") else f" after {settings.get('timeout'):g} s"),
        "" if status == PASS else "the capacity check says how many fit on the hybrid nodes; "
        "pending pods: `kubectl -n {0} get pods --field-selector=status.phase=Pending` and "
        "`kubectl get nodeclaims`".format(settings.get("namespace")),
        f"kubectl -n {settings.get('namespace')} get pods -o wide"))


def _costs_settled_check(scenario: str, settled: dict) -> Check:
    ok = settled.get("settled")
    what = "every pod on a hybrid node carries \"1\"" + (
        " and every cloud pod Karpenter's negative rank" if scenario == "C" else "")
    return Check(
        check_name(scenario, C_COSTS_SETTLED), PASS if ok else FAIL,
        f"{what} after {settled.get('waited'):g} s" if ok else
        f"not after {settled.get('waited'):g} s: {_pods_text([p for p in settled.get('pods') or [] if active(p)])}",
        "" if ok else ("Karpenter re-ranks at most once a minute after its nodes initialize; "
                       "raise --rank-timeout, or check the gate (`kubectl -n kube-system logs "
                       "deploy/karpenter | grep -i deletioncost`)" if scenario == "C" else
                       "Kyverno is slow or failing: its background controller's log"))


def _forecasts(run: ScenarioRun) -> dict[int, dict]:
    """Each step's forecast; one that failed when the run was made is made again from its
    snapshot."""
    forecasts = dict(run.forecasts)
    for e in run.snapshots:
        if e["step"] in forecasts and not forecasts[e["step"]].get("ok"):
            forecasts[e["step"]] = _forecast_again(e, forecasts[e["step"]])
    return forecasts


def _step_row(done: dict, snapshots: dict[int, list[dict]], forecasts: dict[int, dict]) -> StepRow:
    """A scale-in's row: the pods it removed (Karpenter's evictions apart) against the forecast."""
    step = done["step"]
    snapshot = snapshots.get(step) or []
    removed = done.get("removed") or []
    victims = [p for p in removed if not p.get("disruption_target")]
    evicted = [p for p in removed if p.get("disruption_target")]
    after = done.get("after") or []
    forecast = forecasts.get(step)
    row = StepRow(step, len([p for p in snapshot if active(p)]), done["replicas"],
                  (_counts(snapshot)[0], _counts(after)[0]),
                  (_counts(snapshot)[1], _counts(after)[1]),
                  removed=victims, evicted=evicted, done=bool(done.get("done")),
                  snapshot=snapshot,
                  cloud_nodes=len({p["node"] for p in after
                                   if active(p) and p.get("place") == "cloud"}))
    if forecast is not None and forecast.get("ok"):
        row.forecast = forecast.get("delete") or []
        row.forecast_note = forecast.get("note")
    elif forecast is not None:
        row.forecast_error = forecast.get("error")
    row.verdict, row.explanation = compare(snapshot, victims, forecast, evicted, after)
    return row


def _forecast_check(scenario: str, rows: list[StepRow]) -> Check:
    """Each scale-in against its forecast: fails on a divergence nothing explains."""
    name = check_name(scenario, C_FORECAST)
    scaleins = [r for r in rows if r.after < r.before]
    unexplained = [r for r in rows if r.verdict == "unexplained"]
    compared = [r for r in scaleins if r.verdict]
    if unexplained:
        return Check(name, FAIL,
                     "; ".join(f"{r.before} → {r.after}: {r.explanation}" for r in unexplained),
                     "the measured outcome differs from the forecast: see the step table")
    if not compared:
        return Check(name, SKIP, "no forecast to compare with: " + "; ".join(
            sorted({r.explanation for r in scaleins})))
    explained = [r for r in compared if r.verdict == "explained"]
    return Check(name, PASS,
                 f"{len(compared) - len(explained)} of {len(compared)} scale-ins exactly as forecast"
                 + ("; " + "; ".join(f"{r.before} → {r.after}: {r.explanation}" for r in explained)
                    if explained else ""))


def _completed_check(run: ScenarioRun, aborted: Optional[str], events: list[dict],
                     settings: dict) -> Check:
    scenario = run.scenario
    completed = run.done is not None
    if not completed and not aborted:
        return not_read(check_name(scenario, C_COMPLETED),
                        f"scenario {scenario}'s scale sequence to its end", events)
    return Check(check_name(scenario, C_COMPLETED), PASS if completed else FAIL,
                 " → ".join(map(str, settings.get("sequence") or []))
                 if completed else f"stopped: {aborted or 'not recorded'}",
                 "" if completed else "the step that stopped says what it waited for")


def _forecast_again(snapshot: dict, failed: dict) -> dict:
    """A forecast that failed when the run was made, made again from the recorded snapshot (the
    same pods, the same clock), so the report still compares each scale-in with a forecast once
    the predictor can make it."""
    try:
        forecast = ranking.forecast(snapshot.get("raw_pods") or [],
                                    snapshot.get("raw_related") or snapshot.get("raw_pods") or [],
                                    snapshot["replicas"], parse_time(snapshot["now"]))
    except Exception:  # noqa: BLE001 the predictor fails on this snapshot too: keep the recorded failure
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
