"""What the charts share: matplotlib set up to draw offline and alike on every run (the Agg
backend, never a GUI one; text kept as text in the SVG; fixed ids; no dates or versions in the
files), the colours, and the "not measured" mark."""

from __future__ import annotations

import contextlib
import textwrap
from pathlib import Path
from typing import Any, Iterator

OK, FAILED, INK, MUTED, GRID = "#2ca02c", "#d62728", "#212529", "#6c757d", "#dee2e6"
HYBRID, CLOUD = "#1f77b4", "#ff7f0e"
NOT_MEASURED = "not measured"

#: rcParams for every chart. ``svg.fonttype: none`` keeps labels as <text> (slides can edit
#: them, tests read them); ``svg.hashsalt`` makes the SVG's ids the same on every run;
#: DejaVu Sans ships with matplotlib, so nothing depends on the machine's fonts.
RC = {"svg.fonttype": "none", "svg.hashsalt": "eks-hybrid-lab-rehearse", "font.family": "DejaVu Sans",
      "font.size": 10, "axes.spines.top": False, "axes.spines.right": False,
      "axes.titleweight": "bold", "figure.dpi": 100, "savefig.dpi": 100}
#: Metadata matplotlib would otherwise write (a date, its version): none, so the bytes depend
#: only on the data.
SVG_METADATA = {"Date": None, "Creator": None}
PNG_METADATA = {"Software": None}


def _matplotlib() -> Any:
    import matplotlib

    # Agg draws into memory: no display, no GUI toolkit, whatever MPLBACKEND says.
    matplotlib.use("Agg", force=True)
    return matplotlib


@contextlib.contextmanager
def style() -> Iterator[None]:
    with _matplotlib().rc_context(RC):
        yield


def figure(width: float, height: float, layout: Any = "constrained") -> Any:
    """A Figure not registered with pyplot (nothing global to close or leak); ``layout`` None
    for a drawing placed by hand."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout=layout)


def save(fig: Any, folder: Path, name: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig.savefig(folder / f"{name}.svg", format="svg", metadata=SVG_METADATA)
    # The PNG straight from an Agg canvas, not through savefig: savefig would first draw the
    # whole figure once more without output to settle the layout, which the SVG's drawing
    # has already settled (the same PNG bytes; one of the four drawings of a chart fewer).
    FigureCanvasAgg(fig).print_png(folder / f"{name}.png", metadata=PNG_METADATA)


def not_measured(ax: Any, why: str = "", width: int = 44) -> None:
    """An empty panel says so, and why, instead of looking like a zero: its text alone, no
    frame or ticks (an empty frame reads as a measured nothing)."""
    # Wrapped to the panel, in full: a reason cut short mid-sentence says less than none.
    why = textwrap.fill(why, width) if why else ""
    ax.text(0.5, 0.5, NOT_MEASURED + (f"\n{why}" if why else ""), transform=ax.transAxes,
            ha="center", va="center", color=MUTED, fontsize=11)
    ax.set_axis_off()


def only_text(title: str, lines: list[str]) -> Any:
    """A picture of a run that measured nothing: its title and why, no axes to stand empty
    and no legend for marks that are not there. Sized to the lines it holds."""
    height = 0.75 + 0.21 * len(lines)
    fig = figure(10, height, layout=None)
    fig.text(0.01, 1 - 0.12 / height, title, va="top", fontsize=12, fontweight="bold", color=INK)
    fig.text(0.01, 1 - 0.5 / height, "\n".join(lines), va="top", fontsize=10, color=MUTED, linespacing=1.45)
    return fig


def seconds(value: float) -> str:
    return f"{value:.1f} s"


def patch(colour: str, label: str) -> Any:
    from matplotlib.patches import Patch

    return Patch(color=colour, label=label)


def whole_numbers() -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)
