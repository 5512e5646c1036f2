"""The command line of ``burst`` and ``verify burst``, and the settings a run reads from it and
the stack's outputs (recorded first, so the analysis reads the same numbers)."""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from typing import Any

from rehearse.run.arguments import seconds
from rehearse.run.errors import RunError
from rehearse.commands.burst.kinds import DEFAULTS, DEFAULT_SEQUENCE, HYBRID_NODES, PODS_PER_HYBRID_NODE
from rehearse.models.scenarios import scenario_name


# --- arguments --------------------------------------------------------------------------------

def common_arguments(group: Any) -> None:
    """The options both commands take: how often to poll, how long costs may take."""
    group.add_argument("--interval", type=seconds(0.1), default=DEFAULTS["interval"], metavar="S",
                       help="poll the cluster every S seconds (default 0.5)")
    group.add_argument("--within", type=seconds(0.0), default=DEFAULTS["within"], metavar="S",
                       help="pods bound to hybrid nodes must carry Kyverno's cost within S "
                            "seconds (default 15; in A the run watches S seconds that nobody "
                            "writes one)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("demo 2")
    group.add_argument("--scenarios", nargs="+", type=scenario_name, metavar="X",
                       help="run these scenarios in this order, switching the stack's "
                            "burstScenario with `pulumi up` (default: the stack's current one, "
                            "no switch); the original is put back at the end, and the pods' "
                            "leftover deletion costs removed. Each switch and the restore print "
                            "`pulumi preview`'s plan first, refuse one that changes anything "
                            "but the scenario's resources, and ask before applying; needs --stack")
    group.add_argument("--yes", action="store_true",
                       help="apply each previewed switch without asking (a run whose stdin is "
                            "not a terminal needs it)")
    common_arguments(group)
    group.add_argument("--timeout", type=seconds(1.0), default=DEFAULTS["timeout"], metavar="S",
                       help="give up a wait (rollout, NodeClaims gone, 15 Ready, a scale-in) "
                            "after S seconds and record it (default 300)")
    group.add_argument("--rank-timeout", type=seconds(0.0), default=DEFAULTS["rank_timeout"],
                       metavar="S",
                       help="scenario C: wait up to S seconds for Karpenter to rank the cloud "
                            "pods before the first scale-in (it re-ranks at most once a minute; "
                            "default 150)")
    group.add_argument("--pause", type=seconds(0.0), default=DEFAULTS["pause"], metavar="S",
                       help="wait S seconds between steps, as a presenter would (default 5)")
    group.add_argument("--watch", type=seconds(0.0), default=DEFAULTS["watch"], metavar="S",
                       help="after the last scale-in, watch Karpenter for S seconds: does it "
                            "disrupt a cloud node whose pods would fit on the hybrid nodes' free "
                            "room? (NodeClaims, pods, its events; default 180, 0 skips it)")


@dataclass(frozen=True)
class Settings:
    mode: str  # "verify" | "burst"
    namespace: str
    deployment: str
    app: str
    nodepool: str
    sequence: tuple[int, ...]
    stack_scenario: str
    scenarios: tuple[str, ...]
    interval: float = DEFAULTS["interval"]
    timeout: float = DEFAULTS["timeout"]
    within: float = DEFAULTS["within"]
    rank_timeout: float = DEFAULTS["rank_timeout"]
    pause: float = DEFAULTS["pause"]
    watch: float = DEFAULTS["watch"]

    @property
    def peak(self) -> int:
        return max(self.sequence)

    @property
    def on_hybrid(self) -> int:
        return HYBRID_NODES * PODS_PER_HYBRID_NODE


def settings_from(ctx: Any, mode: str) -> Settings:
    outputs = ctx.outputs
    demo2 = outputs.optional("demo2")
    if not isinstance(demo2, dict):
        if outputs.layers and "demo" not in outputs.layers:
            raise RunError(f"{outputs.origin} has no demo layer (no output demo2): set "
                           f"upToLayer to demo and run `pulumi up`{outputs.rewrite()}")
        raise RunError(f"{outputs.origin} has no output demo2 (demo 2's names): run "
                       f"`pulumi up` with this version of the lab{outputs.rewrite()}")
    scenario = str(demo2.get("scenario") or "A").upper()
    sequence = tuple(int(n) for n in (demo2.get("scaleSequence") or DEFAULT_SEQUENCE))
    if len(sequence) < 3 or max(sequence) != sequence[1]:
        raise RunError(f"{outputs.origin}: demo2's scaleSequence {list(sequence)} is not a scale-up "
                       "followed by scale-ins (the demo guide's is 3, 15, 12, 10, 3)")
    options = ctx.options

    def number(key: str) -> float:
        value = options.get(key)
        return float(DEFAULTS[key] if value is None else value)

    asked = options.get("scenarios") if mode == "burst" else None
    scenarios = tuple(dict.fromkeys(asked)) if asked else (scenario,)
    return Settings(mode=mode, namespace=str(demo2.get("namespace") or "demo-burst"),
                    deployment=str(demo2.get("deployment") or "burst"),
                    app=str(demo2.get("app") or demo2.get("deployment") or "burst"),
                    nodepool=str(outputs.optional("karpenterNodePool") or "cloud-burst"),
                    sequence=sequence, stack_scenario=scenario, scenarios=scenarios,
                    interval=number("interval"), within=number("within"),
                    timeout=number("timeout") if mode == "burst" else DEFAULTS["timeout"],
                    rank_timeout=number("rank_timeout") if mode == "burst" else DEFAULTS["rank_timeout"],
                    pause=number("pause") if mode == "burst" else DEFAULTS["pause"],
                    watch=number("watch") if mode == "burst" else DEFAULTS["watch"])


def settings_event(settings: Settings) -> dict:
    """The settings as the run records them first (the analysis reads its numbers there)."""
    return {**asdict(settings), "sequence": list(settings.sequence),
            "scenarios": list(settings.scenarios), "peak": settings.peak,
            "on_hybrid": settings.on_hybrid}
