"""The analysis of `rehearse hostnet` (pure: events -> report): which path each probe took,
named from the source address the server logged and the cloud route tables' longest prefix,
beside the lab's reachability model. The collector is collect.py."""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable, Optional

from rehearse.run.outcome import ending, not_read
from rehearse.run.record import RUN_STARTED, every, first
from rehearse.run.report import FAIL, PASS, Chart, Check, Report
from rehearse.commands.hostnet.kinds import (
    NAMESPACE, REHEARSE_LABEL, STACK_LABEL, PORT, ECHO_APP, SERVER,
    HOST_CLIENT, CLOUD_CLIENT, INPUTS, NODES, ECHO, CREATED,
    POD, WAIT, LOG, CLEANUP, SWEPT, HOST_TO_POD,
    HOST_TO_SVC, CLOUD_TO_HOST, CHECK, CHECK_CLEANUP, TGW, GATEWAY, ROUTE_TABLE)


# --- analysis -------------------------------------------------------------------------------

#: echo-cloud's nginx (the image's ``main`` format): ``<remote_addr> - - [...] "GET <path> ..."``.
_NGINX = re.compile(r'^(?:\S+Z\s+)?(?P<ip>[0-9a-fA-F:.]+) - \S+ \[[^\]]*\] "(?:GET|HEAD) (?P<path>\S+)')
#: busybox httpd -v/-vv: ``<ip>:<port>: url:<path>`` or ``[<ipv6>]:<port>: response:200``.
_HTTPD = re.compile(r'^(?:\S+Z\s+)?(?:\[(?P<ip6>[0-9a-fA-F:.]+)\]|(?P<ip4>[0-9.]+)):\d+: '
                    r'(?P<what>url|response):(?P<value>\S+)')
_CLIENT = re.compile(r'^(?:\S+Z\s+)?client (?P<probe>\w+) (?P<result>ok|FAIL)\s*$')


def nginx_sources(lines: Iterable[str], marker: str) -> list[str]:
    """The peer address of every request whose path carries ``marker``."""
    return [m["ip"] for m in map(_NGINX.match, lines) if m and marker in m["path"]]


def httpd_sources(lines: Iterable[str], marker: str) -> list[str]:
    """The peer address of every request for a path carrying ``marker`` (an IPv4-mapped IPv6
    peer, as httpd listening on ``::`` names it, is given as IPv4)."""
    found = []
    for m in map(_HTTPD.match, lines):
        if m and m["what"] == "url" and marker in m["value"]:
            ip = m["ip4"] or m["ip6"]
            found.append(ip.removeprefix("::ffff:"))
    return found


def client_results(lines: Iterable[str], probe: str) -> tuple[int, int]:
    results = [m["result"] for m in map(_CLIENT.match, lines) if m and m["probe"] == probe]
    return results.count("ok"), results.count("FAIL")


def _in(address: Optional[str], cidr: Optional[str]) -> bool:
    try:
        return bool(address and cidr) and ipaddress.ip_address(address) in ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False


def route_for(tables: list[dict], address: str) -> list[str]:
    """Per route table, the route ``address`` takes (longest prefix), as text."""
    shown = []
    for table in tables:
        best = None
        for route in table.get("routes") or []:
            cidr = route.get("DestinationCidrBlock")
            if cidr and _in(address, cidr) and (best is None or ipaddress.ip_network(cidr).prefixlen
                                                  > ipaddress.ip_network(best["DestinationCidrBlock"]).prefixlen):
                best = route
        if best is None:
            shown.append(f"{table['id']}: no route for {address}")
            continue
        target = (best.get("TransitGatewayId") or best.get("NetworkInterfaceId") or best.get("GatewayId")
                  or best.get("NatGatewayId") or best.get("InstanceId") or "?")
        shown.append(f"{table['id']}: {best['DestinationCidrBlock']} → {target} ({best.get('State', '?')})")
    return shown


def route_kind(tables: list[dict], address: str) -> set[str]:
    kinds = set()
    for text in route_for(tables, address):
        kinds.add("tgw" if "→ tgw-" in text else "eni" if "→ eni-" in text else
                  "local" if "→ local" in text else "none" if "no route" in text else "other")
    return kinds


class _Run:
    def __init__(self, events: list[dict]):
        self.started = first(events, RUN_STARTED) or {}
        self.inputs = first(events, INPUTS) or {}
        self.nodes = {n["name"]: n for n in (first(events, NODES) or {}).get("items", [])}
        self.echo = first(events, ECHO) or {}
        self.tables = list(every(events, ROUTE_TABLE))
        self.pods = {e["name"]: e for e in every(events, POD)}
        self.created = {e["name"]: e for e in every(events, CREATED)}
        self.logs: dict[str, list[dict]] = {}
        for event in every(events, LOG):
            self.logs.setdefault(event["role"], []).append(event)
        self.waits = list(every(events, WAIT))
        self.cleanup = first(events, CLEANUP)
        self.events = events
        #: The path each probe's traffic took, as its check names it (the chart draws them).
        self.paths: dict[str, str] = {}

    def lines(self, role: str) -> list[str]:
        return [line for e in self.logs.get(role, []) for line in e.get("lines", [])]

    def node_of_ip(self, ip: str) -> Optional[str]:
        return next((n["name"] for n in self.nodes.values() if n.get("internalIP") == ip), None)


def _classify_from_hybrid(run: _Run, source: str, node_ip: Optional[str]) -> tuple[str, str]:
    """(path, why) for a request from the hybrid host network, by the source the server saw."""
    pod_cidr = run.inputs.get("hybridPodCidr")
    if source == node_ip:
        return TGW, f"the hybrid node's own IP {source}"
    if _in(source, pod_cidr):
        return GATEWAY, f"{source}, in the hybrid pod CIDR {pod_cidr}"
    if _in(source, run.inputs.get("remoteNodeCidr")):
        return TGW, f"{source}, another address in the remote node CIDR {run.inputs['remoteNodeCidr']}"
    return "unexplained", f"{source}, neither the node's IP nor in {pod_cidr}"


def _reply_route(run: _Run, address: str) -> tuple[str, set[str]]:
    routes = route_for(run.tables, address)
    return "; ".join(routes), route_kind(run.tables, address)


def _check_from_host(run: _Run, probe: str) -> Check:
    name = CHECK[probe]
    token = run.inputs.get("token", "?")
    ns = run.inputs.get("demoNamespace", "demo-gateway")
    server = run.pods.get(SERVER) or {}
    node = server.get("nodeName")
    node_ip = server.get("hostIP") or (run.nodes.get(node) or {}).get("internalIP")
    target = (f"echo-cloud pod {next((p['podIP'] for p in run.echo.get('pods', []) if p.get('podIP')), '?')}"
              if probe == HOST_TO_POD else f"Service echo-cloud {run.echo.get('clusterIP')}:{run.echo.get('port')}")
    command = f"kubectl -n {ns} logs -l app={ECHO_APP} --since=10m | grep {token}-{probe}"
    if HOST_CLIENT not in run.created:
        return Check(name, FAIL, "not probed: the host-network server never ran on the hybrid node "
                     f"({_pod_state(server)})", _not_running_fix(server), command)
    ok, failed = client_results(run.lines(HOST_CLIENT), probe)
    sources = nginx_sources(run.lines(ECHO_APP), f"{token}-{probe}")
    said = f"{HOST_CLIENT} on {node} ({node_ip}) → {target}: {ok} ok, {failed} FAIL"
    if not sources:
        return Check(name, FAIL, said + "; echo-cloud logged none of these requests",
                     "the host network of a hybrid node reaches cloud pods over the Transit Gateway "
                     "with the node's address: the cluster security group must admit the remote node "
                     "CIDR on echo-cloud's port 8080 (stacks/layers/demo.py admit_remote_networks), and "
                     "the on-prem route table must send the VPC CIDR to the Transit Gateway", command)
    return _verdict(run, probe, said, _from_hybrid(run, sources, node_ip), command)


def _from_hybrid(run: _Run, sources: list[str], node_ip: Optional[str]) -> tuple[str, str, bool]:
    paths = []
    for source in dict.fromkeys(sources):
        path, why = _classify_from_hybrid(run, source, node_ip)
        routes, kinds = _reply_route(run, source)
        consistent = (path == TGW and kinds <= {"tgw"}) or (path == GATEWAY and kinds <= {"eni"})
        paths.append((path, f"the server saw {why}; its reply follows {routes or 'no route table read'}"
                      + ("" if consistent or not run.tables else " — which does not match that path")))
    found = {p for p, _ in paths}
    path = found.pop() if len(found) == 1 else "mixed: " + ", ".join(sorted({p for p, _ in paths}))
    return path, "; ".join(text for _, text in paths), path == TGW


def _check_to_host(run: _Run) -> Check:
    name = CHECK[CLOUD_TO_HOST]
    token = run.inputs.get("token", "?")
    port = run.inputs.get("port", PORT)
    server = run.pods.get(SERVER) or {}
    node = server.get("nodeName")
    node_ip = server.get("hostIP") or (run.nodes.get(node) or {}).get("internalIP")
    # The server pod is gone after the run (its log is in events.jsonl): the route stays.
    command = _routes_command(run)
    if CLOUD_CLIENT not in run.created:
        return Check(name, FAIL, "not probed: the host-network server never ran on the hybrid node "
                     f"({_pod_state(server)})", _not_running_fix(server), command)
    client = run.pods.get(CLOUD_CLIENT) or {}
    ok, failed = client_results(run.lines(CLOUD_CLIENT), CLOUD_TO_HOST)
    said = (f"{CLOUD_CLIENT} (pod {client.get('podIP')} on {client.get('nodeName')}) → "
            f"{node_ip}:{port} (host network of {node}): {ok} ok, {failed} FAIL")
    sources = httpd_sources(run.lines(SERVER), f"hostnet-{token}")
    if not sources:
        fix = ("the hybrid hosts' security group admits from the cloud VPC only TCP 10250 and 9443 "
               "(components/hybrid_hosts.py): run again with `--port 9443`" if port != PORT else
               "the cloud route tables must send the remote node CIDR to the Transit Gateway, and the "
               "hybrid hosts' security group admit TCP 9443 from the cloud VPC "
               "(components/hybrid_hosts.py); is another host-network process on the node using the "
               f"port? (`kubectl -n {NAMESPACE} logs {SERVER}` says so while the run lasts)")
        return Check(name, FAIL, said + "; the server logged none of these requests", fix, command)
    routes, kinds = _reply_route(run, node_ip or "")
    path = TGW if kinds == {"tgw"} else GATEWAY if kinds == {"eni"} else "unexplained"
    seen = []
    for source in dict.fromkeys(sources):
        if source == client.get("podIP"):
            seen.append(f"the cloud pod's own IP {source} (not SNATed)")
        elif source == client.get("hostIP"):
            seen.append(f"the cloud node's IP {source} (the VPC CNI SNATs pods' traffic to "
                        "addresses outside the VPC that AWS_VPC_K8S_CNI_EXCLUDE_SNAT_CIDRS does not list)")
        elif _in(source, run.inputs.get("hybridPodCidr")):
            seen.append(f"{source}, in the hybrid pod CIDR (not a cloud address)")
            path = "unexplained"
        else:
            owner = run.node_of_ip(source)
            seen.append(f"{source}" + (f" (node {owner})" if owner else ", an address the run cannot place"))
    evidence = (f"the server saw {', '.join(seen)}; the request to {node_ip} follows "
                f"{routes or 'no route table read'}")
    if not run.tables:
        path = "not determined (no route table read)"
    return _verdict(run, CLOUD_TO_HOST, said, (path, evidence, path == TGW), command)


def _routes_command(run: _Run) -> str:
    tables = " ".join(t["id"] for t in run.tables) or "<cloud route table ids>"
    return (f"aws ec2 describe-route-tables --region {run.inputs.get('region', '<region>')} "
            f"--route-table-ids {tables} --query 'RouteTables[].Routes[].[DestinationCidrBlock,"
            f"TransitGatewayId,NetworkInterfaceId,State]' --output table")


def _verdict(run: _Run, probe: str, said: str, found: tuple[str, str, bool], command: str) -> Check:
    name, (path, evidence, expected) = CHECK[probe], found
    run.paths[probe] = path
    seen = f"{said}. Path: {path} — {evidence}. Expected: {TGW} (a host-network pod has the node's address)"
    if expected:
        return Check(name, PASS, seen, command=command)
    return Check(name, FAIL, seen,
                 "the lab's reachability model (offline/reachability.py) and docs/networking.md send the "
                 "hybrid node CIDR over the Transit Gateway and only pod-CIDR addresses through the "
                 "gateway: this cluster does otherwise — tell the presenter, and record it in "
                 "docs/networking.md and the model", command)


def _pod_state(pod: dict) -> str:
    if not pod:
        return "not created"
    return f"{pod.get('name')} {pod.get('phase') or 'Pending'}" + (f", {pod['reason']}" if pod.get("reason") else "")


def _not_running_fix(pod: dict) -> str:
    return (f"see `kubectl -n {NAMESPACE} describe pod {SERVER}` while the run lasts: a host-network "
            "pod needs the hybrid node's taint tolerated and its port free on the node; an admission "
            "policy (Kyverno) may refuse hostNetwork even in a privileged namespace")


def _check_cleanup(run: _Run) -> Check:
    command = f"kubectl get namespace {NAMESPACE}"
    made = [f"{'namespace' if e['object'] == 'Namespace' else 'pod'}/{e['name']}" for e in run.created.values()]
    if run.cleanup is None and not made:
        return not_read(CHECK_CLEANUP, "a cleanup: nothing was created", run.events, command)
    if run.cleanup is None:
        # Something this run created may still be there: a verdict on the cluster, with its fix.
        return Check(CHECK_CLEANUP, FAIL, "no cleanup was recorded after creating " + ", ".join(made),
                     f"`kubectl delete namespace {NAMESPACE}`", command)
    left = [m for m in made if m not in run.cleanup.get("deleted", [])] + list(run.cleanup.get("failed", []))
    if left or not run.cleanup.get("namespaceGone", True):
        return Check(CHECK_CLEANUP, FAIL, "left behind: " + (", ".join(dict.fromkeys(left)) or
                                                              f"namespace {NAMESPACE} still terminating"),
                     f"`kubectl delete namespace {NAMESPACE}`", command)
    return Check(CHECK_CLEANUP, PASS, f"deleted {', '.join(run.cleanup['deleted'])}; the namespace is gone",
                 command=command)


def analyse(events: list[dict]) -> Report:
    run = _Run(events)
    checks = [_check_from_host(run, HOST_TO_POD), _check_from_host(run, HOST_TO_SVC),
              _check_to_host(run), _check_cleanup(run)]
    if ending(events) is not None and run.cleanup is None:
        # The logs the probe checks read are collected just before the cleanup.
        checks[:3] = [c if c.status == PASS else not_read(c.name, "the probe pods' logs", events, c.command)
                      for c in checks[:3]]
    notes = [
        "Evidence, not assumption: each path is named from the source address the server logged "
        "(echo-cloud's nginx for the requests from the hybrid host network; busybox `httpd -vv` on "
        "the hybrid host network for the cloud pod's) and the cloud route table's longest-prefix "
        "route for the hybrid-side address.",
        f"The probe pods ran in namespace {NAMESPACE} (Pod Security enforce: privileged, because "
        "hostNetwork is forbidden by baseline), non-root, every capability dropped, no privilege "
        "escalation, read-only root, RuntimeDefault seccomp, and were deleted after the run.",
    ]
    deadline = next((e["manifest"]["spec"].get("activeDeadlineSeconds") for e in run.created.values()
                     if e.get("object") == "Pod"), None)
    if deadline:
        notes.append(f"Each probe pod had activeDeadlineSeconds {deadline}: had this run been killed "
                     "before its cleanup, the kubelet would have stopped the host-network server "
                     "that long after it started (phase Failed, DeadlineExceeded), and the next run "
                     f"removes namespace {NAMESPACE} by its labels ({REHEARSE_LABEL}=hostnet, "
                     f"{STACK_LABEL}=<the stack's cluster>).")
    swept = first(run.events, SWEPT)
    if swept:
        states = ", ".join(f"{name} {v.get('phase') or 'Pending'}" + (f" ({v['reason']})" if v.get("reason") else "")
                           for name, v in sorted((swept.get("pods") or {}).items()))
        notes.append(f"Before probing, removed the leftovers of an earlier run ({swept.get('run') or '?'}) "
                     f"that did not clean up: {', '.join(swept.get('deleted') or []) or 'nothing'}"
                     + (f" — its pods were {states}" if states else "") + ".")
    for wait in run.waits:
        if not wait.get("done"):
            notes.append(f"Gave up waiting for {wait['what']} after {wait['seconds']:g} s.")
    chart = Chart("hostnet-paths", "Host-network traffic: the path each direction took", {
        "tgw": TGW, "gateway": GATEWAY,
        "paths": [{"label": CHECK[p], "path": run.paths.get(p), "status": c.status} for p, c in zip(CHECK, checks)]})
    return Report(command="hostnet", stack=run.started.get("stack", "?"), started=run.started.get("at", "?"),
                  title="Host-network pods: the path between hybrid and cloud nodes", checks=checks,
                  notes=notes, charts=[chart])
