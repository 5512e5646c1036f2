"""The demo 1 probers' logs, read with the kubelet's timestamps.

Each turn a prober logs one line per path it probed (``components/demos.py``), which the
kubelet prefixes with the RFC 3339 time it wrote it (``?timestamps=true``)::

    2026-12-01T09:00:00.512345678Z 09:00:00 svc ok
    2026-12-01T09:00:00.530012345Z 09:00:00 pod FAIL

``svc`` went through the ClusterIP Service, ``pod`` straight at a pod. Those timestamps are the
cluster's own clock, so a gap between two successful probes is measured where it happened, not
across a `kubectl` round trip.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from rehearse.run.record import parse_time

_LINE = re.compile(r"^(?P<at>\d{4}-\d\d-\d\dT\S+)\s+(?:\d\d:\d\d:\d\d\s+)?(?P<path>svc|pod)\s+"
                   r"(?P<result>ok|FAIL)\s*$")


@dataclass(frozen=True)
class Probe:
    at: datetime.datetime
    path: str  # svc | pod
    ok: bool


def parse(lines: Iterable[str]) -> list[Probe]:
    """The probes in kubelet-timestamped log lines; other lines are skipped."""
    found = []
    for line in lines:
        match = _LINE.match(line.strip())
        if match:
            found.append(Probe(parse_time(match["at"]), match["path"], match["result"] == "ok"))
    return sorted(found, key=lambda p: p.at)


def longest_gap(probes: Iterable[Probe], path: str, start: Optional[datetime.datetime] = None,
                end: Optional[datetime.datetime] = None) -> Optional[float]:
    """Seconds of the longest interval between two consecutive successful probes of ``path``
    that overlaps [start, end] (the e2e suite's failover figure); None with fewer than two
    successes."""
    times = [p.at for p in probes if p.path == path and p.ok]
    gaps = [(b - a).total_seconds() for a, b in zip(times, times[1:])
            if (end is None or a <= end) and (start is None or b >= start)]
    return max(gaps) if gaps else None


def successes(probes: Iterable[Probe], path: str, start: Optional[datetime.datetime] = None,
              end: Optional[datetime.datetime] = None) -> int:
    return sum(1 for p in probes if p.path == path and p.ok
               and (start is None or p.at >= start) and (end is None or p.at <= end))


def failures(probes: Iterable[Probe], path: str, start: Optional[datetime.datetime] = None,
             end: Optional[datetime.datetime] = None) -> int:
    return sum(1 for p in probes if p.path == path and not p.ok
               and (start is None or p.at >= start) and (end is None or p.at <= end))
