"""A run's folder and its raw observations (``events.jsonl``): one JSON object a line, each with
the UTC time it was observed (``at``), a ``kind`` and what was seen. The first event says which
command and stack the run is, so ``rehearse report`` can analyse the folder again."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

EVENTS = "events.jsonl"
#: Written as the first event of every run.
RUN_STARTED = "run.started"


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def iso(moment: datetime.datetime) -> str:
    return moment.astimezone(datetime.timezone.utc).isoformat(timespec="microseconds").replace(
        "+00:00", "Z")


def parse_time(text: str) -> datetime.datetime:
    """RFC 3339 with up to nanoseconds (kubelet log prefixes, Lease MicroTime) -> aware UTC."""
    text = text.strip().replace("Z", "+00:00")
    head, _, rest = text.partition(".")
    if rest:
        digits = "".join(ch for ch in rest if ch.isdigit())
        zone = rest[len(digits):]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    moment = datetime.datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


#: A run folder's name starts with its UTC start: 20261201T100000Z.
_STAMP = "%Y%m%dT%H%M%SZ"


def folder_for(root: Path, stack: str, command: str, now: datetime.datetime) -> Path:
    stamp = now.astimezone(datetime.timezone.utc).strftime(_STAMP)
    return root / f"{stamp}-{stack}-{command.replace(' ', '-')}"


def is_folder_of(name: str, stack: str, command: str) -> bool:
    """Whether ``name`` is what folder_for names a run of ``stack``'s ``command``: by the whole
    name, since stack names hold dashes too (the runs of ``dev-gpu`` are not ``dev``'s)."""
    stamp, _, rest = name.partition("-")
    try:
        datetime.datetime.strptime(stamp, _STAMP)
    except ValueError:
        return False
    return rest == f"{stack}-{command.replace(' ', '-')}"


@dataclass
class Recorder:
    """Appends events to ``<folder>/events.jsonl`` as they are observed."""

    folder: Path
    clock: Callable[[], datetime.datetime] = utc_now
    events: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._file = (self.folder / EVENTS).open("w")

    def __call__(self, kind: str, **data: Any) -> dict[str, Any]:
        event = {"at": iso(self.clock()), "kind": kind, **data}
        self.events.append(event)
        self._file.write(json.dumps(event, sort_keys=True, default=str) + "\n")
        self._file.flush()
        return event

    def close(self) -> None:
        self._file.close()


def read_events(folder: Path) -> list[dict[str, Any]]:
    path = folder / EVENTS
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def first(events: list[dict[str, Any]], kind: str) -> Optional[dict[str, Any]]:
    return next((e for e in events if e["kind"] == kind), None)


def every(events: list[dict[str, Any]], kind: str) -> Iterator[dict[str, Any]]:
    return (e for e in events if e["kind"] == kind)
