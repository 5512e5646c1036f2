"""The collector of ``rehearse burst`` (demo 2): the scenarios one after another, the scale
sequence of each, and the stack's scenario put back at the end. What the command does is told in
its face's docstring (rehearse/commands/burst/command.py), which is its help; ``verify burst``'s
collector is verify.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from rehearse.models import clock_window, ranking
from rehearse.run.errors import RunError
from rehearse.lab import server_clock
from rehearse.lab.switch import RestoreBlocked, require_stack
from rehearse.run.record import iso
from rehearse.run.report import FAIL
from rehearse.commands.burst.kinds import (ABORTED, COST, COSTS_SETTLED, DONE, FORECAST, ORIGINAL,
                                  PRECONDITIONS, REFUSED, REPLICAS_BACK, RESTARTED, RESTORED,
                                  ROLLOUT, SCALED, SCALEUP, SCALEUP_POLL, SCENARIO_WORDS, SETTINGS,
                                  SETTLED_NODECLAIMS, SNAPSHOT, STEP, STEP_POLL, SWITCHED,
                                  WATCH_DONE, WATCH_EVERY, WATCH_SKIPPED, WATCH_STARTED)
from rehearse.commands.burst.settings import Settings, settings_event, settings_from
from rehearse.commands.burst.reading import (Cluster, active, cost_of, deployment_summary, forecast_event,
                                    pod_for_forecast)
from rehearse.commands.burst.preconditions import (costs_settled, in_place, observe_preconditions,
                                          scenario_checks)
from rehearse.commands.burst.switching import Switcher, _pulumi_error, clear_costs
from rehearse.commands.burst.changes import (diff, event_change, node_change, nodeclaim_change,
                                            pod_change)


# --- the collector --------------------------------------------------------------------------------

class Aborted(Exception):
    """A wait ran out: the scenario's sequence stops here (recorded), the run goes on."""


class Runner:
    def __init__(self, ctx: Any, record: Any, settings: Settings):
        self.ctx, self.record, self.s = ctx, record, settings
        self.cluster = Cluster(ctx, settings)

    # waits

    def _wait(self, what: str, test: Callable[[], Any], timeout: float) -> Any:
        start = self.ctx.monotonic()
        last = -1e9
        while True:
            result = test()
            if result:
                return result
            elapsed = self.ctx.monotonic() - start
            if elapsed >= timeout:
                raise Aborted(f"{what}: not after {timeout:g} s")
            if elapsed - last >= 10:
                last = elapsed
                self.ctx.progress(f"waiting for {what} ({elapsed:.0f} s)")
            self.ctx.sleep(self.s.interval)

    # one scenario

    def restart(self, scenario: str) -> None:
        s, ctx = self.s, self.ctx
        before = self.cluster.workload()
        stamp = iso(ctx.clock())
        ctx.progress(f"scenario {scenario}: restarting deploy/{s.deployment} at {s.sequence[0]} "
                     "replicas (annotations outlive a scenario)")
        self.cluster.scale(s.sequence[0], restart_at=stamp)
        self.record(RESTARTED, scenario=scenario, restarted_at=stamp, replicas=s.sequence[0],
                    revision_before=before["revision"], hash_before=before["hash"])

        def rolled() -> Optional[dict]:
            work = self.cluster.workload()
            if work["revision"] is None or (before["revision"] is not None
                                            and work["revision"] <= before["revision"]):
                return None
            pods = self.cluster.summaries(work["all"])
            current = [p for p in pods if p["hash"] == work["hash"]]
            others = [p for p in pods if p["hash"] != work["hash"]]
            if others or len([p for p in current if active(p)]) != s.sequence[0] \
                    or not all(p["ready"] for p in current if active(p)) \
                    or any(not active(p) for p in current):
                return None
            return {"revision": work["revision"], "hash": work["hash"], "pods": pods}

        try:
            done = self._wait(f"the restart of deploy/{s.deployment}", rolled, s.timeout)
        except Aborted:
            work = self.cluster.workload()
            self.record(ROLLOUT, scenario=scenario, done=False, revision=work["revision"],
                        hash=work["hash"], pods=self.cluster.summaries(work["all"]))
            raise
        self.record(ROLLOUT, scenario=scenario, done=True, **done)

    def settle_nodeclaims(self, scenario: str) -> None:
        claims = self.cluster.nodeclaims()
        if claims is None:
            self.record(SETTLED_NODECLAIMS, scenario=scenario, crd=False, nodeclaims=[])
            raise Aborted("the API serves no NodeClaims: is Karpenter installed?")
        if claims:
            self.ctx.progress(f"waiting for {len(claims)} {self.s.nodepool} NodeClaim(s) of an "
                              "earlier run to go (consolidation after 30 s)")
        try:
            self._wait(f"the {self.s.nodepool} NodeClaims to go",
                       lambda: (self.cluster.nodeclaims() or []) == [], self.s.timeout)
        except Aborted:
            self.record(SETTLED_NODECLAIMS, scenario=scenario, crd=True, settled=False,
                        nodeclaims=self.cluster.nodeclaims() or [])
            raise
        self.record(SETTLED_NODECLAIMS, scenario=scenario, crd=True, settled=True,
                    waited_for=[c["name"] for c in claims])

    def scale_up(self, scenario: str, step: int, target: int) -> None:
        ctx, s, cluster = self.ctx, self.s, self.cluster
        before = cluster.workload()
        claims_before = {c["name"] for c in cluster.nodeclaims() or []}
        sent = ctx.clock()
        cluster.scale(target)
        answered = ctx.clock()
        self.record(SCALED, scenario=scenario, step=step, replicas=target,
                    replicas_before=len([p for p in cluster.summaries(before["current"]) if active(p)]),
                    sent=iso(sent), answered=iso(answered),
                    pods_before=[p["metadata"]["name"] for p in before["current"]])
        ctx.progress(f"scenario {scenario}: scaled to {target}; waiting for the NodeClaim and "
                     f"{target} Ready pods")
        seen_claim: Optional[str] = None
        start = ctx.monotonic()
        last_progress = -1e9
        while True:
            claims = cluster.nodeclaims() or []
            new = [c for c in claims if c["name"] not in claims_before]
            if new and seen_claim is None:
                seen_claim = iso(ctx.clock())
            work = cluster.workload()
            pods = cluster.summaries(work["current"])
            live = [p for p in pods if active(p)]
            ready = [p for p in live if p["ready"]]
            self.record(SCALEUP_POLL, scenario=scenario, step=step, active=len(live),
                        ready=len(ready), pending=len([p for p in live if not p["node"]]),
                        nodeclaims=[c["name"] for c in new])
            if len(live) == target and len(ready) == target:
                break
            elapsed = ctx.monotonic() - start
            if elapsed >= s.timeout:
                self.record(SCALEUP, scenario=scenario, step=step, done=False, replicas=target,
                            sent=iso(sent), answered=iso(answered), nodeclaims=new, pods=pods,
                            nodes=cluster.nodes(), first_nodeclaim_seen=seen_claim,
                            all_ready_seen=None)
                raise Aborted(f"{target} pods Ready: {len(ready)} after {s.timeout:g} s")
            if elapsed - last_progress >= 5:
                last_progress = elapsed
                ctx.progress(f"  {elapsed:.0f} s: {len(ready)}/{target} Ready, "
                             f"{len(new)} new NodeClaim(s)")
            ctx.sleep(s.interval)
        self.record(SCALEUP, scenario=scenario, step=step, done=True, replicas=target,
                    sent=iso(sent), answered=iso(answered), nodeclaims=new, pods=pods,
                    nodes=cluster.nodes(), first_nodeclaim_seen=seen_claim,
                    all_ready_seen=iso(ctx.clock()))

    def settle_costs(self, scenario: str) -> None:
        """Before the first scale-in: B and C, Kyverno's "1" on every hybrid pod; C, Karpenter's
        ranks on the cloud pods (it re-ranks at most once a minute)."""
        if scenario == "A":
            return
        ctx, s = self.ctx, self.s
        timeout = s.rank_timeout if scenario == "C" else s.within

        def settled(pods: list[dict]) -> bool:
            live = [p for p in pods if active(p)]
            if not costs_settled(scenario, live):
                return False
            if scenario == "C":
                return all(cost_of(p["cost"]) < 0 for p in live if p["place"] == "cloud")
            return True

        if scenario == "C":
            ctx.progress(f"scenario C: waiting up to {timeout:g} s for Karpenter to rank the "
                         "cloud pods")
        start = ctx.monotonic()
        while True:
            pods = self.cluster.summaries()
            waited = round(ctx.monotonic() - start, 3)
            if settled(pods) or waited >= timeout:
                break
            ctx.sleep(s.interval)
        self.record(COSTS_SETTLED, scenario=scenario, settled=settled(pods), waited=waited,
                    timeout=timeout, pods=pods)

    def scale_in(self, scenario: str, step: int, target: int) -> None:
        ctx, s, cluster = self.ctx, self.s, self.cluster
        work = cluster.workload()
        nodes = cluster.nodes()
        snapshot = cluster.summaries(work["current"])
        # The controller sorts later, by the API server's clock: measured here, bounded.
        offset = server_clock.measure_offset(ctx.kube, ctx.clock)
        now = ctx.clock()
        self.record(SNAPSHOT, scenario=scenario, step=step, replicas=target,
                    replicas_before=len([p for p in snapshot if active(p)]), pods=snapshot,
                    nodes=nodes, raw_pods=[pod_for_forecast(p) for p in work["current"]],
                    # None: the same pods (one ReplicaSet), not written twice.
                    raw_related=None if [p["metadata"]["name"] for p in work["related"]]
                    == [p["metadata"]["name"] for p in work["current"]]
                    else [pod_for_forecast(p) for p in work["related"]], now=iso(now),
                    server_offset=offset)
        try:
            forecast = ranking.forecast(work["current"], work["related"], target, now,
                                        clock_window.window(offset))
        except KeyboardInterrupt:
            raise
        except Exception as error:  # noqa: BLE001 a forecast that fails is reported, not fatal
            self.record(FORECAST, scenario=scenario, step=step, ok=False,
                        error=f"{type(error).__name__}: {error}"[:300])
        else:
            self.record(FORECAST, scenario=scenario, step=step, ok=True, **forecast_event(forecast))
        sent = ctx.clock()
        cluster.scale(target)
        answered = ctx.clock()
        self.record(SCALED, scenario=scenario, step=step, replicas=target,
                    replicas_before=len([p for p in snapshot if active(p)]),
                    sent=iso(sent), answered=iso(answered))
        ctx.progress(f"scenario {scenario}: scaled {len([p for p in snapshot if active(p)])} → {target}")
        names = {p["name"] for p in snapshot if active(p)}
        terminating: dict[str, dict] = {}
        gone: dict[str, str] = {}
        start = ctx.monotonic()
        while True:
            pods = cluster.summaries(cluster.burst_pods())
            by_name = {p["name"]: p for p in pods}
            for name in names:
                pod = by_name.get(name)
                if pod is None:
                    gone.setdefault(name, iso(ctx.clock()))
                elif not active(pod):
                    # As first seen terminating: who deleted it. An eviction adds its
                    # DisruptionTarget condition before the deletion; one that comes to a pod
                    # already terminating (evicted while it goes) leaves it the scale-in's
                    # choice (docs/scale-in.md#evictions-during-a-scale-in).
                    terminating.setdefault(name, pod)
            live = [p for p in pods if active(p) and p["hash"] == work["hash"]]
            leaving = [p for p in pods if not active(p)]
            self.record(STEP_POLL, scenario=scenario, step=step, active=len(live),
                        ready=len([p for p in live if p["ready"]]),
                        terminating=[p["name"] for p in leaving],
                        new=[p["name"] for p in pods if p["name"] not in names])
            if len(live) == target and all(p["ready"] for p in live) and not leaving:
                done = True
                break
            if ctx.monotonic() - start >= s.timeout:
                done = False
                break
            ctx.sleep(s.interval)
        removed = []
        before = {p["name"]: p for p in snapshot}
        for name in sorted(set(gone) | set(terminating)):
            seen = terminating.get(name)
            removed.append({**before[name], "seen_terminating": seen is not None,
                            "cost_at_deletion": seen["cost"] if seen else None,
                            "disruption_target": seen["disruption_target"] if seen else None,
                            "gone_at": gone.get(name)})
        self.record(STEP, scenario=scenario, step=step, done=done, replicas=target,
                    removed=removed, created=[p for p in pods if p["name"] not in names],
                    after=[p for p in pods if p["name"] not in gone], nodes=cluster.nodes())
        if not done:
            raise Aborted(f"the scale-in to {target}: not settled after {s.timeout:g} s")

    def watch(self, scenario: str) -> None:
        """After the last scale-in: the situation (which cloud nodes' burst pods would fit in
        the hybrid nodes' free room, worked out at report time from what is recorded here),
        then ``--watch`` seconds of Karpenter's decisions — every NodeClaim and node that goes,
        every burst pod that goes or appears and where, every event of Karpenter's."""
        ctx, s, cluster = self.ctx, self.s, self.cluster
        if s.watch <= 0:
            self.record(WATCH_SKIPPED, scenario=scenario, reason="--watch 0")
            return
        every = max(s.interval, min(WATCH_EVERY, s.watch))
        started, claims, nodes, pods, events = self._watch_started(scenario, every)
        ctx.progress(f"scenario {scenario}: watching Karpenter for {s.watch:g} s (does it move "
                     "cloud pods onto the hybrid nodes' free room?)")
        seen_claims = {c["name"]: c for c in claims}
        seen_nodes = {n["name"]: n for n in nodes}
        seen_pods = {p["name"]: p for p in pods}
        seen_events = {e["key"]: e for e in events}
        changes: list[dict] = []
        start = ctx.monotonic()
        last_progress = 0.0
        while True:
            ctx.sleep(every)
            at = iso(ctx.clock())
            now_claims = {c["name"]: c for c in cluster.nodeclaims() or []}
            changes += diff(seen_claims, now_claims, at, nodeclaim_change)
            now_nodes = {n["name"]: n for n in cluster.nodes()}
            changes += diff(seen_nodes, now_nodes, at, node_change)
            now_pods = {p["name"]: p for p in cluster.summaries()}
            changes += diff(seen_pods, now_pods, at, pod_change)
            # Events are read in the order they last happened, and kept once seen.
            now_events = {e["key"]: e for e in cluster.karpenter_events()}
            changes += diff({key: seen_events.get(key) for key in now_events}, now_events, at,
                            event_change)
            seen_events.update(now_events)
            seen_claims, seen_nodes, seen_pods = now_claims, now_nodes, now_pods
            elapsed = ctx.monotonic() - start
            if elapsed >= s.watch:
                break
            if elapsed - last_progress >= 30:
                last_progress = elapsed
                ctx.progress(f"  {elapsed:.0f} s: {len(now_claims)} NodeClaim(s), "
                             f"{len([c for c in changes if c['what'] != 'event'])} change(s), "
                             f"{len([c for c in changes if c['what'] == 'event'])} event(s)")
        self.record(WATCH_DONE, scenario=scenario, started=started, ended=iso(ctx.clock()),
                    watched=round(ctx.monotonic() - start, 3), changes=changes,
                    nodes=sorted(seen_nodes.values(), key=lambda n: n["name"]),
                    nodeclaims=list(seen_claims.values()),
                    pods=sorted(seen_pods.values(), key=lambda p: p["name"]))

    def _watch_started(self, scenario: str, every: float) -> tuple[str, list, list, list, list]:
        """The watch's starting situation, recorded: (when, NodeClaims, nodes, pods, events)."""
        ctx, s, cluster = self.ctx, self.s, self.cluster
        nodes = cluster.nodes()
        work = cluster.workload()
        pods = cluster.summaries(work["all"])
        claims = cluster.nodeclaims() or []
        pool = cluster.get("NodePool", s.nodepool)
        disruption = ((pool or {}).get("spec") or {}).get("disruption") or {}
        events = cluster.karpenter_events()
        hybrid = [n["name"] for n in nodes if n["place"] == "hybrid"]
        started = iso(ctx.clock())
        self.record(WATCH_STARTED, scenario=scenario, seconds=s.watch, every=every, at=started,
                    nodes=nodes, pods=pods, nodeclaims=claims,
                    hybrid_neighbours=cluster.hybrid_neighbours(hybrid),
                    deployment=deployment_summary(work["deployment"]),
                    nodepool={"name": s.nodepool, "found": pool is not None,
                              "consolidation_policy": disruption.get("consolidationPolicy"),
                              "consolidate_after": disruption.get("consolidateAfter"),
                              "budgets": disruption.get("budgets")},
                    events=events)
        return started, claims, nodes, pods, events

    def run_scenario(self, scenario: str) -> None:
        s, ctx = self.s, self.ctx
        try:
            self.restart(scenario)
            self.settle_nodeclaims(scenario)
        except Aborted as stopped:
            self.record(REFUSED, scenario=scenario, reasons=[str(stopped)])
            ctx.progress(f"scenario {scenario}: not measured: {stopped}")
            return
        observed = observe_preconditions(ctx, self.cluster, scenario, "before-run",
                                         watch_whole_window=scenario == "A")
        self.record(PRECONDITIONS, **observed)
        checks = scenario_checks(observed)
        verdict = in_place(scenario, checks)
        if verdict.status == FAIL:
            self.record(REFUSED, scenario=scenario,
                        reasons=[f"{c.name}: {c.seen}" for c in checks if c.status == FAIL])
            ctx.progress(f"scenario {scenario}: {verdict.seen}")
            return
        try:
            for step, (previous, target) in enumerate(zip(s.sequence, s.sequence[1:]), start=1):
                if step > 1:
                    ctx.sleep(s.pause)
                if target > previous:
                    self.scale_up(scenario, step, target)
                    self.settle_costs(scenario)
                else:
                    self.scale_in(scenario, step, target)
        except Aborted as stopped:
            self.record(ABORTED, scenario=scenario, reason=str(stopped))
            ctx.progress(f"scenario {scenario}: stopped: {stopped}")
            return
        self.watch(scenario)
        self.record(DONE, scenario=scenario)


def collect(ctx: Any, record: Any, open_stack: Callable[[str, Path], Any],
            require_confirmation: Callable[[Any, str], None]) -> None:
    """Burst's run: ``open_stack`` and ``require_confirmation`` are the face's (command.py),
    where a test puts a stand-in stack and a terminal."""
    settings = settings_from(ctx, "burst")
    record(SETTINGS, **settings_event(settings))
    runner = Runner(ctx, record, settings)
    deployed = settings.stack_scenario
    switcher = Switcher(ctx, record, open_stack)
    switching = any(x != deployed for x in settings.scenarios)
    if switching:
        # Before anything changes: a stack named, and someone to confirm each plan.
        require_stack(ctx, "burst --scenarios")
        require_confirmation(ctx, "burst --scenarios")
        original = switcher.read_original()
        record(ORIGINAL, deployed=deployed, config=original)
        if (original or "A") != deployed:
            ctx.progress(f"note: the stack's config says burstScenario {original or 'A (default)'} "
                         f"but {deployed} is deployed; it is put back to {original or 'the default'}")
    before = runner.cluster.get("Deployment", settings.deployment, settings.namespace)
    if before is None:
        raise RunError(f"no Deployment {settings.namespace}/{settings.deployment}: the demo layer "
                       "deploys it (`pulumi up`)")
    replicas_before = (before.get("spec") or {}).get("replicas")
    current = deployed
    try:
        for scenario in settings.scenarios:
            if scenario != current:
                ctx.progress(f"switching to scenario {scenario} ({SCENARIO_WORDS[scenario]})")
                result = switcher.switch(scenario)
                record(SWITCHED, scenario=scenario, previous=current, **result)
                if result.get("refused") or result.get("declined"):
                    # Nothing applied: the stack is still on `current`.
                    record(REFUSED, scenario=scenario,
                           reasons=[f"burstScenario {scenario} not applied: {result['error']}"])
                    ctx.progress(f"scenario {scenario}: not applied: {result['error']}")
                    continue
                current = scenario
                if not result["ok"]:
                    record(REFUSED, scenario=scenario,
                           reasons=[f"pulumi up for burstScenario {scenario} failed: {result['error']}"])
                    continue
            runner.run_scenario(scenario)
    finally:
        # Back to the size it had (a run stopped at 15 would keep paying for the cloud nodes;
        # `pulumi up` does not see a replica count changed behind its back).
        if replicas_before is not None:
            try:
                runner.cluster.scale(int(replicas_before))
                record(REPLICAS_BACK, replicas=replicas_before)
            except Exception as error:  # noqa: BLE001 best effort; the run's result stands
                record(REPLICAS_BACK, replicas=replicas_before, error=str(error)[:200])
        if switcher.changed:
            try:
                result = switcher.restore()
            except BaseException as error:
                if isinstance(error, RestoreBlocked):
                    message = (f"could not put burstScenario back to "
                               f"{switcher.original or 'the default'}: {error}")
                else:
                    message = (f"could not put burstScenario back to {switcher.original or 'the default'}: "
                               f"{_pulumi_error(error)}; run `pulumi config set burstScenario "
                               f"{switcher.original or 'A'}` and `pulumi up`")
                record(RESTORED, scenario=switcher.original, ok=False, error=message)
                ctx.progress(message)
                raise RunError(message) from None
            if result.get("applied"):
                back = switcher.original or "A"
                try:
                    result["costs_cleared"] = clear_costs(runner.cluster, back)
                except Exception as error:  # noqa: BLE001 said in the report, with the command
                    result["costs_error"] = (f"{str(error)[:200]}: remove them with `kubectl -n "
                                             f"{settings.namespace} annotate pod -l app={settings.app} "
                                             f"{COST}-` (or `kubectl rollout restart`)")
            record(RESTORED, scenario=switcher.original, **result)
