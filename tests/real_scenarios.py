"""Demo 2's scenarios A, B and C end to end with both real controllers at once: Kyverno v1.19.0
(admission and background controller, the lab's chart values, tests/real_kyverno.py) and
Karpenter v1.15.0's kwok provider (the lab's NodePool, tests/karpenter_lab.py), on one real
control plane per scenario (engines/control_plane.py: kube-apiserver, the controller-manager's
Deployment and ReplicaSet controllers, the scheduler, kwok).

- A: Kyverno installed without the policy (stacks/layers/demo.py installs it in every
  scenario), Karpenter with its ``PodDeletionCostManagement`` gate off;
- B: the lab's ClusterPolicy as the program registers it, the gate off;
- C: the same policy, the gate on as the lab's chart values for C set it
  (karpenter_lab.gates).

Two halves, as in tests/real_kyverno.py:

- ``plan(scenario, ...)`` (in the test process, one scenario at a time: the program runs under
  Pulumi's mocks, which are not thread-safe): Karpenter's lab (karpenter_lab.plan) and
  Kyverno's chart objects and policy (real_kyverno.controllers_plan) for that scenario's run.
- ``python -m tests.real_scenarios BINDIR WORKDIR PLAN RESULT`` (in a private network
  namespace, real_kyverno.run_in_netns: both controllers listen on every interface): the control
  plane, Karpenter, Kyverno, then the demo's sequence — 3 -> 15 (past the hybrid nodes' room:
  Karpenter launches burst nodes), the costs waited for as ``rehearse burst`` waits (B: Kyverno's
  on every hybrid pod; C: Karpenter's ranks too), then each scale-in (15 -> 12 -> 10 -> 3) as a
  presenter does it: ``python -m rehearse predict --json`` against the API server, then the
  scale request, the victims once the ReplicaSet controller has marked them
  (real_scale_in.Scaler.scale_in). The steps go back as JSON, judged in the test process.

What is seen besides: every pod event (karpenter_scenario.PodWatch: the Ledger, and ``CostLog``
here, each cost value a pod carried and when it was first seen), Karpenter's NodeClaims and
Nodes (karpenter_scenario.Poller), Karpenter's own log lines of its deletion-cost controller.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

PROJECT = Path(__file__).resolve().parents[1]
if str(PROJECT) not in sys.path:
    sys.path.insert(0, str(PROJECT))

from tests import karpenter_scenario, real_kyverno  # noqa: E402  (puts engines/ on sys.path)
import karpenter  # noqa: E402  (engines/karpenter.py)
from control_plane import ControlPlane  # noqa: E402

COST = "controller.kubernetes.io/pod-deletion-cost"
SEQUENCE = [3, 15, 12, 10, 3]
SCENARIOS = ("A", "B", "C")
#: predict's --sync-lag, as tests/test_real_scale_in.py's demo steps use: three scenarios'
#: engines share two cores here, and the controller sorts later under that load.
SYNC_LAG = 4.0
#: How long to wait for the costs before the first scale-in. Karpenter's deletion-cost
#: controller reconciles once a minute (pkg/controllers/pod/deletioncost/controller.go
#: ``reconcileInterval``), its first pass at start sees no node of its own, and a node still
#: initializing or nominated for a pending pod is not ranked on that pass
#: (state.StateNode.ValidateNodeDisruptable): two passes at worst, and the writes after.
RANK_TIMEOUT = 150.0
#: Karpenter's log messages of that controller (controller.go, ranking.go), kept with their time.
DELETION_COST_MESSAGES = ("completed node ranking", "enqueued pod deletion cost annotation writes",
                          "no changes detected, skipping pod deletion cost update")


# --- the plan (test process) -----------------------------------------------------------------------

def plan(scenario: str, bindir: Path, workdir: Path) -> dict:
    """What the scenario script needs for ``burstScenario`` = ``scenario``, from the program's
    own run: Karpenter's lab as registered, and Kyverno's chart objects and policy as the chart
    renders and the program registers them. karpenter_lab's stand-in rule for the policy is kept
    only as ``policy_rule`` (what the policy writes, for the assertions): the real Kyverno
    writes the costs here."""
    from tests import karpenter_lab
    from tests.conftest import run_lab

    run = run_lab(burstScenario=scenario)
    lab = karpenter_lab.plan(scenario, run)
    rule = lab.pop("kyverno")
    return {**lab, "policy_rule": rule, "kyverno_controllers": real_kyverno.controllers_plan(run),
            "sequence": SEQUENCE, "sync_lag": SYNC_LAG, "rank_timeout": RANK_TIMEOUT,
            "bindir": str(bindir), "workdir": str(workdir)}


def run_in_netns(bindir: Path, workdir: Path, the_plan: dict, timeout: float = 600) -> dict:
    return real_kyverno.run_in_netns(bindir, workdir, the_plan, timeout, module="tests.real_scenarios")


def run_all(bindir: Path, plans: dict[str, tuple[Path, dict]], head_start_s: float = 60) -> dict:
    """Every scenario's run (``plans``: name -> (workdir, plan)), side by side, each in its own
    network namespace. C goes first and the others once its Karpenter has started (or after
    ``head_start_s``): C is the longest run — it waits for Karpenter's ranking pass, a minute
    after Karpenter's start — and its control plane starts faster without two others starting
    beside it on two cores."""
    import concurrent.futures

    order = sorted(plans, key=lambda name: name != "C")
    with concurrent.futures.ThreadPoolExecutor(len(plans)) as pool:
        futures = {}
        for name in order:
            work, the_plan = plans[name]
            futures[name] = pool.submit(run_in_netns, bindir, work, the_plan)
            if name == "C":
                started = work / "plane" / f"{karpenter.NAME}.log"
                deadline = time.monotonic() + head_start_s
                while not started.exists() and not futures[name].done() \
                        and time.monotonic() < deadline:
                    time.sleep(0.2)
        return {name: future.result() for name, future in futures.items()}


# --- seeing (in the network namespace) ----------------------------------------------------------------

class CostLog:
    """A PodWatch callback: for each pod, when its binding was first seen and every cost value
    it carried, each with the moment it was first seen (karpenter_scenario's clock)."""

    def __init__(self) -> None:
        self.pods: dict[str, dict] = {}
        self.lock = threading.Lock()

    def __call__(self, kind: str, pod: dict) -> None:
        md = pod["metadata"]
        node = (pod.get("spec") or {}).get("nodeName")
        cost = (md.get("annotations") or {}).get(COST)
        with self.lock:
            entry = self.pods.setdefault(md["name"], {"node": None, "bound": None, "costs": []})
            if node and entry["node"] is None:
                entry.update(node=node, bound=karpenter_scenario.now())
            if not entry["costs"] or entry["costs"][-1]["value"] != cost:
                entry["costs"].append({"value": cost, "at": karpenter_scenario.now()})

    def snapshot(self) -> dict[str, dict]:
        with self.lock:
            return json.loads(json.dumps(self.pods))


def deletion_cost_log(plane: ControlPlane) -> list[dict]:
    """Karpenter's log lines of its deletion-cost controller and queue, and its errors."""
    return [line for line in karpenter.log_lines(plane)
            if line.get("message") in DELETION_COST_MESSAGES
            or "deletioncost" in str(line.get("controller"))
            or str(line.get("level")).lower() == "error"][-200:]


# --- the run (in the network namespace) ---------------------------------------------------------------

def wait_binding_webhook(kyverno: real_kyverno.Scenario) -> None:
    """Kyverno registers the policy's rule on its pods/binding webhook after the policy is
    Ready; a pod bound before that gets no cost (tests/test_real_kyverno.py shows the webhook)."""
    kyverno.plane.wait_for("Kyverno's pods/binding webhook", lambda: any(
        "pods/binding" in hook["resources"] for hook in kyverno.webhooks()), timeout=60)


def scenario(bindir: Path, work: Path, the_plan: dict) -> dict:
    from tests.real_scale_in import Scaler, step_to_json

    name = the_plan["scenario"]
    out: dict[str, Any] = {"scenario": name, "timings": {}}
    timings = out["timings"]

    def mark(what: str) -> None:
        timings[what] = karpenter_scenario.now()

    plane = ControlPlane.start(bindir, work / "plane")
    kyverno = real_kyverno.Scenario(bindir, work, the_plan["kyverno_controllers"])
    watcher = poller = None
    try:
        mark("plane_up")
        karpenter.install_crds(plane)
        types = work / "instance-types.json"
        types.write_text(json.dumps(the_plan["instance_types"]))
        # Karpenter first: its deletion-cost controller's minute starts at its first pass.
        karpenter.start(plane, bindir, feature_gates=the_plan["feature_gates"], instance_types=types)
        mark("karpenter_up")
        timings["kyverno"] = kyverno.bring_up(plane)
        if the_plan["kyverno_controllers"]["policy"] is not None:
            wait_binding_webhook(kyverno)
        mark("kyverno_up")
        lab = karpenter_scenario.Lab(plane, the_plan)
        costs = CostLog()
        watcher = karpenter_scenario.PodWatch(plane, lab.ns, [lab.ledger, costs])
        watcher.start()
        poller = karpenter_scenario.Poller(plane)
        poller.start()
        lab.setup()
        mark("setup_done")
        sequence = the_plan["sequence"]
        peak = max(sequence)
        out["scale_up"] = lab.step(peak)
        mark("scaled_up")
        if name in ("B", "C"):
            out["costs_wait"] = lab.wait_costs(name, the_plan["rank_timeout"])
        mark("costs_settled")
        scaler = Scaler(plane, lab.ns, lab.deployment)
        out["steps"] = []
        for replicas in sequence[sequence.index(peak) + 1:]:
            kyverno.check_kyverno()
            started = karpenter_scenario.now()
            step = scaler.scale_in(replicas, lag=the_plan["sync_lag"])
            out["steps"].append({**step_to_json(step), "started": started,
                                 "ended": karpenter_scenario.now()})
        mark("scaled_in")
        time.sleep(1.0)  # the last watch events
        out.update(pods=lab.ledger.snapshot(), costs=costs.snapshot(),
                   nodeclaims=list(poller.claims.values()), nodes=list(poller.nodes.values()),
                   karpenter_log=deletion_cost_log(plane), webhooks=kyverno.webhooks(),
                   policy_status=kyverno.policy_status() if the_plan["kyverno_controllers"]["policy"]
                   else None)
        mark("end")
    except Exception as error:  # noqa: BLE001 - said in the result, with the engines' logs
        out["error"] = f"{type(error).__name__}: {error}"
        out["logs"] = {n: plane.tail(n, 40) for n in ("karpenter-kwok", "kube-controller-manager",
                                                      "kube-scheduler", "kwok")}
        out["logs"].update({f"kyverno-{role}": _tail(work / f"kyverno-{role}.log")
                            for role in real_kyverno.CONTROLLERS})
        out["log"] = kyverno.log_lines
    finally:
        if poller is not None:
            poller.stopping = True
        if watcher is not None:
            watcher.close()  # or kube-apiserver waits for the open watch when told to stop
        kyverno.stop_kyverno()
        plane.stop()  # Karpenter and the engines, by PID
        mark("stopped")
    return out


def _tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return "\n".join(text.splitlines()[-lines:])


def main(argv: list[str]) -> int:
    bindir, workdir, plan_file, result_file = (Path(a) for a in argv)
    # A SIGTERM (the test's timeout, or its death) ends the run through scenario()'s finally,
    # which stops Kyverno, Karpenter and the control plane by PID.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    the_plan = json.loads(plan_file.read_text())
    result: Optional[dict] = None
    try:
        result = scenario(bindir, workdir, the_plan)
    finally:
        result_file.write_text(json.dumps(result if result is not None else
                                          {"error": "the scenario script was stopped"}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
