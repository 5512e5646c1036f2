"""Demo 2 on a real control plane with the real Karpenter (kwok provider): the scenario script
tests/test_real_karpenter.py runs, as ``python -m tests.karpenter_scenario PLAN OUT``, inside a
private network namespace (``run_in_netns``: ``unshare -n``, only ``lo``), because Karpenter
listens on every interface — so this script, the only client, runs in there too. It reads the
plan (tests/karpenter_lab.py: the lab's objects and what to do), writes what happened as JSON
and exits; the test asserts on that. Standard library and engines/ only, plus ``rehearse`` for
the collector mode.

Modes (``plan["mode"]``):

- ``sequence``: scenario A, B or C driven here: the Deployment scaled 3 -> 15 -> 12 -> 10 -> 3,
  each step waited for; B and C with a stand-in for Kyverno's policy (``KyvernoStandIn``: the
  lab's rule as registered — its strategic-merge patch of ``metadata.annotations``, written on
  a pod once it is bound to a node whose compute-type label is hybrid); C with Karpenter's PodDeletionCostManagement
  gate on, waiting (as ``rehearse burst`` does) until Karpenter has ranked the cloud pods
  before the first scale-in. Then ``watch`` seconds of what Karpenter does; with
  ``underutilized`` the NodePool's policy is then switched to WhenEmptyOrUnderutilized and
  that many seconds more watched (the question the demo guide could not answer: would
  consolidation move cloud pods onto the hybrid nodes' free room?).
- ``collector``: ``python -m rehearse burst`` (scenario A) against this cluster, its report
  and events returned beside what this script saw.

What is seen, independently of any tool: every pod event from a watch on the namespace (the
moment a pod first carries a deletionTimestamp, its node, its cost then, a DisruptionTarget
condition), the NodeClaims and Nodes polled every half second, Karpenter's Events at the end.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "engines"))
import karpenter  # noqa: E402
from control_plane import TOKEN, ControlPlane  # noqa: E402

T0 = time.monotonic()
HYBRID_LABEL = ("eks.amazonaws.com/compute-type", "hybrid")
NODEPOOL_LABEL = "karpenter.sh/nodepool"


def now() -> float:
    return round(time.monotonic() - T0, 3)


def run_in_netns(plan_path: Path, out_path: Path, timeout: float = 600) -> dict:
    """Runs this script in a new network namespace (root: ``unshare -n``) and returns its
    JSON. Called by the test, outside."""
    inner = (f"ip link set lo up && exec {sys.executable} -m tests.karpenter_scenario "
             f"{plan_path} {out_path}")
    done = subprocess.run(["unshare", "-n", "--", "sh", "-c", inner], cwd=ROOT,
                          env={**os.environ, karpenter.NETNS_MARK: "1"},
                          capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 or not out_path.exists():
        raise RuntimeError(f"scenario script failed ({done.returncode}):\n{done.stderr[-6000:]}")
    return json.loads(out_path.read_text())


# --- seeing --------------------------------------------------------------------------------------

def _millicores(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


def _condition(obj: dict, kind: str) -> Optional[dict]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or []
                 if c.get("type") == kind), None)


class PodWatch(threading.Thread):
    """A watch on the namespace's pods (the real server's stream, resumed from the last
    resourceVersion seen when the server ends it). ``on_event(type, pod)`` runs for each."""

    def __init__(self, plane: ControlPlane, namespace: str,
                 on_event: list[Callable[[str, dict], None]]):
        super().__init__(daemon=True)
        self.plane, self.namespace, self.on_event = plane, namespace, on_event
        self.stopping = False
        self.pods: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.resource_versions: list[int] = []
        self.stream = None

    def close(self) -> None:
        """Stops the watch and ends its open request at once: told to stop, kube-apiserver
        waits for an open watch (seen: SIGTERM left it running until stop_process's SIGKILL
        15 s later). Shutting the connection's socket down wakes the reading thread."""
        self.stopping = True
        stream = self.stream
        if stream is not None:
            try:
                socket.fromfd(stream.fileno(), socket.AF_INET, socket.SOCK_STREAM).shutdown(
                    socket.SHUT_RDWR)
            except (OSError, ValueError):
                pass  # already closed

    def run(self) -> None:
        base = f"/api/v1/namespaces/{self.namespace}/pods"
        listed = self.plane.call("GET", base).body
        version = listed["metadata"]["resourceVersion"]
        for pod in listed["items"]:
            self._seen("ADDED", pod)
        context = ssl.create_default_context(cafile=str(self.plane.ca_file))
        while not self.stopping:
            url = (f"{self.plane.url}{base}?watch=1&allowWatchBookmarks=true"
                   f"&timeoutSeconds=60&resourceVersion={version}")
            request = urllib.request.Request(url, headers={
                "Authorization": f"Bearer {TOKEN}"})
            try:
                with urllib.request.urlopen(request, context=context, timeout=90) as stream:
                    self.stream = stream
                    for line in stream:
                        if self.stopping:
                            return
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            # 410 Gone: list again (not expected in a run this short).
                            version = self.plane.call("GET", base).body["metadata"]["resourceVersion"]
                            break
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self._seen(event["type"], obj)
            except OSError:
                time.sleep(0.2)

    def _seen(self, kind: str, pod: dict) -> None:
        with self.lock:
            self.resource_versions.append(int(pod["metadata"]["resourceVersion"]))
            self.pods[pod["metadata"]["name"]] = pod
        for call in self.on_event:
            call(kind, pod)


class Ledger:
    """What happened to each burst pod and when (this script's clock, seconds from start)."""

    def __init__(self, hybrid: set[str]):
        self.hybrid = hybrid
        self.pods: dict[str, dict] = {}
        self.lock = threading.Lock()

    def __call__(self, kind: str, pod: dict) -> None:
        md, spec = pod["metadata"], pod.get("spec") or {}
        name, node = md["name"], spec.get("nodeName")
        with self.lock:
            entry = self.pods.setdefault(name, {
                "name": name, "created": now(), "node": None, "place": None, "bound": None,
                "deleting": None, "deleting_wall": None, "cost_at_deletion": None,
                "disruption_target": None,
                "gone": None, "cost": None, "ready": None})
            if node and entry["node"] is None:
                entry.update(node=node, bound=now(),
                             place="hybrid" if node in self.hybrid else "cloud")
            entry["cost"] = (md.get("annotations") or {}).get(
                "controller.kubernetes.io/pod-deletion-cost")
            ready = _condition(pod, "Ready")
            if ready and ready.get("status") == "True" and entry["ready"] is None:
                entry["ready"] = now()
            target = _condition(pod, "DisruptionTarget")
            if target and target.get("status") == "True" and entry["disruption_target"] is None:
                entry["disruption_target"] = {k: target.get(k) for k in ("reason", "message")}
            if (md.get("deletionTimestamp") or kind == "DELETED") and entry["deleting"] is None:
                # This machine's clock too: the collector's records are in it.
                entry.update(deleting=now(), deleting_wall=time.time(),
                             cost_at_deletion=entry["cost"])
            if kind == "DELETED":
                entry["gone"] = now()

    def snapshot(self) -> list[dict]:
        with self.lock:
            return [dict(e) for e in self.pods.values()]

    def active(self) -> list[dict]:
        return [e for e in self.snapshot() if e["deleting"] is None]


class KyvernoStandIn:
    """The lab's ClusterPolicy's effect (components/kyverno.py, read by tests/karpenter_lab.py
    ``kyverno_rule``): once a pod of its namespaces is bound to a node whose label (or its
    default) equals the precondition's value, its strategic-merge patch, from a thread of its
    own, after the binding — as Kyverno's background controller patches the bound pod."""

    def __init__(self, plane: ControlPlane, namespace: str, rule: dict):
        self.plane, self.namespace, self.rule = plane, namespace, rule
        self.labels: dict[str, str] = {}
        self.done: set[str] = set()
        self.patched: list[dict] = []

    def _node_value(self, node: str) -> str:
        if node not in self.labels:
            found = self.plane.call("GET", f"/api/v1/nodes/{node}").body
            self.labels[node] = ((found.get("metadata") or {}).get("labels") or {}).get(
                self.rule["label"], self.rule["default"])
        return self.labels[node]

    def __call__(self, kind: str, pod: dict) -> None:
        md, node = pod["metadata"], (pod.get("spec") or {}).get("nodeName")
        name = md["name"]
        if kind == "DELETED" or not node or name in self.done or md.get("deletionTimestamp") \
                or md["namespace"] not in self.rule["namespaces"]:
            return
        self.done.add(name)
        if self._node_value(node) == self.rule["value"]:
            threading.Thread(target=self._patch, args=(name, node), daemon=True).start()

    def _patch(self, name: str, node: str) -> None:
        answer = self.plane.call(
            "PATCH", f"/api/v1/namespaces/{self.namespace}/pods/{name}", self.rule["patch"],
            content_type="application/strategic-merge-patch+json")
        self.patched.append({"pod": name, "node": node, "status": answer.status, "at": now()})


class Poller(threading.Thread):
    """NodeClaims and Nodes every half second: when each appeared, was marked for deletion,
    went."""

    def __init__(self, plane: ControlPlane):
        super().__init__(daemon=True)
        self.plane = plane
        self.stopping = False
        self.claims: dict[str, dict] = {}
        self.nodes: dict[str, dict] = {}

    def run(self) -> None:
        while not self.stopping:
            try:
                self._poll()
            except Exception:  # noqa: BLE001 polled again
                pass
            time.sleep(0.5)

    def _poll(self) -> None:
        at = now()
        claims = self.plane.call("GET", "/apis/karpenter.sh/v1/nodeclaims").body["items"]
        present = set()
        for c in claims:
            name = c["metadata"]["name"]
            present.add(name)
            entry = self.claims.setdefault(name, {
                "name": name, "seen": at, "deleting": None, "gone": None,
                "instance_type": (c["metadata"].get("labels") or {}).get(
                    "node.kubernetes.io/instance-type"),
                "created": c["metadata"]["creationTimestamp"], "node": None})
            entry["node"] = (c.get("status") or {}).get("nodeName") or entry["node"]
            if c["metadata"].get("deletionTimestamp") and entry["deleting"] is None:
                entry["deleting"] = at
        for name, entry in self.claims.items():
            if name not in present and entry["gone"] is None:
                entry["gone"] = at
        nodes = self.plane.call("GET", "/api/v1/nodes").body["items"]
        present = set()
        for n in nodes:
            name = n["metadata"]["name"]
            present.add(name)
            labels = n["metadata"].get("labels") or {}
            entry = self.nodes.setdefault(name, {
                "name": name, "seen": at, "gone": None, "nodepool": labels.get(NODEPOOL_LABEL),
                "hybrid": labels.get(HYBRID_LABEL[0]) == HYBRID_LABEL[1],
                "instance_type": labels.get("node.kubernetes.io/instance-type"),
                "allocatable_cpu": (n.get("status") or {}).get("allocatable", {}).get("cpu")})
            # The latest: Karpenter registers a node with its own taint first.
            entry.update(labels=labels, taints=(n.get("spec") or {}).get("taints") or [])
        for name, entry in self.nodes.items():
            if name not in present and entry["gone"] is None:
                entry["gone"] = at


# --- doing ---------------------------------------------------------------------------------------

class Lab:
    def __init__(self, plane: ControlPlane, plan: dict):
        self.plane, self.plan = plane, plan
        self.ns = plan["namespace"]["metadata"]["name"]
        self.deployment = plan["deployment"]["metadata"]["name"]
        self.hybrid = set(plan["hybrid"])
        self.ledger = Ledger(self.hybrid)
        self.kyverno: Optional[KyvernoStandIn] = None
        self.steps: list[dict] = []

    def create(self, obj: dict) -> None:
        answer = self.plane.apply(obj)
        if answer.status not in (200, 201):
            raise RuntimeError(f"{obj['kind']} {obj['metadata']['name']}: {answer.body}")

    def setup(self) -> None:
        plane, plan = self.plane, self.plan
        for node in plan["nodes"]:
            # Created with its status (a Node's status may be set on create): kwok initializes
            # a node it sees without allocatable with 1k CPUs, so a later status patch races it.
            answer = plane.call("POST", "/api/v1/nodes", node)
            assert answer.status == 201, answer.body
        plane.wait_for("the fixed nodes Ready", lambda: all(
            (_condition(plane.call("GET", f"/api/v1/nodes/{n['metadata']['name']}").body,
                        "Ready") or {}).get("status") == "True" for n in plan["nodes"]), 60)
        self.create(plan["nodeclass"])
        self.create(plan["nodepool"])
        for obj in plan["daemonsets"] + plan["pods"] + plan["deployments"]:
            self.create(obj)
        self.create(plan["namespace"])
        plane.wait_for("the default ServiceAccount of the namespace", lambda: plane.call(
            "GET", f"/api/v1/namespaces/{self.ns}/serviceaccounts/default").status == 200, 60)
        answer = plane.apply(plan["deployment"])
        if answer.status not in (200, 201):
            raise RuntimeError(f"Deployment: {answer.body}")
        self.admission_warnings = answer.warnings
        self.wait_pods(plan["deployment"]["spec"]["replicas"], "the first pods Ready")

    def pods(self) -> list[dict]:
        return self.plane.call("GET", f"/api/v1/namespaces/{self.ns}/pods",
                               params={"labelSelector": "app=burst"}).body["items"]

    def wait_pods(self, n: int, what: str, timeout: float = 180) -> None:
        def settled() -> bool:
            pods = self.pods()
            live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
            return len(pods) == len(live) == n and all(
                (_condition(p, "Ready") or {}).get("status") == "True" for p in live)
        self.plane.wait_for(what, settled, timeout)

    def free_m(self, nodes: set[str]) -> dict[str, int]:
        """Each node's allocatable CPU less the requests of every pod bound to it and not
        finished (what the scheduler counts), in millicores, as the API server has them."""
        found = {}
        for node in sorted(nodes):
            obj = self.plane.call("GET", f"/api/v1/nodes/{node}").body
            free = _millicores(obj["status"]["allocatable"]["cpu"])
            pods = self.plane.call("GET", "/api/v1/pods", params={
                "fieldSelector": f"spec.nodeName={node}"}).body["items"]
            for pod in pods:
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                for c in pod["spec"]["containers"]:
                    free -= _millicores(((c.get("resources") or {}).get("requests") or {})
                                        .get("cpu", "0"))
            found[node] = free
        return found

    def scale(self, replicas: int) -> None:
        answer = self.plane.call(
            "PATCH", f"/apis/apps/v1/namespaces/{self.ns}/deployments/{self.deployment}/scale",
            {"spec": {"replicas": replicas}}, content_type="application/merge-patch+json")
        assert answer.status == 200, answer.body

    def step(self, replicas: int) -> dict:
        before = {e["name"] for e in self.ledger.active()}
        start = now()
        self.scale(replicas)
        # A plan may bound the wait (``ready_timeout``): a run that expects pods to stay
        # Pending need not wait out the default.
        self.wait_pods(replicas, f"{replicas} pods Ready and nothing terminating",
                       self.plan.get("ready_timeout", 180))
        settled = now()
        # The ledger is a watch, and a watch may deliver later than a GET answers (seen on two
        # loaded cores: a scale-in's deletions not yet in the ledger, so the step "removed"
        # nothing). The snapshot waits until the ledger has the live pods the API server lists.
        # (Every pod of the namespace: the watch is the namespace's, not only the burst pods'.)
        everyone = self.plane.call("GET", f"/api/v1/namespaces/{self.ns}/pods").body["items"]
        live = {p["metadata"]["name"] for p in everyone if not p["metadata"].get("deletionTimestamp")}
        self.plane.wait_for("the pod watch to have seen the scale",
                            lambda: {e["name"] for e in self.ledger.active()} == live, 60)
        snapshot = self.ledger.snapshot()
        record = {"replicas": replicas, "sent": start, "settled": settled,
                  "hybrid_free_m": self.free_m(self.hybrid),
                  "removed": sorted((e for e in snapshot if e["name"] in before
                                     and e["deleting"] is not None and e["deleting"] >= start),
                                    key=lambda e: e["name"]),
                  "after": sorted((e for e in snapshot if e["deleting"] is None),
                                  key=lambda e: e["name"])}
        self.steps.append(record)
        return record

    def wait_costs(self, scenario: str, timeout: float) -> dict:
        """B: every pod on a hybrid node carries "1"; C: also every cloud pod a negative rank."""
        start = now()

        def settled() -> bool:
            live = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
            for p in live:
                node = p["spec"].get("nodeName")
                cost = (p["metadata"].get("annotations") or {}).get(
                    "controller.kubernetes.io/pod-deletion-cost")
                if node in self.hybrid and cost != "1":
                    return False
                if scenario == "C" and node not in self.hybrid and not (
                        cost or "").startswith("-"):
                    return False
            return True
        try:
            self.plane.wait_for(f"scenario {scenario}'s costs", settled, timeout, interval=0.5)
            return {"settled": True, "waited": round(now() - start, 3)}
        except TimeoutError:
            return {"settled": False, "waited": round(now() - start, 3)}

    def watch(self, seconds: float) -> dict:
        start = now()
        time.sleep(seconds)
        return {"from": start, "to": now()}

    def set_policy(self, policy: str) -> None:
        answer = self.plane.call(
            "PATCH", f"/apis/karpenter.sh/v1/nodepools/{self.plan['nodepool']['metadata']['name']}",
            {"spec": {"disruption": {"consolidationPolicy": policy}}},
            content_type="application/merge-patch+json")
        assert answer.status == 200, answer.body

    def events(self) -> list[dict]:
        found = []
        for e in self.plane.call("GET", "/api/v1/events").body["items"]:
            source = (e.get("source") or {}).get("component") or e.get("reportingComponent") or ""
            if "karpenter" not in source.lower():
                continue
            found.append({"reason": e.get("reason"), "message": e.get("message"),
                          "kind": e["involvedObject"].get("kind"),
                          "object": e["involvedObject"].get("name"),
                          "namespace": e["metadata"]["namespace"], "source": source,
                          "reporting_controller": e.get("reportingComponent"),
                          "type": e.get("type"), "count": e.get("count"),
                          "first": e.get("firstTimestamp") or e.get("eventTime"),
                          "last": e.get("lastTimestamp") or e.get("eventTime")})
        return found


def sequence(lab: Lab, plan: dict) -> dict:
    scenario = plan["scenario"]
    out: dict[str, Any] = {"costs": None}
    steps = plan["sequence"]
    for previous, target in zip(steps, steps[1:]):
        lab.step(target)
        if target > previous and scenario in ("B", "C"):
            out["costs"] = lab.wait_costs(scenario, plan.get("rank_timeout", 150))
            # What the costs are as the first scale-in starts.
            out["costs"]["pods"] = sorted(
                ({"name": p["metadata"]["name"], "node": p["spec"].get("nodeName"),
                  "cost": (p["metadata"].get("annotations") or {}).get(
                      "controller.kubernetes.io/pod-deletion-cost")}
                 for p in lab.pods()), key=lambda p: p["name"])
    out["watch"] = lab.watch(plan.get("watch", 0))
    if plan.get("underutilized"):
        # The question the demo guide left open, asked of Karpenter directly: the lab's
        # WhenEmpty leaves a node with pods alone by its rule; would WhenEmptyOrUnderutilized
        # move them onto the hybrid nodes' free room (nodes Karpenter does not manage)?
        lab.set_policy("WhenEmptyOrUnderutilized")
        out["underutilized"] = lab.watch(plan["underutilized"])
    return out


def collector(lab: Lab, plan: dict, work: Path) -> dict:
    outputs = work / "lab.json"
    outputs.write_text(json.dumps(plan["outputs"]))
    folder = work / "rehearsals"
    started = now()
    done = subprocess.run(
        [sys.executable, "-m", "rehearse", "burst", "--outputs", str(outputs),
         "--kubeconfig", str(lab.plane.kubeconfig), "--out", str(folder), *plan["arguments"]],
        cwd=ROOT, capture_output=True, text=True, timeout=plan.get("timeout", 400))
    [run] = list(folder.iterdir()) if folder.exists() else [None]
    result = {"code": done.returncode, "stderr": done.stderr[-4000:], "started": started,
              "ended": now(), "folder": str(run) if run else None}
    if run is not None:
        result["report"] = json.loads((run / "report.json").read_text()) \
            if (run / "report.json").exists() else None
        result["events"] = [json.loads(line) for line in
                            (run / "events.jsonl").read_text().splitlines() if line.strip()]
    return result


def main(plan_path: str, out_path: str) -> int:
    plan = json.loads(Path(plan_path).read_text())
    work = Path(plan["workdir"]).resolve()
    bindir = Path(plan["bindir"])
    plane = ControlPlane.start(bindir, work / "plane")
    out: dict[str, Any] = {"timings": {"plane_up": now()}}
    watcher = poller = None
    try:
        karpenter.install_crds(plane)
        types = work / "instance-types.json"
        types.write_text(json.dumps(plan["instance_types"]))
        karpenter.start(plane, bindir, feature_gates=plan.get("feature_gates", ""),
                        instance_types=types)
        out["timings"]["karpenter_up"] = now()
        lab = Lab(plane, plan)
        callbacks: list = [lab.ledger]
        if plan.get("kyverno"):
            lab.kyverno = KyvernoStandIn(plane, lab.ns, plan["kyverno"])
            callbacks.append(lab.kyverno)
        watcher = PodWatch(plane, lab.ns, callbacks)
        watcher.start()
        poller = Poller(plane)
        poller.start()
        lab.setup()
        out["timings"]["setup_done"] = now()
        mode = plan["mode"]
        if mode == "sequence":
            out["run"] = sequence(lab, plan)
        elif mode == "collector":
            out["run"] = collector(lab, plan, work)
        time.sleep(1.0)  # the last watch events and polls
        out.update(
            steps=lab.steps, pods=lab.ledger.snapshot(), nodeclaims=list(poller.claims.values()),
            nodes=list(poller.nodes.values()), events=lab.events(),
            kyverno=lab.kyverno.patched if lab.kyverno else None,
            admission_warnings=lab.admission_warnings,
            nodepool=plane.call("GET", "/apis/karpenter.sh/v1/nodepools/"
                                f"{plan['nodepool']['metadata']['name']}").body,
            karpenter_log=[line for line in karpenter.log_lines(plane)
                           if line.get("level") in ("INFO", "ERROR", "info", "error")
                           or "deletion cost" in str(line.get("message"))][-400:],
            watch_resource_versions=watcher.resource_versions[-5:])
        out["timings"]["end"] = now()
    except Exception as error:  # noqa: BLE001 said in the output, with the engines' logs
        out["error"] = f"{type(error).__name__}: {error}"
        out["logs"] = {name: plane.tail(name, 40) for name in
                       ("karpenter-kwok", "kube-scheduler", "kube-controller-manager", "kwok")}
    finally:
        if poller is not None:
            poller.stopping = True
        if watcher is not None:
            watcher.close()
        plane.stop()
    Path(out_path).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
