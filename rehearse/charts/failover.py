"""Demo 1's failover timeline: seconds from the leader pod's deletion (the cluster's clock) on
x, one row per probe path, each probe a mark (succeeded or failed), the moments the Lease, the
route and the VTEP config followed as vertical lines, and each path's longest gap beside the
time AWS documents."""

from __future__ import annotations

from typing import Any

from rehearse.charts import common

#: How far before the deletion the timeline starts: enough to show the probes were healthy.
BEFORE_SECONDS = 10.0
MARKER_STYLES = (("#9467bd", "--"), ("#8c564b", "-."), ("#17becf", ":"))


def draw(data: dict, title: str) -> Any:
    rows = data["rows"]
    fig = common.figure(11, 1.6 + 0.9 * len(rows))
    ax = fig.add_subplot()
    ax.set_title(title, loc="left")
    end = max(data.get("end") or 0.0, 1.0)
    start = -BEFORE_SECONDS
    for y, row in enumerate(rows):
        probes = [(t, ok) for t, ok in row["probes"] if t is not None and start <= t <= end + 1]
        for ok, colour, mark in ((True, common.OK, "o"), (False, common.FAILED, "x")):
            xs = [t for t, good in probes if good is ok]
            ax.scatter(xs, [y] * len(xs), color=colour, marker=mark, s=28, zorder=3,
                       label=("probe succeeded" if ok else "probe failed") if y == 0 else None)
        gap = row.get("gap")
        if not row.get("measured") or not row["probes"]:
            ax.text(0.5 * (start + end), y, f"{common.NOT_MEASURED}: the prober's log was not read",
                    ha="center", va="center", color=common.MUTED)
        elif gap is None:
            ax.text(end, y + 0.32, "no gap measured: fewer than two successful probes", ha="right",
                    color=common.MUTED, fontsize=9)
        else:
            ax.plot([gap["start"], gap["end"]], [y, y], color=common.FAILED, alpha=0.25, linewidth=9,
                    solid_capstyle="butt", zorder=2)
            text = (f"longest gap {gap['seconds']:g} s" + (" and counting" if gap["ongoing"] else "")
                    + f" ({data['documented']})")
            ax.text(gap["start"], y + 0.3, text, fontsize=9, color=common.INK, zorder=4,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 1, "alpha": 0.85},
                    fontweight="bold" if row.get("status") != "PASS" else "normal")
    ax.axvline(0, color=common.INK, linewidth=1.5, label="leader pod deleted (0 s)")
    for (colour, style), marker in zip(MARKER_STYLES, data["markers"]):
        if marker["at"] is None:
            ax.plot([], [], color=colour, linestyle=style, label=f"{marker['label']}: {common.NOT_MEASURED}")
        else:
            ax.axvline(marker["at"], color=colour, linestyle=style, linewidth=1.5,
                       label=f"{marker['label']} ({marker['at']:g} s)")
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows])
    ax.set_ylim(len(rows) - 0.4, -0.6)
    ax.set_xlim(start, end + 1)
    ax.set_xlabel("seconds from the leader pod's deletion (the cluster's clock)")
    ax.grid(axis="x", color=common.GRID)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3, frameon=False, fontsize=9)
    return fig
