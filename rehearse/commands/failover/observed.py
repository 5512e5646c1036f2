"""A recorded failover run, read once for the checks (pure), and the commands its report gives
to look for oneself."""

from __future__ import annotations

from typing import Any, Optional

from rehearse.lab import leader as leaders
from rehearse.lab import probes as probe_logs
from rehearse.lab.gateway import LEASE_NAME
from rehearse.run.outcome import ending
from rehearse.run.record import RUN_STARTED, every, first, parse_time
from rehearse.commands.failover.baseline import baseline_problems
from rehearse.commands.failover.kinds import (
    DEFAULTS, LEADER_ENI, LEADER_RESOLVED, POD_DELETED, PROBES_BASELINE, REFUSED, SETTINGS)
from rehearse.commands.failover.moments import deletion_moment


class Run:
    """The recorded run, read once."""

    def __init__(self, events: list[dict[str, Any]]):
        self.events = events
        self.started = first(events, RUN_STARTED) or {}
        self.settings = first(events, SETTINGS) or {}
        self.threshold = float(self.settings.get("threshold", DEFAULTS["threshold"]))
        self.interval = float(self.settings.get("interval", DEFAULTS["interval"]))
        self.namespace = self.settings.get("namespace", leaders.GATEWAY_NAME)
        self.lease_name = self.settings.get("lease", LEASE_NAME)
        self.demo_ns = self.settings.get("demo_namespace", "demo-gateway")
        self.tables = list(self.settings.get("route_tables", []))
        self.cidr = self.settings.get("pod_cidr", "")
        self.region = self.settings.get("region", "")
        self.resolved = first(events, LEADER_RESOLVED)
        self.old = (self.resolved or {}).get("leader")
        self.old_eni = next((e for e in every(events, LEADER_ENI) if e.get("role") == "old"),
                            None)
        self.refused = first(events, REFUSED)
        self.deleted = first(events, POD_DELETED)
        self.deletion = deletion_moment(self.deleted) if self.deleted else None

    def baseline(self) -> tuple[Optional[list[str]], dict[str, list[probe_logs.Probe]], Any, Any]:
        """(why the baseline is not healthy, or None when the probers' logs were not all read;
        the probes each way; the baseline's window)."""
        found, raw = {}, {}
        since = until = None
        for event in every(self.events, PROBES_BASELINE):
            since, until = parse_time(event["since"]), parse_time(event["until"])
            found[event["direction"]] = probe_logs.parse(event.get("lines", []))
            raw[event["direction"]] = (found[event["direction"]], event.get("error", ""))
        if since is None or (ending(self.events) and len(found) < len(probe_logs.PROBERS)):
            return None, found, since, until
        return baseline_problems(raw, since, until), found, since, until


def commands_for(run: Run) -> dict[str, str]:
    ns, lease, demo = run.namespace, run.lease_name, run.demo_ns
    tables = " ".join(run.tables) or "<route table ids>"
    return {
        "baseline": "; ".join(f"kubectl -n {demo} logs deploy/{prober.name} --timestamps --since=1m"
                              for prober in probe_logs.PROBERS),
        "leader": f"kubectl -n {ns} get lease {lease} -o jsonpath='{{.spec.holderIdentity}}'; "
                  f"kubectl -n {ns} get pods -o wide",
        "lease": f"kubectl -n {ns} get lease {lease} -o yaml",
        "pods": f"kubectl -n {ns} get pods -o wide --watch",
        "route": f"aws ec2 describe-route-tables --region {run.region} --route-table-ids {tables} "
                 f"--query \"RouteTables[].[RouteTableId,Routes[?DestinationCidrBlock=='{run.cidr}']]\"",
        "vtep": "kubectl get ciliumvtepconfig hybrid-gateway -o yaml",
    }
