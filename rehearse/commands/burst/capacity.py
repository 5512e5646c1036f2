"""The NodePool and the capacity arithmetic (pure): 8 burst pods fit on the two hybrid nodes, a
9th does not, from what was observed and the offline scheduling model's units."""

from __future__ import annotations

from typing import Any, Optional

from rehearse.run.report import FAIL, PASS, Check
from rehearse.commands.burst.kinds import CHECK_CAPACITY, CHECK_NODEPOOL
from rehearse.commands.burst.preconditions import budget_check


def _quantity_cpu(value: Any) -> Optional[int]:
    if value is None:
        return None
    from offline.scheduling import cpu_millis

    return cpu_millis(value)


def nodepool_check(observed: dict, settings: dict) -> Check:
    pool = observed.get("nodepool") or {}
    name = CHECK_NODEPOOL.format(pool=pool.get("name"))
    command = f"kubectl get nodepool {pool.get('name')} -o jsonpath='{{.spec.limits}} {{.spec.disruption}}'"
    if not pool.get("found"):
        return Check(name, FAIL, f"no NodePool {pool.get('name')}: nothing bursts to the cloud",
                     "the karpenter layer creates it: `pulumi up`", command)
    limit = _quantity_cpu((pool.get("limits") or {}).get("cpu"))
    request = _burst_request(observed)
    overflow = settings["peak"] - settings["on_hybrid"]
    problems = []
    if limit is None:
        problems.append("no CPU limit: nothing caps what Karpenter launches (the lab's cost guard)")
    elif request is not None and limit < overflow * request.cpu_m:
        problems.append(f"CPU limit {limit}m is below what the {overflow} overflow pods request "
                        f"({overflow} × {request.cpu_m}m): they would stay Pending")
    budget = budget_check(observed, name)
    if budget.status == FAIL:
        problems.append(budget.seen)
    seen = (f"limits.cpu {(pool.get('limits') or {}).get('cpu')}"
            + (f" (the {overflow} overflow pods need {overflow * request.cpu_m}m)" if request and limit else "")
            + f"; budgets {pool.get('budgets')}")
    if problems:
        return Check(name, FAIL, "; ".join(problems),
                     "stacks/layers/karpenter.py sets limits.cpu (burstCpuLimit) and budgets "
                     "[{nodes: \"100%\"}]: `pulumi up`", command)
    return Check(name, PASS, seen, "", command)


def _burst_request(observed: dict):
    from offline.scheduling import pod_request

    deployment = observed.get("deployment") or {}
    if not deployment.get("found"):
        return None
    return pod_request(deployment.get("containers") or [], deployment.get("init_containers") or [])


def _tolerated(taints: list[dict], tolerations: list[dict]) -> bool:
    for taint in taints:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True


def _tolerates(toleration: dict, taint: dict) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration.get("key") == taint.get("key")
    return toleration.get("key") == taint.get("key") and \
        (toleration.get("value") or "") == (taint.get("value") or "")


def capacity(observed: dict) -> dict:
    """How many burst pods fit on each hybrid node the burst pods may use: (allocatable - what
    the node's other pods request) // the burst pod's request, as the scheduler counts requests
    (offline.scheduling.pod_request: the larger of the containers' sum and the largest init
    container). Each node's allocatable is also set beside components.capacity's EKS AMI formula
    (capacity - kube-reserved), which sized the burst request: a kubelet reserving more shows
    there."""
    from components.capacity import kube_reserved_cpu_m
    from offline.scheduling import Request, memory_mib, pod_request

    request = _burst_request(observed)
    tolerations = (observed.get("deployment") or {}).get("tolerations") or []
    rows = []
    for node in observed.get("nodes") or []:
        if node["place"] != "hybrid":
            continue
        eligible = node["ready"] and not node["unschedulable"] and _tolerated(node["taints"], tolerations)
        alloc = node.get("allocatable") or {}
        allocatable = Request(_quantity_cpu(alloc.get("cpu")) or 0,
                              memory_mib(alloc["memory"]) if alloc.get("memory") else 0)
        used, others = Request(), []
        for pod in observed.get("hybrid_neighbours") or []:
            if pod["node"] != node["name"] or pod["deleting"] or pod["phase"] in ("Succeeded", "Failed"):
                continue
            r = pod_request(pod["containers"], pod["init_containers"])
            used = used + r
            others.append((pod["name"], r.cpu_m))
        free = allocatable - used
        cores = _quantity_cpu((node.get("capacity") or {}).get("cpu"))
        formula = cores - kube_reserved_cpu_m(cores // 1000) if cores else None
        fit = 0
        if request is not None and eligible and request.cpu_m > 0:
            fit = free.cpu_m // request.cpu_m
            if request.memory_mib:
                fit = min(fit, free.memory_mib // request.memory_mib)
            fit = max(fit, 0)
        rows.append({"node": node["name"], "eligible": eligible, "taints": node["taints"],
                     "allocatable_cpu_m": allocatable.cpu_m, "used_cpu_m": used.cpu_m,
                     "free_cpu_m": free.cpu_m, "others": others, "fit": fit,
                     "formula_cpu_m": formula})
    return {"request_cpu_m": request.cpu_m if request else None,
            "request_memory_mib": request.memory_mib if request else None,
            "nodes": rows, "total": sum(r["fit"] for r in rows if r["eligible"])}


def capacity_check(observed: dict, settings: dict) -> Check:
    expected = settings["on_hybrid"]
    command = ("kubectl describe nodes -l eks.amazonaws.com/compute-type=hybrid | "
               "grep -A8 'Allocated resources'")
    found = capacity(observed)
    if found["request_cpu_m"] is None:
        return Check(CHECK_CAPACITY, FAIL, "no burst Deployment to read the CPU request from",
                     "the demo layer deploys it: `pulumi up`", command)
    parts = []
    for r in found["nodes"]:
        if not r["eligible"]:
            parts.append(f"{r['node']}: not for burst pods (not Ready, cordoned or a taint they do "
                         f"not tolerate: {', '.join(t['key'] for t in r['taints'])})")
            continue
        others = ", ".join(f"{n} {m}m" for n, m in r["others"] if m) or "nothing"
        formula = (f" (components/capacity.py's formula gives {r['formula_cpu_m']}m: the kubelet "
                   "reserves otherwise)" if r["formula_cpu_m"] not in (None, r["allocatable_cpu_m"]) else "")
        parts.append(f"{r['node']}: {r['allocatable_cpu_m']}m allocatable{formula} − {r['used_cpu_m']}m "
                     f"({others}) = {r['free_cpu_m']}m → {r['fit']} × {found['request_cpu_m']}m")
    seen = "; ".join(parts) or "no hybrid node"
    total = found["total"]
    if total == expected:
        return Check(CHECK_CAPACITY, PASS, f"{seen}: {total} fit, a {total + 1}th does not", "", command)
    if total > expected:
        consequence = (f"{total} fit: at {settings['peak']} only {settings['peak'] - total} burst to "
                       "the cloud and the scale-ins show other numbers than the demo guide's (docs/demo-guide.md#demo-2-bursting-and-scale-in)")
    else:
        consequence = (f"only {total} fit: {settings['peak'] - total} burst to the cloud instead of "
                       f"{settings['peak'] - expected}")
    return Check(CHECK_CAPACITY, FAIL, f"{seen}: {consequence}",
                 "the burst request is sized for 4 pods per hybrid node next to demo 1's pods "
                 "(components/capacity.py): another pod on a hybrid node, or a different host type, "
                 "breaks it — move the extra pod off, or `pulumi up` to resize", command)
