"""The preconditions both commands collect, and the judging of them: pure, so the collector
decides with the same checks the analysis reports."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from rehearse.run.record import iso
from rehearse.run.report import FAIL, NOT_READ, PASS, SKIP, Check
from rehearse.commands.burst.kinds import (BINDING_FILTERS, COST, C_BUDGET, C_FILTERS, C_FOREIGN_COST,
                                  C_GATE_OFF, C_GATE_ON, C_GATE_VERSION, C_HYBRID_COST, C_IN_PLACE,
                                  C_KARPENTER_PATCH, C_KYVERNO_NODES, C_KYVERNO_UPDATE, C_NO_POLICY,
                                  C_POLICY, GATE, GATE_SINCE, KARPENTER_DEPLOYMENT, KARPENTER_NS,
                                  KARPENTER_SA, KYVERNO_CONFIGMAP, KYVERNO_CONTROLLERS, KYVERNO_NS,
                                  POLICY, SCENARIO_WORDS, check_name)
from rehearse.commands.burst.reading import Cluster, _condition, active, cost_of, deployment_summary


# --- the preconditions (collected by both commands) ----------------------------------------------

def costs_settled(scenario: str, pods: list[dict]) -> bool:
    """What the scenario's writers have written on the active pods: B and C, "1" on every pod
    on a hybrid node."""
    if scenario == "A":
        return True
    hybrid = [p for p in pods if active(p) and p.get("place") == "hybrid"]
    return bool(hybrid) and all(p.get("cost") == "1" for p in hybrid)


def observe_preconditions(ctx: Any, cluster: Cluster, scenario: str, phase: str,
                          watch_whole_window: bool) -> dict:
    """Everything the scenario checks read, in one event's worth of observations."""
    s = cluster.s
    ctx.progress(f"scenario {scenario}: checking it is in place ({SCENARIO_WORDS[scenario]})")
    nodes = cluster.nodes()
    hybrid_nodes = [n["name"] for n in nodes if n["place"] == "hybrid"]
    work = cluster.workload()
    accounts = {role: cluster.service_account(KYVERNO_NS, deployment, deployment)
                for role, deployment in KYVERNO_CONTROLLERS}
    karpenter_sa = cluster.service_account(KARPENTER_NS, KARPENTER_DEPLOYMENT, KARPENTER_SA)
    reviews = [cluster.review("kyverno admission", KYVERNO_NS, accounts["admission"], "get", "nodes"),
               cluster.review("kyverno background", KYVERNO_NS, accounts["background"], "get", "nodes"),
               cluster.review("kyverno background", KYVERNO_NS, accounts["background"], "update",
                              "pods", s.namespace),
               cluster.review("karpenter", KARPENTER_NS, karpenter_sa, "patch", "pods", s.namespace)]
    policy = cluster.get("ClusterPolicy", POLICY)
    ready = _condition(policy, "Ready") if policy else None
    config = cluster.get("ConfigMap", KYVERNO_CONFIGMAP, KYVERNO_NS)
    nodepool = cluster.get("NodePool", s.nodepool)
    pool_spec = (nodepool or {}).get("spec") or {}
    observed = {
        "scenario": scenario, "phase": phase, "namespace": s.namespace,
        "deployment": {**deployment_summary(work["deployment"]), "revision": work["revision"],
                       "hash": work["hash"]},
        "nodes": nodes,
        "hybrid_neighbours": cluster.hybrid_neighbours(hybrid_nodes),
        "reviews": reviews, "service_accounts": {**accounts, "karpenter": karpenter_sa},
        "policy": {"found": policy is not None,
                   "ready": (ready or {}).get("status") == "True" if ready else
                   ((policy or {}).get("status") or {}).get("ready"),
                   "reason": (ready or {}).get("reason"), "message": (ready or {}).get("message")},
        "kyverno_config": {"found": config is not None,
                           "resource_filters": ((config or {}).get("data") or {}).get("resourceFilters")},
        "karpenter": cluster.karpenter(),
        "nodepool": {"name": s.nodepool, "found": nodepool is not None,
                     "limits": pool_spec.get("limits") or {},
                     "budgets": (pool_spec.get("disruption") or {}).get("budgets"),
                     "taints": ((pool_spec.get("template") or {}).get("spec") or {}).get("taints") or []},
        "within": s.within,
    }
    polls = []
    start = ctx.monotonic()
    while True:
        pods = cluster.summaries()
        waited = round(ctx.monotonic() - start, 3)
        polls.append({"at": iso(ctx.clock()), "waited": waited, "pods": pods})
        done = costs_settled(scenario, pods) and not watch_whole_window
        if done or waited >= s.within:
            break
        ctx.sleep(s.interval)
    observed["pod_polls"] = polls
    return observed


# --- judging the preconditions (pure; the collector decides with it, the analysis reports it) -----

def _review(observed: dict, who: str, verb: str, resource: str) -> Optional[dict]:
    return next((r for r in observed.get("reviews") or []
                 if r["who"] == who and r["verb"] == verb and r["resource"] == resource), None)


def _review_check(name: str, found: Optional[dict], fix: str, consequence: str) -> Check:
    where = f" in {found['namespace']}" if found and found.get("namespace") else ""
    command = (f"kubectl auth can-i {found['verb']} {found['resource']}{' -n ' + found['namespace'] if found.get('namespace') else ''} "
               f"--as={found['user']}" if found else "")
    if found is None:
        return Check(name, NOT_READ, "not read: the run did not ask the API server", command=command)
    if found.get("allowed") is None:
        return Check(name, FAIL, f"could not ask the API server (HTTP {found.get('http')}): "
                                 f"{found.get('error')}",
                     "your identity needs `create subjectaccessreviews` (cluster-admin has it)",
                     command)
    what = f"{found['user']} may {'' if found['allowed'] else 'not '}{found['verb']} {found['resource']}{where}"
    if found.get("reason"):
        what += f" ({found['reason']})"
    if found["allowed"]:
        return Check(name, PASS, what, "", command)
    return Check(name, FAIL, f"{what}: {consequence}", fix, command)


def _gates(observed: dict) -> tuple[Optional[bool], str, list[dict]]:
    """Whether the running Karpenter has the gate on: (on, what was seen, the controllers)."""
    karpenter = observed.get("karpenter") or {}
    controllers = [p for p in karpenter.get("pods") or []] or (
        [karpenter["deployment"]] if karpenter.get("deployment") else [])
    if not controllers:
        return None, f"no Karpenter controller in {KARPENTER_NS} (no pod, no Deployment {KARPENTER_DEPLOYMENT})", []
    states = [c["gates"].get(GATE, False) for c in controllers]
    shown = "; ".join(f"{c['name']}: {GATE}={'true' if c['gates'].get(GATE) else 'false' if GATE in c['gates'] else 'absent'} "
                      f"({c['gates_source'] or 'no feature gates set'}), image {c['image']}"
                      for c in controllers)
    if not karpenter.get("pods"):
        shown += " (no running pod: read from the Deployment)"
    if all(states):
        return True, shown, controllers
    if not any(states):
        return False, shown, controllers
    return None, shown + " — the controllers disagree (a rollout under way?)", controllers


def _pods_text(pods: list[dict]) -> str:
    return ", ".join(f"{p['name']} on {p['node'] or 'no node'} ({p['place'] or '?'}): "
                     f"{'no cost' if p['cost'] is None else repr(p['cost'])}" for p in pods)


def _final_pods(observed: dict) -> list[dict]:
    polls = observed.get("pod_polls") or []
    return [p for p in (polls[-1]["pods"] if polls else []) if active(p)]


def _restart_fix(observed: dict) -> str:
    ns = observed.get("namespace", "demo-burst")
    dep = (observed.get("deployment") or {}).get("name") or "burst"
    fix = (f"restart the Deployment so every pod starts fresh: `kubectl -n {ns} rollout restart "
           f"deploy/{dep}` (`python -m rehearse burst` does it before measuring)")
    if (observed.get("deployment") or {}).get("template_cost") is not None:
        fix = (f"the Deployment's pod template itself carries {COST}="
               f"{observed['deployment']['template_cost']!r}, so every new pod starts with it: "
               f"remove it (`kubectl -n {ns} patch deploy {dep} --type=json -p "
               "'[{\"op\":\"remove\",\"path\":\"/spec/template/metadata/annotations/"
               "controller.kubernetes.io~1pod-deletion-cost\"}]'`), then `pulumi up`")
    return fix


@dataclass(frozen=True)
class _Seen:
    """One preconditions event as the scenario checks read it: the scenario, the active pods of
    the last poll, the running Karpenter's gate, and the commands a reader runs to look again."""
    observed: dict
    scenario: str
    namespace: str
    policy: dict
    pods: list[dict]
    gate_on: Optional[bool]
    gates_seen: str
    controllers: list[dict]

    def name(self, what: str) -> str:
        return check_name(self.scenario, what)

    @property
    def deployment(self) -> str:
        return (self.observed.get("deployment") or {}).get("name") or "burst"

    @property
    def karpenter_cmd(self) -> str:
        return (f"kubectl -n {KARPENTER_NS} get pods -l app.kubernetes.io/name=karpenter -o "
                "jsonpath='{range .items[*]}{.metadata.name} {.spec.containers[0].image} "
                "{.spec.containers[0].env[?(@.name==\"FEATURE_GATES\")].value}{\"\\n\"}{end}'")

    @property
    def placement_cmd(self) -> str:
        return (f"kubectl -n {self.namespace} get pods -l app={self.deployment} "
                "-o custom-columns=POD:.metadata.name,NODE:.spec.nodeName,"
                "COST:'.metadata.annotations.controller\\.kubernetes\\.io/pod-deletion-cost'")

    @property
    def policy_cmd(self) -> str:
        return f"kubectl get clusterpolicy {POLICY} -o wide"


def _seen(observed: dict) -> _Seen:
    gate_on, gates_seen, controllers = _gates(observed)
    return _Seen(observed, observed["scenario"], observed.get("namespace", "demo-burst"),
                 observed.get("policy") or {}, _final_pods(observed), gate_on, gates_seen,
                 controllers)


# --- the scenario checks, one function each (the tables below say which scenario makes which) ---

def _no_policy(x: _Seen) -> Check:
    found = x.policy.get("found")
    return Check(x.name(C_NO_POLICY), FAIL if found else PASS,
                 f"ClusterPolicy {POLICY} exists: Kyverno writes \"1\" on hybrid pods, "
                 "so A would look like B" if found else f"no ClusterPolicy {POLICY}",
                 "scenario A has no policy: `pulumi config set burstScenario A` and "
                 "`pulumi up` deletes it" if found else "", x.policy_cmd)


def _kyverno_may_get_nodes(x: _Seen, role: str) -> Check:
    return _review_check(
        x.name(C_KYVERNO_NODES.format(role=role)),
        _review(x.observed, f"kyverno {role}", "get", "nodes"),
        f"grant it through the chart values {role}Controller.rbac.clusterRole."
        "extraResources (components/kyverno.py does) and `pulumi up`",
        "Kyverno drops the policy's node lookup silently, so no pod gets \"1\": "
        f"{x.scenario} would look like A")


def _kyverno_admission_may_get_nodes(x: _Seen) -> Check:
    return _kyverno_may_get_nodes(x, "admission")


def _kyverno_background_may_get_nodes(x: _Seen) -> Check:
    return _kyverno_may_get_nodes(x, "background")


def _kyverno_may_update_pods(x: _Seen) -> Check:
    return _review_check(
        x.name(C_KYVERNO_UPDATE), _review(x.observed, "kyverno background", "update", "pods"),
        "grant it through backgroundController.rbac.clusterRole.extraResources and "
        "`pulumi up`",
        "the mutate-existing rule cannot patch the bound pod: no \"1\"")


def _kyverno_sees_bindings(x: _Seen) -> Check:
    config = x.observed.get("kyverno_config") or {}
    filters = config.get("resource_filters") or ""
    dropped = [f for f in BINDING_FILTERS if f in filters]
    config_cmd = (f"kubectl -n {KYVERNO_NS} get configmap {KYVERNO_CONFIGMAP} -o "
                  "jsonpath='{.data.resourceFilters}'")
    if not config.get("found"):
        return Check(x.name(C_FILTERS), FAIL,
                     f"no ConfigMap {KYVERNO_NS}/{KYVERNO_CONFIGMAP} (Kyverno's config)",
                     "is Kyverno installed? the demo layer installs it: `pulumi up`", config_cmd)
    if dropped:
        return Check(x.name(C_FILTERS), FAIL,
                     f"Kyverno's resourceFilters drop {', '.join(dropped)}: the policy "
                     "never sees a binding",
                     "set config.resourceFiltersExclude to exactly "
                     "[\"[Pod/binding,*,*]\", \"[Binding,*,*]\"] (components/kyverno.py); "
                     "the chart preserves an existing ConfigMap (config.preserve), so "
                     "delete it and `pulumi up`", config_cmd)
    return Check(x.name(C_FILTERS), PASS, "Kyverno's resourceFilters keep Pod/binding and Binding",
                 "", config_cmd)


def _policy_ready(x: _Seen) -> Check:
    policy, s = x.policy, x.scenario
    if not policy.get("found"):
        return Check(x.name(C_POLICY), FAIL, f"no ClusterPolicy {POLICY}",
                     f"scenario {s} needs it: `pulumi config set burstScenario {s}` "
                     "and `pulumi up`", x.policy_cmd)
    if policy.get("ready"):
        return Check(x.name(C_POLICY), PASS, f"Ready ({policy.get('reason') or 'True'})",
                     "", x.policy_cmd)
    return Check(x.name(C_POLICY), FAIL,
                 f"not Ready: {policy.get('reason') or ''} {policy.get('message') or ''}".strip(),
                 f"`kubectl describe clusterpolicy {POLICY}` and Kyverno's admission "
                 f"controller's log (`kubectl -n {KYVERNO_NS} logs deploy/"
                 "kyverno-admission-controller`)", x.policy_cmd)


def _hybrid_pods_cost_one(x: _Seen) -> Check:
    hybrid = [p for p in x.pods if p.get("place") == "hybrid"]
    polls = x.observed.get("pod_polls") or []
    waited = polls[-1]["waited"] if polls else 0.0
    if not hybrid:
        return Check(x.name(C_HYBRID_COST), FAIL,
                     "no burst pod runs on a hybrid node to look at",
                     f"scale the Deployment to 3 (`kubectl -n {x.namespace} scale deploy/"
                     f"{x.deployment} --replicas=3`) and run this again", x.placement_cmd)
    without = [p for p in hybrid if p.get("cost") != "1"]
    if not without:
        first_ok = next((poll["waited"] for poll in polls
                         if costs_settled(x.scenario, [p for p in poll["pods"] if active(p)])), None)
        return Check(x.name(C_HYBRID_COST), PASS,
                     f"{len(hybrid)} of {len(hybrid)} pods on hybrid nodes carry "
                     f"\"1\" (seen after {first_ok:g} s)", "", x.placement_cmd)
    return Check(x.name(C_HYBRID_COST), FAIL,
                 f"{len(without)} of {len(hybrid)} pods on hybrid nodes carry no \"1\" after "
                 f"{waited:g} s: {_pods_text(without)}",
                 "Kyverno did not annotate them: the checks above say why (RBAC, filters, "
                 f"policy); Kyverno's background controller's log: `kubectl -n {KYVERNO_NS} "
                 "logs deploy/kyverno-background-controller`", x.placement_cmd)


def _foreign(scenario: str, pod: dict) -> bool:
    """Whether the pod carries a cost nobody in the scenario writes: a previous scenario's, or
    a stray writer's (B and C write "1" on hybrid pods; C's Karpenter, negatives on cloud pods)."""
    value = pod.get("cost")
    if value is None:
        return False
    if scenario == "A":
        return True
    if pod.get("place") == "hybrid":
        return value != "1"
    return not (scenario == "C" and pod.get("place") == "cloud" and cost_of(value) < 0)


def _no_foreign_cost(x: _Seen) -> Check:
    foreign = [p for p in x.pods if _foreign(x.scenario, p)]
    if foreign:
        return Check(x.name(C_FOREIGN_COST), FAIL,
                     f"{len(foreign)} pod(s) carry a cost scenario {x.scenario} does not write "
                     f"(left from a previous scenario?): {_pods_text(foreign)}",
                     _restart_fix(x.observed), x.placement_cmd)
    return Check(x.name(C_FOREIGN_COST), PASS,
                 f"{len(x.pods)} burst pod(s): " + (
                     "none carries a cost" if all(p.get("cost") is None for p in x.pods)
                     else "only the scenario's costs"), "", x.placement_cmd)


def _gate_off(x: _Seen) -> Check:
    if x.gate_on is False:
        return Check(x.name(C_GATE_OFF), PASS, x.gates_seen, "", x.karpenter_cmd)
    return Check(x.name(C_GATE_OFF), FAIL,
                 f"{x.gates_seen}: Karpenter ranks the cloud pods, so {x.scenario} would look "
                 "like C" if x.gate_on else x.gates_seen,
                 f"`pulumi config set burstScenario {x.scenario}` and `pulumi up` turns it "
                 "off; then remove the negative costs it left (switching from C "
                 "does)", x.karpenter_cmd)


def _gate_on(x: _Seen) -> Check:
    if x.gate_on:
        return Check(x.name(C_GATE_ON), PASS, x.gates_seen, "", x.karpenter_cmd)
    return Check(x.name(C_GATE_ON), FAIL,
                 f"{x.gates_seen}: Karpenter writes no ranks, so C would look like B",
                 "`pulumi config set burstScenario C` and `pulumi up` sets the Helm "
                 "value settings.featureGates.podDeletionCostManagement=true; a chart "
                 "older than 1.15.0 ignores it silently", x.karpenter_cmd)


def _gate_version(x: _Seen) -> Check:
    versions = [(c.get("name"), c.get("version"), c.get("image")) for c in x.controllers]
    old = [v for v in versions if v[1] and tuple(int(n) for n in v[1].split(".")) < GATE_SINCE]
    unknown = [v for v in versions if not v[1]]
    if not versions:
        return Check(x.name(C_GATE_VERSION), FAIL, "no Karpenter controller found",
                     "the karpenter layer installs it: `pulumi up`", x.karpenter_cmd)
    if old:
        return Check(x.name(C_GATE_VERSION), FAIL,
                     "running " + ", ".join(f"{n}: {v}" for n, v, _ in old) +
                     f": {GATE} arrived in 1.15.0 and an older controller ignores it "
                     "silently, so C would look like B",
                     "set karpenterVersion to 1.15.0 or later (both charts) and "
                     "`pulumi up`", x.karpenter_cmd)
    if unknown:
        return Check(x.name(C_GATE_VERSION), SKIP,
                     "no version in the image reference: " +
                     ", ".join(i or "?" for _, _, i in unknown) +
                     " (the runtime check before the first scale-in still applies)",
                     "", x.karpenter_cmd)
    return Check(x.name(C_GATE_VERSION), PASS,
                 ", ".join(f"{n}: {v}" for n, v, _ in versions), "", x.karpenter_cmd)


def _karpenter_may_patch_pods(x: _Seen) -> Check:
    return _review_check(
        x.name(C_KARPENTER_PATCH), _review(x.observed, "karpenter", "patch", "pods"),
        "the Helm value settings.featureGates.podDeletionCostManagement=true grants it "
        "(a chart older than 1.15.0 does not): `pulumi up`",
        "Karpenter cannot write its ranks: C would look like B")


def _budget(x: _Seen) -> Check:
    return budget_check(x.observed, x.name(C_BUDGET))


#: Kyverno's side of B and C: it may read the node a pod is bound to and patch the pod, it sees
#: the binding, its policy is Ready, and the pods on hybrid nodes carry its "1".
_KYVERNO_WRITES = (_kyverno_admission_may_get_nodes, _kyverno_background_may_get_nodes,
                   _kyverno_may_update_pods, _kyverno_sees_bindings, _policy_ready,
                   _hybrid_pods_cost_one)

#: Which checks prove each scenario in place, in the order they are reported
#: (docs/rehearse.md, `verify burst`): A — nobody writes costs; B — Kyverno writes "1" on
#: hybrid pods and Karpenter's gate is off; C — B's writers plus Karpenter ranking the cloud
#: pods (the gate on, a controller that knows it, allowed to patch pods, a 100% budget).
SCENARIO_CHECKS: dict[str, tuple[Callable[[_Seen], Check], ...]] = {
    "A": (_no_policy, _no_foreign_cost, _gate_off),
    "B": (*_KYVERNO_WRITES, _no_foreign_cost, _gate_off),
    "C": (*_KYVERNO_WRITES, _no_foreign_cost, _gate_on, _gate_version, _karpenter_may_patch_pods,
          _budget),
}


def scenario_checks(observed: dict) -> list[Check]:
    """The checks that prove ``observed['scenario']`` is in place, in order."""
    seen = _seen(observed)
    return [check(seen) for check in SCENARIO_CHECKS[seen.scenario]]


def budget_check(observed: dict, name: str) -> Check:
    pool = observed.get("nodepool") or {}
    command = f"kubectl get nodepool {pool.get('name')} -o jsonpath='{{.spec.disruption.budgets}}'"
    if not pool.get("found"):
        return Check(name, FAIL, f"no NodePool {pool.get('name')}",
                     "the karpenter layer creates it: `pulumi up`", command)
    budgets = pool.get("budgets")
    if not budgets:
        return Check(name, FAIL, "no budgets: Karpenter's default is nodes: 10%, so only about "
                     "one node gets a rank",
                     "set disruption.budgets: [{nodes: \"100%\"}] (stacks/layers/karpenter.py)",
                     command)
    tight = [b for b in budgets if str(b.get("nodes")) != "100%"]
    if tight:
        return Check(name, FAIL, f"budgets {budgets}: " + ", ".join(
            f"nodes {b.get('nodes')}" + (f" on schedule {b['schedule']}" if b.get("schedule") else "")
            for b in tight) + " keep some nodes unranked",
                     "one budget, nodes: \"100%\" (stacks/layers/karpenter.py), and `pulumi up`",
                     command)
    return Check(name, PASS, f"budgets {budgets}", "", command)


def in_place(scenario: str, checks: list[Check], measuring: bool = True) -> Check:
    failing = [c for c in checks if c.status == FAIL]
    name = check_name(scenario, C_IN_PLACE)
    if failing:
        reasons = "; ".join(f"{c.name.split(': ', 1)[-1]} — {c.seen}" for c in failing)
        return Check(name, FAIL, f"not in place{', not measured' if measuring else ''}: {reasons}",
                     "fix the checks below, then run again")
    return Check(name, PASS, f"{SCENARIO_WORDS[scenario]}: {len(checks)} checks passed")
