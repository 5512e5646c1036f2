"""The range of clocks the ReplicaSet controller may sort by, and where in it a log2 bucket flips.

The controller buckets ``log2(now - readyTime)`` (and creation times) with its own
``metav1.Now()`` at sync time (kubernetes ``pkg/controller/controller_utils.go``
``ActivePodsWithRanks.Less``, ``logarithmicRankDiff``; docs/scale-in.md#ties-and-the-controllers-clock): later than any snapshot a
client takes, and on the API server's side of whatever skew this machine has. Near a bucket edge
(2^35 ns ≈ 34.4 s) half a second decides which pod goes. A forecast therefore takes a window —
the controller's clock lies in ``[now + early, now + late]`` — and calls undecided every choice
that differs somewhere in it (rehearse.models.ranking's forecast).

The skew is measured, bounded, from the API server's ``Date`` header (RFC 7231: the server's
clock when it wrote the answer, whole seconds): the server's clock less ours lies in
``[Date - received, Date + 1 s - sent]``. The sync lag is a bound of ours, not measured.

Pure time arithmetic in nanoseconds; the one request, for the ``Date``, is
rehearse.lab.server_clock's. No import of the forecast, which imports this.
"""

from __future__ import annotations

import datetime
import email.utils
from typing import Iterable, Optional

_NS = 10**9
#: After a scale request, how late the ReplicaSet controller may sort: the Deployment controller
#: updates the ReplicaSet, whose informer event queues its sync (typically well under a second;
#: a bound, not a measurement).
SYNC_LAG_SECONDS = 2.0
#: With no measurement of this machine's skew (a file, no Date header), the skew assumed.
DEFAULT_SKEW_SECONDS = 1.0


def _ns(moment: datetime.datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    delta = moment - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * _NS + delta.microseconds * 1000


def offset_from_date(date: str, sent: datetime.datetime, received: datetime.datetime) -> tuple[int, int]:
    """(lowest, highest) of the server's clock less ours, in ns, from one answer's ``Date``."""
    server = _ns(email.utils.parsedate_to_datetime(date))
    return server - _ns(received), server + _NS - _ns(sent)


def window(offset: Optional[dict], lag_seconds: float = SYNC_LAG_SECONDS,
           default_skew_seconds: float = DEFAULT_SKEW_SECONDS) -> tuple[int, int]:
    """(early, late) in ns around this machine's clock at the snapshot: the controller's clock
    lies in ``[now + early, now + late]``. Always includes ``now`` itself (the forecast made at
    it stays one of the outcomes)."""
    if offset is None:
        low, high = -int(default_skew_seconds * _NS), int(default_skew_seconds * _NS)
    else:
        low, high = int(offset["low_ns"]), int(offset["high_ns"])
    return min(0, low), max(0, high + int(lag_seconds * _NS))


def candidate_clocks(times: Iterable[Optional[int]], low: int, high: int) -> list[int]:
    """Clocks in ``[low, high]`` that together meet every ordering the controller can reach in
    it: the ends, each instant where some pod's age crosses a power of two (``t + 2^k``; a
    bucket flips there, give or take Go's rounding of Log2), and a point between each two of
    those (the bucket is constant in between, whatever the exact edge)."""
    points = {low, high}
    for t in times:
        if t is None:
            continue
        for k in range(63):
            edge = t + (1 << k)
            if edge > high:
                break
            if edge > low:
                points.update((edge - 1, edge))
        if low < t <= high:
            points.add(t)  # an age of 0 or less is bucket -1
    ordered = sorted(p for p in points if low <= p <= high)
    between = [(a + b) // 2 for a, b in zip(ordered, ordered[1:]) if b - a > 1]
    return sorted(set(ordered) | set(between))


def describe(early: int, late: int) -> str:
    return f"{early / _NS:+.3f} s to {late / _NS:+.3f} s around the snapshot"
