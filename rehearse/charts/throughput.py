"""Gateway throughput per instance type: iperf3's received Gbit/s each way, beside the type's
baseline bandwidth where it is known, with the path MTU each run saw and the MTU in force."""

from __future__ import annotations

from typing import Any

from rehearse.charts import common

COLOURS = {"cloud → hybrid": common.CLOUD, "hybrid → cloud": common.HYBRID}
WIDTH = 0.36


def draw(data: dict, title: str) -> Any:
    rows = data["rows"]
    fig = common.figure(max(6.0, 2.6 * len(rows) + 2), 4.8)
    ax = fig.add_subplot()
    fig.suptitle(title, x=0.01, ha="left", fontweight="bold")
    mtu = data.get("mtu")
    ax.set_title(f"MTU in force: {mtu['mtu']} ({mtu['source']})" if mtu else f"MTU in force: {common.NOT_MEASURED}",
                 loc="left", fontsize=9, color=common.MUTED, fontweight="normal")
    values = [d["receiver_gbps"] for r in rows for d in r["directions"].values() if d["receiver_gbps"]]
    top = max(values + [r["baseline_gbps"] or 0 for r in rows] + [1.0]) * 1.25
    for x, row in enumerate(rows):
        for i, (direction, d) in enumerate(row["directions"].items()):
            at = x + (i - 0.5) * WIDTH
            label = f"{direction} (received)" if x == 0 else None
            if d["status"] == "ok":
                ax.bar(at, d["receiver_gbps"], WIDTH * 0.9, color=COLOURS[direction], label=label)
                ax.text(at, d["receiver_gbps"] + top * 0.01, f"{d['receiver_gbps']:g} Gbit/s", ha="center",
                        va="bottom", fontsize=9, zorder=4,
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 1, "alpha": 0.85})
                ax.text(at, top * 0.02, f"path MTU {d['pmtu'] or '?'}\nMSS {d['tcp_mss'] or '?'}", ha="center",
                        va="bottom", fontsize=7, color="white")
            else:
                ax.bar(at, top * 0.5, WIDTH * 0.9, fill=False, edgecolor=common.GRID, linestyle="--", label=label)
                ax.text(at, top * 0.25, f"{common.NOT_MEASURED}\n({d['status']})" if d["status"] != "not measured"
                        else common.NOT_MEASURED, ha="center", va="center", rotation=90, color=common.MUTED, fontsize=9)
        if row["baseline_gbps"] is not None:
            ax.hlines(row["baseline_gbps"], x - 2 * WIDTH * 0.75, x + 2 * WIDTH * 0.75, colors=common.INK,
                      linestyles="--", label="instance baseline bandwidth" if x == 0 else None)
            ax.text(x + 2 * WIDTH * 0.75, row["baseline_gbps"], f" baseline {row['baseline_gbps']:g} Gbit/s",
                    va="center", fontsize=8)
        else:
            ax.text(x, top * 0.93, "baseline not known", ha="center", fontsize=8, color=common.MUTED)
    ax.set_xticks(range(len(rows)), [r["instance_type"] for r in rows])
    ax.set_xlim(-0.7, len(rows) - 0.3)
    ax.set_ylim(0, top)
    ax.set_ylabel("Gbit/s received (iperf3)")
    ax.grid(axis="y", color=common.GRID)
    ax.set_axisbelow(True)
    fig.legend(loc="outside lower center", ncol=3, frameon=False, fontsize=9)
    return fig
