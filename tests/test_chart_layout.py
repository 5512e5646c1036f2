"""Every chart of every recorded run (tests/fixtures/rehearse/*/), measured as matplotlib drew
it: no two texts overlap, no text leaves the figure, no line runs through a text, no line hides
under another, no text is cut short with "…", and a picture of a run that measured nothing
has neither empty axes nor a legend.

The recordings are discovered, not listed: when the fixtures are recorded again (another stack,
other times, another run), this covers what is there; and each once more cut short half-way,
for the "not measured" drawings a complete recording never needs. Each is replayed as `python -m rehearse
report` does (``outcome.analyse_run`` with the command's ``analyse``) and each chart drawn once,
in memory (``rehearse.charts.draw``): the extents are the renderer's own, from the texts and
lines the figure actually drew, never from the data the chart was given."""

from __future__ import annotations

import importlib
import itertools
from pathlib import Path
from typing import Any

import pytest

from rehearse import cli
from rehearse.run import outcome
from rehearse.run import record
from rehearse.charts import common, draw

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "rehearse"
#: Less than this (pixels at the charts' 100 dpi) is two edges touching, not an overlap: glyph
#: extents are rounded to whole pixels by Agg.
SLACK = 1.0


def _cut_short(events: list[dict]) -> list[dict]:
    """The run stopped half-way (Ctrl-C): what it had not reached yet is drawn as not
    measured, which a complete recording never shows."""
    kept = events[:len(events) // 2]
    return kept + [{"at": kept[-1]["at"], "kind": outcome.RUN_INTERRUPTED, "reason": "Ctrl-C"}]


def _recorded_charts() -> list[tuple[str, Any]]:
    found = []
    for events_file in sorted(FIXTURES.glob(f"*/{record.EVENTS}")):
        events = record.read_events(events_file.parent)
        started = record.first(events, record.RUN_STARTED) or {}
        analyse = importlib.import_module(cli.COMMANDS[started["command"]]).analyse
        for variant, replayed in (("", events), (" cut short", _cut_short(events))):
            report = outcome.analyse_run(analyse, replayed)
            found += [(f"{events_file.parent.name}{variant}/{chart.name}", chart) for chart in report.charts]
    return found


CHARTS = _recorded_charts()


def test_the_recordings_have_charts_to_measure():
    # A glob that found nothing would pass every test below.
    assert len({name.split("/")[0] for name, _ in CHARTS if "cut short" not in name}) >= 5, CHARTS


class Drawn:
    """A chart drawn once on an Agg canvas, with what the renderer was asked to draw."""

    def __init__(self, chart: Any):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.text import Text

        self.figure = draw(chart.name, chart.title, chart.data)
        canvas = FigureCanvasAgg(self.figure)
        self.renderer = canvas.get_renderer()
        drawn: dict[int, Any] = {}
        original = Text.draw

        def draw_text(text, renderer):
            # Only the texts the figure actually draws: a tick label on an axis turned off,
            # or an empty annotation, has a Text object but puts nothing on the picture.
            # (Text.draw, not the renderer's draw_text: that one is not told which Text a
            # line of a multi-line text belongs to.)
            if text.get_visible() and text.get_text().strip():
                drawn[id(text)] = text
            return original(text, renderer)

        Text.draw = draw_text
        try:
            with common.style():
                self.figure.draw(self.renderer)
        finally:
            Text.draw = original
        self.texts = list(drawn.values())

    def extent(self, text: Any) -> Any:
        return text.get_window_extent(self.renderer)


@pytest.fixture(scope="module", params=[c for _, c in CHARTS], ids=[n for n, _ in CHARTS])
def drawn(request) -> Drawn:
    return Drawn(request.param)


def _label(text: Any) -> str:
    return repr(text.get_text()[:60])


def _overlap(a: Any, b: Any) -> bool:
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > SLACK) and (min(a.y1, b.y1) - max(a.y0, b.y0) > SLACK)


def test_no_two_texts_overlap(drawn):
    # Every drawn text, tick labels included: matplotlib's own tick labels never overlap on
    # these charts as drawn (checked), so none is excused.
    boxes = [(t, drawn.extent(t)) for t in drawn.texts]
    clashes = [f"{_label(a)} and {_label(b)}" for (a, ea), (b, eb) in itertools.combinations(boxes, 2)
               if _overlap(ea, eb)]
    assert not clashes, clashes


def test_no_text_leaves_the_figure(drawn):
    frame = drawn.figure.bbox
    outside = [f"{_label(t)} at {drawn.extent(t).bounds}" for t in drawn.texts
               if drawn.extent(t).x0 < frame.x0 - SLACK or drawn.extent(t).y0 < frame.y0 - SLACK
               or drawn.extent(t).x1 > frame.x1 + SLACK or drawn.extent(t).y1 > frame.y1 + SLACK]
    assert not outside, outside


def test_no_text_is_cut_short(drawn):
    # The picture says what it says in full (wrapped); the report's tables hold the details.
    assert not [_label(t) for t in drawn.texts if "…" in t.get_text()]


def _lines(ax: Any) -> list[tuple[Any, Any, float]]:
    """The data lines an axes draws (lines it was given and line collections, not its grid,
    spines or ticks), each as (the artist, its path in pixels, half its width in pixels)."""
    from matplotlib.collections import LineCollection
    from matplotlib.path import Path as MPath

    found = []
    for line in ax.lines:
        if line.get_visible() and line.get_linestyle() not in ("None", "", " ") and len(line.get_xydata()) > 1:
            path = line.get_transform().transform_path(MPath(line.get_xydata()))
            found.append((line, path, line.get_linewidth() * ax.figure.dpi / 72 / 2))
    for collection in ax.collections:
        if isinstance(collection, LineCollection) and collection.get_visible():
            widths = collection.get_linewidths()
            for i, segment in enumerate(collection.get_segments()):
                path = collection.get_transform().transform_path(MPath(segment))
                found.append((collection, path, widths[i % len(widths)] * ax.figure.dpi / 72 / 2))
    return found


def _covers(text: Any, line: Any) -> bool:
    """A text drawn over the line on an opaque box hides it there: the line does not cross
    the letters (the hostnet drawing's numbered badges sit on their arrows so)."""
    box = text.get_bbox_patch()
    if box is None or text.get_zorder() <= line.get_zorder():
        return False
    alpha = box.get_alpha()
    return (alpha is None or alpha >= 1) and box.get_facecolor()[3] >= 1


def test_no_line_runs_through_a_text(drawn):
    from matplotlib.transforms import Bbox

    crossed = []
    for ax in drawn.figure.axes:
        clip = ax.bbox
        for line, path, half in _lines(ax):
            for text in drawn.texts:
                extent = drawn.extent(text)
                if _covers(text, line):
                    continue
                # The part of the text the line could reach: inside the axes (lines are
                # clipped to it), and the text's box widened by half the line's width.
                reach = Bbox.intersection(Bbox.from_extents(extent.x0 - half, extent.y0 - half,
                                                            extent.x1 + half, extent.y1 + half), clip)
                if reach is not None and reach.width > SLACK and reach.height > SLACK and \
                        path.intersects_bbox(Bbox.from_extents(reach.x0 + SLACK, reach.y0 + SLACK,
                                                               reach.x1 - SLACK, reach.y1 - SLACK), filled=False):
                    crossed.append(f"{line.get_label()!r} through {_label(text)}")
    assert not crossed, crossed


def _shared_run(a: Any, b: Any) -> bool:
    """Two straight lines on the same pixels for more than a pixel: both vertical at one x,
    or both horizontal at one y, their spans overlapping."""
    if len(a.vertices) != 2 or len(b.vertices) != 2:
        return False
    for along, across in ((1, 0), (0, 1)):
        if max(abs(a.vertices[0][across] - a.vertices[1][across]),
               abs(b.vertices[0][across] - b.vertices[1][across]),
               abs(a.vertices[0][across] - b.vertices[0][across])) > SLACK:
            continue
        low = max(min(a.vertices[:, along]), min(b.vertices[:, along]))
        high = min(max(a.vertices[:, along]), max(b.vertices[:, along]))
        if high - low > SLACK:
            return True
    return False


def test_no_line_hides_under_another(drawn):
    """Two lines on the same pixels (the route and the VTEP config following at the same
    moment): the one drawn underneath is the wider, so both stay in sight."""
    hidden = []
    for ax in drawn.figure.axes:
        for (a, pa, ha), (b, pb, hb) in itertools.combinations(_lines(ax), 2):
            if a is b or not _shared_run(pa, pb):
                continue
            under, over = ((a, ha), (b, hb)) if a.get_zorder() <= b.get_zorder() else ((b, hb), (a, ha))
            if under[1] <= over[1] + SLACK / 2:
                hidden.append(f"{under[0].get_label()!r} under {over[0].get_label()!r}")
    assert not hidden, hidden


def _holds_data(ax: Any) -> bool:
    return bool(ax.lines or ax.patches or ax.collections or ax.images)


def test_no_empty_axes_and_no_legend_without_data(drawn):
    """An axes with its frame drawn holds something measured; a picture with nothing measured
    is its text alone: no axes, and no legend for bars that are not there."""
    framed = [ax for ax in drawn.figure.axes if ax.get_visible() and ax.axison]
    assert not [ax.get_title() for ax in framed if not _holds_data(ax)]
    if not any(_holds_data(ax) for ax in drawn.figure.axes):
        assert not framed and not drawn.figure.legends
        assert not [ax for ax in drawn.figure.axes if ax.get_legend() is not None]


def test_a_text_on_a_bar_is_inside_it_or_clear_of_it(drawn):
    """A label half on a bar (p50's on the tallest bar of the histogram) reads as part of it:
    a text is either off every filled bar or wholly inside one."""
    from matplotlib.patches import Rectangle

    straddling = []
    for ax in drawn.figure.axes:
        bars = [p for p in ax.patches if isinstance(p, Rectangle) and p.get_visible() and p.get_fill()]
        for bar in bars:
            box = bar.get_window_extent(drawn.renderer)
            for text in drawn.texts:
                extent = drawn.extent(text)
                inside = box.x0 - SLACK <= extent.x0 and extent.x1 <= box.x1 + SLACK and \
                    box.y0 - SLACK <= extent.y0 and extent.y1 <= box.y1 + SLACK
                if _overlap(box, extent) and not inside:
                    straddling.append(f"{_label(text)} on the bar at {tuple(round(v) for v in box.bounds)}")
    assert not straddling, straddling
