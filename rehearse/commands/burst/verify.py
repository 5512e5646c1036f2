"""Check that demo 2 is ready, minutes before the talk, changing nothing: the stack's scenario in
place (B and C: Kyverno's admission and background controllers may get nodes, Kyverno sees pod
bindings, the policy is Ready, pods bound to hybrid nodes carry pod-deletion-cost "1"; C: the
running Karpenter has PodDeletionCostManagement on, knows it (1.15.0 or later) and may patch
pods, and the NodePool's budget is 100%; A: nobody writes costs), the NodePool's CPU limit and
budget, and the capacity arithmetic (8 burst pods fit on the two hybrid nodes, a 9th does not).
A scenario that is not in place is reported as not in place, with the reason.

The checks and the analysis are `rehearse burst`'s (the same checks it makes before it
measures).
"""

from __future__ import annotations

import argparse
from typing import Any

from rehearse.commands.burst.kinds import PRECONDITIONS, SETTINGS, VERIFY_TITLE as TITLE
from rehearse.commands.burst.preconditions import observe_preconditions
from rehearse.commands.burst.reading import Cluster
from rehearse.commands.burst.report import analyse
from rehearse.commands.burst.settings import common_arguments, settings_event, settings_from

__all__ = ["TITLE", "add_arguments", "analyse", "check_inputs", "collect"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common_arguments(parser.add_argument_group("demo 2"))


def check_inputs(given: Any) -> None:
    """Before a run starts (rehearse.run.inputs): demo 2's names in the stack's outputs."""
    settings_from(given, "verify")


def collect(ctx: Any, record: Any) -> None:
    """The stack's scenario, observed once as ``burst`` observes it before measuring (its pods
    left as they are: no restart, no waiting the whole window in A)."""
    settings = settings_from(ctx, "verify")
    record(SETTINGS, **settings_event(settings))
    cluster = Cluster(ctx, settings)
    observed = observe_preconditions(ctx, cluster, settings.stack_scenario, "verify",
                                     watch_whole_window=False)
    record(PRECONDITIONS, **observed)
