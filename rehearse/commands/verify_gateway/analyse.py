"""The analysis of ``verify gateway``: pure functions from its recorded events to the checks
(PASS/FAIL with what was seen and the fix), so a recorded run replays to the same report."""

from __future__ import annotations

import datetime
import ipaddress
from typing import Optional

from rehearse.lab import probes as probe_logs
from rehearse.lab.leader import holder_host
from rehearse.run.record import RUN_STARTED, every, first, parse_time
from rehearse.run.outcome import not_read
from rehearse.run.report import FAIL, PASS, SKIP, Check, Report
from rehearse.commands.verify_gateway.kinds import (
    METRICS, METRICS_PORT, LEADER_GAUGE, LEASE_DURATION_SECONDS, RENEW_DEADLINE_SECONDS,
    RETRY_PERIOD_SECONDS, CHECK_LEADERSHIP, GATEWAY_POD_SELECTOR, GATEWAY_NODE_SELECTOR, HEALTH_PORT,
    VTEP_CONFIG, VTEP_VERSIONS, PROBERS, POD_IDENTITY_AGENT, ZONE_LABELS, WINDOW_SECONDS,
    MIN_SUCCESSES, MAX_FAILURES, MAX_LOG_AGE_SECONDS, INPUTS, NODES, PODS, LEASE, HEALTHZ,
    ROUTE_TABLE, INSTANCE, VTEP, CILIUM_CONFIG, AGENT, PROBER_PODS, PROBER_LOG, CHECK_PODS,
    CHECK_LEASE, CHECK_HEALTH, CHECK_ROUTE, CHECK_VTEP, CHECK_TRAFFIC, CHECK_CILIUM, CHECK_AGENT,
    labels_match, parse_selector)


#: The checks in the order the collector reads their input (the report shows the traffic
#: before Cilium and the agent; rehearse.outcome names the read that failed by this order).
READ_ORDER = (CHECK_PODS, CHECK_LEASE, CHECK_HEALTH, CHECK_LEADERSHIP, CHECK_ROUTE, CHECK_VTEP,
              CHECK_CILIUM, CHECK_AGENT, CHECK_TRAFFIC["cloudToHybrid"], CHECK_TRAFFIC["hybridToCloud"])


class _Lab:
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


def _ready(pod: dict) -> bool:
    return pod["phase"] == "Running" and pod.get("ready") == "True" and not pod.get("deletionTimestamp")


def _describe_pod(lab: _Lab, pod: dict) -> str:
    state = pod["phase"] or "no phase"
    if pod.get("deletionTimestamp"):
        state += ", terminating"
    elif pod["phase"] == "Running":
        state += ", Ready" if pod.get("ready") == "True" else ", not Ready"
    where = pod["nodeName"] or "unscheduled"
    zone = lab.zone(pod["nodeName"])
    if pod["nodeName"]:
        where += f" ({zone or 'no zone label'}{'' if lab.is_gateway_node(pod['nodeName']) else ', not a gateway node'})"
    return f"{pod['name']} {state} on {where}"


def _check_pods(lab: _Lab) -> Check:
    command = (f"kubectl -n {lab.ns} get pods -l {lab.selector} -o wide && kubectl get nodes "
               f"-l {lab.node_selector} -L topology.kubernetes.io/zone")
    fix_common = (f"see why: `kubectl -n {lab.ns} describe pods -l {lab.selector}`; the gateway "
                  f"needs its two nodes labelled and tainted {lab.node_selector} in two zones "
                  "(the gateway layer's node group) and the CiliumNode/CiliumVTEPConfig CRDs "
                  "before it starts, else it crash-loops (docs/gateway.md#what-it-does)")
    if not lab.pods_event:
        return not_read(CHECK_PODS, "the gateway's pods", lab.events, command)
    pods = lab.pods
    if not pods:
        return Check(CHECK_PODS, FAIL, f"no gateway pods in {lab.ns}",
                     "install the gateway (the gateway layer: `pulumi up`); " + fix_common, command)
    seen = "; ".join(_describe_pod(lab, p) for p in pods)
    if lab.pods_event.get("selector") is None:
        seen += f" (no pod carries {lab.selector}: every pod in {lab.ns} was taken as the gateway's)"
    good = [p for p in pods if _ready(p) and lab.is_gateway_node(p["nodeName"])]
    nodes = {p["nodeName"] for p in good}
    zones = {lab.zone(p["nodeName"]) for p in good} - {None}
    problems = []
    if len(good) < 2:
        problems.append(f"{len(good)} of the 2 needed are Running and Ready on a gateway node")
    elif len(nodes) < 2:
        problems.append("the Ready pods share one node")
    elif len(zones) < 2:
        problems.append(f"the Ready pods' nodes are in {len(zones)} zone{'s' if len(zones) != 1 else ''}, not 2")
    if problems:
        return Check(CHECK_PODS, FAIL, f"{'; '.join(problems)}: {seen}", fix_common, command)
    return Check(CHECK_PODS, PASS, f"{len(good)} Running and Ready on {len(nodes)} gateway nodes in "
                 f"{len(zones)} zones: {seen}", command=command)


def _leader(lab: _Lab) -> tuple[Optional[str], Optional[dict], Check]:
    """(leader node, leader pod, the lease check)."""
    lease_name = lab.inputs.get("lease", "hybrid-gateway-leader")
    command = f"kubectl -n {lab.ns} get lease {lease_name} -o jsonpath='{{.spec.holderIdentity}}'"
    lease = lab.lease
    if lease is None:
        return None, None, not_read(CHECK_LEASE, "the Lease", lab.events, command)
    if not lease.get("found"):
        return None, None, Check(
            CHECK_LEASE, FAIL, f"no Lease {lease_name} in {lab.ns}: no gateway replica has been elected",
            f"the gateway pods elect a leader with this Lease as they start: see `kubectl -n {lab.ns} "
            f"logs -l {lab.selector}` (RBAC on leases, or pods not running)", command)
    holder = lease.get("holderIdentity") or ""
    if not holder:
        return None, None, Check(
            CHECK_LEASE, FAIL, f"Lease {lease_name} has no holder: no leader right now",
            "a holder appears within a few seconds of a gateway pod starting (lease 3 s); if it "
            f"stays empty, read `kubectl -n {lab.ns} logs -l {lab.selector}`", command)
    node = holder_host(holder)
    transitions = lease.get("leaseTransitions")
    detail = f"holder {holder!r} → node {node}" + (
        f", acquired {lease['acquireTime']}" if lease.get("acquireTime") else "") + (
        f", {transitions} transition{'s' if transitions != 1 else ''}" if transitions is not None else "")
    stale = _lease_age(lab, lease)
    if stale["text"]:
        detail += ", " + stale["text"]
    fix = (f"a holder names the gateway pod's node (`<node name>_<uuid>`: the pods use the host "
           f"network). Delete the gateway pods so they elect again: `kubectl -n {lab.ns} delete pods "
           f"-l {lab.selector}`, then check `kubectl -n {lab.ns} get pods -o wide`")
    if "_" not in holder:
        return None, None, Check(CHECK_LEASE, FAIL, f"{detail}: not of the form <node name>_<uuid>",
                                 fix, command)
    if node not in lab.nodes:
        return None, None, Check(CHECK_LEASE, FAIL, f"{detail}, but the cluster has no node {node} "
                                 "(a stale holder from a node that is gone)", fix, command)
    on_node = lab.live_pods_on(node)
    if not on_node:
        return None, None, Check(CHECK_LEASE, FAIL, f"{detail}, but no gateway pod runs on {node}",
                                 fix, command)
    if stale["expired"]:
        pods = f"kubectl -n {lab.ns} get pods -l {lab.selector} -o wide"
        return None, None, Check(
            CHECK_LEASE, FAIL, f"{detail}: longer than the Lease's {stale['duration']:g} s, so it "
            "has expired and no gateway replica is leading (the leader renews it about every "
            f"{RETRY_PERIOD_SECONDS} s and gives up after {RENEW_DEADLINE_SECONDS} s without a renewal)",
            f"the holder's gateway has stopped renewing and the standby has not taken over: see "
            f"`{pods}` and read both pods' logs (`kubectl -n {lab.ns} logs <pod>`: lost access "
            "to the API server, RBAC on leases, a crash loop); deleting the gateway pods makes "
            f"them elect again: `kubectl -n {lab.ns} delete pods -l {lab.selector}`", command)
    pod = on_node[0]
    return node, pod, Check(CHECK_LEASE, PASS, f"{detail}, which runs gateway pod {pod['name']}",
                            command=command)


def _lease_age(lab: _Lab, lease: dict) -> dict:
    """How long before it was read the Lease was last renewed, judged by the API server's clock
    (the Date header of the answer that carried it, whole seconds: the server's time then was
    at least that, so the age is at least Date - renewTime and this never fails a fresh Lease);
    by this machine's clock only when the answer had no Date, and then it says so. The leader's
    own clock wrote renewTime; the API server's and the nodes' are both kept by AWS."""
    duration = float(lease.get("leaseDurationSeconds") or LEASE_DURATION_SECONDS)
    found = {"expired": False, "duration": duration, "text": ""}
    if not lease.get("renewTime"):
        return found
    renewed = parse_time(lease["renewTime"])
    local = parse_time(lease["at"])
    server = _http_date(lease.get("serverDate"))
    if server is None:
        age = (local - renewed).total_seconds()
        found["text"] = (f"renewed {age:.1f} s before it was read (by this machine's clock: the "
                         "API server's answer carried no Date)")
    else:
        age = (server - renewed).total_seconds()
        skew = (local - server).total_seconds()
        found["text"] = (f"renewed at least {max(age, 0):.0f} s before it was read (by the API "
                         f"server's clock, its Date header {lease['serverDate']}; this machine's "
                         f"clock read {skew:+.1f} s from it)")
    found["expired"] = age > duration
    return found


def _http_date(text: Optional[str]) -> Optional[datetime.datetime]:
    if not text:
        return None
    import email.utils

    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def _check_health(lab: _Lab) -> Check:
    """Every gateway replica's /healthz: each answers 200 while its process is up, the standby
    as much as the leader, so this says nothing about who leads (that is the metrics' check)."""
    path = f"/api/v1/namespaces/{lab.ns}/pods/<pod>:{HEALTH_PORT}/proxy/healthz"
    names = [p["name"] for p in lab.pods] or ["<gateway pod>"]
    command = " && ".join(f"kubectl get --raw \"{path.replace('<pod>', n)}\"" for n in names)
    if not lab.pods_event:
        return not_read(CHECK_HEALTH, "the gateway's pods", lab.events, command)
    if not lab.pods:
        return Check(CHECK_HEALTH, SKIP, f"no gateway pod to ask (see '{CHECK_PODS}')", command=command)
    unread = [p["name"] for p in lab.pods if p["name"] not in lab.healthz]
    if unread:
        return not_read(CHECK_HEALTH, f"the healthz of {', '.join(unread)}", lab.events, command)
    seen, bad = [], []
    for pod in lab.pods:
        answer = lab.healthz[pod["name"]]
        body = (answer.get("body") or "").strip().splitlines()
        said = f" {body[0][:80]!r}" if body else ""
        seen.append(f"{pod['name']} on {pod['nodeName']}: HTTP {answer.get('status')}{said}")
        if answer.get("status") != 200:
            bad.append(pod["name"])
    text = "; ".join(seen) + " (every replica answers healthz, the standby too)"
    if bad:
        return Check(CHECK_HEALTH, FAIL, text,
                     f"read the pod's log: `kubectl -n {lab.ns} logs {bad[0]}`; an unhealthy "
                     "gateway is restarted by its liveness probe; a pod the proxy cannot reach "
                     "answers 502/503 from the API server", command)
    return Check(CHECK_HEALTH, PASS, text, command=command)


def _check_leadership(lab: _Lab, node: Optional[str], pod: Optional[dict]) -> Check:
    """The Lease holder's pod says it leads (``hybrid_gateway_leader_is_active 1``) and every
    other replica says it stands by (0): the gateway sets the gauge when its leader-only setup
    (routes, VTEP config) starts and clears it when leadership ends."""
    path = f"/api/v1/namespaces/{lab.ns}/pods/<pod>:{METRICS_PORT}/proxy/metrics"
    names = [p["name"] for p in lab.pods] or ["<gateway pod>"]
    command = " && ".join(f"kubectl get --raw \"{path.replace('<pod>', n)}\" | grep {LEADER_GAUGE}"
                          for n in names)
    if lab.lease is None:
        return not_read(CHECK_LEADERSHIP, "the Lease", lab.events, command)
    if pod is None:
        return Check(CHECK_LEADERSHIP, SKIP, f"no leader resolved (see '{CHECK_LEASE}')", command=command)
    unread = [p["name"] for p in lab.pods if p["name"] not in lab.metrics]
    if unread:
        return not_read(CHECK_LEADERSHIP, f"the metrics of {', '.join(unread)}", lab.events, command)
    seen, problems = [], []
    for other in lab.pods:
        name = other["name"]
        answer = lab.metrics.get(name)
        role = "the holder" if name == pod["name"] else "standby"
        if answer is None:
            seen.append(f"{name} ({role}): not read")
            problems.append("unread")
            continue
        if answer.get("status") != 200:
            seen.append(f"{name} ({role}): :{METRICS_PORT}/metrics answered HTTP {answer.get('status')}"
                        + (f" {answer.get('body', '')[:80]!r}" if answer.get("body") else ""))
            problems.append("unread")
            continue
        value = answer.get("gauge")
        if value is None:
            seen.append(f"{name} ({role}): no {LEADER_GAUGE} in its metrics")
            problems.append("no gauge")
            continue
        seen.append(f"{name} ({role}): {LEADER_GAUGE} {value:g}")
        if name == pod["name"] and value != 1:
            problems.append("holder not leading")
        elif name != pod["name"] and value != 0:
            problems.append("two leaders")
    text = "; ".join(seen)
    if "two leaders" in problems:
        both = "holder not leading" not in problems
        return Check(CHECK_LEADERSHIP, FAIL, text + f" — a replica other than the Lease holder {pod['name']} "
                     "says it leads" + (": two gateways may write routes and the VTEP config" if both
                                       else ", and the holder does not"),
                     f"delete the replica that is not the holder so it restarts as a standby: `kubectl -n "
                     f"{lab.ns} delete pod <that pod>`, then run again", command)
    if "holder not leading" in problems:
        return Check(CHECK_LEADERSHIP, FAIL, text + f" — the Lease names {node}, but its gateway "
                     "is not running the leader's setup (routes, VTEP config)",
                     f"read its log (`kubectl -n {lab.ns} logs {pod['name']}`: a failed route "
                     f"update ends the setup); hand over: `kubectl -n {lab.ns} delete pod {pod['name']}`",
                     command)
    if problems:
        return Check(CHECK_LEADERSHIP, FAIL, text + " — leadership cannot be confirmed from the "
                     "gateway's own metrics",
                     f"the gateway serves them on :{METRICS_PORT} (its --metrics-bind-address); the "
                     "API server's pod proxy must reach that port on the gateway node (the cluster "
                     "security group admits the control plane to the nodes); a gateway without "
                     f"{LEADER_GAUGE} predates the chart this lab pins", command)
    return Check(CHECK_LEADERSHIP, PASS, text + f" — only the Lease holder on {node} says it leads",
                 command=command)


def _check_route(lab: _Lab, node: Optional[str], pod: Optional[dict]) -> Check:
    cidr = lab.inputs.get("hybridPodCidr", "<hybrid pod CIDR>")
    ids = lab.inputs.get("routeTables") or [t["id"] for t in lab.tables]
    command = (f"aws ec2 describe-route-tables --region {lab.region} --route-table-ids {' '.join(ids)} "
               f"--query \"RouteTables[].[RouteTableId,Routes[?DestinationCidrBlock=='{cidr}']]\"")
    eni = lab.primary_eni(node)
    instance = lab.instances.get(node or "") or {}
    if instance.get("instanceId"):
        # No JMESPath literal (`0`): backticks inside double quotes are command substitution.
        command += (f" && aws ec2 describe-instances --region {lab.region} --instance-ids "
                    f"{instance['instanceId']} --query \"Reservations[].Instances[].NetworkInterfaces"
                    "[].[Attachment.DeviceIndex,NetworkInterfaceId]\" --output text")
    if not lab.tables:
        return not_read(CHECK_ROUTE, "the route tables", lab.events, command)
    if lab.lease is None:
        return not_read(CHECK_ROUTE, "the Lease (which names the leader)", lab.events, command)
    if node is not None and node not in lab.instances:
        return not_read(CHECK_ROUTE, f"the leader node {node}'s EC2 instance", lab.events, command)
    leader_pod = pod["name"] if pod else "<leader pod>"
    handover = (f"the leader writes the route once, when it wins the Lease: to have it written "
                f"again, hand over (`kubectl -n {lab.ns} delete pod {leader_pod}`) and read the new "
                f"leader's log for the route update (its role needs ec2:CreateRoute/ReplaceRoute on "
                f"these tables, through the Pod Identity agent)")
    seen, problems, unsure = [], [], False
    for table in lab.tables:
        if not table.get("found"):
            seen.append(f"{table['id']}: not found ({table.get('error', 'no such table')})")
            problems.append("table")
            continue
        route = next((r for r in table["routes"] if r.get("DestinationCidrBlock") == cidr), None)
        if route is None:
            seen.append(f"{table['id']}: no route for {cidr}")
            problems.append("missing")
            continue
        target = route.get("NetworkInterfaceId") or route.get("InstanceId") or route.get(
            "TransitGatewayId") or route.get("GatewayId") or route.get("NatGatewayId") or "nothing"
        state = route.get("State", "unknown")
        owner = lab.eni_owner(route.get("NetworkInterfaceId"))
        text = f"{table['id']}: {cidr} → {target}" + (f" (node {owner})" if owner else "") + f", {state}"
        if state != "active":
            problems.append("blackhole")
            text += " — its target is gone"
        elif not route.get("NetworkInterfaceId"):
            problems.append("other")
            text += " — not a network interface"
        elif eni is None:
            unsure = True
        elif route["NetworkInterfaceId"] != eni:
            problems.append("other")
            text += f" — not the leader's primary ENI {eni}"
        seen.append(text)
    if node is not None and eni is None and not problems:
        where = instance.get("lookup") or {}
        return Check(CHECK_ROUTE, FAIL, "; ".join(seen) + f"; but the leader node {node}'s primary ENI "
                     f"was not found (EC2 lookup by {where.get('by', 'nothing')} "
                     f"{where.get('value', '')}: {instance.get('error', 'not read')})",
                     "check that the leader node is an EC2 instance of this region "
                     f"(`kubectl get node {node} -o jsonpath='{{.spec.providerID}}'`)", command)
    if problems:
        fix = handover
        if "table" in problems:
            fix = ("a route table the stack names is gone: `pulumi refresh` and `pulumi up` the "
                   "gateway layer; then " + handover)
        elif "blackhole" in problems:
            fix = ("the route points at an interface that no longer exists (a replaced gateway "
                   "node); the gateway never deletes routes and only writes them on winning the "
                   "Lease: " + handover)
        elif "missing" in problems:
            fix = ("no route: the leader never wrote it (is the table in the chart's "
                   "routeTableIDs? did CreateRoute fail in the leader's log?): " + handover)
        return Check(CHECK_ROUTE, FAIL, "; ".join(seen), fix, command)
    if node is None or unsure:
        return Check(CHECK_ROUTE, SKIP, "; ".join(seen) + f" — whether that is the leader's cannot be "
                     f"said without a leader (see '{CHECK_LEASE}')", command=command)
    return Check(CHECK_ROUTE, PASS, "; ".join(seen) + f" — the leader {node}'s primary ENI (device index 0)",
                 command=command)


def _check_vtep(lab: _Lab, node: Optional[str], pod: Optional[dict]) -> Check:
    command = "kubectl get ciliumvtepconfig hybrid-gateway -o yaml"
    if node:
        command += f" && kubectl get node {node} -o wide"
    leader_pod = pod["name"] if pod else "<leader pod>"
    fix_missing = ("the leader upserts it when it wins the Lease (and re-creates it if deleted): "
                   f"read `kubectl -n {lab.ns} logs {leader_pod}`; the CRD comes with the AWS Cilium "
                   "build (1.18.8-1 or later, VTEP on)")
    if lab.vtep is None:
        return not_read(CHECK_VTEP, "the CiliumVTEPConfig", lab.events, command)
    if lab.lease is None:
        return not_read(CHECK_VTEP, "the Lease (which names the leader)", lab.events, command)
    if not lab.vtep.get("found"):
        return Check(CHECK_VTEP, FAIL, f"no CiliumVTEPConfig {VTEP_CONFIG} (asked cilium.io "
                     f"{', '.join(lab.vtep.get('tried') or VTEP_VERSIONS)})", fix_missing, command)
    spec = lab.vtep.get("spec") or {}
    # cilium.io/v2 (what the gateway writes) says endpoints; upstream v2alpha1 vtepEndpoints.
    endpoints = spec.get("endpoints") or spec.get("vtepEndpoints") or []
    if not endpoints:
        return Check(CHECK_VTEP, FAIL, f"CiliumVTEPConfig {VTEP_CONFIG} has no endpoints", fix_missing, command)
    shown = ", ".join(f"{e.get('cidr')} → {e.get('tunnelEndpoint')}" for e in endpoints)
    seen = f"{VTEP_CONFIG} (cilium.io/{lab.vtep.get('version')}): {shown}"
    if node is None:
        return Check(CHECK_VTEP, SKIP, seen + f" — whether that is the leader cannot be said "
                     f"without a leader (see '{CHECK_LEASE}')", command=command)
    ip = (lab.nodes.get(node) or {}).get("internalIP")
    wrong = [e for e in endpoints if e.get("tunnelEndpoint") != ip]
    vpc = lab.inputs.get("cloudVpcCidr")
    if wrong:
        others = {e.get("tunnelEndpoint") for e in wrong}
        owners = [n["name"] for n in lab.nodes.values() if n.get("internalIP") in others]
        return Check(CHECK_VTEP, FAIL, seen + f" — not the leader {node}'s IP {ip}" +
                     (f" (it is {', '.join(owners)}'s)" if owners else ""),
                     "hybrid pods would tunnel to a gateway that is not the leader: the leader "
                     f"writes it on winning the Lease; delete the stale object so the leader "
                     f"re-creates it (`kubectl delete ciliumvtepconfig {VTEP_CONFIG}`), or hand "
                     f"over (`kubectl -n {lab.ns} delete pod {leader_pod}`)", command)
    if vpc and not any(_same_network(e.get("cidr"), vpc) for e in endpoints):
        return Check(CHECK_VTEP, FAIL, seen + f" — no endpoint for the VPC {vpc}",
                     f"the chart's vpcCIDR should be the cloud VPC's CIDR {vpc} (gateway layer)", command)
    return Check(CHECK_VTEP, PASS, seen + f" — the leader {node}'s InternalIP", command=command)


def _same_network(a: Optional[str], b: str) -> bool:
    try:
        return ipaddress.ip_network(a or "", strict=False) == ipaddress.ip_network(b, strict=False)
    except ValueError:
        return False


def _traffic_fix(direction: str, lab: _Lab, svc_bad: bool, pod_bad: bool) -> str:
    cidr = lab.inputs.get("hybridPodCidr", "<hybrid pod CIDR>")
    if direction == "cloudToHybrid":
        if svc_bad and not pod_bad:
            return ("pod to pod works but the ClusterIP Service does not: cloud pods' Service "
                    f"traffic to hybrid endpoints needs AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS={cidr} "
                    "on the vpc-cni add-on (docs/gateway.md#what-it-does)")
        return ("cloud pods reach hybrid pods by the VPC route to the leader's ENI, then VXLAN "
                "(UDP 8472) to the hybrid node: fix the route and VTEP checks above first, then "
                "the VXLAN rules between the gateway nodes and the server LAN, and the gateway "
                "nodes' source/dest check (off on the primary ENI)")
    if svc_bad and not pod_bad:
        return ("pod to pod works but the Service does not: Service traffic from hybrid pods is "
                "NATed on the node and arrives from the node IP, so the cluster security group "
                "must admit the remote node CIDR on the echo port (docs/networking.md#where-a-hybrid-pods-packets-come-from)")
    if pod_bad and not svc_bad:
        return ("the Service works but pod to pod does not: that traffic arrives from the pod IP "
                "through the gateway, so the cluster security group must admit the remote pod CIDR "
                "on the echo port, and the VTEP config must point at the leader "
                "(docs/networking.md#where-a-hybrid-pods-packets-come-from)")
    return ("hybrid pods reach the VPC through Cilium's VTEP to the leader: fix the VTEP and "
            "Cilium checks first; hybrid pods also need DNS (TCP+UDP 53) to CoreDNS on cloud "
            "nodes, which the cluster security group must admit from the remote pod and node "
            "CIDRs (docs/networking.md#ports)")


def _check_traffic(lab: _Lab, direction: str) -> Check:
    name = CHECK_TRAFFIC[direction]
    demo_ns = lab.inputs.get("demoNamespace", "demo-gateway")
    prober = (lab.inputs.get("probers") or PROBERS).get(direction, PROBERS[direction])
    window = float(lab.inputs.get("window", WINDOW_SECONDS))
    need = int(lab.inputs.get("minSuccesses", MIN_SUCCESSES))
    allowed = int(lab.inputs.get("maxFailures", MAX_FAILURES))
    max_age = float(lab.inputs.get("maxLogAge", MAX_LOG_AGE_SECONDS))
    command = f"kubectl -n {demo_ns} logs deploy/{prober} --timestamps --since={window:g}s"
    pods_event = lab.prober_pods.get(direction)
    if pods_event is None:
        return not_read(name, f"{prober}'s pods", lab.events, command)
    if not pods_event.get("items"):
        return Check(name, FAIL, f"no {prober} pod in {demo_ns}",
                     f"deploy the demo layer (`pulumi up`); see `kubectl -n {demo_ns} get deploy {prober}`",
                     command)
    logs = lab.prober_logs.get(direction, [])
    logged = {e.get("pod") for e in logs}
    unread = [p["name"] for p in pods_event["items"]
              if p.get("phase") in ("Running", "Succeeded", "Failed") and p["name"] not in logged]
    if unread:
        return not_read(name, f"the log of {', '.join(unread)}", lab.events, command)
    refused = [(e, *_log_refusal(lab, e)) for e in logs if e.get("error")]
    errors = [text for _event, text, _fix, _fatal in refused]
    lines = [line for e in logs for line in e.get("lines", [])]
    found = probe_logs.parse(lines)
    if not found:
        states = "; ".join(f"{p['name']} {p['phase']}" for p in pods_event["items"])
        fix = next((fix for _e, _t, fix, _f in refused if fix),
                   f"see why it is not probing: `kubectl -n {demo_ns} describe pod -l app={prober}`")
        return Check(name, FAIL, f"{prober} logged no probe in the last {window:g} s ({states}"
                     + (f"; log: {'; '.join(errors)}" if errors else "") + ")", fix, command)
    fatal = [(text, fix) for _e, text, fix, is_fatal in refused if is_fatal]
    if fatal:
        return Check(name, FAIL, f"{prober}'s log: " + "; ".join(errors), fatal[0][1], command)
    newest = found[-1].at
    start = newest - datetime.timedelta(seconds=window)
    read_at = parse_time(logs[-1]["at"]) if logs else newest
    age = (read_at - newest).total_seconds()
    per_path, bad = [], {}
    for path in ("svc", "pod"):
        ok = probe_logs.successes(found, path, start, newest)
        failed = probe_logs.failures(found, path, start, newest)
        bad[path] = ok < need or failed > allowed
        label = "Service" if path == "svc" else "pod to pod"
        per_path.append(f"{label} ({path}): {ok} ok, {failed} FAIL")
    seen = (f"{prober}, last {window:g} s of its log: " + "; ".join(per_path) +
            f"; newest line {age:.1f} s before it was read")
    if age > max_age:
        return Check(name, FAIL, seen + f" (older than {max_age:g} s: the prober stopped logging, or "
                     "this machine's clock is off)",
                     f"see `kubectl -n {demo_ns} get pods -l app={prober}`; its liveness probe "
                     "restarts a loop stuck for a minute", command)
    if bad["svc"] or bad["pod"]:
        return Check(name, FAIL, seen + f" (needs ≥ {need} ok and ≤ {allowed} FAIL on each path)",
                     _traffic_fix(direction, lab, bad["svc"], bad["pod"]), command)
    return Check(name, PASS, seen, command=command)


def _log_refusal(lab: _Lab, event: dict) -> tuple[str, str, bool]:
    """What a refused ``pods/log`` request means: (what was seen, the fix or "", whether it
    fails the check even when another pod's log was read). The API server answers with a Status:
    500 when it cannot dial the kubelet (on a hybrid node: the remote node network does not
    admit the control plane on TCP 10250), 400 for a container that has not started, 404 for a
    pod that went away while it was read. Older recordings kept only "HTTP <code>"."""
    error = event.get("error")
    pod, node = event.get("pod"), event.get("node") or "its node"
    if isinstance(error, str):
        return f"{pod}: {error}", "", False
    code, reason, message = error.get("code"), error.get("reason") or "", error.get("message") or ""
    said = f"HTTP {code}{' ' + reason if reason else ''}: {message[:160]}"
    labels = (lab.nodes.get(event.get("node") or "") or {}).get("labels") or {}
    hybrid = labels.get("eks.amazonaws.com/compute-type") == "hybrid" or (
        event.get("node") or "").startswith("mi-")
    if code in (500, 502, 503) and ("10250" in message or "dial" in message or "kubelet" in message):
        where = f"the hybrid node {node}" if hybrid else f"node {node}"
        return (f"{pod}: the API server could not reach the kubelet on {where} ({said})",
                "check TCP 10250 from the cluster to the remote node network: the hybrid nodes' "
                "firewall and the on-premises security rules must admit the EKS control plane's "
                "ENIs (the cluster VPC CIDR) on 10250, and the remote node CIDR must route back "
                "through the Transit Gateway; `kubectl logs` and `kubectl exec` on hybrid pods "
                f"fail the same way (test: `kubectl -n {event.get('namespace', '<ns>')} logs {pod}`)"
                if hybrid else
                "the API server could not open TCP 10250 to that node's kubelet: check the node is "
                "Ready and its security group admits the cluster security group on 10250", True)
    if code == 400:
        return (f"{pod}: its container has not started yet or is restarting ({said})",
                f"wait for it to run (`kubectl describe pod {pod}`), then run again", False)
    if code == 404:
        return (f"{pod}: the pod went away while its log was read ({said})",
                "a rollout or an eviction replaced it: run again", False)
    if code in (401, 403):
        return (f"{pod}: reading its log was refused ({said})",
                "your identity needs get on pods/log in the demo namespace", True)
    return f"{pod}: {said}", "", True


def _check_cilium(lab: _Lab) -> Check:
    command = 'kubectl -n kube-system get configmap cilium-config -o yaml | grep -E "enable-vtep|enable-l7-proxy"'
    fix = ("set vtep.enabled=true and l7Proxy=false on the Cilium release (components/cilium.py) — "
           "at first install: turning VTEP on by a Helm upgrade has been seen not to apply "
           "(docs/gateway.md#what-it-does) — then `kubectl -n kube-system rollout restart daemonset/cilium`")
    if lab.cilium is None:
        return not_read(CHECK_CILIUM, "cilium-config", lab.events, command)
    if not lab.cilium.get("found"):
        return Check(CHECK_CILIUM, FAIL, "no ConfigMap cilium-config in kube-system: is Cilium installed?",
                     fix, command)
    data = lab.cilium.get("data") or {}
    vtep, l7 = data.get("enable-vtep"), data.get("enable-l7-proxy")
    seen = f"enable-vtep: {vtep!r}, enable-l7-proxy: {l7!r}"
    problems = []
    if str(vtep).lower() != "true":
        problems.append("VTEP is not on")
    # An absent key means Cilium's default, which turns the L7 proxy on.
    if str(l7).lower() != "false":
        problems.append("the L7 proxy is not off")
    if problems:
        return Check(CHECK_CILIUM, FAIL, f"{seen}: {' and '.join(problems)}", fix, command)
    return Check(CHECK_CILIUM, PASS, seen, command=command)


def _check_agent(lab: _Lab) -> Check:
    command = f"kubectl -n kube-system get daemonset {POD_IDENTITY_AGENT}"
    fix = ("the gateway's route writes use Pod Identity credentials: add the eks-pod-identity-agent "
           "add-on (the cluster layer) and see `aws eks describe-addon --cluster-name <cluster> "
           f"--addon-name {POD_IDENTITY_AGENT}`; then `kubectl -n kube-system describe daemonset "
           f"{POD_IDENTITY_AGENT}`")
    if lab.agent is None:
        return not_read(CHECK_AGENT, "the agent's DaemonSet", lab.events, command)
    if not lab.agent.get("found"):
        return Check(CHECK_AGENT, FAIL, f"no DaemonSet {POD_IDENTITY_AGENT} in kube-system", fix, command)
    status = lab.agent.get("status") or {}
    desired, ready = status.get("desiredNumberScheduled") or 0, status.get("numberReady") or 0
    seen = f"{ready} of {desired} pods ready"
    if desired <= 0 or ready != desired:
        return Check(CHECK_AGENT, FAIL, seen, fix, command)
    return Check(CHECK_AGENT, PASS, seen, command=command)


def analyse(events: list[dict]) -> Report:
    lab = _Lab(events)
    node, pod, lease_check = _leader(lab)
    checks = [_check_pods(lab), lease_check, _check_health(lab), _check_leadership(lab, node, pod), _check_route(lab, node, pod),
              _check_vtep(lab, node, pod), _check_traffic(lab, "cloudToHybrid"),
              _check_traffic(lab, "hybridToCloud"), _check_cilium(lab), _check_agent(lab)]
    notes = []
    if node and pod:
        instance = lab.instances.get(node) or {}
        lookup = instance.get("lookup") or {}
        notes.append(f"Leader: node {node} ({lab.zone(node) or 'no zone'}), pod {pod['name']}, "
                     f"InternalIP {(lab.nodes.get(node) or {}).get('internalIP')}, instance "
                     f"{instance.get('instanceId', '?')}, primary ENI {lab.primary_eni(node) or '?'} "
                     f"(found by {lookup.get('by', 'nothing')}).")
        notes.append("When you show `kubectl get lease`, say that the HOLDER is `<node name>_<uuid>`, "
                     "not a pod name: the gateway pods use the host network. To fail over, delete "
                     f"the pod on that node: `kubectl -n {lab.ns} delete pod {pod['name']}` "
                     "(or `python -m rehearse failover`, which measures it).")
    if lab.inputs:
        notes.append(f"Traffic thresholds: the last {float(lab.inputs.get('window', WINDOW_SECONDS)):g} s "
                     f"of each prober's log (the cluster's timestamps), ≥ {lab.inputs.get('minSuccesses')} "
                     f"ok and ≤ {lab.inputs.get('maxFailures')} FAIL per path, newest line at most "
                     f"{float(lab.inputs.get('maxLogAge', MAX_LOG_AGE_SECONDS)):g} s old.")
    return Report(command="verify gateway", stack=lab.started.get("stack", "?"),
                  started=lab.started.get("at", "?"), title="Demo 1: the hybrid nodes gateway, verified",
                  checks=checks, notes=notes)
