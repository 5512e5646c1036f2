"""The rehearsal's charts, drawn with matplotlib (requirements-rehearse.txt) from the plain data
an analyser put in its report (``rehearse.run.report.Chart``): each as ``<name>.svg`` for slides and
``<name>.png`` for a quick look, in the run folder beside report.md.

One module per chart, each with ``draw(data, title) -> Figure``; ``common`` holds what they share
(the offline, deterministic setup: replaying the same events writes byte-identical files).
Nothing here is imported until a report with charts is written."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

#: Chart name (the files' stem) -> the module that draws it.
DRAWERS = {
    "failover-timeline": "rehearse.charts.failover",
    "burst-scale-in": "rehearse.charts.burst",
    "gateway-throughput": "rehearse.charts.throughput",
    "gpu-latency": "rehearse.charts.gpu",
    "hostnet-paths": "rehearse.charts.hostnet",
}


def draw(name: str, title: str, data: dict) -> Any:
    """The chart as a matplotlib Figure, not yet saved: what ``write`` saves, and what the
    layout tests measure. Draw it (``fig.canvas.draw()``) inside ``common.style()``: the
    layout settles when it is drawn."""
    from rehearse.charts import common

    module = importlib.import_module(DRAWERS[name])
    with common.style():
        return module.draw(data, title)


def write(folder: Path, name: str, title: str, data: dict) -> None:
    from rehearse.charts import common

    figure = draw(name, title, data)
    with common.style():
        common.save(figure, folder, name)
