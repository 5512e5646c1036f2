"""What ``failover`` records and reports: the event kinds with the fields each carries, the
defaults of its settings, and the check names — shared by its collector (collect.py) and its
analysis (analyse.py and the modules beside it). The strings are as recorded: old runs replay
from them. Field names are snake_case as recorded (``since``/``until`` are ISO times)."""

from __future__ import annotations

from rehearse.lab import probes

#: The settings' defaults (the command line's, and the analysis's for a run that recorded none).
DEFAULTS = {"interval": 0.5, "observe": 30.0, "timeout": 60.0, "threshold": 10.0, "baseline": 20.0}

# --- event kinds, in the order a run records them --------------------------------------------

#: interval, observe, timeout, threshold, baseline, namespace, lease, route_tables, pod_cidr,
#: demo_namespace, region.
SETTINGS = "failover.settings"
#: prober, direction (``Prober.arrow``), pods, since, until, lines, error: the baseline's logs.
PROBES_BASELINE = "probes.baseline"
#: lease, leader, reason, gateway_pods (``lab.leader.Resolution.to_event``).
LEADER_RESOLVED = "leader.resolved"
#: role (old | new), node, holder, instance_id, eni, and internal_ip (or error).
LEADER_ENI = "leader.eni"
#: reasons: why nothing was deleted.
REFUSED = "failover.refused"
#: phase (before | failover | observe), sent, exists, and the Lease's holder, acquire_time,
#: renew_time, transitions, duration_seconds.
LEASE_OBSERVED = "lease.observed"
#: phase, sent, routes (per table: table, eni, other_target, state).
ROUTES_OBSERVED = "routes.observed"
#: phase, sent, exists, endpoints.
VTEP_OBSERVED = "vtep.observed"
#: pod, node, uid, requested_at, answered_at, deletion_timestamp, grace_seconds.
POD_DELETED = "pod.deleted"
#: A different holder resolved after the deletion (as LEADER_RESOLVED).
LEADER_NEW = "leader.new"
#: what, error: a poll that failed and was retried.
OBSERVE_ERROR = "observe.error"
#: holder, node, eni, waited.
CONVERGED = "failover.converged"
#: after, missing.
WAIT_TIMEOUT = "wait.timeout"
#: seconds, converged.
OBSERVE_STARTED = "observe.started"
OBSERVE_ENDED = "observe.ended"
#: As PROBES_BASELINE, read after the observation, from the baseline's start.
PROBES_READ = "probes.read"
FAILOVER_ENDED = "failover.ended"

# --- check names -----------------------------------------------------------------------------

#: The paths each prober logs, and their names in the checks.
PATHS = ((probes.SVC, "Service"), (probes.POD, "pod"))
CHECK_BASELINE = "baseline healthy"
CHECK_LEADER = "leader resolved"
CHECK_DELETED = "leader pod deleted"
CHECK_NEW_LEADER = "new leader elected"
CHECK_ROUTE = "route switched to the new leader's ENI"
CHECK_VTEP = "VTEP config follows the new leader"


def check_gap(direction: str, path_name: str) -> str:
    return f"gap {direction} via {path_name}"


#: The checks a run makes only once the leader's pod is deleted.
AFTER_DELETION = (CHECK_NEW_LEADER, CHECK_ROUTE, CHECK_VTEP) + tuple(
    check_gap(prober.arrow, name) for prober in probes.PROBERS for _path, name in PATHS)
