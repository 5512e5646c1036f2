"""Demo 2 as numbers: scale the ``burst`` Deployment 3 -> 15 -> 12 -> 10 -> 3 under scenarios
A, B and C (docs/demo-guide.md#demo-2-bursting-and-scale-in) and measure which pods each scale-in removes, beside what
``rehearse.predict`` forecast and what the scenario's rule says (docs/scale-in.md#what-each-scenario-should-show).

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

# The command's face, what rehearse.cli reads (a run command, rehearse.run.command): its
# docstring is its --help description. ``collect`` and ``check_inputs`` stay in the package,
# where the seams a test replaces (open_stack, require_confirmation) are looked up.
from rehearse.commands.burst import TITLE, add_arguments, analyse, check_inputs, collect

__all__ = ["TITLE", "add_arguments", "analyse", "check_inputs", "collect"]
