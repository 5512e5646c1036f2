"""When, and as which stack, the recorded runs in tests/fixtures/rehearse were recorded: the
recorders take these as their parameters. One stack (the repo's Pulumi.dev.yaml) and one
rehearsal evening, as a presenter's rehearsals folder would hold them: the failing and odd
runs the day before, then each command run healthy, so the latest run of every command is
the healthy one and the summary of the replays shows demos 1, 2 and 3 and the open
questions."""

from __future__ import annotations

import datetime

STACK = "dev"


def _at(day: int, hour: int, minute: int) -> datetime.datetime:
    return datetime.datetime(2026, 11 if day == 30 else 12, day, hour, minute,
                             tzinfo=datetime.timezone.utc)


#: recording -> its start (its first event's ``at``, and the replay's folder name).
STARTED = {
    # The day before: what went wrong, and the odd cases.
    "gateway-route-elsewhere": _at(30, 18, 0),
    "failover-refused-baseline": _at(30, 18, 10),
    "failover-slow-standby": _at(30, 18, 20),
    "failover-route-stuck": _at(30, 18, 30),
    "failover-skewed-clock": _at(30, 18, 40),
    "burst-b-no-get-nodes": _at(30, 19, 0),
    "verify-burst-c-old-karpenter": _at(30, 19, 10),
    # The evening: the pre-check first, then each command healthy, demo by demo (burst-abc
    # takes 18 min).
    "preflight-healthy": _at(1, 17, 55),
    "gateway-healthy": _at(1, 18, 0),
    "failover-healthy": _at(1, 18, 5),
    "burst-abc": _at(1, 18, 10),
    "verify-burst-a": _at(1, 18, 30),
    "gpu-recorded": _at(1, 18, 35),
    "throughput-two-types": _at(1, 18, 40),
    "hostnet-healthy": _at(1, 18, 50),
}
