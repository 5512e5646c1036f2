"""The collector of `python -m rehearse failover`; what the command is and does, its --help, is
its face's docstring (command.py). It records what it sees as events (kinds.py); the analysis
(analyse.py) is pure over them."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Optional

from rehearse.lab import leader as leaders
from rehearse.lab import probes as probe_logs
from rehearse.run.errors import RunError
from rehearse.run.record import iso
from rehearse.commands.failover.baseline import baseline_problems
from rehearse.commands.failover.kinds import (
    CONVERGED, DEFAULTS, FAILOVER_ENDED, LEADER_ENI, LEADER_NEW, LEADER_RESOLVED, LEASE_OBSERVED,
    OBSERVE_ENDED, OBSERVE_ERROR, OBSERVE_STARTED, POD_DELETED, PROBES_BASELINE, PROBES_READ,
    REFUSED, ROUTES_OBSERVED, SETTINGS, VTEP_OBSERVED, WAIT_TIMEOUT)
# The face (command.py) hands the analysis on to rehearse.cli from here.
from rehearse.commands.failover.analyse import analyse  # noqa: F401

__all__ = ["collect", "analyse"]


@dataclass(frozen=True)
class Settings:
    """The run's settings in seconds, from the command line (its options in command.py say what
    each does), ``DEFAULTS`` where not given; recorded as ``failover.settings``."""

    interval: float
    observe: float
    timeout: float
    threshold: float
    baseline: float

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "Settings":
        return cls(**{k: float(options.get(k) if options.get(k) is not None else v)
                      for k, v in DEFAULTS.items()})


def _transient() -> tuple[type[BaseException], ...]:
    """Errors a poll after the deletion records and survives (the failover is under way; one
    throttled or dropped call must not lose the run)."""
    import botocore.exceptions
    import httpx2
    from lightkube import ApiError

    return (ApiError, httpx2.HTTPError, botocore.exceptions.ClientError,
            botocore.exceptions.BotoCoreError, leaders.VtepUnreadable, OSError)


@dataclass
class RunState:
    """What the polls after the deletion have seen of the new leader, carried from one poll to
    the next (``_Collector.poll`` updates it; ``wait`` and ``observe`` read it)."""

    #: The different Lease holder taken as the new leader: set only once it resolved to a node,
    #: one gateway pod and a primary ENI, and kept until another different holder does.
    holder: Optional[str] = None
    leader: Optional[leaders.Leader] = None
    #: The new leader's primary ENI, which every route table must target.
    eni: Optional[str] = None
    #: How many route tables route the pod CIDR to that ENI (active), and which do not.
    routes_on_new: int = 0
    routes_off: list[str] = field(default_factory=list)
    #: Whether the VTEP config names the new leader's IP.
    vtep_on_new: bool = False


class _Collector:
    def __init__(self, ctx: Any, record: Any, settings: Settings):
        self.ctx, self.record, self.s = ctx, record, settings
        out = ctx.outputs
        self.namespace = out.get("gatewayNamespace")
        self.lease_name = out.get("gatewayLeaseName")
        self.tables = [str(t) for t in (out.get("gatewayRouteTableIds") or [])]
        self.cidr = str(out.get("hybridPodCidr"))
        demo = out.get("demo1")
        self.demo_ns = demo.get("namespace") if isinstance(demo, dict) else None
        if not self.tables:
            raise RunError(f"the stack {out.stack} has no gateway route tables "
                           "(gatewayRouteTableIds is empty)")
        if not self.demo_ns:
            raise RunError(f"the stack {out.stack}'s demo1 output names no namespace")
        self._ec2: Any = None
        self.last_progress = -1e9

    @property
    def ec2(self) -> Any:
        if self._ec2 is None:
            self._ec2 = self.ctx.aws("ec2")
        return self._ec2

    # observations: each records what it saw with when it asked (sent) and when it had the
    # answer (the event's own time).

    def lease(self, phase: str) -> Optional[leaders.LeaseState]:
        sent = self.ctx.clock()
        state = leaders.read_lease(self.ctx.kube, self.namespace, self.lease_name)
        self.record(LEASE_OBSERVED, phase=phase, sent=iso(sent), exists=state is not None,
                    **(state.to_event() if state else {}))
        return state

    def routes(self, phase: str) -> list[dict[str, Any]]:
        sent = self.ctx.clock()
        found = leaders.route_targets(self.ec2, self.tables, self.cidr)
        self.record(ROUTES_OBSERVED, phase=phase, sent=iso(sent), routes=found)
        return found

    def vtep(self, phase: str) -> Optional[list[dict[str, Any]]]:
        sent = self.ctx.clock()
        endpoints = leaders.read_vtep(self.ctx.kube)
        self.record(VTEP_OBSERVED, phase=phase, sent=iso(sent), exists=endpoints is not None,
                    endpoints=endpoints or [])
        return endpoints

    def guarded(self, what: str, action: Any) -> Any:
        try:
            return action()
        except _transient() as error:
            self.record(OBSERVE_ERROR, what=what, error=f"{type(error).__name__}: {error}"[:300])
            return None

    def eni(self, role: str, leader: leaders.Leader) -> Optional[str]:
        try:
            instance, eni = leaders.primary_eni(self.ec2, leader)
        except leaders.NoEni as error:
            self.record(LEADER_ENI, role=role, node=leader.node, holder=leader.holder,
                        instance_id=None, eni=None, error=str(error))
            return None
        self.record(LEADER_ENI, role=role, node=leader.node, holder=leader.holder,
                    instance_id=instance, eni=eni, internal_ip=leader.internal_ip)
        return eni

    def progress(self, message: str, every_s: float) -> None:
        now = self.ctx.monotonic()
        if now - self.last_progress >= every_s:
            self.last_progress = now
            self.ctx.progress(message)

    def run(self) -> None:
        ctx, record, s = self.ctx, self.record, self.s
        record(SETTINGS, interval=s.interval, observe=s.observe, timeout=s.timeout,
               threshold=s.threshold, baseline=s.baseline, namespace=self.namespace,
               lease=self.lease_name, route_tables=self.tables, pod_cidr=self.cidr,
               demo_namespace=self.demo_ns, region=ctx.region)

        # 1. The baseline: both probers healthy, the leader resolved exactly.
        until = ctx.clock()
        since = until - datetime.timedelta(seconds=s.baseline)
        ctx.progress(f"reading the probers' last {s.baseline:g} s of logs in {self.demo_ns}")
        baseline = {}
        for prober in probe_logs.PROBERS:
            lines, pods, error = probe_logs.lines_since(ctx.kube, self.demo_ns, prober.name, since)
            record(PROBES_BASELINE, prober=prober.name, direction=prober.arrow, pods=pods,
                   since=iso(since), until=iso(until), lines=lines, error=error)
            baseline[prober.arrow] = (probe_logs.parse(lines), error)
        problems = baseline_problems(baseline, since, until)
        resolution = leaders.resolve(ctx.kube, self.namespace, self.lease_name)
        record(LEADER_RESOLVED, **resolution.to_event())
        reasons = [f"baseline: {p}" for p in problems]
        if resolution.leader is None:
            reasons.append(f"leader: {resolution.reason}")
        old = resolution.leader
        old_eni = self.eni("old", old) if old is not None else None
        if old is not None and old_eni is None:
            reasons.append(f"leader: the primary ENI of node {old.node} was not found in EC2, "
                           "so the route switch could not be judged")
        if reasons:
            record(REFUSED, reasons=reasons)
            ctx.progress("not measuring, nothing deleted: " + "; ".join(reasons))
            return
        assert old is not None
        ctx.progress(f"leader: {old.holder} -> node {old.node} -> pod {old.pod} ({old_eni})")

        # 2. What the leader wrote, before.
        self.lease("before")
        self.routes("before")
        self.vtep("before")

        # 3. Delete the leader's pod.
        if not self.delete(old):
            return

        # 4. Wait for a different holder, its ENI in every table and its IP in the VTEP config.
        state = RunState()
        converged = self.wait(old, state)

        # 5. Keep watching, then read the probers' logs from the baseline to now.
        self.observe(old, state, converged)
        for prober in probe_logs.PROBERS:
            lines, pods, error = probe_logs.lines_since(ctx.kube, self.demo_ns, prober.name, since)
            record(PROBES_READ, prober=prober.name, direction=prober.arrow, pods=pods,
                   since=iso(since), until=iso(ctx.clock()), lines=lines, error=error)
        record(FAILOVER_ENDED)

    def delete(self, old: leaders.Leader) -> bool:
        import httpx2
        from lightkube import ApiError
        from lightkube.resources.core_v1 import Pod

        ctx = self.ctx
        ctx.progress(f"deleting the leader's pod {self.namespace}/{old.pod} on {old.node}")
        requested = ctx.clock()
        try:
            ctx.kube.client.delete(Pod, old.pod, namespace=self.namespace)
        except (ApiError, httpx2.HTTPStatusError) as error:
            if not leaders.not_found(error):
                raise
            self.record(REFUSED, reasons=[
                f"leader: its pod {old.pod} was gone before it could be deleted"])
            return False
        answered = ctx.clock()
        # The API server's answer: a gracefully deleted pod stays, Terminating, with the
        # deletionTimestamp it set (its clock, whole seconds, plus the grace period).
        deletion_timestamp = grace = None
        try:
            pod = ctx.kube.client.get(Pod, old.pod, namespace=self.namespace)
            if pod.metadata.uid == old.pod_uid and pod.metadata.deletionTimestamp is not None:
                deletion_timestamp = iso(pod.metadata.deletionTimestamp)
                grace = pod.metadata.deletionGracePeriodSeconds
        except (ApiError, httpx2.HTTPStatusError) as error:
            if not leaders.not_found(error):
                raise
        self.record(POD_DELETED, pod=old.pod, node=old.node, uid=old.pod_uid,
                    requested_at=iso(requested), answered_at=iso(answered),
                    deletion_timestamp=deletion_timestamp, grace_seconds=grace)
        return True

    def poll(self, phase: str, old: leaders.Leader, state: RunState) -> None:
        """One round: the Lease (resolving a new holder), the routes, the VTEP config."""
        lease = self.guarded("lease", lambda: self.lease(phase))
        holder = lease.holder if lease else None
        if holder and holder != old.holder and holder != state.holder:
            resolution = self.guarded(
                "new leader", lambda: leaders.resolve_holder(self.ctx.kube, self.namespace, lease,
                                                             self.lease_name))
            if resolution is not None:
                self.record(LEADER_NEW, **resolution.to_event())
                if resolution.leader is not None:
                    eni = self.guarded("new leader's ENI",
                                       lambda: self.eni("new", resolution.leader))
                    if eni is not None:
                        state.holder, state.leader, state.eni = holder, resolution.leader, eni
        routes = self.guarded("routes", lambda: self.routes(phase))
        vtep = self.guarded("vtep", lambda: self.vtep(phase))
        new = state.leader
        on_new = {r["table"] for r in routes or [] if new and r["eni"] == state.eni
                  and r["state"] == "active"}
        state.routes_on_new = len(on_new)
        state.routes_off = [t for t in self.tables if t not in on_new]
        state.vtep_on_new = bool(new) and leaders.vtep_names(vtep, new.internal_ip)

    def wait(self, old: leaders.Leader, state: RunState) -> bool:
        ctx, s = self.ctx, self.s
        start = ctx.monotonic()
        while True:
            round_start = ctx.monotonic()
            self.poll("failover", old, state)
            new = state.leader
            done = (new is not None and state.routes_on_new == len(self.tables)
                    and state.vtep_on_new)
            elapsed = ctx.monotonic() - start
            if done:
                self.record(CONVERGED, holder=new.holder, node=new.node,
                            eni=state.eni, waited=round(elapsed, 3))
                ctx.progress(f"failover complete after {elapsed:.1f} s: {new.node} leads, "
                             f"{len(self.tables)} route table(s) on {state.eni}, VTEP follows")
                return True
            if elapsed >= s.timeout:
                missing = []
                if new is None:
                    missing.append("a new leader (a different Lease holder, resolved to its "
                                   "node, pod and ENI)")
                else:
                    if state.routes_off:
                        missing.append(f"the route in {', '.join(state.routes_off)} on "
                                       f"{state.eni}")
                    if not state.vtep_on_new:
                        missing.append(f"the VTEP config naming {new.internal_ip}")
                self.record(WAIT_TIMEOUT, after=s.timeout, missing=missing)
                ctx.progress(f"gave up waiting after {s.timeout:g} s; still missing: "
                             + "; ".join(missing))
                return False
            self.progress(
                f"waiting for the failover: {elapsed:.1f} s of {s.timeout:g}; leader: "
                f"{new.node if new else 'not yet changed'}; routes on the new ENI: "
                f"{state.routes_on_new}/{len(self.tables)}; VTEP: "
                f"{'follows' if state.vtep_on_new else 'not yet'}", every_s=2.0)
            ctx.sleep(max(0.0, s.interval - (ctx.monotonic() - round_start)))

    def observe(self, old: leaders.Leader, state: RunState, converged: bool) -> None:
        """Keep polling (a leader that changes again, a route that moves back) while the
        probers log the recovery."""
        ctx, s = self.ctx, self.s
        self.record(OBSERVE_STARTED, seconds=s.observe, converged=converged)
        start = ctx.monotonic()
        while ctx.monotonic() - start < s.observe:
            round_start = ctx.monotonic()
            self.progress(f"observing the recovery: {ctx.monotonic() - start:.0f} s of "
                          f"{s.observe:g}", every_s=5.0)
            ctx.sleep(max(0.0, s.interval - (ctx.monotonic() - round_start)))
            self.poll("observe", old, state)
        self.record(OBSERVE_ENDED)


def collect(ctx: Any, record: Any) -> None:
    _Collector(ctx, record, Settings.from_options(ctx.options)).run()
