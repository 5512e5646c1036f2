"""The EKS Hybrid Nodes gateway's leader, resolved exactly: Lease holder -> node -> pod -> the
node's primary ENI, and what the leader writes (the pod-CIDR routes, the VTEP config).

The Lease ``hybrid-gateway-leader`` names its holder ``<hostname>_<uuid>`` (controller-runtime's
identity); the gateway pods use the host network, so the hostname is the node's, never a pod's
(docs/gateway.md#the-lease). Passing the holder to ``kubectl delete pod`` deletes nothing; matching it
with a prefix (``ip-10-0-1-1`` is a prefix of ``ip-10-0-1-10``) can pick the wrong node. Here the
part before the last ``_`` must equal the node's name (or its ``kubernetes.io/hostname`` label),
and exactly one live gateway pod must run on that node.

The leader writes ``<hybrid pod CIDR> -> <its instance's primary ENI>`` (device index 0) into each
route table, and ``CiliumVTEPConfig/hybrid-gateway`` with ``tunnelEndpoint`` = its node IP.

A lab reader: ``failover`` resolves the leader with it and polls what the leader writes;
``verify gateway`` reads the holder the same way (``holder_host``), so both name the same node."""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from rehearse.run.record import iso
# Read through this module too (gateway-throughput picks gateway nodes by GATEWAY_NODE_LABEL).
from rehearse.lab.gateway import GATEWAY_NAME, GATEWAY_NODE_LABEL, VTEP_CONFIG

VTEP_CONFIG_PATH = f"/apis/cilium.io/v2/ciliumvtepconfigs/{VTEP_CONFIG}"
_HOSTNAME_LABEL = "kubernetes.io/hostname"


def holder_host(holder: Optional[str]) -> Optional[str]:
    """``<hostname>_<uuid>`` -> ``<hostname>`` (hostnames have no ``_``; the uuid has none)."""
    if not holder:
        return None
    return holder.rsplit("_", 1)[0] if "_" in holder else holder


def not_found(error: BaseException) -> bool:
    """A 404 from the API server: lightkube's ApiError, or the HTTP error it passes through when
    the answer's content type is not exactly ``application/json``."""
    from lightkube import ApiError

    if isinstance(error, ApiError):
        return getattr(error.status, "code", None) == 404
    response = getattr(error, "response", None)
    return type(error).__name__ == "HTTPStatusError" and getattr(response, "status_code", 0) == 404


def _time(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, datetime.datetime):
        return iso(value if value.tzinfo else value.replace(tzinfo=datetime.timezone.utc))
    return str(value)


@dataclass(frozen=True)
class LeaseState:
    holder: Optional[str]
    acquire_time: Optional[str]
    renew_time: Optional[str]
    transitions: Optional[int]
    duration_seconds: Optional[int]

    @property
    def host(self) -> Optional[str]:
        return holder_host(self.holder)

    def to_event(self) -> dict[str, Any]:
        return asdict(self)


def read_lease(kube: Any, namespace: str, name: str) -> Optional[LeaseState]:
    """The Lease, or None when it does not exist."""
    import httpx2
    from lightkube import ApiError
    from lightkube.resources.coordination_v1 import Lease

    try:
        lease = kube.client.get(Lease, name, namespace=namespace)
    except (ApiError, httpx2.HTTPStatusError) as error:
        if not_found(error):
            return None
        raise
    spec = lease.spec
    return LeaseState(holder=spec.holderIdentity or None, acquire_time=_time(spec.acquireTime),
                      renew_time=_time(spec.renewTime), transitions=spec.leaseTransitions,
                      duration_seconds=spec.leaseDurationSeconds)


def is_gateway_pod(pod: Any) -> bool:
    """The chart's pods: its name label (tolerating a ``nameOverride`` that keeps the chart's
    name in it) or, unlabelled, a pod named after the chart. Terminating and finished pods are
    not gateways any more."""
    meta = pod.metadata
    labels = meta.labels or {}
    named = labels.get("app.kubernetes.io/name", "")
    ours = (named == GATEWAY_NAME or "hybrid-nodes-gateway" in named
            or (not named and (meta.name or "").startswith(GATEWAY_NAME)))
    phase = pod.status.phase if pod.status else None
    return ours and meta.deletionTimestamp is None and phase not in ("Succeeded", "Failed")


def gateway_pods(kube: Any, namespace: str) -> list[Any]:
    """The live gateway pods in the gateway's namespace (listed whole and filtered here: the
    namespace is the chart's own, and label selectors are not trusted to be exact)."""
    from lightkube.resources.core_v1 import Pod

    return sorted((p for p in kube.client.list(Pod, namespace=namespace) if is_gateway_pod(p)),
                  key=lambda p: p.metadata.name)


def find_node(kube: Any, host: str) -> Optional[Any]:
    """The node whose name is ``host``, or else the one whose hostname label is (exactly)."""
    import httpx2
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Node

    try:
        return kube.client.get(Node, host)
    except (ApiError, httpx2.HTTPStatusError) as error:
        if not not_found(error):
            raise
    matches = [n for n in kube.client.list(Node)
               if (n.metadata.labels or {}).get(_HOSTNAME_LABEL) == host]
    return matches[0] if len(matches) == 1 else None


def _address(node: Any, kind: str) -> Optional[str]:
    for address in (node.status.addresses or []) if node.status else []:
        if address.type == kind:
            return address.address
    return None


def instance_id_of(provider_id: Optional[str]) -> Optional[str]:
    """``aws:///ap-northeast-2a/i-0123...`` -> ``i-0123...``."""
    if not provider_id or not provider_id.startswith("aws://"):
        return None
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None


@dataclass(frozen=True)
class Leader:
    holder: str
    node: str
    internal_ip: Optional[str]
    private_dns: Optional[str]
    instance_id: Optional[str]
    #: Whether the node carries ``hybrid-gateway-node=true``.
    gateway_node: bool
    pod: str
    pod_uid: Optional[str]

    def to_event(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Resolution:
    """A holder resolved to its node and pod, or why it could not be."""

    lease: Optional[LeaseState]
    leader: Optional[Leader]
    reason: str = ""
    #: (pod, node) of every live gateway pod seen, for the report.
    pods: list[tuple[str, str]] = field(default_factory=list)

    def to_event(self) -> dict[str, Any]:
        return {"lease": self.lease.to_event() if self.lease else None,
                "leader": self.leader.to_event() if self.leader else None,
                "reason": self.reason, "gateway_pods": [list(p) for p in self.pods]}


def resolve_holder(kube: Any, namespace: str, lease: Optional[LeaseState],
                   lease_name: str = "") -> Resolution:
    """Holder -> node -> exactly one live gateway pod on that node."""
    pods = gateway_pods(kube, namespace)
    seen = [(p.metadata.name, p.spec.nodeName or "") for p in pods]
    if lease is None:
        return Resolution(None, None, f"there is no Lease {lease_name} in {namespace}", seen)
    if not lease.holder:
        return Resolution(lease, None, f"the Lease {lease_name} has no holder", seen)
    host = lease.host or ""
    node = find_node(kube, host)
    if node is None:
        return Resolution(lease, None, f"the Lease holder {lease.holder} names host {host}, which "
                          "is no node of the cluster", seen)
    name = node.metadata.name
    on_node = [p for p in pods if p.spec.nodeName == name]
    listed = ", ".join(f"{p} on {n or 'no node'}" for p, n in seen) or "none"
    if not on_node:
        return Resolution(lease, None, f"the Lease holder {lease.holder} names node {name}, where "
                          f"no gateway pod runs (gateway pods: {listed})", seen)
    if len(on_node) > 1:
        return Resolution(lease, None, f"{len(on_node)} gateway pods run on the holder's node "
                          f"{name} ({listed}): which one leads is not certain", seen)
    pod = on_node[0]
    labels = node.metadata.labels or {}
    leader = Leader(holder=lease.holder, node=name, internal_ip=_address(node, "InternalIP"),
                    private_dns=_address(node, "InternalDNS") or _address(node, "Hostname"),
                    instance_id=instance_id_of(node.spec.providerID if node.spec else None),
                    gateway_node=labels.get(GATEWAY_NODE_LABEL) == "true",
                    pod=pod.metadata.name, pod_uid=pod.metadata.uid)
    return Resolution(lease, leader, "", seen)


def resolve(kube: Any, namespace: str, lease_name: str) -> Resolution:
    return resolve_holder(kube, namespace, read_lease(kube, namespace, lease_name), lease_name)


class NoEni(LookupError):
    """The leader's instance or its primary ENI was not found in EC2."""


def primary_eni(ec2: Any, leader: Leader) -> tuple[str, str]:
    """(instance id, primary ENI id) of the leader's node: by the instance id in the node's
    providerID, else by its InternalIP, else by its private DNS name (the node's name on EKS).
    The primary ENI is the one at device index 0 — the one the gateway writes into the routes."""
    ways = []
    if leader.instance_id:
        ways.append(({"InstanceIds": [leader.instance_id]}, f"instance {leader.instance_id}"))
    if leader.internal_ip:
        ways.append(({"Filters": [{"Name": "private-ip-address", "Values": [leader.internal_ip]}]},
                     f"private IP {leader.internal_ip}"))
    for dns in dict.fromkeys(d for d in (leader.private_dns, leader.node) if d):
        ways.append(({"Filters": [{"Name": "private-dns-name", "Values": [dns]}]},
                     f"private DNS name {dns}"))
    if not ways:
        raise NoEni(f"node {leader.node} has no providerID, InternalIP or DNS name to find its "
                    "instance by")
    tried = []
    for query, what in ways:
        instances = [i for r in ec2.describe_instances(**query).get("Reservations", [])
                     for i in r.get("Instances", [])]
        if len(instances) != 1:
            tried.append(f"{what}: {len(instances)} instances")
            continue
        instance = instances[0]
        for eni in instance.get("NetworkInterfaces", []):
            if (eni.get("Attachment") or {}).get("DeviceIndex") == 0:
                return instance["InstanceId"], eni["NetworkInterfaceId"]
        raise NoEni(f"instance {instance['InstanceId']} (node {leader.node}) has no network "
                    "interface at device index 0")
    raise NoEni(f"no single EC2 instance for node {leader.node} ({'; '.join(tried)})")


def route_targets(ec2: Any, table_ids: list[str], cidr: str) -> list[dict[str, Any]]:
    """For each table, the route for ``cidr``: its target ENI (or other target) and state."""
    tables = {t["RouteTableId"]: t for t in
              ec2.describe_route_tables(RouteTableIds=list(table_ids)).get("RouteTables", [])}
    found = []
    for table in table_ids:
        route = next((r for r in tables.get(table, {}).get("Routes", [])
                      if r.get("DestinationCidrBlock") == cidr), None)
        if route is None:
            found.append({"table": table, "eni": None, "other_target": None,
                          "state": "missing" if table in tables else "no such table"})
            continue
        other = next((f"{k}={route[k]}" for k in ("GatewayId", "InstanceId", "TransitGatewayId",
                                                   "NatGatewayId", "VpcPeeringConnectionId")
                      if route.get(k) and not route.get("NetworkInterfaceId")), None)
        found.append({"table": table, "eni": route.get("NetworkInterfaceId"),
                      "other_target": other, "state": route.get("State", "")})
    return found


def read_vtep(kube: Any) -> Optional[list[dict[str, Any]]]:
    """``CiliumVTEPConfig/hybrid-gateway``'s endpoints, or None when it does not exist."""
    status, body = kube.get_raw(VTEP_CONFIG_PATH)
    if status == 404:
        return None
    if status != 200:
        raise VtepUnreadable(f"GET {VTEP_CONFIG_PATH} answered HTTP {status}")
    spec = (json.loads(body) or {}).get("spec") or {}
    return [{"name": e.get("name"), "tunnelEndpoint": e.get("tunnelEndpoint"),
             "cidr": e.get("cidr")} for e in spec.get("endpoints") or []]


class VtepUnreadable(RuntimeError):
    pass


def vtep_names(endpoints: Optional[list[dict[str, Any]]], ip: Optional[str]) -> bool:
    """Every endpoint of the VTEP config tunnels to ``ip`` (the leader's node IP)."""
    return bool(ip) and bool(endpoints) and all(e.get("tunnelEndpoint") == ip for e in endpoints)
