"""The analysis of `python -m rehearse verify gpu` (pure: events -> report): the checks
(checks.py), the client's success rate and latency, the image pull's time, the chart. The
collector is collect.py."""

from __future__ import annotations

import json
from typing import Optional

from rehearse.commands.verify_gpu.checks import (client_check, completion_check, gpu_check, pod_check,
                                                 pod_spec_checks)
from rehearse.commands.verify_gpu.demo import (DEFAULT_MIN_SUCCESS_RATE, DEFAULT_NAMES, DEFAULT_WINDOW_MINUTES,
                                               GPU_LABEL, GUIDE_PULL_SECONDS, HYBRID_LABEL, HYBRID_VALUE,
                                               MAX_TOKENS, PROMPT, SEED_PULL)
from rehearse.commands.verify_gpu.kinds import (CHECK_CLIENT, CHECK_COMPLETION, CHECK_GPU, CHECK_HOST_NETWORK,
                                                CHECK_POD, CHECK_SIDECAR, CLIENT_LOG, CLIENT_PODS, COMPLETION,
                                                DEPLOYMENT, M_COMPLETION, M_P50, M_P95, M_PULL,
                                                M_SCHEDULED_TO_STARTED, M_SUCCESS, NODES, POD_EVENTS,
                                                SERVER_PODS, SETTINGS, TITLE)
from rehearse.commands.verify_gpu.parse import (Call, Pull, go_duration_text, parse_client_log, parse_pulled,
                                                percentile)
from rehearse.run import record as rec
from rehearse.run.outcome import mark_unread
from rehearse.run.report import Chart, Measurement, Report

#: What each check reads, and the events the collector records once that read is done (it
#: reads in this order), for a run that ended part-way (rehearse.run.outcome.mark_unread).
READS = {
    CHECK_GPU: ("the nodes", (NODES,)),
    CHECK_POD: ("the vLLM Deployment, its pods and their events", (CLIENT_PODS, COMPLETION)),
    CHECK_SIDECAR: ("the vLLM pods", (SERVER_PODS,)),
    CHECK_HOST_NETWORK: ("the vLLM pods", (SERVER_PODS,)),
    CHECK_CLIENT: ("the client's pods and logs", (COMPLETION,)),
    CHECK_COMPLETION: ("a completion through the vLLM Service", (COMPLETION,)),
}


def analyse(events: list[dict]) -> Report:
    # events.jsonl is written with sorted keys: read the live events the same way, so a run
    # and its replay (`rehearse report`) iterate dicts alike and write the same report.
    events = json.loads(json.dumps(events, sort_keys=True, default=str))
    started = rec.first(events, rec.RUN_STARTED) or {}
    report = Report(command="verify gpu", stack=started.get("stack", "?"),
                    started=started.get("at", "?"), title=TITLE)
    settings = rec.first(events, SETTINGS) or {}
    ns = settings.get("namespace", "demo-gpu")
    app = settings.get("deployment", DEFAULT_NAMES["deployment"])
    nodes_event = rec.first(events, NODES)
    nodes = (nodes_event or {}).get("nodes") or []
    gpu_hosts = [n for n in nodes if n["labels"].get(GPU_LABEL) == "true"
                 and n["labels"].get(HYBRID_LABEL) == HYBRID_VALUE]
    pods = [p for p in (rec.first(events, SERVER_PODS) or {}).get("pods") or []
            if not p.get("deleting")]
    pod_events = {e["pod"]: e.get("events") or [] for e in rec.every(events, POD_EVENTS)}
    deployment = rec.first(events, DEPLOYMENT) or {}

    report.checks.append(gpu_check(settings, nodes_event, nodes, gpu_hosts))
    report.checks.append(pod_check(ns, app, deployment, pods, pod_events, gpu_hosts))
    report.checks += pod_spec_checks(ns, app, pods)
    calls = _calls_in_window(events, settings)
    report.checks.append(client_check(events, settings, calls))
    completion = rec.first(events, COMPLETION)
    report.checks.append(completion_check(settings, completion))
    mark_unread(report, events, READS)

    report.measurements += _client_measurements(settings, calls)
    report.measurements += _pull_measurements(pods, pod_events, report.notes)
    report.charts.append(_chart(report, calls))
    if completion and completion.get("status") == 200:
        report.measurements.append(Measurement(
            M_COMPLETION, completion.get("seconds"), "s", "",
            "one POST through the API server's service proxy, timed here: includes the round "
            "trip from this machine to the cluster"))
    answered = [c for c in calls if c.ok and c.answer]
    if answered:
        report.notes.append(f"The client's latest answer ({answered[-1].at:%H:%M:%S} UTC): "
                            f"{PROMPT!r} → {answered[-1].answer!r}")
    for pod in pods:
        restarted = {c: n for c, n in (pod.get("restarts") or {}).items() if n}
        if restarted:
            last = {c: next(iter(s.values()), {}).get("reason")
                    for c, s in (pod.get("last_states") or {}).items()}
            report.notes.append(f"Pod {pod['name']} restarted: " + ", ".join(
                f"{c} {n} time(s) (last: {last.get(c) or 'unknown'})" for c, n in restarted.items())
                + f"; `kubectl -n {ns} logs {pod['name']} --previous` shows why.")
    return report


def _chart(report: Report, calls: list[Call]) -> Chart:
    """The client's call times and the pull beside the demo guide's, from the measurements."""
    values = {m.name: m.value for m in report.measurements}
    return Chart("gpu-latency", "Demo 3: the cloud client's completions and the vLLM image pull",
                 {"calls": [[c.seconds, c.ok] for c in calls], "p50": values.get(M_P50),
                  "p95": values.get(M_P95), "pull_seconds": values.get(M_PULL),
                  "guide_pull_seconds": GUIDE_PULL_SECONDS, "guide_pull": SEED_PULL})


def _calls_in_window(events: list[dict], settings: dict) -> list[Call]:
    start = settings.get("window_start")
    start_at = rec.parse_time(start) if start else None
    calls = []
    for log in rec.every(events, CLIENT_LOG):
        calls += [c for c in parse_client_log(log.get("lines") or [])
                  if start_at is None or c.at >= start_at]
    return sorted(calls, key=lambda c: c.at)


def _client_measurements(settings: dict, calls: list[Call]) -> list[Measurement]:
    window = settings.get("window_minutes", DEFAULT_WINDOW_MINUTES)
    threshold = settings.get("min_success_rate", DEFAULT_MIN_SUCCESS_RATE)
    ok = [c.seconds for c in calls if c.ok]
    rate = round(100.0 * len(ok) / len(calls), 1) if calls else None

    def rank(p: int) -> str:
        if not ok:
            return "no ok call in the window"
        return (f"nearest rank: the {_ordinal(max(1, -(-p * len(ok) // 100)))} smallest of the "
                f"{len(ok)} ok calls' times")

    return [
        Measurement(M_SUCCESS, rate, "%", f"pass at ≥ {threshold:g} % and the latest call ok",
                    f"{len(ok)} of {len(calls)} calls in the last {window:g} min"),
        Measurement(M_P50, percentile(ok, 50), "s", "the demo guide checked it, gave no figure",
                    f"{rank(50)}, by the client's clock (name lookup, ClusterIP, cloud → hybrid, "
                    f"{MAX_TOKENS} tokens)"),
        Measurement(M_P95, percentile(ok, 95), "s", "", rank(95)),
    ]


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _pull_measurements(pods: list[dict], pod_events: dict[str, list[dict]],
                       notes: list[str]) -> list[Measurement]:
    ordered = sorted(pods, key=lambda p: not p["ready"])
    found: Optional[tuple[dict, dict, Pull]] = None
    cached: Optional[tuple[dict, dict, Pull]] = None
    for pod in ordered:
        images = set((pod.get("images") or {}).values())
        for event in reversed(pod_events.get(pod["name"]) or []):
            if event.get("reason") != "Pulled":
                continue
            pull = parse_pulled(event.get("message") or "")
            if pull is None or (images and pull.image not in images):
                continue
            if pull.cached:
                cached = cached or (pod, event, pull)
            elif found is None:
                found = (pod, event, pull)
        if found:
            break
    measurements = []
    if found:
        pod, event, pull = found
        waiting = (f"; {go_duration_text(pull.total_seconds)} including waiting for the "
                   "kubelet's pull queue" if pull.total_seconds is not None else "")
        size = f"; image {pull.size_bytes / 1e9:.1f} GB" if pull.size_bytes else ""
        measurements.append(Measurement(
            M_PULL, pull.seconds, "s", SEED_PULL,
            f"\"in {pull.text}\" in the Pulled event of {pod['name']} on {pod['node']} at "
            f"{event.get('last') or event.get('event_time')}{waiting}{size}"))
    else:
        measurements.append(Measurement(M_PULL, None, "s", SEED_PULL,
                                        "no Pulled event with a time (see the notes)"))
        if cached:
            notes.append(f"The vLLM image was already on {cached[0]['node']} when "
                         f"{cached[0]['name']} started (\"already present on machine\"): no pull "
                         "to time. A fresh GPU host pulls it again.")
        else:
            notes.append("No Pulled event for the vLLM pod: the API server keeps events for "
                         "about an hour (Kubernetes' default --event-ttl; EKS's eventTtl), so a "
                         "pod started earlier has lost them. Run this within the hour after a "
                         "fresh deploy to time the pull; the scheduled → started time below "
                         "outlives the events.")
    for pod in ordered:
        spent = _scheduled_to_started(pod)
        if spent is not None:
            measurements.append(Measurement(
                M_SCHEDULED_TO_STARTED, spent, "s", "an upper bound of the pull",
                f"{pod['name']}: PodScheduled → the vllm container's start, from the pod's "
                "status (kept as long as the pod): the pull plus creating the container"))
            break
    return measurements


def _scheduled_to_started(pod: dict) -> Optional[float]:
    if any(pod.get("restarts", {}).values()):
        return None  # the running state is the latest restart's, not the first start
    scheduled = next((c.get("lastTransitionTime") for c in pod.get("conditions") or []
                      if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
    states = pod.get("states") or {}
    container = "vllm" if "vllm" in states else next(iter(states), None)
    running = (states.get(container) or {}).get("running") if container else None
    if not scheduled or not running or not running.get("startedAt"):
        return None
    return round((rec.parse_time(running["startedAt"]) - rec.parse_time(scheduled)).total_seconds(), 3)
