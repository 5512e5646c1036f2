"""The plan's "Charts" lines: each Helm release the stack installs, the chart and version it
pins, and the chart source the plan's models render for it (offline/chart_render.py
``CHART_SOURCES``; docs/charts.md says where each source is from). Where the source is not the
pinned version, the plan says so beside the release: the models' renders are then of the
newest source this machine can read, and a reader of the plan should not take them for the
pinned chart's."""

from __future__ import annotations

import textwrap
from typing import TextIO

from offline import chart_render
from offline.runner import ProgramRun

WIDTH = 120


def lines(run: ProgramRun) -> list[str]:
    out = []
    for release in chart_render.registered_releases(run):
        pinned = f"{release.chart} {release.version}"
        source = release.source
        if source is None:
            rendered = "no chart source known here: its pods are not modelled (offline/chart_render.py)"
        elif source.version == release.version:
            rendered = f"rendered from that chart ({source.directory} {source.version})"
        else:
            rendered = (f"rendered from {source.directory} {source.version}, NOT the pinned "
                        f"version: {source.why}")
        out += textwrap.wrap(f"{release.name:<25} {pinned}: {rendered}", WIDTH - 2,
                             initial_indent="  ", subsequent_indent=" " * 6,
                             break_on_hyphens=False, break_long_words=False)
    return out


def render(run: ProgramRun, out: TextIO) -> None:
    found = lines(run)
    if not found:
        return
    out.write("\nCharts (the chart each release pins; the source the models render, docs/charts.md)\n")
    for line in found:
        out.write(line + "\n")
