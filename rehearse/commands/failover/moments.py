"""The clocks a failover is measured on (pure): when the leader's pod was deleted, on this
machine's clock and on the cluster's, and how far a figure measured from it can be trusted."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any, Optional

from rehearse.run.record import parse_time


#: How far this machine's DELETE time may lie from the API server's deletionTimestamp (less
#: the grace, whole seconds) and still stand for the cluster's clock: the slack either side of
#: that second, and so the bound on the deletion moment in the cluster's clock (docs/gateway.md#the-lease).
AGREEMENT_SLACK = 0.5


AGREEMENT_BOUND = 1.0 + AGREEMENT_SLACK


#: The deletionTimestamp's resolution, when it is the moment used.
WHOLE_SECOND = 1.0


def clock(moment: Optional[datetime.datetime]) -> str:
    return "—" if moment is None else moment.strftime("%H:%M:%S.%f")[:-3]


def time_or_none(value: Optional[str]) -> Optional[datetime.datetime]:
    return parse_time(value) if value else None


def rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 3)


@dataclass(frozen=True)
class Deletion:
    """When the leader's pod was deleted, on both clocks a figure is measured with: this
    machine's (the polls of the Lease, routes and VTEP config) and the cluster's (the Lease's
    times, the kubelet's log timestamps)."""

    local: datetime.datetime
    cluster: datetime.datetime
    #: Which clock the cluster-side moment comes from, for the report.
    source: str
    #: How far ``cluster`` may be from the API server's own moment, in seconds (None: not known,
    #: the API server's clock was never read back). A figure measured between ``cluster`` and a
    #: gateway node's clock (the Lease handover) is good to this much at best.
    bound: Optional[float] = None

    @property
    def offset(self) -> datetime.timedelta:
        """The cluster's clock less this machine's (zero when they agree)."""
        return self.cluster - self.local


def deletion_moment(event: dict[str, Any]) -> Deletion:
    """When the leader's pod was deleted. This machine's clock when the DELETE was sent is finer
    than the API server's answer (its deletionTimestamp, less the grace period, has whole
    seconds): it stands for both clocks when the two agree. When they do not, the cluster-side
    moment is the API server's and this machine's clock is taken to be off by the difference."""
    requested = parse_time(event["requested_at"])
    answered = time_or_none(event.get("answered_at")) or requested
    if event.get("deletion_timestamp") is None or event.get("grace_seconds") is None:
        return Deletion(requested, requested,
                        "this machine's clock when the DELETE was sent (the pod was gone before "
                        "the API server's deletionTimestamp could be read back: how far it is from "
                        "the cluster's clock is not known)")
    server = parse_time(event["deletion_timestamp"]) - datetime.timedelta(
        seconds=float(event["grace_seconds"]))
    # The server's moment lies in [server, server + 1 s); ours in [requested, answered].
    slack = datetime.timedelta(seconds=AGREEMENT_SLACK)
    if requested <= server + datetime.timedelta(seconds=1) + slack and answered >= server - slack:
        # Accepted as agreeing when ours is at most 1 s + slack after the server's whole second
        # or at most the slack before it: against the server's true moment (within that second)
        # that is AGREEMENT_BOUND either way.
        return Deletion(requested, requested,
                        "this machine's clock when the DELETE was sent, which agrees with the "
                        f"API server's deletionTimestamp ({clock(server)} + grace) within "
                        f"±{AGREEMENT_BOUND:g} s", AGREEMENT_BOUND)
    offset = (server - requested).total_seconds()
    return Deletion(requested, server,
                    "the API server's deletionTimestamp less the grace period (whole seconds): "
                    f"this machine's clock is about {abs(offset):.0f} s "
                    f"{'behind' if offset > 0 else 'ahead of'} the cluster's, so the poll times "
                    "are measured on this machine's clock and the rest on the cluster's "
                    f"(the deletionTimestamp has whole seconds: good to {WHOLE_SECOND:g} s)",
                    WHOLE_SECOND)


def deletion_bound(deletion: Deletion) -> str:
    """What the deletion moment's clock does to a figure measured from it, for the report."""
    if deletion.bound is None:
        return ("± unknown: the deletion moment is this machine's clock, never compared with the "
                "API server's")
    if deletion.cluster == deletion.local:
        return (f"± {deletion.bound:g} s: the deletion moment is this machine's clock, which "
                f"agrees with the API server's within ±{deletion.bound:g} s")
    return (f"up to {deletion.bound:g} s long: the deletion moment is the API server's "
            "deletionTimestamp, whole seconds, so the true moment is up to that much later")
