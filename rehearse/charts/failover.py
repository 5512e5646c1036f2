"""Demo 1's failover timeline: seconds from the leader pod's deletion (the cluster's clock) on
x, one row per probe path, each probe a mark (succeeded or failed), the longest gap as a band
with the pass limit where it would have to end, and the moments the Lease, the route and the
VTEP config followed as vertical lines, each named at its top.

The names of the moments climb a staircase above the rows, earliest highest, each line
starting at its own name: a later line never reaches an earlier name, and two moments at the
same second keep a name each. Each path's longest gap and its verdict stand in a column right
of the rows, where no line passes."""

from __future__ import annotations

import textwrap
from typing import Any

from rehearse.charts import common

#: How far before the deletion the timeline starts: enough to show the probes were healthy.
BEFORE_SECONDS = 10.0
#: The moments' lines: (colour, style, width, zorder). Where two fall on the same second the
#: one drawn underneath is the wider, so it shows on both sides of the other.
DELETED_STYLE = (common.INK, "-", 1.2, 2.4)
MARKER_STYLES = (("#9467bd", "--", 2.6, 2.2), ("#8c564b", "-", 4.0, 2.1), ("#17becf", ":", 1.8, 2.3))
#: The staircase: the lowest name this far above the first row, each next one a step higher.
FIRST_STEP, STEP = 0.85, 0.42
GAP_COLOUR = common.FAILED


def draw(data: dict, title: str) -> Any:
    rows = data["rows"]
    moments, missing = _moments(data["markers"])
    fig = common.figure(11, 2.6 + 0.7 * len(rows) + 0.3 * len(moments))
    ax = fig.add_subplot()
    ax.set_title(title, loc="left")
    threshold = data["threshold"]
    start = -BEFORE_SECONDS
    right = max([data.get("end") or 0.0, 1.0] + [at for _, at, _ in moments]) + 1
    for y, row in enumerate(rows):
        limit = _row(ax, y, row, start, threshold)
        if limit is not None:
            right = max(right, limit + 1)
        _verdict(ax, y, row, threshold)
    top = -FIRST_STEP - STEP * (len(moments) - 1)
    bottom = len(rows) - 0.4
    for step, (name, at, style) in enumerate(moments):
        colour, line, width, zorder = style
        level = top + STEP * step
        ax.plot([at, at], [level, bottom], color=colour, linestyle=line, linewidth=width, zorder=zorder,
                alpha=0.7 if width > 3 else 1.0, label=name)
        ax.annotate(f"{name} {common.seconds(at)}", (at, level), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=9, color=colour)
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows])
    ax.set_ylim(bottom, top - STEP)
    ax.set_xlim(start, right)
    ax.set_xlabel("seconds from the leader pod's deletion (the cluster's clock)")
    ax.grid(axis="x", color=common.GRID)
    ax.set_axisbelow(True)
    ax.legend(handles=_legend(threshold, missing), loc="upper center", bbox_to_anchor=(0.5, -0.14),
              ncol=2 + bool(missing), frameon=False, fontsize=9, alignment="left",
              title=textwrap.fill(f"{data['documented']} for {data['documented_measures']}: a gap "
                                  "between two successful probes also holds the probes' own spacing.", 120),
              title_fontsize=9)
    return fig


def _moments(markers: list[dict]) -> tuple[list[tuple[str, float, tuple]], list[tuple[str, tuple]]]:
    """The deletion and each marker that was measured, in time order (a tie keeps the
    markers' order); and the markers that were not."""
    measured = [(m["label"], m["at"], style) for style, m in zip(MARKER_STYLES, markers) if m["at"] is not None]
    missing = [(m["label"], style) for style, m in zip(MARKER_STYLES, markers) if m["at"] is None]
    ordered = sorted(enumerate(measured), key=lambda item: (item[1][1], item[0]))
    return [("leader pod deleted", 0.0, DELETED_STYLE)] + [m for _, m in ordered], missing


def _row(ax: Any, y: int, row: dict, start: float, threshold: float) -> Any:
    """One path's probes and its longest gap; returns where the gap would have had to end."""
    probes = [(t, ok) for t, ok in row["probes"] if t is not None and t >= start]
    for ok, colour, mark in ((True, common.OK, "o"), (False, common.FAILED, "x")):
        xs = [t for t, good in probes if good is ok]
        ax.scatter(xs, [y] * len(xs), color=colour, marker=mark, s=28, zorder=3)
    gap = row.get("gap")
    if not row.get("measured") or not row["probes"] or gap is None:
        return None
    ax.plot([gap["start"], gap["end"]], [y, y], color=GAP_COLOUR, alpha=0.25, linewidth=9,
            solid_capstyle="butt", zorder=1.5)
    limit = gap["start"] + threshold
    ax.scatter([limit], [y], marker="|", s=420, linewidths=2, color=common.INK, zorder=3.5)
    return limit


def _verdict(ax: Any, y: int, row: dict, threshold: float) -> None:
    """The right-hand column: the gap, and PASS or why not, beside its row."""
    gap = row.get("gap")
    if not row.get("measured") or not row["probes"]:
        text, colour = f"{common.NOT_MEASURED}:\nthe prober's log\nwas not read", common.MUTED
    elif gap is None:
        text, colour = "no gap measured:\nfewer than two\nsuccessful probes", common.MUTED
    else:
        text = f"longest gap {common.seconds(gap['seconds'])}" + (" and counting" if gap["ongoing"] else "")
        if row.get("status") == "PASS":
            text, colour = f"{text}\nPASS: ≤ {threshold:g} s", common.OK
        elif gap["seconds"] > threshold:
            text, colour = f"{text}\nFAIL: over {threshold:g} s", common.FAILED
        else:
            text, colour = f"{text}\nFAIL: see the report", common.FAILED
    ax.text(1.01, y, text, transform=ax.get_yaxis_transform(), va="center", ha="left", fontsize=9,
            color=colour, fontweight="normal" if colour == common.OK else "bold")


def _legend(threshold: float, missing: list[tuple[str, tuple]]) -> list[Any]:
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], color=common.OK, marker="o", linestyle="none", label="probe succeeded"),
        Line2D([], [], color=common.FAILED, marker="x", linestyle="none", label="probe failed"),
        Line2D([], [], color=GAP_COLOUR, alpha=0.25, linewidth=9, label="longest gap between two successful probes"),
        Line2D([], [], color=common.INK, marker="|", markersize=14, markeredgewidth=2, linestyle="none",
               label=f"pass limit: the gap ends within {threshold:g} s of its start"),
    ]
    for label, (colour, style, width, _) in missing:
        handles.append(Line2D([], [], color=colour, linestyle=style, linewidth=min(width, 2.0),
                              label=f"{label}: {common.NOT_MEASURED}"))
    return handles
