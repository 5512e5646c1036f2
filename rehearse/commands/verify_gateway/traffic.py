"""Traffic both ways, from the demo probers' recent logs (the kubelet's timestamps), and what a
refused log read means (pure: observations -> checks)."""

from __future__ import annotations

import datetime

from rehearse.lab import probes as probe_logs
from rehearse.run.outcome import not_read
from rehearse.run.record import parse_time
from rehearse.run.report import FAIL, PASS, Check
from rehearse.commands.verify_gateway.kinds import (
    CHECK_TRAFFIC, MAX_FAILURES, MAX_LOG_AGE_SECONDS, MIN_SUCCESSES, WINDOW_SECONDS)
from rehearse.commands.verify_gateway.observed import Lab


def traffic_fix(direction: str, lab: Lab, svc_bad: bool, pod_bad: bool) -> str:
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


def check_traffic(lab: Lab, direction: str) -> Check:
    name = CHECK_TRAFFIC[direction]
    demo_ns = lab.inputs.get("demoNamespace", "demo-gateway")
    prober = (lab.inputs.get("probers") or probe_logs.NAMES).get(direction, probe_logs.NAMES[direction])
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
    refused = [(e, *log_refusal(lab, e)) for e in logs if e.get("error")]
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
    for path in (probe_logs.SVC, probe_logs.POD):
        ok = probe_logs.successes(found, path, start, newest)
        failed = probe_logs.failures(found, path, start, newest)
        bad[path] = ok < need or failed > allowed
        label = "Service" if path == probe_logs.SVC else "pod to pod"
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
                     traffic_fix(direction, lab, bad["svc"], bad["pod"]), command)
    return Check(name, PASS, seen, command=command)


def log_refusal(lab: Lab, event: dict) -> tuple[str, str, bool]:
    """What a refused ``pods/log`` request means: (what was seen, the fix or "", whether it
    fails the check even when another pod's log was read). The API server answers with a Status:
    500 when it cannot dial the kubelet (on a hybrid node: the remote node network does not
    admit the control plane on TCP 10250), 400 for a container that has not started, 404 for a
    pod that went away while it was read. An error recorded as text ("HTTP <code>", all some
    recordings keep) is shown as it is."""
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
