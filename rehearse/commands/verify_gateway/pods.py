"""The gateway's pods: two Running and Ready on two gateway nodes in two zones, and every
replica's healthz (pure: observations -> checks)."""

from __future__ import annotations

from rehearse.lab.gateway import HEALTH_PORT
from rehearse.run.outcome import not_read
from rehearse.run.report import FAIL, PASS, SKIP, Check
from rehearse.commands.verify_gateway.kinds import CHECK_HEALTH, CHECK_PODS
from rehearse.commands.verify_gateway.observed import Lab


def ready(pod: dict) -> bool:
    return pod["phase"] == "Running" and pod.get("ready") == "True" and not pod.get("deletionTimestamp")


def describe_pod(lab: Lab, pod: dict) -> str:
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


def check_pods(lab: Lab) -> Check:
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
    seen = "; ".join(describe_pod(lab, p) for p in pods)
    if lab.pods_event.get("selector") is None:
        seen += f" (no pod carries {lab.selector}: every pod in {lab.ns} was taken as the gateway's)"
    good = [p for p in pods if ready(p) and lab.is_gateway_node(p["nodeName"])]
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


def check_health(lab: Lab) -> Check:
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
