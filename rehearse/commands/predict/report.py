"""What `python -m rehearse predict` prints: a forecast as a table a presenter reads, or
several ReplicaSets' forecasts as one JSON document."""

from __future__ import annotations

from typing import Any

from rehearse.models.ranking import RULES, Forecast


def merge(results: list[tuple[str, int, Forecast]], where: str, replicas: int) -> dict[str, Any]:
    """The forecasts of several ReplicaSets as one JSON document: each under ``replica_sets``,
    and their victims, open pods and notes together at the top, as a single forecast has them."""
    parts = [{"source": source, "size": size, **r.to_json()} for source, size, r in results]
    split: dict[str, int] = {}
    for part in parts:
        for rule, count in part["split"].items():
            split[rule] = split.get(rule, 0) + count
    return {"source": f"{where} ({len(parts)} ReplicaSets)",
            "replicas_before": sum(p["replicas_before"] for p in parts), "replicas_after": replicas,
            "now": parts[0]["now"] if parts else "", "window": parts[0]["window"] if parts else "",
            "sorted": all(p["sorted"] for p in parts), "decided": all(p["decided"] for p in parts),
            "delete": [v for p in parts for v in p["delete"]],
            "order": [n for p in parts for n in p["order"]],
            "undecided": [n for p in parts for n in p["undecided"]],
            "clock_undecided": [n for p in parts for n in p["clock_undecided"]],
            "split": split, "notes": [n for p in parts for n in p["notes"]],
            "replica_sets": parts}


def render(result: Forecast, source: str = "") -> str:
    """The forecast as a table a presenter can read."""
    lines = [f"Scale-in {result.replicas_before} -> {result.replicas_after}"
             + (f" of {source}" if source else "") + f", controller clock {result.now}"]
    if not result.delete:
        lines.append("Nothing is deleted.")
    else:
        versus = {v.versus for v in result.delete if v.versus and not v.tie}
        against = f", each against the first pod kept ({next(iter(versus))})" if len(versus) == 1 else ""
        header = ("#", "POD", "NODE", "COST", "RANK", "DECIDED BY")
        rows = [(str(i), v.name, v.node or "(none)", str(v.cost), str(v.rank),
                 ("RANDOM: " if v.tie else "CLOCK: " if v.clock else
                  (f"rule {v.rule_number}: " if v.rule_number else "")) + v.rule)
                for i, v in enumerate(result.delete, 1)]
        widths = [max(len(r[c]) for r in rows + [header]) for c in range(5)]
        lines.append(f"Deleted, in order, {len(result.delete)} of {result.replicas_before}{against}:")
        for row in [header] + rows:
            lines.append("  " + "  ".join(cell.ljust(widths[c]) for c, cell in enumerate(row[:5]))
                         + "  " + row[5])
    if result.split:
        pairs = sum(result.split.values())
        parts = [f"{count} by rule {rule} ({RULES[rule]})" if rule else f"{count} by no rule (random)"
                 for rule, count in sorted(result.split.items(), key=lambda item: (-item[1], item[0]))]
        lines.append(f"What separates deleted from kept ({pairs} pairs): {'; '.join(parts)}")
    kept = result.order[len(result.delete):] if result.sorted else []
    if kept:
        lines.append(f"Kept ({len(kept)}), next to go first: {', '.join(kept)}")
    if result.undecided:
        lines.append(f"Could go instead (random): {', '.join(result.undecided)}")
    if result.clock_undecided:
        lines.append(f"Undecided by the controller's clock ({result.window}): "
                     f"{', '.join(result.clock_undecided)}")
    lines += [f"Note: {note}" for note in result.notes]
    return "\n".join(lines)
