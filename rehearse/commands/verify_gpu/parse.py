"""What `python -m rehearse verify gpu` reads in recorded text, as pure functions: Go durations,
the kubelet's Pulled event messages, the cloud client's kubelet-timestamped log; and the
nearest-rank percentile its latencies are given by."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from rehearse.run import record as rec


_GO_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|μs|ns)")
_GO_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6,
            "ns": 1e-9}


def parse_go_duration(text: str) -> float:
    """Seconds in a Go duration as ``time.Duration.String`` writes it (``4m27.912s``, ``850ms``,
    ``1h2m0s``, ``0s``); ValueError for anything else."""
    text = text.strip()
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    if body == "0":
        return 0.0
    if not body or not re.fullmatch(f"(?:{_GO_PART.pattern})+", body):
        raise ValueError(f"not a Go duration: {text!r}")
    return sign * round(sum(float(n) * _GO_UNIT[u] for n, u in _GO_PART.findall(body)), 9)


_DURATION = r"[0-9.]+(?:h|ms|m|s|us|µs|μs|ns)(?:[0-9.]+(?:h|ms|m|s|us|µs|μs|ns))*"
_PULLED = re.compile(r'Successfully pulled image "(?P<image>[^"]+)" in (?P<pull>' + _DURATION
                     + r')(?: \((?P<total>' + _DURATION + r') including waiting\))?'
                     + r'(?:\. Image size: (?P<size>\d+) bytes)?')
_PRESENT = re.compile(r'Container image "(?P<image>[^"]+)" already present on machine')


@dataclass(frozen=True)
class Pull:
    image: str
    #: The pull itself; ``total`` adds the wait in the kubelet's pull queue (serial pulls).
    seconds: Optional[float]
    total_seconds: Optional[float]
    size_bytes: Optional[int]
    #: The image was on the node already: no pull to time.
    cached: bool = False
    text: str = ""


def parse_pulled(message: str) -> Optional[Pull]:
    """The kubelet's Pulled event message: ``Successfully pulled image "<image>" in 4m27.912s
    (4m28.1s including waiting). Image size: 10123456789 bytes.`` (the size clause and the
    waiting clause are absent in older kubelets), or ``Container image "<image>" already present
    on machine``."""
    match = _PULLED.search(message or "")
    if match:
        return Pull(image=match["image"], seconds=parse_go_duration(match["pull"]),
                    total_seconds=parse_go_duration(match["total"]) if match["total"] else None,
                    size_bytes=int(match["size"]) if match["size"] else None,
                    text=match["pull"])
    match = _PRESENT.search(message or "")
    if match:
        return Pull(image=match["image"], seconds=None, total_seconds=None, size_bytes=None,
                    cached=True)
    return None


_CALL = re.compile(r"^(?P<at>\d{4}-\d\d-\d\dT\S+)\s+(?P<clock>\d\d:\d\d:\d\d)\s+(?P<result>ok|FAIL)"
                   r"\s+in\s+(?P<seconds>\d+(?:\.\d+)?)s\s*$")


@dataclass(frozen=True)
class Call:
    """One call of the cloud client: when the kubelet logged its result line, whether wget
    succeeded, and how long it took by the client's own clock."""

    at: datetime.datetime
    ok: bool
    seconds: float
    #: The completion's text, from the JSON line the client logged before the result.
    answer: Optional[str] = None


def parse_client_log(lines: Iterable[str]) -> list[Call]:
    """The calls in the client's kubelet-timestamped log. Each call logs the completion JSON
    (or nothing, when wget failed), then ``HH:MM:SS ok in 0.42s`` or ``HH:MM:SS FAIL in
    60.01s``; other lines are skipped."""
    calls, previous = [], ""
    for raw in lines:
        line = raw.strip()
        match = _CALL.match(line)
        if match:
            ok = match["result"] == "ok"
            calls.append(Call(rec.parse_time(match["at"]), ok, float(match["seconds"]),
                              _answer(previous) if ok else None))
            previous = ""
        elif line:
            previous = line
    return sorted(calls, key=lambda c: c.at)


def _answer(line: str) -> Optional[str]:
    _, _, rest = line.partition(" ")
    try:
        return json.loads(rest)["choices"][0]["text"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def percentile(values: Iterable[float], p: int) -> Optional[float]:
    """Nearest rank: the smallest value with at least ``p`` % of the values at or below it,
    i.e. the ⌈p·n/100⌉-th smallest (an observed value, no interpolation)."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, -(-p * len(ordered) // 100))
    return ordered[rank - 1]


def go_duration_text(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.1f}s" if minutes else f"{rest:.1f}s"
