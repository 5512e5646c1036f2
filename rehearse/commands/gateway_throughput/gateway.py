"""The gateway as `python -m rehearse gateway-throughput` sees it: its nodes' instance type and
its leader (read_gateway), the MTU in force (read_mtu), and whether a switch to an instance type
has settled (settled, which the analysis judges by too)."""

from __future__ import annotations

from typing import Any

from rehearse.run.errors import first_line

INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
#: rehearse.lab.leader.GATEWAY_NODE_LABEL (the gateway node group's label).
GATEWAY_NODE_LABEL = "hybrid-gateway-node"
#: components.cilium.TRANSIT_SAFE_MTU (not imported: it would import Pulumi).
LAB_MTU = 8450
TGW_MAX_PACKET = 8500
#: After a switch: the node group's old nodes leave and the Lease moves to a new node.
GATEWAY_SETTLE_SECONDS = 600
#: Baseline network bandwidth (Gbit/s) of the gateway instance types the lab compares, from
#: AWS's instance-type network specifications (docs/networking.md#gateway-instance-bandwidth):
#: these sizes burst above it on network I/O credits, for minutes.
BASELINE_GBPS = {"m6i.large": 0.781, "m6in.large": 3.125, "c6in.xlarge": 6.25}


def read_mtu(ctx: Any) -> dict:
    from lightkube.resources.core_v1 import ConfigMap

    try:
        cm = ctx.kube.client.get(ConfigMap, "cilium-config", namespace="kube-system")
    except Exception as error:  # noqa: BLE001 not found, or not allowed to read it
        return {"mtu": LAB_MTU, "source": "configured, not observed",
                "why": first_line(error)}
    value = (cm.data or {}).get("mtu")
    if value:
        return {"mtu": int(value), "source": "cilium-config ConfigMap (kube-system), key mtu"}
    return {"mtu": LAB_MTU, "source": "configured, not observed",
            "why": "cilium-config has no mtu key"}


def read_gateway(ctx: Any) -> dict:
    from lightkube.resources.core_v1 import Node

    from rehearse.lab import leader

    nodes = []
    for node in ctx.kube.client.list(Node):
        labels = node.metadata.labels or {}
        if labels.get(GATEWAY_NODE_LABEL) == "true":
            nodes.append({"name": node.metadata.name,
                          "instance_type": labels.get(INSTANCE_TYPE_LABEL)})
    found: dict[str, Any] = {"nodes": sorted(nodes, key=lambda n: n["name"])}
    namespace = ctx.outputs.optional("gatewayNamespace") or "eks-hybrid-nodes-gateway"
    lease_name = ctx.outputs.optional("gatewayLeaseName") or "hybrid-gateway-leader"
    try:
        lease = leader.read_lease(ctx.kube, namespace, lease_name)
        host = lease.host if lease else None
        node = leader.find_node(ctx.kube, host) if host else None
    except Exception as error:  # noqa: BLE001 recorded, the measurement goes on
        found.update(leader=None, leader_why=first_line(error))
        return found
    if node is None:
        found.update(leader=None, holder=lease.holder if lease else None,
                     leader_why="no Lease" if lease is None else
                     f"no node for the holder {lease.holder}")
    else:
        labels = node.metadata.labels or {}
        found.update(leader=node.metadata.name, holder=lease.holder,
                     leader_instance_type=labels.get(INSTANCE_TYPE_LABEL))
    return found


def settled(gateway: dict, instance_type: str) -> bool:
    nodes = gateway.get("nodes") or []
    return (bool(nodes) and all(n.get("instance_type") == instance_type for n in nodes)
            and gateway.get("leader_instance_type") == instance_type)
