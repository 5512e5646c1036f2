"""Recorded runs replayed through `rehearse report` once per test process: the chart tests and
the summary page's tests replay the same recordings in tests/fixtures/rehearse, and drawing
their charts is most of the cost (a few tenths of a second a chart). A replay writes the same
files wherever it writes them, so the second module reads the first one's."""

from __future__ import annotations

from pathlib import Path

from rehearse import charts, cli

#: (a recording's folder, the chart writer in force) -> the folder its replay was written to
#: (kept for the session). By the writer too: where tests/conftest.py has it draw nothing,
#: a replay is not one with its charts.
_REPLAYED: dict[tuple[Path, object], Path] = {}


def replayed(recording: Path, base: Path) -> Path:
    """The folder `rehearse report RECORDING --out DIR` wrote: read it, copy it to change it.
    A recording this process has not replayed yet is replayed into a new folder under
    ``base``, a directory the session keeps (``tmp_path_factory``'s)."""
    key = (recording.resolve(), charts.write)
    if key not in _REPLAYED:
        out = base / f"replay-{len(_REPLAYED)}-{recording.name}"
        cli.run_report(recording, out)
        _REPLAYED[key] = out
    return _REPLAYED[key]
