"""What a ``verify gateway`` run observed, read once from its events and indexed for the
checks (pure: replays read the same events the same way)."""

from __future__ import annotations

from typing import Optional

from rehearse.lab.gateway import GATEWAY_NODE_SELECTOR, GATEWAY_POD_SELECTOR
from rehearse.run.record import RUN_STARTED, every, first
from rehearse.commands.verify_gateway.kinds import (
    AGENT, CILIUM_CONFIG, HEALTHZ, INPUTS, INSTANCE, LEASE, METRICS, NODES, PODS, PROBER_LOG,
    PROBER_PODS, ROUTE_TABLE, VTEP, ZONE_LABELS)


def parse_selector(text: str) -> dict[str, str]:
    """``key=value`` -> ``{key: value}`` (the one-label selectors the stack names)."""
    key, _, value = text.partition("=")
    return {key.strip(): value.strip()}


def labels_match(labels: Optional[dict], selector: dict[str, str]) -> bool:
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


class Lab:
    """The recorded observations, indexed."""

    def __init__(self, events: list[dict]):
        self.events = events
        self.started = first(events, RUN_STARTED) or {}
        self.inputs = first(events, INPUTS) or {}
        self.nodes = {n["name"]: n for n in (first(events, NODES) or {}).get("items", [])}
        self.pods_event = first(events, PODS) or {}
        self.pods = list(self.pods_event.get("items", []))
        self.lease = first(events, LEASE)
        self.healthz = {e["pod"]: e for e in every(events, HEALTHZ)}
        self.metrics = {e["pod"]: e for e in every(events, METRICS)}
        self.tables = list(every(events, ROUTE_TABLE))
        self.instances = {e["node"]: e for e in every(events, INSTANCE)}
        self.vtep = first(events, VTEP)
        self.cilium = first(events, CILIUM_CONFIG)
        self.agent = first(events, AGENT)
        self.prober_pods = {e["direction"]: e for e in every(events, PROBER_PODS)}
        self.prober_logs: dict[str, list[dict]] = {}
        for e in every(events, PROBER_LOG):
            self.prober_logs.setdefault(e["direction"], []).append(e)
        self.ns = self.inputs.get("namespace", "eks-hybrid-nodes-gateway")
        self.region = self.inputs.get("region", "<region>")
        self.selector = self.inputs.get("podSelector", GATEWAY_POD_SELECTOR)
        self.node_selector = self.inputs.get("nodeSelector", GATEWAY_NODE_SELECTOR)

    def zone(self, node: Optional[str]) -> Optional[str]:
        labels = (self.nodes.get(node or "") or {}).get("labels") or {}
        return next((labels[k] for k in ZONE_LABELS if labels.get(k)), None)

    def is_gateway_node(self, node: Optional[str]) -> bool:
        labels = (self.nodes.get(node or "") or {}).get("labels") or {}
        return labels_match(labels, parse_selector(self.node_selector))

    def live_pods_on(self, node: str) -> list[dict]:
        return [p for p in self.pods if p["nodeName"] == node and p["phase"] == "Running"
                and not p.get("deletionTimestamp")]

    def primary_eni(self, node: Optional[str]) -> Optional[str]:
        found = self.instances.get(node or "")
        if not found or not found.get("found"):
            return None
        return next((i["id"] for i in found.get("interfaces", []) if i.get("deviceIndex") == 0), None)

    def eni_owner(self, eni: Optional[str]) -> Optional[str]:
        for node, found in self.instances.items():
            if any(i["id"] == eni for i in found.get("interfaces") or []):
                return node
        return None
