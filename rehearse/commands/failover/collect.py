"""The collector of `python -m rehearse failover`; what the command is and does, its --help, is
its face's docstring (command.py)."""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass
from typing import Any, Optional

from rehearse.lab import leader as leaders
from rehearse.lab import probes as probe_logs
from rehearse.run.arguments import seconds
from rehearse.run.errors import RunError
from rehearse.run.record import iso
from rehearse.commands.failover.analyse import DEFAULTS, MIN_BASELINE_SUCCESSES, PROBERS, baseline_problems
# A command module's interface to rehearse.cli: its analyser.
from rehearse.commands.failover.analyse import analyse  # noqa: F401


TITLE = "delete the gateway leader's pod and measure the failover"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("failover")
    group.add_argument("--threshold", type=seconds(0.1), default=DEFAULTS["threshold"],
                       metavar="S",
                       help="PASS when every gap between two successful probes is at most S "
                            "seconds (default 10: AWS documents 3-5 s and the probers measure "
                            "to about 3 s during an outage; the gateway's e2e test allows 30)")
    group.add_argument("--interval", type=seconds(0.1, 1.0), default=DEFAULTS["interval"],
                       metavar="S",
                       help="poll the Lease, route tables and VTEP config every S seconds, "
                            "0.1-1 (default 0.5, as the gateway's e2e test probes)")
    group.add_argument("--observe", type=seconds(0.0), default=DEFAULTS["observe"], metavar="S",
                       help="keep watching S seconds after the failover completes "
                            "(default 30, as the gateway's e2e test)")
    group.add_argument("--timeout", type=seconds(1.0), default=DEFAULTS["timeout"], metavar="S",
                       help="stop waiting for the new leader, routes and VTEP config after S "
                            "seconds and record a timeout (default 60)")
    group.add_argument("--baseline", type=seconds(5.0), default=DEFAULTS["baseline"],
                       metavar="S",
                       help="the baseline is the probers' last S seconds of logs (default 20); "
                            f"it needs {MIN_BASELINE_SUCCESSES} successful probes per path each way")


@dataclass(frozen=True)
class Settings:
    interval: float
    observe: float
    timeout: float
    threshold: float
    baseline: float

    @classmethod
    def from_options(cls, options: dict[str, Any]) -> "Settings":
        return cls(**{k: float(options.get(k) if options.get(k) is not None else v)
                      for k, v in DEFAULTS.items()})


# --- collecting -----------------------------------------------------------------------------

def _transient() -> tuple[type[BaseException], ...]:
    """Errors a poll after the deletion records and survives (the failover is under way; one
    throttled or dropped call must not lose the run)."""
    import botocore.exceptions
    import httpx2
    from lightkube import ApiError

    return (ApiError, httpx2.HTTPError, botocore.exceptions.ClientError,
            botocore.exceptions.BotoCoreError, leaders.VtepUnreadable, OSError)


def _prober_lines(kube: Any, namespace: str, deployment: str,
                  since: datetime.datetime) -> tuple[list[str], list[str], str]:
    """The kubelet-timestamped lines the Deployment's pods logged since ``since``: (lines, pods,
    what went wrong)."""
    from lightkube.resources.core_v1 import Pod

    pods = sorted((p for p in kube.client.list(Pod, namespace=namespace, labels={"app": deployment})
                   if (p.metadata.labels or {}).get("app") == deployment),
                  key=lambda p: p.metadata.name)
    if not pods:
        return [], [], f"no {deployment} pod in {namespace}"
    stamp = since.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines, problems = [], []
    for pod in pods:
        name = pod.metadata.name
        status, body = kube.get_raw(f"/api/v1/namespaces/{namespace}/pods/{name}/log"
                                    f"?timestamps=true&sinceTime={stamp}")
        if status != 200:
            problems.append(f"the logs of {name} answered HTTP {status}")
            continue
        lines += [line for line in body.splitlines() if line.strip()]
    return lines, [p.metadata.name for p in pods], "; ".join(problems)


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
        self.record("lease.observed", phase=phase, sent=iso(sent), exists=state is not None,
                    **(state.to_event() if state else {}))
        return state

    def routes(self, phase: str) -> list[dict[str, Any]]:
        sent = self.ctx.clock()
        found = leaders.route_targets(self.ec2, self.tables, self.cidr)
        self.record("routes.observed", phase=phase, sent=iso(sent), routes=found)
        return found

    def vtep(self, phase: str) -> Optional[list[dict[str, Any]]]:
        sent = self.ctx.clock()
        endpoints = leaders.read_vtep(self.ctx.kube)
        self.record("vtep.observed", phase=phase, sent=iso(sent), exists=endpoints is not None,
                    endpoints=endpoints or [])
        return endpoints

    def guarded(self, what: str, action: Any) -> Any:
        try:
            return action()
        except _transient() as error:
            self.record("observe.error", what=what, error=f"{type(error).__name__}: {error}"[:300])
            return None

    def eni(self, role: str, leader: leaders.Leader) -> Optional[str]:
        try:
            instance, eni = leaders.primary_eni(self.ec2, leader)
        except leaders.NoEni as error:
            self.record("leader.eni", role=role, node=leader.node, holder=leader.holder,
                        instance_id=None, eni=None, error=str(error))
            return None
        self.record("leader.eni", role=role, node=leader.node, holder=leader.holder,
                    instance_id=instance, eni=eni, internal_ip=leader.internal_ip)
        return eni

    def progress(self, message: str, every_s: float) -> None:
        now = self.ctx.monotonic()
        if now - self.last_progress >= every_s:
            self.last_progress = now
            self.ctx.progress(message)

    def run(self) -> None:
        ctx, record, s = self.ctx, self.record, self.s
        record("failover.settings", interval=s.interval, observe=s.observe, timeout=s.timeout,
               threshold=s.threshold, baseline=s.baseline, namespace=self.namespace,
               lease=self.lease_name, route_tables=self.tables, pod_cidr=self.cidr,
               demo_namespace=self.demo_ns, region=ctx.region)

        # 1. The baseline: both probers healthy, the leader resolved exactly.
        until = ctx.clock()
        since = until - datetime.timedelta(seconds=s.baseline)
        ctx.progress(f"reading the probers' last {s.baseline:g} s of logs in {self.demo_ns}")
        baseline = {}
        for name, direction in PROBERS:
            lines, pods, error = _prober_lines(ctx.kube, self.demo_ns, name, since)
            record("probes.baseline", prober=name, direction=direction, pods=pods,
                   since=iso(since), until=iso(until), lines=lines, error=error)
            baseline[direction] = (probe_logs.parse(lines), error)
        problems = baseline_problems(baseline, since, until)
        resolution = leaders.resolve(ctx.kube, self.namespace, self.lease_name)
        record("leader.resolved", **resolution.to_event())
        reasons = [f"baseline: {p}" for p in problems]
        if resolution.leader is None:
            reasons.append(f"leader: {resolution.reason}")
        old = resolution.leader
        old_eni = self.eni("old", old) if old is not None else None
        if old is not None and old_eni is None:
            reasons.append(f"leader: the primary ENI of node {old.node} was not found in EC2, "
                           "so the route switch could not be judged")
        if reasons:
            record("failover.refused", reasons=reasons)
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
        state: dict[str, Any] = {}
        converged = self.wait(old, state)

        # 5. Keep watching, then read the probers' logs from the baseline to now.
        self.observe(old, state, converged)
        for name, direction in PROBERS:
            lines, pods, error = _prober_lines(ctx.kube, self.demo_ns, name, since)
            record("probes.read", prober=name, direction=direction, pods=pods, since=iso(since),
                   until=iso(ctx.clock()), lines=lines, error=error)
        record("failover.ended")

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
            self.record("failover.refused", reasons=[
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
        self.record("pod.deleted", pod=old.pod, node=old.node, uid=old.pod_uid,
                    requested_at=iso(requested), answered_at=iso(answered),
                    deletion_timestamp=deletion_timestamp, grace_seconds=grace)
        return True

    def poll(self, phase: str, old: leaders.Leader, state: dict[str, Any]) -> None:
        """One round: the Lease (resolving a new holder), the routes, the VTEP config."""
        lease = self.guarded("lease", lambda: self.lease(phase))
        holder = lease.holder if lease else None
        if holder and holder != old.holder and holder != state.get("holder"):
            resolution = self.guarded(
                "new leader", lambda: leaders.resolve_holder(self.ctx.kube, self.namespace, lease,
                                                             self.lease_name))
            if resolution is not None:
                self.record("leader.new", **resolution.to_event())
                if resolution.leader is not None:
                    eni = self.guarded("new leader's ENI",
                                       lambda: self.eni("new", resolution.leader))
                    if eni is not None:
                        state.update(holder=holder, leader=resolution.leader, eni=eni)
        routes = self.guarded("routes", lambda: self.routes(phase))
        vtep = self.guarded("vtep", lambda: self.vtep(phase))
        new = state.get("leader")
        on_new = {r["table"] for r in routes or [] if new and r["eni"] == state["eni"]
                  and r["state"] == "active"}
        state["routes_on_new"] = len(on_new)
        state["routes_off"] = [t for t in self.tables if t not in on_new]
        state["vtep_on_new"] = bool(new) and leaders.vtep_names(vtep, new.internal_ip)

    def wait(self, old: leaders.Leader, state: dict[str, Any]) -> bool:
        ctx, s = self.ctx, self.s
        start = ctx.monotonic()
        while True:
            round_start = ctx.monotonic()
            self.poll("failover", old, state)
            new = state.get("leader")
            done = (new is not None and state["routes_on_new"] == len(self.tables)
                    and state["vtep_on_new"])
            elapsed = ctx.monotonic() - start
            if done:
                self.record("failover.converged", holder=new.holder, node=new.node,
                            eni=state["eni"], waited=round(elapsed, 3))
                ctx.progress(f"failover complete after {elapsed:.1f} s: {new.node} leads, "
                             f"{len(self.tables)} route table(s) on {state['eni']}, VTEP follows")
                return True
            if elapsed >= s.timeout:
                missing = []
                if new is None:
                    missing.append("a new leader (a different Lease holder, resolved to its "
                                   "node, pod and ENI)")
                else:
                    if state["routes_off"]:
                        missing.append(f"the route in {', '.join(state['routes_off'])} on "
                                       f"{state['eni']}")
                    if not state["vtep_on_new"]:
                        missing.append(f"the VTEP config naming {new.internal_ip}")
                self.record("wait.timeout", after=s.timeout, missing=missing)
                ctx.progress(f"gave up waiting after {s.timeout:g} s; still missing: "
                             + "; ".join(missing))
                return False
            self.progress(
                f"waiting for the failover: {elapsed:.1f} s of {s.timeout:g}; leader: "
                f"{new.node if new else 'not yet changed'}; routes on the new ENI: "
                f"{state['routes_on_new']}/{len(self.tables)}; VTEP: "
                f"{'follows' if state['vtep_on_new'] else 'not yet'}", every_s=2.0)
            ctx.sleep(max(0.0, s.interval - (ctx.monotonic() - round_start)))

    def observe(self, old: leaders.Leader, state: dict[str, Any], converged: bool) -> None:
        """Keep polling (a leader that changes again, a route that moves back) while the
        probers log the recovery."""
        ctx, s = self.ctx, self.s
        self.record("observe.started", seconds=s.observe, converged=converged)
        start = ctx.monotonic()
        while ctx.monotonic() - start < s.observe:
            round_start = ctx.monotonic()
            self.progress(f"observing the recovery: {ctx.monotonic() - start:.0f} s of "
                          f"{s.observe:g}", every_s=5.0)
            ctx.sleep(max(0.0, s.interval - (ctx.monotonic() - round_start)))
            self.poll("observe", old, state)
        self.record("observe.ended")


#: What the collector reads from the stack, checked before a run starts (rehearse.inputs).
OUTPUTS = ("gatewayNamespace", "gatewayLeaseName", "gatewayRouteTableIds", "hybridPodCidr", "demo1")


def check_inputs(given: Any) -> None:
    out = given.outputs
    if not list(out.get("gatewayRouteTableIds") or []):
        raise RunError(f"{out.origin} names no gateway route tables (gatewayRouteTableIds is "
                       f"empty): build the gateway layer and run `pulumi up`{out.rewrite()}")
    demo = out.get("demo1")
    if not isinstance(demo, dict) or not demo.get("namespace"):
        raise RunError(f"{out.origin}: the output demo1 names no namespace: run `pulumi up` "
                       f"with this version of the lab{out.rewrite()}")


def collect(ctx: Any, record: Any) -> None:
    _Collector(ctx, record, Settings.from_options(ctx.options)).run()
