"""The collector of `python -m rehearse verify gateway`; what the command is and does, its --help, is
its face's docstring (command.py)."""

from __future__ import annotations

import argparse
from typing import Any, Optional

from rehearse.run.arguments import seconds, whole
from rehearse.run.errors import RunError, api_failure
from rehearse.commands.verify_gateway.analyse import analyse
from rehearse.lab.leader import holder_host, instance_id_of, not_found
# TITLE is the command's interface to rehearse.cli; the rest is what the collector uses.
from rehearse.commands.verify_gateway.kinds import (  # noqa: F401
    TITLE, GATEWAY_POD_SELECTOR, GATEWAY_NODE_SELECTOR, HEALTH_PORT, METRICS_PORT,
    LEADER_GAUGE, VTEP_CONFIG, VTEP_VERSIONS, PROBERS, PROBER_CONTAINER, CILIUM_KEYS,
    POD_IDENTITY_AGENT, WINDOW_SECONDS, MIN_SUCCESSES, MAX_FAILURES,
    MAX_LOG_AGE_SECONDS, MAX_LINES, INPUTS, NODES, PODS, LEASE, HEALTHZ, ROUTE_TABLE, INSTANCE,
    VTEP, CILIUM_CONFIG, AGENT, PROBER_PODS, PROBER_LOG, METRICS, labels_match, parse_selector)

__all__ = ["TITLE", "add_arguments", "collect", "analyse"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    traffic = parser.add_argument_group("the traffic check (the demo probers' logs)")
    traffic.add_argument("--window", type=seconds(1.0), default=WINDOW_SECONDS, metavar="SECONDS",
                         help=f"how much recent log to judge (default {WINDOW_SECONDS:g})")
    traffic.add_argument("--min-successes", type=whole(1), default=MIN_SUCCESSES, metavar="N",
                         help="successful probes each prober needs on each path in the window "
                              f"(default {MIN_SUCCESSES}, as AWS's e2e baseline)")
    traffic.add_argument("--max-failures", type=whole(0), default=MAX_FAILURES, metavar="N",
                         help=f"failed probes tolerated per path in the window (default {MAX_FAILURES})")
    traffic.add_argument("--max-log-age", type=seconds(0.0), default=MAX_LOG_AGE_SECONDS, metavar="SECONDS",
                         help="how old a prober's newest line may be when read "
                              f"(default {MAX_LOG_AGE_SECONDS:g})")


# --- collector ------------------------------------------------------------------------------

def _node_view(node: dict) -> dict:
    meta, spec, status = node.get("metadata", {}), node.get("spec") or {}, node.get("status") or {}
    labels = meta.get("labels") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return {"name": meta.get("name"), "labels": labels, "providerID": spec.get("providerID"),
            "internalIP": addresses.get("InternalIP"), "ready": ready}


def _pod_view(pod: dict) -> dict:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec") or {}, pod.get("status") or {}
    ready = next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    return {"name": meta.get("name"), "labels": meta.get("labels") or {},
            "nodeName": spec.get("nodeName"), "hostNetwork": bool(spec.get("hostNetwork")),
            "containers": [c.get("name") for c in spec.get("containers") or []],
            "phase": status.get("phase"), "ready": ready, "hostIP": status.get("hostIP"),
            "deletionTimestamp": meta.get("deletionTimestamp"),
            "restarts": sum(c.get("restartCount", 0) for c in status.get("containerStatuses") or [])}


#: What collect reads from the stack, checked before a run starts (rehearse.inputs).
LAYERS = (("gateway", "the gateway it verifies"),
          ("demo", "the demo 1 probers that show traffic both ways"))
OUTPUTS = ("gatewayNamespace", "gatewayLeaseName", "gatewayRouteTableIds", "hybridPodCidr", "demo1")


def check_inputs(given: Any) -> None:
    demo1 = given.outputs.get("demo1")
    if not isinstance(demo1, dict) or not demo1.get("namespace"):
        raise RunError(f"{given.outputs.origin}: the output demo1 names no namespace: run "
                       f"`pulumi up` with this version of the lab{given.outputs.rewrite()}")


def collect(ctx: Any, record: Any) -> None:
    from lightkube.resources.apps_v1 import DaemonSet
    from lightkube.resources.core_v1 import ConfigMap, Node, Pod

    outputs = ctx.outputs
    outputs.require_layer("gateway", "the gateway it verifies")
    outputs.require_layer("demo", "the demo 1 probers that show traffic both ways")
    options = ctx.options
    namespace = outputs.get("gatewayNamespace")
    lease_name = outputs.get("gatewayLeaseName")
    tables = list(outputs.get("gatewayRouteTableIds"))
    pod_cidr = outputs.get("hybridPodCidr")
    demo1 = outputs.get("demo1")
    probers = {**PROBERS, **(demo1.get("probers") or {})}
    pod_selector = outputs.optional("gatewayPodSelector") or GATEWAY_POD_SELECTOR
    node_selector = outputs.optional("gatewayNodeSelector") or GATEWAY_NODE_SELECTOR
    record(INPUTS, region=ctx.region, namespace=namespace, lease=lease_name, routeTables=tables,
           hybridPodCidr=pod_cidr, cloudVpcCidr=outputs.optional("cloudVpcCidr"),
           podSelector=pod_selector, nodeSelector=node_selector,
           demoNamespace=demo1["namespace"], probers=probers,
           window=float(options.get("window", WINDOW_SECONDS)),
           minSuccesses=int(options.get("min_successes", MIN_SUCCESSES)),
           maxFailures=int(options.get("max_failures", MAX_FAILURES)),
           maxLogAge=float(options.get("max_log_age", MAX_LOG_AGE_SECONDS)))
    client = ctx.kube.client

    def get_or_none(resource: Any, name: str, ns: Optional[str] = None) -> Optional[dict]:
        try:
            return client.get(resource, name, namespace=ns).to_dict()
        except Exception as error:  # noqa: BLE001 a 404 comes as lightkube's ApiError or httpx's
            if not_found(error):
                return None
            raise

    ctx.progress(f"reading the gateway in {namespace}")
    nodes = [_node_view(n.to_dict()) for n in client.list(Node)]
    record(NODES, items=nodes)

    # The emulator (and a careless proxy) may ignore the selector: filter here as well.
    wanted = parse_selector(pod_selector)
    listed = [p.to_dict() for p in client.list(Pod, namespace=namespace, labels=wanted)]
    pods = [_pod_view(p) for p in listed if labels_match(p["metadata"].get("labels"), wanted)]
    selector_used: Optional[str] = pod_selector
    if not pods:
        # A chart installed with nameOverride labels its pods otherwise; the namespace is
        # the gateway's own, so every pod in it is a gateway pod.
        pods = [_pod_view(p.to_dict()) for p in client.list(Pod, namespace=namespace)]
        selector_used = None
    record(PODS, namespace=namespace, selector=selector_used, items=pods)

    lease, lease_read = _read_lease(ctx.kube, namespace, lease_name)
    spec = (lease or {}).get("spec") or {}
    record(LEASE, name=lease_name, found=lease is not None,
           holderIdentity=spec.get("holderIdentity"), acquireTime=spec.get("acquireTime"),
           renewTime=spec.get("renewTime"), leaseDurationSeconds=spec.get("leaseDurationSeconds"),
           leaseTransitions=spec.get("leaseTransitions"), **lease_read)

    for pod in pods:
        path = f"/api/v1/namespaces/{namespace}/pods/{pod['name']}:{HEALTH_PORT}/proxy/healthz"
        status, body = ctx.kube.get_raw(path)
        record(HEALTHZ, pod=pod["name"], node=pod["nodeName"], path=path, status=status,
               body=body[:200])
    for pod in pods:
        _collect_metrics(ctx.kube, namespace, pod, record)

    ctx.progress("reading the gateway's route tables and nodes in EC2")
    ec2 = ctx.aws("ec2")
    _collect_route_tables(ec2, tables, record)
    holder = spec.get("holderIdentity") or ""
    gateway_nodes = parse_selector(node_selector)
    wanted_nodes = {p["nodeName"] for p in pods if p["nodeName"]}
    wanted_nodes |= {n["name"] for n in nodes if labels_match(n["labels"], gateway_nodes)}
    wanted_nodes |= {n["name"] for n in nodes if n["name"] == holder_host(holder)}
    for node in nodes:
        if node["name"] in wanted_nodes:
            _collect_instance(ec2, node, record)

    ctx.progress("reading Cilium's VTEP config and settings")
    _collect_vtep(client, record)
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

    ctx.progress("reading the demo 1 probers' recent logs")
    window = float(options.get("window", WINDOW_SECONDS))
    demo_ns = demo1["namespace"]
    for direction, name in probers.items():
        selector = {"app": name}
        prober_pods = [_pod_view(p.to_dict()) for p in client.list(Pod, namespace=demo_ns, labels=selector)]
        prober_pods = [p for p in prober_pods if labels_match(p["labels"], selector)]
        record(PROBER_PODS, direction=direction, prober=name, namespace=demo_ns, items=prober_pods)
        for pod in prober_pods:
            if pod["phase"] not in ("Running", "Succeeded", "Failed"):
                continue  # no container has started: no log to read
            container = PROBER_CONTAINER if PROBER_CONTAINER in pod["containers"] else \
                (pod["containers"] or [None])[0]
            try:
                lines = [line.rstrip("\n") for line in client.log(
                    pod["name"], namespace=demo_ns, container=container, timestamps=True,
                    since=int(window) + 1)]
                error = None
            except Exception as failure:  # noqa: BLE001 sorted below: an answer, or not
                # A refused log request is the API server's Status (400 container not
                # started, 404 pod gone, 500 kubelet not reachable): a finding, not a crash.
                error = api_failure(failure)
                if error is None:
                    raise
                lines = []
            record(PROBER_LOG, direction=direction, prober=name, pod=pod["name"],
                   namespace=demo_ns, node=pod["nodeName"], container=container,
                   sinceSeconds=int(window) + 1, lines=lines[-MAX_LINES:], error=error)


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


def _ec2_code(error: BaseException) -> str:
    return str(getattr(error, "response", {}).get("Error", {}).get("Code", ""))


def _collect_route_tables(ec2: Any, tables: list[str], record: Any) -> None:
    from botocore.exceptions import ClientError

    keep = ("DestinationCidrBlock", "NetworkInterfaceId", "InstanceId", "GatewayId",
            "TransitGatewayId", "NatGatewayId", "VpcPeeringConnectionId", "State", "Origin")
    for table in tables:
        try:
            found = ec2.describe_route_tables(RouteTableIds=[table])["RouteTables"]
        except ClientError as error:
            if _ec2_code(error) != "InvalidRouteTableID.NotFound":
                raise
            record(ROUTE_TABLE, id=table, found=False, error=_ec2_code(error), routes=[])
            continue
        routes = [{k: r[k] for k in keep if k in r} for t in found for r in t.get("Routes", [])]
        record(ROUTE_TABLE, id=table, found=bool(found), routes=routes)


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
        if _ec2_code(error) not in ("InvalidInstanceID.NotFound", "InvalidInstanceID.Malformed"):
            raise
        record(INSTANCE, node=node["name"], lookup=lookup, found=False, error=_ec2_code(error))
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


