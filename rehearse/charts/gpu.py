"""Demo 3: how long the cloud client's completions took (each call's time, p50 and p95 marked,
failed calls apart) and the vLLM image pull beside the demo guide's 4 min 28 s."""

from __future__ import annotations

from typing import Any

from rehearse.charts import common


def draw(data: dict, title: str) -> Any:
    fig = common.figure(11, 4.2)
    fig.suptitle(title, x=0.01, ha="left", fontweight="bold")
    calls, pull = fig.subplots(1, 2, width_ratios=[2.2, 1])
    _calls(calls, data)
    _pull(pull, data)
    return fig


def _calls(ax: Any, data: dict) -> None:
    ok = sorted(seconds for seconds, good in data["calls"] if good)
    failed = [seconds for seconds, good in data["calls"] if not good]
    ax.set_title(f"the cloud client's calls: {len(ok)} ok, {len(failed)} failed", loc="left", fontsize=10)
    if not ok:
        common.not_measured(ax, "no successful call in the window")
        return
    ax.hist(ok, bins=min(20, max(5, len(ok))), color=common.HYBRID, alpha=0.8, label="ok calls")
    # The labels at two heights: p50 and p95 are often close.
    for name, value, style, height in (("p50", data["p50"], "--", 0.97), ("p95", data["p95"], ":", 0.87)):
        if value is None:
            continue
        ax.axvline(value, color=common.INK, linestyle=style, linewidth=1.5)
        ax.text(value, height, f" {name} {value:g} s", transform=ax.get_xaxis_transform(), va="top",
                fontsize=9, fontweight="bold")
    if failed:
        ax.text(0.99, 0.6, f"{len(failed)} failed call(s): not in the distribution",
                transform=ax.transAxes, ha="right", fontsize=8, color=common.FAILED)
    ax.set_xlabel("seconds per completion, by the client's clock")
    ax.set_ylabel("calls")
    ax.yaxis.set_major_locator(common.whole_numbers())
    ax.grid(axis="y", color=common.GRID)
    ax.set_axisbelow(True)


def _pull(ax: Any, data: dict) -> None:
    ax.set_title("vLLM image pull (kubelet)", loc="left", fontsize=10)
    guide, measured = data["guide_pull_seconds"], data["pull_seconds"]
    labels = ["demo guide", "this run"]
    ax.barh(0, guide, color=common.MUTED)
    ax.text(guide, 0, f" 4 min 28 s ({guide} s)", va="center", fontsize=9)
    if measured is None:
        ax.text(0, 1, f" {common.NOT_MEASURED} (no pull timed: cached, or not pulled yet)", va="center",
                fontsize=9, color=common.MUTED)
    else:
        ax.barh(1, measured, color=common.HYBRID)
        minutes, rest = divmod(measured, 60)
        ax.text(measured, 1, f" {int(minutes)} min {rest:.0f} s ({measured:g} s)", va="center", fontsize=9)
    ax.set_yticks([0, 1], labels)
    ax.set_xlim(0, max(guide, measured or 0) * 1.6)
    ax.set_xlabel("seconds")
    ax.invert_yaxis()
