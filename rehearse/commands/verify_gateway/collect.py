"""The collector of `python -m rehearse verify gateway`; what the command is and does, its --help,
is its face's docstring (command.py). It records what it reads as events (kinds.py); the
analysis (analyse.py) is pure over them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from rehearse.run.errors import RunError
from rehearse.lab import probes
from rehearse.lab.gateway import (GATEWAY_NODE_SELECTOR, GATEWAY_POD_SELECTOR, HEALTH_PORT,
                                  LEADER_GAUGE, METRICS_PORT, VTEP_CONFIG, VTEP_VERSIONS)
from rehearse.lab.leader import holder_host, instance_id_of, not_found
from rehearse.lab.nodes import node_view
from rehearse.lab.route_tables import ec2_error_code, read_route_tables
from rehearse.commands.verify_gateway.kinds import (
    AGENT, CILIUM_CONFIG, CILIUM_KEYS, HEALTHZ, INPUTS, INSTANCE, LEASE, MAX_FAILURES,
    MAX_LINES, MAX_LOG_AGE_SECONDS, METRICS, MIN_SUCCESSES, NODES, PODS, POD_IDENTITY_AGENT,
    PROBER_LOG, PROBER_PODS, ROUTE_TABLE, VTEP, WINDOW_SECONDS)
from rehearse.commands.verify_gateway.observed import labels_match, parse_selector
# The face (command.py) hands the analysis on to rehearse.cli from here.
from rehearse.commands.verify_gateway.analyse import analyse  # noqa: F401

__all__ = ["collect", "analyse"]


def _pod_view(pod: dict) -> dict:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec") or {}, pod.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return {"name": meta.get("name"), "labels": meta.get("labels") or {},
            "nodeName": spec.get("nodeName"), "hostNetwork": bool(spec.get("hostNetwork")),
            "containers": [c.get("name") for c in spec.get("containers") or []],
            "phase": status.get("phase"), "ready": ready, "hostIP": status.get("hostIP"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "restarts": sum(c.get("restartCount", 0) for c in status.get("containerStatuses") or [])}


@dataclass(frozen=True)
class _Inputs:
    """What the run reads the lab by: the stack's outputs with the lab's defaults filled in."""

    namespace: str
    lease: str
    tables: list[str]
    demo_namespace: str
    #: Prober key -> its Deployment's name.
    probers: dict[str, str]
    pod_selector: str
    node_selector: str
    window: float


def _inputs(ctx: Any, record: Any) -> _Inputs:
    """Reads the stack's outputs and records them (``gateway.inputs``) with the options."""
    outputs = ctx.outputs
    outputs.require_layer("gateway", "the gateway it verifies")
    outputs.require_layer("demo", "the demo 1 probers that show traffic both ways")
    options = ctx.options
    namespace, lease = outputs.get("gatewayNamespace"), outputs.get("gatewayLeaseName")
    tables = list(outputs.get("gatewayRouteTableIds"))
    pod_cidr = outputs.get("hybridPodCidr")
    demo1 = outputs.get("demo1")
    given = _Inputs(namespace=namespace, lease=lease, tables=tables,
                    demo_namespace=demo1["namespace"],
                    probers={**probes.NAMES, **(demo1.get("probers") or {})},
                    pod_selector=outputs.optional("gatewayPodSelector") or GATEWAY_POD_SELECTOR,
                    node_selector=outputs.optional("gatewayNodeSelector") or GATEWAY_NODE_SELECTOR,
                    window=float(options.get("window", WINDOW_SECONDS)))
    record(INPUTS, region=ctx.region, namespace=given.namespace, lease=given.lease,
           routeTables=given.tables, hybridPodCidr=pod_cidr,
           cloudVpcCidr=outputs.optional("cloudVpcCidr"), podSelector=given.pod_selector,
           nodeSelector=given.node_selector, demoNamespace=given.demo_namespace,
           probers=given.probers, window=given.window,
           minSuccesses=int(options.get("min_successes", MIN_SUCCESSES)),
           maxFailures=int(options.get("max_failures", MAX_FAILURES)),
           maxLogAge=float(options.get("max_log_age", MAX_LOG_AGE_SECONDS)))
    return given


def collect(ctx: Any, record: Any) -> None:
    from lightkube.resources.core_v1 import Node

    given = _inputs(ctx, record)
    client = ctx.kube.client
    ctx.progress(f"reading the gateway in {given.namespace}")
    nodes = [node_view(n.to_dict()) for n in client.list(Node)]
    record(NODES, items=nodes)
    pods = _collect_pods(client, given, record)
    lease, lease_read = _read_lease(ctx.kube, given.namespace, given.lease)
    spec = (lease or {}).get("spec") or {}
    record(LEASE, name=given.lease, found=lease is not None,
           holderIdentity=spec.get("holderIdentity"), acquireTime=spec.get("acquireTime"),
           renewTime=spec.get("renewTime"), leaseDurationSeconds=spec.get("leaseDurationSeconds"),
           leaseTransitions=spec.get("leaseTransitions"), **lease_read)
    for pod in pods:
        path = f"/api/v1/namespaces/{given.namespace}/pods/{pod['name']}:{HEALTH_PORT}/proxy/healthz"
        status, body = ctx.kube.get_raw(path)
        record(HEALTHZ, pod=pod["name"], node=pod["nodeName"], path=path, status=status,
               body=body[:200])
    for pod in pods:
        _collect_metrics(ctx.kube, given.namespace, pod, record)

    ctx.progress("reading the gateway's route tables and nodes in EC2")
    ec2 = ctx.aws("ec2")
    _collect_route_tables(ec2, given.tables, record)
    holder = spec.get("holderIdentity") or ""
    gateway_nodes = parse_selector(given.node_selector)
    wanted_nodes = {p["nodeName"] for p in pods if p["nodeName"]}
    wanted_nodes |= {n["name"] for n in nodes if labels_match(n["labels"], gateway_nodes)}
    wanted_nodes |= {n["name"] for n in nodes if n["name"] == holder_host(holder)}
    for node in nodes:
        if node["name"] in wanted_nodes:
            _collect_instance(ec2, node, record)

    ctx.progress("reading Cilium's VTEP config and settings")
    _collect_vtep(client, record)
    _collect_cluster(client, record)
    ctx.progress("reading the demo 1 probers' recent logs")
    _collect_probers(client, given, record)


def _collect_pods(client: Any, given: _Inputs, record: Any) -> list[dict]:
    """The gateway's pods, by the chart's selector, else every pod of its namespace."""
    from lightkube.resources.core_v1 import Pod

    # The emulator (and a careless proxy) may ignore the selector: filter here as well.
    wanted = parse_selector(given.pod_selector)
    listed = [p.to_dict() for p in client.list(Pod, namespace=given.namespace, labels=wanted)]
    pods = [_pod_view(p) for p in listed if labels_match(p["metadata"].get("labels"), wanted)]
    selector_used: Optional[str] = given.pod_selector
    if not pods:
        # A chart installed with nameOverride labels its pods otherwise; the namespace is
        # the gateway's own, so every pod in it is a gateway pod.
        pods = [_pod_view(p.to_dict()) for p in client.list(Pod, namespace=given.namespace)]
        selector_used = None
    record(PODS, namespace=given.namespace, selector=selector_used, items=pods)
    return pods


def _collect_cluster(client: Any, record: Any) -> None:
    """What the gateway needs of the cluster: cilium-config's VTEP and L7 proxy keys, and the
    Pod Identity agent's DaemonSet."""
    from lightkube.resources.apps_v1 import DaemonSet
    from lightkube.resources.core_v1 import ConfigMap

    def get_or_none(resource: Any, name: str, ns: Optional[str] = None) -> Optional[dict]:
        try:
            return client.get(resource, name, namespace=ns).to_dict()
        except Exception as error:  # noqa: BLE001 a 404 comes as lightkube's ApiError or httpx's
            if not_found(error):
                return None
            raise

    config = get_or_none(ConfigMap, "cilium-config", "kube-system")
    data = (config or {}).get("data") or {}
    record(CILIUM_CONFIG, found=config is not None,
           data={k: v for k, v in data.items() if k in CILIUM_KEYS or k.startswith("vtep-")})
    agent = get_or_none(DaemonSet, POD_IDENTITY_AGENT, "kube-system")
    agent_status = (agent or {}).get("status") or {}
    record(AGENT, name=POD_IDENTITY_AGENT, found=agent is not None,
           status={k: agent_status.get(k) for k in ("desiredNumberScheduled", "currentNumberScheduled",
                                                      "numberReady", "numberAvailable",
                                                      "updatedNumberScheduled")})


def _collect_probers(client: Any, given: _Inputs, record: Any) -> None:
    """Each prober's pods, and the last window (plus a second) of each started pod's log."""
    since = int(given.window) + 1
    for direction, name in given.probers.items():
        prober_pods = [_pod_view(p.to_dict())
                       for p in probes.prober_pods(client, given.demo_namespace, name)]
        record(PROBER_PODS, direction=direction, prober=name, namespace=given.demo_namespace,
               items=prober_pods)
        for pod in prober_pods:
            if pod["phase"] not in ("Running", "Succeeded", "Failed"):
                continue  # no container has started: no log to read
            container = probes.CONTAINER if probes.CONTAINER in pod["containers"] else \
                (pod["containers"] or [None])[0]
            lines, error = probes.recent_lines(client, given.demo_namespace, pod["name"],
                                               container, since)
            record(PROBER_LOG, direction=direction, prober=name, pod=pod["name"],
                   namespace=given.demo_namespace, node=pod["nodeName"], container=container,
                   sinceSeconds=since, lines=lines[-MAX_LINES:], error=error)


def _read_lease(kube: Any, namespace: str, name: str) -> tuple[Optional[dict], dict]:
    """The Lease (None if absent) and when it was read by the API server's clock: a raw GET,
    so the answer's Date header comes with it (lightkube's typed get does not show headers)."""
    import json

    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
    status, body, date = kube.get_raw_dated(path)
    read = {"serverDate": date}
    if status == 404:
        return None, read
    if status != 200:
        raise RunError(f"reading Lease {namespace}/{name} answered HTTP {status}: {body[:200]}")
    try:
        lease = json.loads(body)
    except ValueError:
        raise RunError(f"the API server's answer for Lease {namespace}/{name} is not JSON "
                       f"(HTTP {status}, {len(body)} bytes)") from None
    return lease, read


def _collect_metrics(kube: Any, namespace: str, pod: dict, record: Any) -> None:
    """What the gateway pod says about its own leadership: its ``/metrics`` through the API
    server's pod proxy. Only the few lines that matter are kept."""
    path = f"/api/v1/namespaces/{namespace}/pods/{pod['name']}:{METRICS_PORT}/proxy/metrics"
    status, body = kube.get_raw(path)
    kept = [line for line in body.splitlines()
            if line.startswith((LEADER_GAUGE, "leader_election_master_status"))]
    record(METRICS, pod=pod["name"], node=pod["nodeName"], path=path, status=status,
           gauge=gauge(body, LEADER_GAUGE) if status == 200 else None, lines=kept[:10],
           body="" if status == 200 else body[:200])


def gauge(text: str, name: str) -> Optional[float]:
    """The value of the unlabelled series ``name`` in a Prometheus text exposition."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        metric, _, rest = line.partition(" ")
        if metric != name:
            continue  # another metric with this prefix, or a labelled series
        try:
            return float(rest.split()[0])
        except (IndexError, ValueError):
            return None
    return None


def _collect_route_tables(ec2: Any, tables: list[str], record: Any) -> None:
    for table in read_route_tables(ec2, tables):
        record(ROUTE_TABLE, **table)


def _collect_instance(ec2: Any, node: dict, record: Any) -> None:
    """The node's EC2 instance and its interfaces.

    Matched by the instance id in the node's ``spec.providerID`` (``aws:///<zone>/<id>``): the
    kubelet takes it from the instance metadata, and it is the same instance id the gateway
    itself describes to find its primary ENI, so nothing depends on how nodes are named (the
    node name is the private DNS name only with IP-based host names). A node without one is
    looked up by its InternalIP (filter ``private-ip-address``): the instance's primary private
    IP, unique in the VPC, and the address the gateway writes into the VTEP config."""
    from botocore.exceptions import ClientError

    instance_id = instance_id_of(node["providerID"])
    if instance_id:
        lookup = {"by": "instance-id (spec.providerID)", "value": instance_id}
        request: dict[str, Any] = {"InstanceIds": [instance_id]}
    elif node["internalIP"]:
        lookup = {"by": "private-ip-address (InternalIP)", "value": node["internalIP"]}
        request = {"Filters": [{"Name": "private-ip-address", "Values": [node["internalIP"]]}]}
    else:
        record(INSTANCE, node=node["name"], lookup=None, found=False,
               error="the node has neither a providerID nor an InternalIP")
        return
    try:
        reservations = ec2.describe_instances(**request)["Reservations"]
    except ClientError as error:
        if ec2_error_code(error) not in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
            raise
        record(INSTANCE, node=node["name"], lookup=lookup, found=False, error=ec2_error_code(error))
        return
    instances = [i for r in reservations for i in r.get("Instances", [])]
    if not instances:
        record(INSTANCE, node=node["name"], lookup=lookup, found=False, error="no such instance")
        return
    instance = instances[0]
    record(INSTANCE, node=node["name"], lookup=lookup, found=True,
           instanceId=instance.get("InstanceId"), privateIp=instance.get("PrivateIpAddress"),
           privateDnsName=instance.get("PrivateDnsName"),
           state=(instance.get("State") or {}).get("Name"),
           interfaces=[{"id": eni.get("NetworkInterfaceId"),
                        "deviceIndex": (eni.get("Attachment") or {}).get("DeviceIndex"),
                        "privateIp": eni.get("PrivateIpAddress")}
                       for eni in instance.get("NetworkInterfaces", [])])


def _collect_vtep(client: Any, record: Any) -> None:
    from lightkube.generic_resource import create_global_resource

    tried = []
    for version in VTEP_VERSIONS:
        resource = create_global_resource("cilium.io", version, "CiliumVTEPConfig", "ciliumvtepconfigs")
        tried.append(version)
        try:
            found = client.get(resource, VTEP_CONFIG)
        except Exception as error:  # noqa: BLE001 a 404 comes as lightkube's ApiError or httpx's
            if not_found(error):
                continue  # not served at this version, or absent
            raise
        found = found.to_dict() if hasattr(found, "to_dict") else dict(found)
        record(VTEP, name=VTEP_CONFIG, found=True, version=version, tried=tried,
               spec=found.get("spec") or {})
        return
    record(VTEP, name=VTEP_CONFIG, found=False, version=None, tried=tried, spec=None)
