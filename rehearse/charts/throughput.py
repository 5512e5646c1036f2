"""Gateway throughput per instance type: iperf3's received Gbit/s each way, beside the type's
baseline bandwidth where it is known, with the path MTU each run saw and the MTU in force."""

from __future__ import annotations

from typing import Any

from rehearse.charts import common

COLOURS = {"cloud → hybrid": common.CLOUD, "hybrid → cloud": common.HYBRID}
WIDTH = 0.36


#: The measured figures' one precision on the picture (the report's tables keep iperf3's).
PRECISION = 2
#: A value label's height and its gap above the bar, as fractions of the y axis (9 pt text on
#: an axis about 3.3 in tall, with room to spare): where a baseline line would cross the label
#: above the bar, it goes inside the bar's top instead.
LABEL_HEIGHT, LABEL_GAP = 0.075, 0.01


def draw(data: dict, title: str) -> Any:
    rows = data["rows"]
    fig = common.figure(max(6.0, 2.6 * len(rows) + 2), 4.8)
    ax = fig.add_subplot()
    fig.suptitle(title, x=0.01, ha="left", fontweight="bold")
    paths = _paths(rows)
    mtu = data.get("mtu")
    subtitle = f"MTU in force: {mtu['mtu']} ({mtu['source']})" if mtu else f"MTU in force: {common.NOT_MEASURED}"
    if len(paths) == 1:
        # The same on every direction measured: said once, not on every bar.
        [(pmtu, mss)] = paths
        subtitle += f"\nevery direction measured: path MTU {pmtu or '?'}, MSS {mss or '?'}"
    ax.set_title(subtitle, loc="left", fontsize=9, color=common.MUTED, fontweight="normal")
    values = [d["receiver_gbps"] for r in rows for d in r["directions"].values() if d["receiver_gbps"]]
    top = max(values + [r["baseline_gbps"] or 0 for r in rows] + [1.0]) * 1.25
    ticks = []
    for x, row in enumerate(rows):
        baseline = row["baseline_gbps"]
        for i, (direction, d) in enumerate(row["directions"].items()):
            at = x + (i - 0.5) * WIDTH
            label = f"{direction} (received)" if x == 0 else None
            if d["status"] == "ok":
                value = d["receiver_gbps"]
                ax.bar(at, value, WIDTH * 0.9, color=COLOURS[direction], label=label)
                clear = baseline is None or not value <= baseline <= value + (LABEL_GAP + LABEL_HEIGHT) * top
                ax.text(at, value + LABEL_GAP * top if clear else value - LABEL_GAP * top,
                        f"{value:.{PRECISION}f} Gbit/s", ha="center", va="bottom" if clear else "top",
                        fontsize=9, color=common.INK if clear else "white", fontweight="normal" if clear else "bold")
            else:
                ax.bar(at, top * 0.5, WIDTH * 0.9, fill=False, edgecolor=common.GRID, linestyle="--", label=label)
                ax.text(at, _clear_of(baseline, top), f"{common.NOT_MEASURED}\n({d['status']})"
                        if d["status"] != "not measured" else common.NOT_MEASURED, ha="center", va="bottom",
                        rotation=90, color=common.MUTED, fontsize=9)
        tick = [row["instance_type"]]
        if baseline is not None:
            ax.hlines(baseline, x - 2 * WIDTH * 0.75, x + 2 * WIDTH * 0.75, colors=common.INK,
                      linestyles="--", label="instance baseline bandwidth" if x == 0 else None)
            tick.append(f"baseline {baseline:g} Gbit/s")
        else:
            tick.append("baseline not known")
        if len(paths) > 1:
            measured = [d for d in row["directions"].values() if d["status"] == "ok"]
            tick.append("path MTU " + " / ".join(str(d["pmtu"] or "?") for d in measured) +
                        ", MSS " + " / ".join(str(d["tcp_mss"] or "?") for d in measured))
        ticks.append("\n".join(tick))
    ax.set_xticks(range(len(rows)), ticks)
    ax.set_xlim(-0.7, len(rows) - 0.3)
    ax.set_ylim(0, top)
    ax.set_ylabel("Gbit/s received (iperf3)")
    ax.grid(axis="y", color=common.GRID)
    ax.set_axisbelow(True)
    fig.legend(loc="outside lower center", ncol=3, frameon=False, fontsize=9)
    return fig


#: The upright "not measured" of an empty slot, as fractions of the y axis: its length (two
#: lines of 9 pt, about 30 characters at most, on an axis about 3.3 in tall) and its margin.
UPRIGHT_LENGTH, UPRIGHT_MARGIN = 0.3, 0.03


def _clear_of(baseline: Any, top: float) -> float:
    """Where an empty slot's upright text starts: near the axis, unless the baseline line
    would cross it there; then just under the line, or, with no room there, above it."""
    start = UPRIGHT_MARGIN * top
    if baseline is None or not start - UPRIGHT_MARGIN * top < baseline < start + (UPRIGHT_LENGTH + UPRIGHT_MARGIN) * top:
        return start
    under = baseline - (UPRIGHT_LENGTH + UPRIGHT_MARGIN) * top
    return under if under >= start else baseline + UPRIGHT_MARGIN * top


def _paths(rows: list[dict]) -> set[tuple[Any, Any]]:
    """The (path MTU, MSS) pairs the measured directions saw."""
    return {(d["pmtu"], d["tcp_mss"]) for r in rows for d in r["directions"].values() if d["status"] == "ok"}
