"""The analysis of ``verify gateway``: pure functions from its recorded events to the checks
(PASS/FAIL with what was seen and the fix), so a recorded run replays to the same report. Each
check's module: pods (pods, healthz), lease (the leader, its metrics), writes (route, VTEP
config), traffic (the probers' logs), cluster (Cilium, the Pod Identity agent)."""

from __future__ import annotations

from rehearse.run.report import Report
from rehearse.commands.verify_gateway.cluster import check_agent, check_cilium
from rehearse.commands.verify_gateway.kinds import (
    CHECK_AGENT, CHECK_CILIUM, CHECK_HEALTH, CHECK_LEADERSHIP, CHECK_LEASE, CHECK_PODS, CHECK_ROUTE,
    CHECK_TRAFFIC, CHECK_VTEP, MAX_LOG_AGE_SECONDS, WINDOW_SECONDS)
from rehearse.commands.verify_gateway.lease import check_leadership, leader
from rehearse.commands.verify_gateway.observed import Lab
from rehearse.commands.verify_gateway.pods import check_health, check_pods
from rehearse.commands.verify_gateway.traffic import check_traffic
from rehearse.commands.verify_gateway.writes import check_route, check_vtep


#: The checks in the order the collector reads their input (the report shows the traffic
#: before Cilium and the agent; rehearse.run.outcome names the read that failed by this order).
READ_ORDER = (CHECK_PODS, CHECK_LEASE, CHECK_HEALTH, CHECK_LEADERSHIP, CHECK_ROUTE, CHECK_VTEP,
              CHECK_CILIUM, CHECK_AGENT, CHECK_TRAFFIC["cloudToHybrid"], CHECK_TRAFFIC["hybridToCloud"])


def analyse(events: list[dict]) -> Report:
    lab = Lab(events)
    node, pod, lease_check = leader(lab)
    checks = [check_pods(lab), lease_check, check_health(lab), check_leadership(lab, node, pod), check_route(lab, node, pod),
              check_vtep(lab, node, pod), check_traffic(lab, "cloudToHybrid"),
              check_traffic(lab, "hybridToCloud"), check_cilium(lab), check_agent(lab)]
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
