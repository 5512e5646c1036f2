"""The demo 1 probers: their names, the direction each probes, and their logs, read with the
kubelet's timestamps. The one place the rehearsal tools learn them from (``verify gateway``
judges recent traffic with them, ``failover`` measures the gap around a leader change).

Each turn a prober logs one line per path it probed (``components/demos.py``), which the
kubelet prefixes with the RFC 3339 time it wrote it (``?timestamps=true``)::

    2026-12-01T09:00:00.512345678Z 09:00:00 svc ok
    2026-12-01T09:00:00.530012345Z 09:00:00 pod FAIL

``svc`` went through the ClusterIP Service, ``pod`` straight at a pod. Those timestamps are the
cluster's own clock, so a gap between two successful probes is measured where it happened, not
across a `kubectl` round trip.

The logs are read two ways, each for a reason: ``recent_lines`` asks for the last N seconds of
one container with lightkube's typed log call (``sinceSeconds``; a refusal comes back as the
API server's Status, which ``verify gateway`` reports); ``lines_since`` asks for everything
after one moment with a raw GET (``sinceTime``, which the typed call does not offer), so
``failover`` reads the same window from its baseline's start before and after the deletion.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from rehearse.run.errors import api_failure
from rehearse.run.record import parse_time


@dataclass(frozen=True)
class Prober:
    """One demo 1 prober (``components/demos.py``, deployed by the demo layer)."""

    #: The key of the stack's ``demo1.probers`` output, and of ``verify gateway``'s records.
    key: str
    #: The Deployment's name, and its pods' ``app`` label.
    name: str
    #: The direction it probes, as ``verify gateway`` names it in its checks.
    direction: str
    #: The same direction as ``failover`` records it in its events and names its checks
    #: (without spaces; kept as recorded, since old runs replay from it).
    arrow: str


CLOUD_TO_HYBRID = Prober("cloudToHybrid", "prober-cloud", "cloud → hybrid", "cloud→hybrid")
HYBRID_TO_CLOUD = Prober("hybridToCloud", "prober-hybrid", "hybrid → cloud", "hybrid→cloud")
#: Both probers, cloud → hybrid first (the order the tools read and report them in).
PROBERS = (CLOUD_TO_HYBRID, HYBRID_TO_CLOUD)
#: Key -> Deployment name: what the stack's ``demo1.probers`` output says when it says nothing.
NAMES = {p.key: p.name for p in PROBERS}
#: The probing container's name in a prober pod.
CONTAINER = "prober"
#: The paths each prober logs: through the ClusterIP Service, and straight at a pod.
SVC, POD = "svc", "pod"

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


# --- reading the logs (lab I/O) ---------------------------------------------------------------

def prober_pods(client: Any, namespace: str, name: str) -> list[Any]:
    """The pods of prober ``name`` (label ``app=<name>``), as listed. The label is checked here
    as well: a server that ignores the selector (a careless proxy) lists them all."""
    from lightkube.resources.core_v1 import Pod

    return [p for p in client.list(Pod, namespace=namespace, labels={"app": name})
            if (p.metadata.labels or {}).get("app") == name]


def recent_lines(client: Any, namespace: str, pod: str, container: Optional[str],
                 seconds: int) -> tuple[list[str], Optional[dict]]:
    """The kubelet-timestamped lines ``pod``'s ``container`` logged in the last ``seconds``, and
    the Status the API server answered instead when it refused (400 container not started, 404
    pod gone, 500 kubelet not reachable): a finding, not a crash. Errors that are no answer (a
    timeout, a refused connection) are raised."""
    try:
        return [line.rstrip("\n") for line in client.log(
            pod, namespace=namespace, container=container, timestamps=True, since=seconds)], None
    except Exception as failure:  # noqa: BLE001 sorted here: an answer, or not
        error = api_failure(failure)
        if error is None:
            raise
        return [], error


def lines_since(kube: Any, namespace: str, name: str,
                since: datetime.datetime) -> tuple[list[str], list[str], str]:
    """The kubelet-timestamped lines prober ``name``'s pods logged since ``since``: (lines, pods,
    what went wrong)."""
    pods = sorted(prober_pods(kube.client, namespace, name), key=lambda p: p.metadata.name)
    if not pods:
        return [], [], f"no {name} pod in {namespace}"
    stamp = since.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines, problems = [], []
    for pod in pods:
        pod_name = pod.metadata.name
        status, body = kube.get_raw(f"/api/v1/namespaces/{namespace}/pods/{pod_name}/log"
                                    f"?timestamps=true&sinceTime={stamp}")
        if status != 200:
            problems.append(f"the logs of {pod_name} answered HTTP {status}")
            continue
        lines += [line for line in body.splitlines() if line.strip()]
    return lines, [p.metadata.name for p in pods], "; ".join(problems)
