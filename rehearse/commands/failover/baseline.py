"""Whether the probers' baseline is healthy enough to act on (pure): the failover deletes
nothing unless it is, and the analysis reports the same verdict from the recorded logs."""

from __future__ import annotations

import datetime

from rehearse.lab import probes
from rehearse.commands.failover.kinds import PATHS
from rehearse.commands.failover.moments import clock


#: As the gateway's e2e test: at least this many good probes each way before acting.
MIN_BASELINE_SUCCESSES = 5


#: The baseline's latest probe must be this recent on this machine's clock (looser: the
#: offset between this machine's clock and the cluster's is not known before the deletion).
BASELINE_FRESH_SECONDS = 10.0


def baseline_problems(baseline: dict[str, tuple[list[probes.Probe], str]],
                      since: datetime.datetime, until: datetime.datetime) -> list[str]:
    """Why the probers' baseline is not healthy (empty: healthy): on each path each way, at least
    MIN_BASELINE_SUCCESSES successes since ``since``, the latest probe a success, and recent."""
    problems = []
    for direction in (prober.arrow for prober in probes.PROBERS):
        found, error = baseline.get(direction, ([], "not read"))
        if error and not found:
            problems.append(f"{direction}: {error}")
            continue
        for path, name in PATHS:
            series = [p for p in found if p.path == path and p.at >= since]
            ok = sum(1 for p in series if p.ok)
            if ok < MIN_BASELINE_SUCCESSES:
                problems.append(f"{direction} via {name}: {ok} successful probe(s) in the "
                                f"{(until - since).total_seconds():g} s before acting (needs "
                                f"{MIN_BASELINE_SUCCESSES})")
                continue
            latest = series[-1]
            if not latest.ok:
                problems.append(f"{direction} via {name}: the latest probe "
                                f"({clock(latest.at)}) failed")
            elif (until - latest.at).total_seconds() > BASELINE_FRESH_SECONDS:
                problems.append(f"{direction} via {name}: the latest probe is "
                                f"{(until - latest.at).total_seconds():.1f} s old "
                                "(is the prober still running?)")
    return problems
