"""The cluster's nodes as the rehearsal tools record them: a small view of each Node, the same
for every command that records ``kube.nodes``, so one report's reading of a node (its zone,
its address, whether it is hybrid or a gateway node) holds in another's."""

from __future__ import annotations


def node_view(node: dict) -> dict:
    """What is kept of a Node (its ``to_dict()``): name, labels, providerID (the EC2 instance),
    InternalIP and its Ready condition's status."""
    meta, spec, status = node.get("metadata", {}), node.get("spec") or {}, node.get("status") or {}
    labels = meta.get("labels") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return {"name": meta.get("name"), "labels": labels, "providerID": spec.get("providerID"),
            "internalIP": addresses.get("InternalIP"), "ready": ready}
