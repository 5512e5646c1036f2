"""Demo 3: how long the cloud client's completions took (each call's time, p50 and p95 marked,
failed calls apart) and the vLLM image pull beside the demo guide's 4 min 28 s."""

from __future__ import annotations

from typing import Any

from rehearse.charts import common


def draw(data: dict, title: str) -> Any:
    fig = common.figure(11, 4.2)
    fig.suptitle(title, x=0.01, ha="left", fontweight="bold")
    calls, pull = fig.subplots(1, 2, width_ratios=[1.8, 1.2])
    _calls(calls, data)
    _pull(pull, data)
    return fig


def _calls(ax: Any, data: dict) -> None:
    ok = sorted(seconds for seconds, good in data["calls"] if good)
    failed = [seconds for seconds, good in data["calls"] if not good]
    # A failed call has no time to place among the others: it is counted in the title, not
    # drawn beside some successful call's bar.
    ax.set_title(f"the cloud client's calls: {len(ok)} ok, {len(failed)} failed"
                 + (" (not in the histogram)" if failed else ""), loc="left", fontsize=10)
    if not ok:
        common.not_measured(ax, "no successful call in the window")
        return
    counts, _, _ = ax.hist(ok, bins=min(20, max(5, len(ok))), color=common.HYBRID, alpha=0.8, label="ok calls")
    peak = max(counts)
    # p50 and p95 named above the tallest bar, p50 (the left one) a step higher, each line
    # stopping at its own name: p95's line never reaches p50's name.
    marks = [(name, value, style) for name, value, style in (("p50", data["p50"], "--"), ("p95", data["p95"], ":"))
             if value is not None]
    for step, (name, value, style) in enumerate(sorted(marks, key=lambda m: m[1])):
        level = peak * (1.45 - 0.2 * step)
        ax.plot([value, value], [0, level], color=common.INK, linestyle=style, linewidth=1.5)
        ax.annotate(f"{name} {value:g} s", (value, level), xytext=(4, 0), textcoords="offset points",
                    va="center", fontsize=9, fontweight="bold")
    ax.set_ylim(0, peak * 1.6)
    ax.set_xlabel("seconds per completion, by the client's clock")
    ax.set_ylabel("calls")
    ax.yaxis.set_major_locator(common.whole_numbers())
    ax.grid(axis="y", color=common.GRID)
    ax.set_axisbelow(True)


def _pull(ax: Any, data: dict) -> None:
    """This run's pull as a bar, the demo guide's as a line above it: one bar for one pull."""
    ax.set_title("vLLM image pull (kubelet)", loc="left", fontsize=10)
    guide, measured = data["guide_pull_seconds"], data["pull_seconds"]
    if measured is None:
        ax.text(0, 0, f"this run: {common.NOT_MEASURED}\n(no pull timed: cached, or not pulled yet)",
                va="center", fontsize=9, color=common.MUTED)
    else:
        ax.barh(0, measured, height=0.5, color=common.HYBRID)
        ax.annotate(f"this run: {_minutes(measured)} ({measured:g} s)", (measured, 0), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=9)
    # The guide's line stops above the bar, its name at its top: the bar's label, level with
    # the bar, never meets either, whichever pull is longer.
    ax.plot([guide, guide], [0.4, 1.1], color=common.INK, linestyle="--", linewidth=1.5)
    ax.annotate(f"demo guide: {_minutes(guide)} ({guide:g} s)", (guide, 1.1), xytext=(4, 0), textcoords="offset points",
                va="center", fontsize=9)
    ax.set_yticks([])
    ax.spines["left"].set_visible(False)
    ax.set_ylim(-0.5, 1.4)
    ax.set_xlim(0, max(guide, measured or 0) * 2.0)
    ax.set_xlabel("seconds")


def _minutes(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"
