"""Recorded runs replayed through `rehearse report` once per test run: the chart tests and the
summary page's tests replay the same recordings in tests/fixtures/rehearse, and drawing their
charts is most of the cost (a few tenths of a second a chart, and matplotlib's import). A
replay writes the same files wherever it writes them, so the second module reads the first
one's — in this process, or, under xdist, the other worker's (tests/worker_share.py)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from rehearse import charts, cli
from tests import worker_share

#: (a recording's folder, the chart writer in force) -> the folder its replay was written to
#: (kept for the session). By the writer too: where tests/conftest.py has it draw nothing,
#: a replay is not one with its charts.
_REPLAYED: dict[tuple[Path, object], Path] = {}

#: The writer that draws (tests/conftest.py replaces it, per test, where charts are not
#: tested): only its replays are left for the other worker, the others cost next to nothing.
_DRAWING = charts.write


def replayed(recording: Path, base: Path) -> Path:
    """The run folder `rehearse report RECORDING --out DIR` wrote (DIR/<time>-<stack>-<command>):
    read it, copy it to change it. A recording this process has not replayed yet is replayed
    into a new rehearsals folder under ``base``, a directory the session keeps
    (``tmp_path_factory``'s), or one both workers share."""
    key = (recording.resolve(), charts.write)
    if key not in _REPLAYED:
        shared = worker_share.directory("report-replays") if charts.write is _DRAWING else None
        if shared is None:
            rehearsals = base / f"replay-{len(_REPLAYED)}-{recording.name}"
            cli.run_report(recording, rehearsals)
            out = cli.replay_folder(recording, rehearsals)
        else:
            name = f"{recording.name}-{hashlib.sha256(str(key[0]).encode()).hexdigest()[:12]}"
            out = worker_share.once(shared, name, lambda: _replay_into(recording, shared / name))
        _REPLAYED[key] = out
    return _REPLAYED[key]


def _replay_into(recording: Path, target: Path) -> Path:
    """Replayed into a rehearsals folder beside ``target``, its run folder renamed to it: the
    other worker never reads a folder still being written."""
    partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
    cli.run_report(recording, partial)
    try:
        cli.replay_folder(recording, partial).rename(target)
    except OSError:
        # The other worker, tired of waiting, replayed it too and was first: the same files.
        if not target.is_dir():
            raise
    return target


def report_into(recording: Path, rehearsals: Path) -> Path:
    """`rehearse report RECORDING --out REHEARSALS`, uncached: the run folder it wrote."""
    cli.run_report(recording, rehearsals)
    return cli.replay_folder(recording, rehearsals)
