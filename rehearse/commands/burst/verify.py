"""Check that demo 2 is ready, minutes before the talk, changing nothing: the stack's scenario in
place (B and C: Kyverno's admission and background controllers may get nodes, Kyverno sees pod
bindings, the policy is Ready, pods bound to hybrid nodes carry pod-deletion-cost "1"; C: the
running Karpenter has PodDeletionCostManagement on, knows it (1.15.0 or later) and may patch
pods, and the NodePool's budget is 100%; A: nobody writes costs), the NodePool's CPU limit and
budget, and the capacity arithmetic (8 burst pods fit on the two hybrid nodes, a 9th does not).
A scenario that is not in place is reported as not in place, with the reason.

The collector and the analysis are rehearse.burst's (the same checks `rehearse burst` makes
before it measures).
"""

from __future__ import annotations

from rehearse.commands import burst

TITLE = burst.VERIFY_TITLE
add_arguments = burst.add_verify_arguments
collect = burst.collect_verify
check_inputs = burst.check_verify_inputs
analyse = burst.analyse
