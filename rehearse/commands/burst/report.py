"""The report (pure): demo 2's report.md sections and tables, its report.json and the data of
its chart (rehearse.charts.burst), from the analysis' results."""

from __future__ import annotations

from typing import Any, Optional

from rehearse.run.record import RUN_STARTED, every, first
from rehearse.run.report import FAIL, NOT_READ, PASS, SKIP, Chart, Check, Report
from rehearse.commands.burst.kinds import (CHECK_RESTORED, ORIGINAL, PRECONDITIONS, RESTORED, SCENARIO_WORDS,
                                  SETTINGS, SWITCHED, C_COMPLETED)
from rehearse.run.outcome import not_read
from rehearse.commands.burst.preconditions import in_place, scenario_checks
from rehearse.commands.burst.capacity import capacity, capacity_check, nodepool_check
from rehearse.commands.burst.analyse import ScenarioResult, _victim_text, analyse_scenario
from rehearse.commands.burst.scalein import StepRow


class BurstReport(Report):
    """The frame's report with demo 2's tables."""

    def __init__(self, *args: Any, sections: Optional[list[str]] = None,
                 data: Optional[dict] = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.sections = sections or []
        self.data = data or {}

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        if self.data:
            out["demo2"] = self.data
        return out

    def to_markdown(self) -> str:
        text = super().to_markdown()
        if not self.sections:
            return text
        head, sep, tail = text.partition("## Checklist")
        return head + "\n".join(self.sections).rstrip() + "\n\n" + sep + tail


def analyse(events: list[dict]) -> Report:
    started = first(events, RUN_STARTED) or {}
    settings = first(events, SETTINGS) or {}
    mode = settings.get("mode") or ("verify" if started.get("command") == "verify burst" else "burst")
    title = "Demo 2: " + ("ready to burst" if mode == "verify" else "scale-in under scenarios "
                          + "/".join(settings.get("scenarios") or []))
    report = BurstReport(command=started.get("command", "burst"), stack=started.get("stack", "?"),
                         started=started.get("at", "?"), title=title)
    if mode == "verify":
        return _analyse_verify(events, settings, report)
    return _analyse_burst(events, settings, report)


def _common_checks(observed: Optional[dict], settings: dict) -> list[Check]:
    if observed is None:
        return []
    return [nodepool_check(observed, settings), capacity_check(observed, settings)]


def _analyse_verify(events: list[dict], settings: dict, report: BurstReport) -> Report:
    observed = first(events, PRECONDITIONS)
    if observed is None:
        report.checks.append(not_read("preconditions recorded", "the preconditions", events))
        return report
    scenario = observed["scenario"]
    checks = scenario_checks(observed)
    report.checks.append(in_place(scenario, checks, measuring=False))
    report.checks.extend(checks)
    report.checks.extend(_common_checks(observed, settings))
    report.notes.append(f"The stack's scenario is {scenario} ({SCENARIO_WORDS[scenario]}). "
                        "`verify burst` restarts nothing: pods older than a scenario switch carry "
                        "the previous scenario's costs until the Deployment is restarted "
                        "(`python -m rehearse burst` restarts it before measuring).")
    if scenario == "C":
        report.notes.append("Karpenter writes its ranks only on pods of initialized cloud-burst "
                            "nodes; at rest (3 pods, all on hybrid nodes) there are none to see: "
                            "`rehearse burst` waits for them before the first scale-in.")
    report.sections.append(_capacity_section(observed))
    return report


def _capacity_section(observed: dict) -> str:
    found = capacity(observed)
    lines = ["## Capacity on the hybrid nodes", "",
             f"A burst pod requests {found['request_cpu_m']}m CPU (the scheduler's count: the "
             "larger of its containers' sum and its largest init container).", "",
             "| node | for burst pods | allocatable | requested by other pods | free | burst pods that fit |",
             "|---|---|---|---|---|---|"]
    for r in found["nodes"]:
        others = ", ".join(f"{n} {m}m" for n, m in r["others"] if m) or "—"
        lines.append(f"| {r['node']} | {'yes' if r['eligible'] else 'no'} | {r['allocatable_cpu_m']}m | "
                     f"{r['used_cpu_m']}m ({others}) | {r['free_cpu_m']}m | {r['fit']} |")
    lines.append("")
    return "\n".join(lines)


def _step_table(result: ScenarioResult) -> list[str]:
    lines = ["| step | hybrid pods | cloud pods | removed by the scale-in | forecast | forecast vs measured |",
             "|---|---|---|---|---|---|"]
    if result.start is not None:
        lines.append(f"| start (restarted) | {result.start[0]} | {result.start[1]} | — | — | — |")
    for r in result.rows:
        if r.after > r.before:
            removed = forecast = match = "—"
        else:
            (h, c), predicted = _step_counts(r)
            removed = f"{len(r.removed)}: {h} hybrid, {c} cloud"
            if r.evicted:
                removed += f" (+{len(r.evicted)} evicted by Karpenter)"
            if predicted is not None:
                fh, fc = predicted
                ties = len([v for v in r.forecast or [] if v.get("tie")])
                forecast = f"{len(r.forecast or [])}: {fh} hybrid, {fc} cloud" + (
                    f" ({ties} chosen among equals)" if ties else "")
            else:
                forecast = f"— ({r.forecast_error or 'none'})"
            match = {"same": "same pods", "explained": "differs, explained",
                     "unexplained": "**DIFFERS — unexplained**", "": "not compared"}[r.verdict]
        state = "" if r.done else " (stopped)"
        lines.append(f"| {r.before} → {r.after}{state} | {r.hybrid[0]} → {r.hybrid[1]} | "
                     f"{r.cloud[0]} → {r.cloud[1]} | {removed} | {forecast} | {match} |")
    return lines


def _step_counts(r: StepRow) -> tuple[tuple[int, int], Optional[tuple[int, int]]]:
    """(hybrid, cloud) pods the scale-in removed, and those the forecast named (None: no
    forecast): the step table's and the chart's figures."""
    removed = (len([p for p in r.removed if p.get("place") == "hybrid"]),
               len([p for p in r.removed if p.get("place") == "cloud"]))
    if r.forecast is None:
        return removed, None
    fh = len([v for v in r.forecast if _place_of(r, v["name"]) == "hybrid"])
    return removed, (fh, len(r.forecast) - fh)


def _chart(results: list[ScenarioResult], settings: dict) -> Chart:
    """Per scenario, the hybrid/cloud split at the start and after each step of the sequence
    (a step not reached is drawn as not measured), and each scale-in's removed pods beside the
    forecast's."""
    sequence = list(settings.get("sequence") or [])
    scenarios = []
    for result in results:
        states = []
        if result.start is not None:
            states.append({"label": "start", "hybrid": result.start[0], "cloud": result.start[1]})
        for r in result.rows:
            state = {"label": f"{r.before} → {r.after}", "hybrid": r.hybrid[1], "cloud": r.cloud[1],
                     "done": r.done}
            if r.after < r.before:
                removed, predicted = _step_counts(r)
                state.update(removed=list(removed), verdict=r.verdict,
                             forecast=None if predicted is None else list(predicted))
            states.append(state)
        missing = [f"{a} → {b}" for a, b in zip(sequence, sequence[1:])][len(result.rows):]
        why = ("not in place: " + "; ".join(result.refused) if result.refused else
               f"stopped: {result.aborted}" if result.aborted else "the run ended before it")
        scenarios.append({"scenario": result.scenario, "words": SCENARIO_WORDS[result.scenario],
                          "refused": bool(result.refused), "states": states,
                          "not_measured": missing, "why": why})
    return Chart("burst-scale-in", "Demo 2: burst pods on hybrid vs cloud nodes after each step",
                 {"scenarios": scenarios})


def _place_of(row: StepRow, name: str) -> Optional[str]:
    return next((p.get("place") for p in row.snapshot if p["name"] == name), None)


def _analyse_burst(events: list[dict], settings: dict, report: BurstReport) -> Report:
    if not settings:
        # The run ended before its settings were recorded: which scenarios it would have
        # measured is not known, and nothing was.
        report.checks.append(not_read(C_COMPLETED, "the stack's demo 2 settings", events))
        return report
    scenarios = settings.get("scenarios") or []
    results = []
    for scenario in scenarios:
        result = analyse_scenario(scenario, events, settings)
        results.append(result)
        report.checks.extend(result.checks)
        report.measurements.extend(result.measurements)
    observed = next((e for e in every(events, PRECONDITIONS)), None)
    report.checks.extend(_common_checks(observed, settings))
    restored = first(events, RESTORED)
    original = first(events, ORIGINAL)
    if restored is not None:
        report.checks.append(Check(
            CHECK_RESTORED, PASS if restored.get("ok") else FAIL,
            f"burstScenario back to {restored.get('scenario') or 'the default (unset)'} "
            f"(pulumi up took {restored.get('seconds')} s)" if restored.get("ok") else restored.get("error"),
            "" if restored.get("ok") else "set it back yourself: the message says how",
            "pulumi config get burstScenario"))
    elif original is not None and first(events, SWITCHED) is None:
        # Nothing was switched, so nothing was left to put back.
        report.checks.append(not_read(CHECK_RESTORED, "burstScenario (it was never switched)",
                                      events, "pulumi config get burstScenario"))
    elif original is not None:
        report.checks.append(Check(CHECK_RESTORED, FAIL, "the run ended after switching "
                                   "burstScenario and before putting it back",
                                   "check `pulumi config get burstScenario`"))
    for result in results:
        report.sections.append(_scenario_section(result, settings))
    if len([r for r in results if r.rows]) > 1:
        report.sections.append(_comparison_section(results, settings))
    if results:
        report.charts.append(_chart(results, settings))
    report.data = {"scenarios": {r.scenario: _result_json(r) for r in results}}
    report.notes.append("Times are the cluster's own: NodeClaim creationTimestamp and the pods' "
                        "Ready conditions, against the scale (the first pod the scale created), in "
                        "whole seconds. The demo guide measured each scenario once (docs/demo-guide.md#demo-2-bursting-and-scale-in).")
    report.notes.append("pod-deletion-cost is a preference: it does not apply to node failures or "
                        "evictions (the demo guide's talking point, docs/demo-guide.md#demo-2-bursting-and-scale-in); Karpenter's evictions are listed "
                        "apart from the scale-in's victims.")
    return report


def _result_json(result: ScenarioResult) -> dict:
    return {"refused": result.refused, "aborted": result.aborted, "start": result.start,
            "nodeclaim_seconds": result.nodeclaim_s, "ready_seconds": result.ready_s,
            "steps": [{"step": r.step, "from": r.before, "to": r.after,
                       "hybrid": list(r.hybrid), "cloud": list(r.cloud),
                       "removed": r.removed, "evicted": r.evicted,
                       "forecast": r.forecast, "forecast_error": r.forecast_error,
                       "verdict": r.verdict, "explanation": r.explanation, "done": r.done}
                      for r in result.rows],
            "consolidation": result.consolidation}


def _scenario_section(result: ScenarioResult, settings: dict) -> str:
    s = result.scenario
    lines = [f"## Scenario {s}: {SCENARIO_WORDS[s]}", ""]
    if result.refused:
        lines += ["**Not measured** — the scenario was not in place:", ""]
        lines += [f"- {reason}" for reason in result.refused]
        lines.append("")
        return "\n".join(lines)
    lines += _step_table(result)
    lines.append("")
    for r in result.rows:
        if r.after >= r.before:
            continue
        lines.append(f"**{r.before} → {r.after}** removed: "
                     + (", ".join(_victim_text(p) for p in r.removed) or "nothing"))
        if r.evicted:
            lines.append("  Evicted by Karpenter (DisruptionTarget, not the scale-in's choice): "
                         + ", ".join(_victim_text(p) + f" — {p['disruption_target'].get('reason')}"
                                     for p in r.evicted))
        if r.forecast is not None:
            lines.append("  Forecast" + (f" ({r.forecast_note})" if r.forecast_note else "") + ": " + (", ".join(
                f"{v['name']} ({v.get('rule')}{', tie' if v.get('tie') else ''})"
                for v in r.forecast) or "nothing"))
        if r.verdict in ("explained", "unexplained"):
            lines.append(f"  {'⚠ ' if r.verdict == 'unexplained' else ''}Divergence: {r.explanation}")
        lines.append("")
    lines += ["| timing | measured | demo guide |", "|---|---|---|",
              f"| scale to 15 → first NodeClaim | {_fmt(result.nodeclaim_s)} | 1–2 s |",
              f"| scale to 15 → all 15 Ready | {_fmt(result.ready_s)} | 37–38 s |", ""]
    if result.aborted:
        lines += [f"Stopped: {result.aborted}", ""]
    lines += _consolidation_lines(result)
    return "\n".join(lines)


_ANSWER_WORD = {PASS: "as expected", FAIL: "**NOT as expected**", SKIP: "not answered",
                NOT_READ: "not answered"}


def _consolidation_lines(result: ScenarioResult) -> list[str]:
    answer = result.consolidation
    if answer is None:
        return []
    lines = [f"### Consolidation and hybrid capacity (scenario {result.scenario})", ""]
    if "room" not in answer:
        return lines + [answer["answer"][:1].upper() + answer["answer"][1:] + ".", ""]
    room = answer["room"]
    lines += [f"Expected: {answer['expectation']}.", "",
              f"Answer ({_ANSWER_WORD[answer['status']]}): {answer['answer']}.", "",
              f"Watched {answer.get('seconds'):g} s after the last scale-in"
              + (f"; NodePool consolidationPolicy {answer['consolidation_policy']}"
                 if answer.get("consolidation_policy") else "")
              + (f", consolidateAfter {answer['consolidate_after']}" if answer.get("consolidate_after") else "")
              + "." + (f" Note: {answer['note']}." if answer.get("note") else ""), "",
              "| hybrid node | burst pods that fit | burst pods on it | free slots |",
              "|---|---|---|---|"]
    for h in room["hybrid"]:
        lines.append(f"| {h['node']} | {h['fit']} | {h['burst_pods']} | {h['free_slots']} |")
    lines += ["", "| cloud node | NodeClaim | burst pods at the start | fit on the hybrid room | disrupted |",
              "|---|---|---|---|---|"]
    disrupted = {r["node"]: r for r in answer.get("disrupted") or []}
    for c in room["cloud"]:
        d = disrupted.get(c["node"])
        lines.append(f"| {c['node']} | {c.get('nodeclaim') or '—'} | {', '.join(c['pods']) or '—'} | "
                     f"{'yes' if c['fits'] else 'no' if c['pods'] else '— (empty)'} | "
                     f"{'; '.join(d['evidence']) if d else 'no'} |")
    lines.append("")
    events = answer.get("events") or []
    if events:
        lines += ["Karpenter's events during the watch:", ""]
        lines += [f"- {e['at']}: {e.get('kind')} {e.get('object')} — {e.get('reason')}: "
                  f"{e.get('message')}" + (f" (× {e['count']})" if (e.get("count") or 1) > 1 else "")
                  for e in events]
        lines.append("")
    else:
        lines += ["Karpenter's events during the watch: none.", ""]
    moved = answer.get("moved") or []
    created = answer.get("created") or []
    if moved or created:
        lines += ["Pods that moved: "
                  + (", ".join(f"{c['name']} left {c.get('node')}" + (" (evicted)" if c.get("disruption_target") else "")
                               for c in moved) or "none left")
                  + "; " + (", ".join(f"{c['name']} started on {c.get('node') or 'no node'} ({c.get('place') or '?'})"
                                       for c in created) or "none created"), ""]
    else:
        lines += ["No burst pod moved during the watch.", ""]
    return lines


def _fmt(value: Optional[float]) -> str:
    return "—" if value is None else f"{value:g} s"


def _comparison_section(results: list[ScenarioResult], settings: dict) -> str:
    steps = [f"{a} → {b}" for a, b in zip(settings.get("sequence") or [], (settings.get("sequence") or [])[1:])
             if b < a]
    lines = ["## Across scenarios", "",
             "Removed by each scale-in (hybrid / cloud), what was left (a cloud node left empty "
             "is one Karpenter can consolidate), and the timings.", "",
             "| scenario | " + " | ".join(steps) + " | first NodeClaim | all Ready | "
             "consolidation and hybrid capacity |",
             "|---|" + "---|" * (len(steps) + 3)]
    for r in results:
        if r.refused:
            lines.append(f"| {r.scenario} | " + " | ".join("not measured" for _ in steps) + " | — | — | — |")
            continue
        cells = []
        for row in [row for row in r.rows if row.after < row.before]:
            h = len([p for p in row.removed if p.get("place") == "hybrid"])
            c = len([p for p in row.removed if p.get("place") == "cloud"])
            cells.append(f"{h} / {c} (left: {row.hybrid[1]} hybrid, {row.cloud[1]} cloud on "
                         f"{row.cloud_nodes} node{'' if row.cloud_nodes == 1 else 's'})")
        cells += ["—"] * (len(steps) - len(cells))
        answer = r.consolidation
        watch = (f"{_ANSWER_WORD[answer['status']]}: {answer['answer']}" if answer else "not watched")
        lines.append(f"| {r.scenario} | " + " | ".join(cells) + f" | {_fmt(r.nodeclaim_s)} | "
                     f"{_fmt(r.ready_s)} | {watch.replace('|', '/')} |")
    lines.append("")
    return "\n".join(lines)
