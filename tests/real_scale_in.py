"""Demo 2's scale-ins on the real ReplicaSet controller, against ``rehearse predict``.

The scene (``Scene``): the lab's two hybrid nodes and the cloud-burst NodePool's nodes (one of
each instance type, standing for what Karpenter launches) as kwok Nodes, shaped by the scheduling
model from the program's own registrations (tests/real_placement.py: labels, taints,
allocatable); the pods the model puts on those nodes beside ``burst`` (demo 1's hybrid pods,
Cilium, the node DaemonSets), so exactly four burst pods fit on each hybrid node as in the lab;
and the ``burst`` Deployment as the program registers it.

A step (``Scene.scale_in``) does what a presenter does: ``python -m rehearse predict --json``
against the API server (a kubeconfig with a token user, as a user runs it), then the Deployment's
scale subresource, as ``kubectl scale`` does; the real kube-controller-manager deletes its
victims at once. The victims are the pods active before the scale request and not after (the
pods are otherwise still: kwok makes a pod Running and Ready once and never touches it again).

``judge`` says where the forecast and the controller disagree: a pod predict calls decided that
the controller kept, or a pod the controller deleted that predict neither named nor called
possible (random, or undecided by the clock). ``false_ties`` checks the other way, that "random"
is claimed only where the engine's inputs really are equal: every rule's input of a tied victim
and the pod it ties with, read from the raw objects (not through rehearse.predict_analysis).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from offline import scheduling
from tests import real_placement
from tests.conftest import PROJECT_DIR, run_lab

COST = "controller.kubernetes.io/pod-deletion-cost"
HYBRID = ("eks.amazonaws.com/compute-type", "hybrid")


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def parse_rfc3339(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def lab_pieces() -> tuple[list[scheduling.Node], list[scheduling.Workload], scheduling.Workload]:
    """(the hybrid and burst nodes, the other workloads the model places only on them, burst)
    from the dev stack as the program registers it."""
    model = scheduling.evaluate(run_lab())
    nodes = [n for n in model.nodes if n.role in ("hybrid", "burst")]
    names = {n.name for n in nodes}
    others = [p.workload for p in model.result.placements
              if p.workload.name != scheduling.BURST and any(p.nodes.values())
              and {n for n, c in p.nodes.items() if c} <= names]
    [burst] = [w for w in model.workloads if w.name == scheduling.BURST]
    return nodes, others, burst


@dataclass
class Step:
    """One scale-in: predict's JSON, the pods before (as listed right after predict ran) and
    which of them the controller deleted."""
    replicas: int
    forecast: dict
    before: list[dict]
    victims: set[str]
    #: Seconds from predict's snapshot (its ``now``) to the moment the victims were seen marked
    #: for deletion: the controller sorted somewhere in between.
    elapsed: float
    #: Predict's window, (early, late) in seconds around its snapshot.
    window: tuple[float, float]
    #: The pods' related set (every pod of the Deployment's ReplicaSets) at the snapshot.
    related: list[dict] = field(default_factory=list)
    #: This machine's clock (the controller's too) when the scale request went, and when the
    #: victims were seen marked for deletion: the controller sorted in between.
    between: tuple = ()


def step_to_json(step: Step) -> dict:
    """A Step as JSON (its clock moments as RFC 3339 with microseconds), for a step taken in
    another process (tests/real_scenarios.py's scenario script)."""
    return {"replicas": step.replicas, "forecast": step.forecast, "before": step.before,
            "victims": sorted(step.victims), "elapsed": step.elapsed, "window": list(step.window),
            "related": step.related, "between": [m.isoformat() for m in step.between]}


def step_from_json(data: dict) -> Step:
    return Step(data["replicas"], data["forecast"], data["before"], set(data["victims"]),
                data["elapsed"], tuple(data["window"]), data["related"],
                tuple(datetime.datetime.fromisoformat(m) for m in data["between"]))


class Scaler:
    """A Deployment already on the control plane, read and scaled as a presenter does:
    ``scale_in`` runs ``rehearse predict`` first, then the scale request, and returns the
    controller's victims beside the forecast (tests/real_scenarios.py drives the cluster of the
    real Karpenter and Kyverno with it)."""

    def __init__(self, plane, namespace: str = "", deployment: str = scheduling.BURST):
        self.plane = plane
        self.namespace = namespace
        self.deployment = deployment

    # --- reading ----------------------------------------------------------------------------

    def all_pods(self) -> list[dict]:
        """Every pod of the Deployment's namespace, as the API server lists them."""
        return self.plane.call("GET", f"/api/v1/namespaces/{self.namespace}/pods").body["items"]

    def active(self) -> list[dict]:
        return [p for p in self.all_pods() if not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in ("Succeeded", "Failed")]

    def ready(self, pod: dict) -> bool:
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in pod["status"].get("conditions") or [])

    def wait_settled(self, replicas: int, timeout: float = 60) -> list[dict]:
        """Until the Deployment has ``replicas`` active pods, each bound and Running (kwok's
        stage), and nothing terminating is left."""
        def done():
            pods = self.all_pods()
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            if len(live) != replicas or len(pods) != len(live):
                return None
            if not all(p["spec"].get("nodeName") and p["status"].get("phase") == "Running"
                       for p in live):
                return None
            return live
        return self.plane.wait_for(f"{replicas} burst pods Running", done, timeout=timeout,
                                   interval=0.1)

    # --- acting -----------------------------------------------------------------------------

    def scale(self, replicas: int) -> None:
        answer = self.plane.call(
            "PATCH", f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.deployment}/scale",
            {"spec": {"replicas": replicas}}, content_type="application/merge-patch+json")
        assert answer.status == 200, answer.body

    def annotate(self, pod: str, annotations: dict[str, Optional[str]]) -> None:
        answer = self.plane.call("PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{pod}",
                                 {"metadata": {"annotations": annotations}},
                                 content_type="application/merge-patch+json")
        assert answer.status == 200, answer.body

    def patch_status(self, pod: str, status: dict) -> None:
        """The pods/status subresource, strategic merge (conditions merge by type, container
        statuses by name). kwok's stages select Pending pods only (pod-ready.yaml), so a
        Running pod keeps what is written here."""
        answer = self.plane.call(
            "PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{pod}/status", {"status": status},
            content_type="application/strategic-merge-patch+json")
        assert answer.status == 200, answer.body

    def replica_sets(self) -> list[dict]:
        return self.plane.call("GET", f"/apis/apps/v1/namespaces/{self.namespace}/replicasets").body["items"]

    def start_stuck_rollout(self) -> None:
        """A new revision whose pods turn Ready but not available for an hour
        (minReadySeconds): the rollout surges the new ReplicaSet by maxSurge, shrinks the old
        by maxUnavailable, and stops there, both ReplicaSets active — a rollout in progress."""
        answer = self.plane.call(
            "PATCH", f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{self.deployment}",
            {"spec": {"minReadySeconds": 3600, "progressDeadlineSeconds": 7200, "template": {"metadata": {"annotations": {
                "eks-hybrid-lab.io/revision": "2"}}}}},
            content_type="application/strategic-merge-patch+json")
        assert answer.status == 200, answer.body

        def stuck():
            sets = self.replica_sets()
            if len(sets) != 2 or any(rs.get("status", {}).get("observedGeneration") !=
                                     rs["metadata"]["generation"] for rs in sets):
                return None
            want = sum(rs["spec"]["replicas"] for rs in sets)
            pods = self.all_pods()
            if len(pods) != want or not all(p["status"].get("phase") == "Running" for p in pods):
                return None
            return sorted((rs["metadata"]["annotations"].get("deployment.kubernetes.io/revision"),
                           rs["spec"]["replicas"]) for rs in sets)
        # One answer that looks stopped is not enough: old 6 and new 2 is a step of the rollout,
        # before the new ReplicaSet takes the room the old one freed.
        self.plane.wait_quiet("the rollout to stop", stuck, quiet=2.0, timeout=60, interval=0.2)

    def predict(self, replicas: int, lag: float) -> dict:
        done = subprocess.run(
            [sys.executable, "-m", "rehearse", "predict", "--kubeconfig", str(self.plane.kubeconfig),
             "--namespace", self.namespace, "--deployment", self.deployment,
             "--replicas", str(replicas), "--json", "--sync-lag", str(lag)],
            cwd=PROJECT_DIR, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def scale_in(self, replicas: int, lag: float = 4.0, remain: Optional[int] = None,
                 forecast: Optional[dict] = None) -> Step:
        """predict, then the scale request; the victims once the controller has deleted them.
        ``lag`` is predict's --sync-lag: how much later than its snapshot the controller may
        sort — here predict's own exit, this list and the request, measured in ``elapsed``.
        ``remain``: the pods left after (default ``replicas``; more during a rollout, whose
        surge the Deployment keeps). ``forecast``: predict's answer when the caller already
        ran it (with this ``lag``) and checked what it needed of its snapshot."""
        forecast = forecast or self.predict(replicas, lag)
        before = self.active()
        related = self.all_pods()
        sent = utc_now()
        self.scale(replicas)
        left = replicas if remain is None else remain
        # The controller sorts, then deletes: the API server marks each victim (its
        # deletionTimestamp) on the controller's request. Seeing them marked bounds the sort;
        # seeing them gone would add kwok's removal of the terminating pods, which under load
        # took longer than predict's window and made an honest lag look dishonest.
        self.plane.wait_for(f"{len(before) - left} burst pods marked for deletion",
                            lambda: len(self.active()) <= left, timeout=60, interval=0.05)
        seen = utc_now()
        after = self.wait_settled(left)
        names = {p["metadata"]["name"] for p in before}
        kept = {p["metadata"]["name"] for p in after}
        assert kept <= names, f"pods appeared during a scale-in: {sorted(kept - names)}"
        snapshot = parse_rfc3339(forecast["now"])
        early, late = (float(x.split()[0]) for x in forecast["window"].split(" to "))
        return Step(replicas, forecast, before, names - kept,
                    (seen - snapshot).total_seconds(), (early, late), related, (sent, seen))


class Scene(Scaler):
    def __init__(self, plane, prefix: str):
        super().__init__(plane)
        self.prefix = prefix
        self.scenario = real_placement.Scenario(plane, prefix)
        self.cloud: list[scheduling.Node] = []
        self.template: dict = {}

    # --- building ---------------------------------------------------------------------------

    def build(self, replicas: int = 3) -> None:
        """The hybrid nodes, their other pods, and ``burst`` at ``replicas`` (at most the 8
        that fit there). The cloud-burst nodes come later (``add_cloud_nodes``), as Karpenter
        launches them for pods left Pending: with them there from the start, kube-scheduler's
        default spreading puts some of the first pods on them despite burst's preference."""
        nodes, others, burst = lab_pieces()
        self.cloud = [n for n in nodes if n.role == "burst"]
        self.scenario.add_nodes([n for n in nodes if n.role == "hybrid"])
        if others:
            self.scenario.add_workloads(others)
        self.namespace = self.scenario.namespace(burst.namespace)
        obj = real_placement.workload_object(burst, self.prefix, self.namespace)
        obj["spec"]["replicas"] = replicas
        self.template = obj
        answer = self.plane.apply(obj)
        assert answer.status in (200, 201), answer.body
        self.wait_settled(replicas)

    def scale_out_past_hybrid(self, replicas: int) -> list[dict]:
        """Scales up past the hybrid nodes' room: the pods that do not fit stay Pending until
        the cloud-burst nodes join (one of each instance type the NodePool may launch, standing
        for Karpenter's), then every pod runs."""
        self.scale(replicas)

        def pending_rest():
            pods = [p for p in self.all_pods() if not p["metadata"].get("deletionTimestamp")]
            bound = [p for p in pods if p["spec"].get("nodeName")]
            unschedulable = [p for p in pods if any(
                c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable"
                for c in p["status"].get("conditions") or [])]
            return len(pods) == replicas and len(bound) + len(unschedulable) == replicas
        self.plane.wait_for("burst's overflow Pending", pending_rest, timeout=60, interval=0.1)
        self.scenario.add_nodes(self.cloud)
        return self.wait_settled(replicas)

    def hybrid_nodes(self) -> set[str]:
        return {name for name, node in self.scenario.nodes.items()
                if node.labels.get(HYBRID[0]) == HYBRID[1]}

    def cost_on_hybrid(self, value: str = "1") -> None:
        """Scenario B: what Kyverno's policy writes (components/kyverno.py), on every active pod
        bound to a hybrid node; cloud pods keep none."""
        hybrid = self.hybrid_nodes()
        for pod in self.active():
            if pod["spec"].get("nodeName") in hybrid and \
                    (pod["metadata"].get("annotations") or {}).get(COST) != value:
                self.annotate(pod["metadata"]["name"], {COST: value})

    def delete(self) -> None:
        self.scenario.delete()


# --- judging ----------------------------------------------------------------------------------

def verdicts(forecast: dict) -> Counter:
    """How many victims predict calls decided, random (a tie) or undecided by the clock."""
    found: Counter = Counter({"decided": 0, "random": 0, "clock": 0})
    for victim in forecast["delete"]:
        found["random" if victim["tie"] else "clock" if victim["clock"] else "decided"] += 1
    return found


def judge(step: Step) -> list[str]:
    """Where the forecast and the controller disagree (empty: they agree)."""
    found = []
    forecast = step.forecast
    named = [v["name"] for v in forecast["delete"]]
    decided = {v["name"] for v in forecast["delete"] if not v["tie"] and not v["clock"]}
    possible = set(named) | set(forecast["undecided"]) | set(forecast["clock_undecided"])
    if len(step.victims) != len(step.before) - forecast["replicas_after"] and \
            "replica_sets" not in forecast:
        found.append(f"the controller deleted {len(step.victims)}, not "
                     f"{len(step.before)} - {step.replicas}")
    if len(named) != len(step.victims):
        found.append(f"predict names {len(named)} victims, the controller deleted {len(step.victims)}")
    for name in sorted(decided - step.victims):
        found.append(f"{name}: predict says decided, the controller kept it")
    for name in sorted(step.victims - possible):
        found.append(f"{name}: the controller deleted it, predict kept it without doubt")
    if forecast["decided"] and set(named) != step.victims:
        found.append(f"predict says the whole choice is decided: {sorted(named)}, the controller "
                     f"deleted {sorted(step.victims)}")
    if step.elapsed > step.window[1]:
        found.append(f"the controller sorted up to {step.elapsed:.2f} s after predict's snapshot, "
                     f"past its window's {step.window[1]:+.2f} s: the sync lag is not honest")
    return found


def _restarts(pod: dict) -> int:
    return max([c.get("restartCount", 0) for c in pod["status"].get("containerStatuses") or []],
               default=0)


def _ready_time(pod: dict) -> Optional[str]:
    return next((c.get("lastTransitionTime") for c in pod["status"].get("conditions") or []
                 if c["type"] == "Ready" and c["status"] == "True"), None)


def rule_inputs(pod: dict, related: list[dict]) -> tuple:
    """Every input of ActivePodsWithRanks.Less for one pod, raw: assigned, phase, Ready, the
    cost annotation's text, the active related pods on its node, the Ready time, the highest
    restart count, the creation time (times as the API serves them, to the second)."""
    node = pod["spec"].get("nodeName") or ""
    rank = sum(1 for p in related if (p["spec"].get("nodeName") or "") == node
               and not p["metadata"].get("deletionTimestamp")
               and p["status"].get("phase") not in ("Succeeded", "Failed"))
    ready = any(c["type"] == "Ready" and c["status"] == "True"
                for c in pod["status"].get("conditions") or [])
    return (bool(node), pod["status"].get("phase"), ready,
            (pod["metadata"].get("annotations") or {}).get(COST), rank, _ready_time(pod),
            _restarts(pod), pod["metadata"]["creationTimestamp"])


def hidden_ties(step: Step) -> list[str]:
    """Victims predict calls decided that have every input equal to a pod the controller kept
    (a tie it won by chance, which predict must call random)."""
    kept = [p for p in step.before if p["metadata"]["name"] not in step.victims]
    by_name = {p["metadata"]["name"]: p for p in step.before}
    found = []
    for victim in step.forecast["delete"]:
        if victim["tie"] or victim["clock"] or victim["name"] not in step.victims:
            continue
        mine = rule_inputs(by_name[victim["name"]], step.related)
        for pod in kept:
            if rule_inputs(pod, step.related) == mine:
                found.append(f"{victim['name']} called decided, ties with kept {pod['metadata']['name']}")
    return found


def false_ties(step: Step) -> list[str]:
    """Victims predict calls an exact tie ("every rule ties", rule 0) whose inputs differ from
    the pod it ties them with. (Its other random verdict, rules that contradict each other
    across pods, is judged by the controller's own sort: ``oracle_problems``.)"""
    by_name = {p["metadata"]["name"]: p for p in step.before}
    found = []
    for victim in step.forecast["delete"]:
        if not victim["tie"] or victim["rule_number"] != 0:
            continue
        a, b = by_name[victim["name"]], by_name[victim["versus"]]
        if rule_inputs(a, step.related) != rule_inputs(b, step.related):
            found.append(f"{victim['name']} ties with {victim['versus']}, yet "
                         f"{rule_inputs(a, step.related)} != {rule_inputs(b, step.related)}")
    return found


def settle_time() -> None:
    """Creation and Ready times are whole seconds: sleeping past the next second boundary makes
    the next pods' times differ from the last ones'."""
    time.sleep(1.05 - (time.time() % 1.0))


# --- the controller's own sort, over every order the informer may list the pods in ----------

ORACLE = PROJECT_DIR / "tests" / "scale_in_oracle"


def build_oracle(folder: Path) -> Optional[Path]:
    """tests/scale_in_oracle built against the pinned k8s.io/kubernetes (engines/kubernetes's
    go.mod and go.sum, from the module cache only); None when Go cannot build it here."""
    binary = folder / "scale-in-oracle"
    done = subprocess.run(["go", "build", "-trimpath", "-o", str(binary), "."], cwd=ORACLE,
                          capture_output=True, text=True,
                          env={**os.environ, "GOFLAGS": "-mod=readonly", "GOPROXY": "off"})
    return binary if done.returncode == 0 else None


def _ns(moment: datetime.datetime) -> int:
    return int(moment.timestamp()) * 10**9 + moment.microsecond * 1000


def _time_ns(text: Optional[str]) -> Optional[int]:
    return None if not text else _ns(parse_rfc3339(text))


def oracle_clocks(step: Step) -> list[str]:
    """The controller's possible clocks: both ends of ``step.between`` and both sides of every
    log2 bucket edge of a pod's Ready or creation time inside it."""
    low, high = (_ns(m) for m in step.between)
    points = {low, high}
    for pod in step.before:
        for t in (_time_ns(_ready_time(pod)), _time_ns(pod["metadata"]["creationTimestamp"])):
            if t is None:
                continue
            for k in range(40):
                edge = t + (1 << k)
                if low < edge <= high:
                    points.update((edge - 1, edge + 1))
    def text(ns: int) -> str:
        seconds, rest = divmod(ns, 10**9)
        return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%S") + f".{rest:09d}Z"
    return [text(p) for p in sorted(p for p in points if low <= p <= high)]


def oracle(binary: Path, step: Step, permutations: int = 300) -> dict[str, tuple[int, int]]:
    """pod -> (runs it was deleted in, runs), over the controller's clocks and orders. When
    predict split the scale across ReplicaSets (a rollout in progress), each ReplicaSet's
    controller sorts its own pods (ranked by all of them) to the size predict gave it."""
    groups: list[tuple[list[dict], int]] = []
    parts = step.forecast.get("replica_sets")
    if parts:
        for part in parts:
            rs_name = part["source"].rsplit("ReplicaSet ", 1)[-1].rstrip(")")
            pods = [p for p in step.before
                    if any(r.get("name") == rs_name for r in p["metadata"].get("ownerReferences") or [])]
            groups.append((pods, len(pods) - part["replicas_after"]))
    else:
        groups.append((step.before, len(step.before) - step.replicas))
    counts: dict[str, tuple[int, int]] = {p["metadata"]["name"]: (0, 0) for p in step.before}
    for pods, diff in groups:
        request = {"pods": pods, "related": step.related, "diff": max(diff, 0),
                   "clocks": oracle_clocks(step), "permutations": permutations, "seed": 1}
        done = subprocess.run([str(binary)], input=json.dumps(request), capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        for outcome in json.loads(done.stdout):
            for pod in pods:
                name = pod["metadata"]["name"]
                deleted, runs = counts[name]
                counts[name] = (deleted + outcome["deleted"].get(name, 0), runs + outcome["runs"])
    return counts


def oracle_problems(step: Step, counts: dict[str, tuple[int, int]]) -> list[str]:
    """Where predict's verdicts and the controller's own sort disagree: a pod predict calls a
    decided victim that some order or clock keeps; a pod that goes in some orders or clocks and
    not others that predict does not call open (random or clock); a pod that always goes that
    predict keeps for sure; and the pods the controller deleted must be among those its sort
    can delete."""
    forecast = step.forecast
    decided = {v["name"] for v in forecast["delete"] if not v["tie"] and not v["clock"]}
    open_ = ({v["name"] for v in forecast["delete"] if v["tie"] or v["clock"]}
             | set(forecast["undecided"]) | set(forecast["clock_undecided"]))
    named = {v["name"] for v in forecast["delete"]}
    found = []
    for name, (deleted, runs) in sorted(counts.items()):
        if name in decided and deleted < runs:
            found.append(f"{name}: predict says decided, the controller's sort keeps it in "
                         f"{runs - deleted} of {runs} orders and clocks")
        if 0 < deleted < runs and name not in open_:
            found.append(f"{name}: goes in {deleted} of {runs} orders and clocks, predict "
                         "calls it sure")
        if deleted == runs and name not in named | open_:
            found.append(f"{name}: always goes, predict keeps it for sure")
        if name in step.victims and deleted == 0:
            found.append(f"{name}: the controller deleted it, its sort never does here")
    return found


def overcautious(step: Step, counts: dict[str, tuple[int, int]]) -> list[str]:
    """Pods predict calls random whose fate the controller's sort never leaves to the order."""
    random = ({v["name"] for v in step.forecast["delete"] if v["tie"] and not v["clock"]}
              | (set(step.forecast["undecided"]) - set(step.forecast["clock_undecided"])))
    return sorted(n for n in random if counts[n][0] in (0, counts[n][1]))
