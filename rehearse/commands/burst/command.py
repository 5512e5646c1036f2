"""Demo 2 as numbers: scale the ``burst`` Deployment 3 -> 15 -> 12 -> 10 -> 3 under scenarios
A, B and C (docs/demo-guide.md#demo-2-bursting-and-scale-in) and measure which pods each scale-in removes, beside what
``rehearse predict`` forecasts and what the scenario's rule says (docs/scale-in.md#what-each-scenario-should-show).

For each scenario asked (``--scenarios A B C``; default the stack's current one) the run
switches the stack's ``burstScenario`` through the Pulumi Automation API and runs ``pulumi up``
(only when it differs), restarts the Deployment at 3 replicas (annotations outlive a scenario),
waits for the cloud-burst NodeClaims of a previous run to go, and proves the scenario is in
place — B and C: Kyverno's admission and background controllers may ``get nodes``
(SubjectAccessReview), Kyverno sees pod bindings, the policy is Ready and the pods bound to
hybrid nodes carry ``pod-deletion-cost: "1"`` within seconds; C: the running Karpenter has
``PodDeletionCostManagement`` on, is 1.15.0 or later and may patch pods, and the NodePool's
budget is 100%; A: nobody writes costs. A scenario that is not in place is refused, not
measured. Then the demo guide's sequence: the time from the scale to 15 until the first NodeClaim
exists and until all 15 pods are Ready (cluster clocks, beside the demo guide's 1-2 s and 37-38 s);
before each scale-in a snapshot and the forecast; after it the pods removed (hybrid or cloud,
node, cost), Karpenter's evictions (``DisruptionTarget``) told apart from scale-in victims. After
the last scale-in the consolidation watch (``--watch S``, default 180, 0 skips it) asks the demo guide's
open question (docs/demo-guide.md#open-questions): does Karpenter disrupt a cloud node whose burst pods would fit in the hybrid
nodes' free room (not under the lab's WhenEmpty; under WhenEmptyOrUnderutilized the real one does,
docs/karpenter.md#consolidation-and-the-hybrid-nodes)? It records every NodeClaim and node that goes,
every burst pod that goes or appears and where, and Karpenter's events (``DisruptionTerminating``,
``DisruptionBlocked``, ``Unconsolidatable``...), and answers per scenario with that evidence. The
stack's original scenario is put back at the end, also on an interrupt or a failure.

``verify burst`` is the preconditions alone, quick enough for the minutes before the talk: the
stack's scenario in place (without restarting anything), the NodePool's limits and budget, and
the capacity arithmetic (8 burst pods fit on the two hybrid nodes, a 9th does not).

The collector records what it saw (events.jsonl); the analysis is pure over those events, so
``python -m rehearse report <folder>`` gives the same report, tables and chart again.
"""

from __future__ import annotations

from typing import Any

from rehearse.commands.burst import collect as collector
from rehearse.commands.burst.kinds import TITLE
from rehearse.commands.burst.report import analyse
from rehearse.commands.burst.settings import add_arguments, settings_from
# The seams a test replaces (``mock.patch.object(command, "open_stack", ...)``: a stand-in
# stack; ``require_confirmation``: a terminal). They are read from this module each time a run
# starts and handed to the collector, so that a test puts them in one place.
from rehearse.lab.stack import open_stack
from rehearse.lab.switch import require_confirmation, require_stack

__all__ = ["TITLE", "add_arguments", "analyse", "check_inputs", "collect"]


def check_inputs(given: Any) -> None:
    """Before a run starts (rehearse.run.inputs): demo 2's names, and with --scenarios that
    switch a stack named and someone to confirm each switch."""
    settings = settings_from(given, "burst")
    if any(x != settings.stack_scenario for x in settings.scenarios):
        require_stack(given, "burst --scenarios")
        require_confirmation(given, "burst --scenarios")


def collect(ctx: Any, record: Any) -> None:
    collector.collect(ctx, record, lambda name, work_dir: open_stack(name, work_dir),
                      lambda ctx, what: require_confirmation(ctx, what))
