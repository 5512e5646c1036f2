"""Which node requirements Karpenter's scheduler tries for a pending pod, one set after another:
how it reads a pod's node affinity, which is not the kube-scheduler's way.

The kube-scheduler ORs a pod's ``nodeSelectorTerms`` at once. Karpenter (sigs.k8s.io/karpenter
v1.15.0) takes the pod's ``nodeSelector``, its heaviest preferred node-affinity term and only
the FIRST required term as its requirements (``pkg/scheduling/requirements.go``,
``newPodRequirements``). When the pod fits on no existing node, in-flight NodeClaim or new
NodeClaim with them, it relaxes and tries again (``pkg/controllers/provisioning/scheduling/
scheduler.go``, ``trySchedule``), in the order of ``preferences.go`` ``Relax``: first it drops
the first required term while more than one is left (``removeRequiredNodeAffinityTerm``), then
preferred pod (anti-)affinity terms (no node requirement), then the heaviest preferred
node-affinity term (``removePreferredNodeAffinityTerm``), then ScheduleAnyway spreads and, if
enabled, PreferNoSchedule taints (neither a node-label requirement).

So a required term is tried only together with the preference while an earlier term is still
there, and a dropped term never comes back: with terms ``[pool, hybrid]`` and a hybrid
preference, the first try asks for both (no node is both), the pool's term is dropped, and
Karpenter never launches a pool node for the pod. Demo 2's burst Deployment puts hybrid's term
first for this reason (components/demos.py ``burst_affinity``).

Not here: Karpenter's ``--preference-policy=Ignore`` (the lab keeps the default, Respect), and
the provisioner's refusal of restricted label domains (``provisioner.go`` ``Validate``); a
term with ``matchFields`` makes it refuse the pod (``validateNodeSelectorTerm``), modelled."""

from __future__ import annotations

from typing import Any, Mapping, Optional

Expressions = list[Mapping[str, Any]]


def _node_affinity(affinity: Mapping[str, Any]) -> Mapping[str, Any]:
    return affinity.get("nodeAffinity") or {}


def required_terms(affinity: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    required = _node_affinity(affinity).get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


def requirement_steps(affinity: Mapping[str, Any]) -> Optional[list[Expressions]]:
    """The label expressions Karpenter requires of a node at each try, in order (the pod's
    ``nodeSelector`` comes on top of every one); None when Karpenter refuses the pod outright
    (a required term with ``matchFields``)."""
    terms = required_terms(affinity)
    if any(term.get("matchFields") for term in terms):
        return None
    required = [list(term.get("matchExpressions") or []) for term in terms] or [[]]
    preferred = sorted(_node_affinity(affinity).get("preferredDuringSchedulingIgnoredDuringExecution")
                       or [], key=lambda p: -p["weight"])
    preferences = [list(p["preference"].get("matchExpressions") or []) for p in preferred]
    heaviest = preferences[0] if preferences else []
    # Every required term in turn, each with the heaviest preference...
    steps = [[*term, *heaviest] for term in required]
    # ...then the last term with each lighter preference, and at last alone.
    steps += [[*required[-1], *p] for p in preferences[1:]]
    if preferences:
        steps.append(list(required[-1]))
    return steps
