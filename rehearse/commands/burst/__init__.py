"""Demo 2's scale sequence (`python -m rehearse burst`, its face command.py) and its checks
alone (`verify burst`, verify.py)."""
from __future__ import annotations

from typing import Any

# The command's face is command.py (what rehearse.cli reads, and the help); the package keeps
# what the face and the tests reach it by; its modules are the concerns:
#   names          what the lab deploys, the event kinds and the check names
#   settings       the command line and the run's settings
#   reading        reading the cluster: the summaries recorded, and Cluster (collect)
#   preconditions  the preconditions collected, and judging them (pure)
#   capacity       the NodePool and the capacity arithmetic (pure)
#   switching      switching scenarios through rehearse.switch (collect)
#   run            the collector: the scenarios and the scale sequence of each
#   analysis       the scale-in steps, the scale-up measurements, each scenario's result (pure)
#   watch          the consolidation watch's answer (pure)
#   report         report.md and report.json (pure)
from rehearse.commands.burst import collect as run
from rehearse.commands.burst.scalein import compare  # noqa: F401
from rehearse.commands.burst.capacity import capacity_check  # noqa: F401
from rehearse.commands.burst.kinds import *  # noqa: F401,F403 the vocabulary tests and report readers use
from rehearse.commands.burst.reading import (cost_of, feature_gates, image_version,  # noqa: F401
                                    neighbour_summary, node_summary)
from rehearse.commands.burst.report import analyse  # noqa: F401
from rehearse.commands.burst.collect import collect_verify  # noqa: F401
from rehearse.commands.burst.settings import add_arguments, add_verify_arguments  # noqa: F401
from rehearse.commands.burst.switching import SCENARIO_SCOPE, clear_costs  # noqa: F401
from rehearse.commands.burst.watch import hybrid_room  # noqa: F401
# The seams a test replaces (``mock.patch.object(burst, "open_stack", ...)``: a stand-in stack;
# ``require_confirmation``: a terminal): ``collect`` looks them up here each time it runs and
# hands them to the collector, so the collector's modules never import this package back.
from rehearse.lab.stack import open_stack
from rehearse.commands.burst.settings import settings_from
from rehearse.lab.switch import require_confirmation, require_stack


def check_inputs(given: Any) -> None:
    """Before a run starts (rehearse.inputs): demo 2's names, and with --scenarios that
    switch a stack named and someone to confirm each switch."""
    settings = settings_from(given, "burst")
    if any(x != settings.stack_scenario for x in settings.scenarios):
        require_stack(given, "burst --scenarios")
        require_confirmation(given, "burst --scenarios")


def check_verify_inputs(given: Any) -> None:
    settings_from(given, "verify")


def collect(ctx: Any, record: Any) -> None:
    run.collect(ctx, record, lambda name, work_dir: open_stack(name, work_dir),
                lambda ctx, what: require_confirmation(ctx, what))
