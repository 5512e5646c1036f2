"""What the pods already on a node forbid another pod, as kube-scheduler's filters judge it:

- required pod anti-affinity (``pkg/scheduler/framework/plugins/interpodaffinity/
  filtering.go``): a pod may not join a topology domain (the nodes sharing the term's
  ``topologyKey`` value) that holds a pod its term's label selector matches in the term's
  namespaces — nor one that holds a pod whose own required anti-affinity term matches it (the
  rule is symmetric). A node without the topology label is no domain, and refuses no one.
- host ports (``pkg/scheduler/framework/plugins/nodeports``, ``pkg/scheduler/util``
  ``GetHostPorts``): two pods on one node may not bind the same host port and protocol. A
  host-network pod's container ports are host ports (the API server defaults ``hostPort`` to
  ``containerPort``); a sidecar's count, other init containers' do not. Every host IP is
  taken as 0.0.0.0 (no pod of the lab names one), which conflicts with any.

``offline/scheduling.py`` places pods by them; tests/test_real_placement.py holds them to the
real scheduler. Required pod affinity (the opposite wish) is not modelled: no pod of the lab
asks for it; nor a non-empty namespaceSelector (read as the term's namespaces alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence


@dataclass(frozen=True)
class PodFacts:
    """What the rules read of a pod: its labels, namespace, affinity and host ports."""
    labels: Mapping[str, str]
    namespace: str
    affinity: Mapping[str, Any]
    host_ports: frozenset[tuple[str, int]] = frozenset()


def host_ports(pod: Mapping[str, Any]) -> frozenset[tuple[str, int]]:
    """(protocol, port) of every host port a pod spec binds."""
    containers = [*(c for c in pod.get("initContainers") or []
                    if c.get("restartPolicy") == "Always"), *(pod.get("containers") or [])]
    found = set()
    for c in containers:
        for p in c.get("ports") or []:
            port = p.get("hostPort") or (p.get("containerPort") if pod.get("hostNetwork") else 0)
            if port:
                found.add((p.get("protocol") or "TCP", int(port)))
    return frozenset(found)


def host_port_taken(pod: PodFacts, on_node: Iterable[PodFacts]) -> bool:
    return any(pod.host_ports & other.host_ports for other in on_node)


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector against labels (an empty selector matches everything)."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != str(value):
            return False
    for e in selector.get("matchExpressions") or []:
        key, operator, values = e["key"], e["operator"], [str(v) for v in e.get("values") or []]
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def anti_affinity_terms(affinity: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return ((affinity.get("podAntiAffinity") or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def _term_matches(term: Mapping[str, Any], owner: PodFacts, other: PodFacts) -> bool:
    """Whether ``owner``'s term selects ``other``: its namespaces (the owner's by default; an
    empty namespaceSelector means all) and its label selector. A term without a label selector
    selects no pod."""
    if "namespaceSelector" in term and not term["namespaceSelector"]:
        in_scope = True
    else:
        in_scope = other.namespace in (term.get("namespaces") or [owner.namespace])
    selector = term.get("labelSelector")
    return in_scope and selector is not None and selector_matches(selector, other.labels)


def refused_by_anti_affinity(pod: PodFacts, node_labels: Mapping[str, str],
                             placed: Iterable[tuple[PodFacts, Mapping[str, str]]]) -> bool:
    """Whether ``pod`` may not run on a node with ``node_labels``, given the pods ``placed``
    (each with its node's labels)."""
    placed = list(placed)
    for term in anti_affinity_terms(pod.affinity):
        key = term["topologyKey"]
        if key not in node_labels:
            continue
        if any(labels.get(key) == node_labels[key] and _term_matches(term, pod, other)
               for other, labels in placed):
            return True
    for other, labels in placed:
        for term in anti_affinity_terms(other.affinity):
            key = term["topologyKey"]
            if key in node_labels and labels.get(key) == node_labels[key] and \
                    _term_matches(term, other, pod):
                return True
    return False
