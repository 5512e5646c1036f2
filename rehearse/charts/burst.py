"""Demo 2's scale-in: one panel per scenario, one stacked bar per state (the start and after
each step: burst pods on hybrid nodes below, on cloud-burst nodes above), and under each
scale-in the pods it removed beside the ones the forecast named, so A, B and C compare at a
glance. A step the run did not reach is drawn as "not measured", never as an empty space."""

from __future__ import annotations

import textwrap
from typing import Any

from rehearse.charts import common

VERDICT_COLOUR = {"same": common.OK, "explained": "#b8860b", "unexplained": common.FAILED}


#: Characters a line of a picture that is only text holds (10 in at 10 pt, with a margin).
TEXT_WIDTH = 110


def draw(data: dict, title: str) -> Any:
    scenarios = data["scenarios"]
    if not any(_measured(s) for s in scenarios):
        return common.only_text(title, _why_nothing(scenarios))
    widest = max((len(s["states"]) + len(s["not_measured"]) for s in scenarios), default=1)
    fig = common.figure(max(7.0, 1.15 * widest * len(scenarios)), 5.2)
    fig.suptitle(title, x=0.01, ha="left", fontweight="bold")
    peak = max((s["hybrid"] + s["cloud"] for sc in scenarios for s in sc["states"]), default=1)
    axes = fig.subplots(1, max(1, len(scenarios)), sharey=True, squeeze=False)[0]
    scale = None
    for ax, scenario in zip(axes, scenarios):
        ax.set_title(f"Scenario {scenario['scenario']}\n{scenario['words']}", fontsize=9)
        if not _measured(scenario):
            common.not_measured(ax, scenario["why"], width=int(38 * fig.get_figwidth() / len(scenarios) / 5))
            continue
        _panel(ax, scenario, peak)
        scale = scale or ax
    # The first measured panel carries the scale: the panels left of it show only their text.
    scale.set_ylabel("burst pods")
    scale.tick_params(labelleft=True)
    handles = [common.patch(common.HYBRID, "on hybrid nodes"), common.patch(common.CLOUD, "on cloud-burst nodes")]
    fig.legend(handles=handles, loc="outside lower center", ncol=2, frameon=False,
               title="under each scale-in: pods removed and pods forecast, hybrid + cloud", title_fontsize=9)
    return fig


def _measured(scenario: dict) -> bool:
    return not scenario["refused"] and bool(scenario["states"])


def _why_nothing(scenarios: list[dict]) -> list[str]:
    """Each scenario's name and, wrapped, why it measured nothing."""
    lines = []
    for scenario in scenarios:
        lines.append(f"Scenario {scenario['scenario']} ({scenario['words']}): {common.NOT_MEASURED}")
        lines += textwrap.wrap(scenario["why"], TEXT_WIDTH, initial_indent="  ", subsequent_indent="  ")
    return lines


def _panel(ax: Any, scenario: dict, peak: int) -> None:
    labels = []
    for x, state in enumerate(scenario["states"]):
        hybrid, cloud = state["hybrid"], state["cloud"]
        ax.bar(x, hybrid, color=common.HYBRID, width=0.7)
        ax.bar(x, cloud, bottom=hybrid, color=common.CLOUD, width=0.7)
        ax.text(x, hybrid + cloud + 0.3, f"{hybrid} + {cloud}", ha="center", fontsize=9)
        label = state["label"] + ("" if state.get("done", True) else "\n(stopped)")
        if "removed" in state:
            removed = f"removed {state['removed'][0]} + {state['removed'][1]}"
            forecast = ("forecast: none" if state["forecast"] is None else
                        f"forecast {state['forecast'][0]} + {state['forecast'][1]}")
            ax.text(x, -0.2 * peak, f"{removed}\n{forecast}", ha="center", va="top", fontsize=8,
                    color=VERDICT_COLOUR.get(state.get("verdict") or "", common.MUTED))
        labels.append(label)
    start = len(scenario["states"])
    for i, step in enumerate(scenario["not_measured"]):
        x = start + i
        ax.bar(x, peak, width=0.7, fill=False, edgecolor=common.GRID, linestyle="--")
        ax.text(x, peak / 2, common.NOT_MEASURED, rotation=90, ha="center", va="center", color=common.MUTED)
        labels.append(step)
    if scenario["not_measured"]:
        ax.text(start - 0.4, peak * 1.12, scenario["why"], fontsize=8, color=common.MUTED, va="bottom")
    ax.set_xticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(0, peak * 1.25)
    ax.yaxis.set_major_locator(common.whole_numbers())
    ax.grid(axis="y", color=common.GRID)
    ax.set_axisbelow(True)
