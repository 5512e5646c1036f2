"""Switching scenarios (collect): the glue between the run and rehearse.lab.switch (preview,
confirm, ``pulumi up``), and the deletion costs a restore leaves on the pods."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from rehearse.run.errors import RunError
from rehearse.run.arguments import PROJECT_DIR
from rehearse.lab.switch import ConfigSwitch, Scope
from rehearse.commands.burst.kinds import COST, SCENARIO_KEY
from rehearse.commands.burst.reading import Cluster


# --- switching scenarios: the Pulumi Automation API ---------------------------------------------

def _pulumi_error(error: BaseException) -> str:
    from rehearse.lab.outputs import _first_line

    return _first_line(error) if isinstance(error, Exception) else type(error).__name__


#: What a burstScenario change touches in the program: Kyverno's ClusterPolicy in B and C
#: (stacks/layers/demo.py, components/kyverno.py), the Karpenter controller's Helm release, whose
#: values carry the podDeletionCostManagement gate in C (stacks/layers/karpenter.py,
#: components/karpenter.py), and DeletionCostRanks in C (stacks/layers/demo.py).
SCENARIO_SCOPE = Scope(
    SCENARIO_KEY, "the scenario's resources (Kyverno's ClusterPolicy, the Karpenter controller's "
    "Helm release, DeletionCostRanks)",
    resources=(("kubernetes:kyverno.io/v1:ClusterPolicy", "-kyverno-deletion-cost"),
               ("kubernetes:helm.sh/v3:Release", "-karpenter-controller-release"),
               ("pulumi-python:dynamic/cleanup:DeletionCostRanks", "-deletion-cost-ranks")))


class Switcher:
    """Switches ``burstScenario`` (rehearse.lab.switch: preview, confirm, up) and puts it back,
    through the stack ``open_stack`` opens (the face's, command.py: a test's stand-in there)."""

    def __init__(self, ctx: Any, record: Any, open_stack: Callable[[str, Path], Any]):
        self.ctx, self.record = ctx, record
        self._open_stack = open_stack
        self.config = ConfigSwitch(ctx, self._open, SCENARIO_SCOPE)

    def _open(self) -> Any:
        work_dir = getattr(self.ctx, "work_dir", None) or PROJECT_DIR
        try:
            return self._open_stack(self.ctx.outputs.stack, Path(work_dir))
        except FileNotFoundError:
            raise RunError("switching scenarios needs the pulumi CLI (the Automation API runs "
                           "it): install it, or run one scenario at a time without "
                           "--scenarios") from None
        except Exception as error:  # noqa: BLE001 automation's CommandError
            raise RunError(f"pulumi could not find the stack {self.ctx.outputs.stack}: "
                           f"{_pulumi_error(error)}") from None

    @property
    def original(self) -> Optional[str]:
        return self.config.original

    @property
    def changed(self) -> bool:
        return self.config.touched

    def read_original(self) -> Optional[str]:
        return self.config.read_original()

    def switch(self, scenario: str) -> dict:
        started = self.ctx.monotonic()
        try:
            result = self.config.switch(scenario, f"burstScenario {scenario}")
        except (KeyboardInterrupt, RunError):
            raise
        except Exception as error:  # noqa: BLE001 automation's CommandError
            return {"ok": False, "error": _pulumi_error(error),
                    "seconds": round(self.ctx.monotonic() - started, 1)}
        return {**result, "seconds": round(self.ctx.monotonic() - started, 1)}

    def restore(self) -> dict:
        started = self.ctx.monotonic()
        result = self.config.restore(f"burstScenario back to {self.original or 'the default'}")
        return {**result, "seconds": round(self.ctx.monotonic() - started, 1)}


def clear_costs(cluster: "Cluster", scenario: str) -> list[dict]:
    """After a restore: removes from the running burst pods the deletion costs ``scenario``
    does not write — in A every one, in B all but Kyverno's "1" (Karpenter's negative ranks);
    C writes both. Deleting the ClusterPolicy or turning Karpenter's gate off stops new
    writes but leaves the values on the pods (the demo guide's ``karpenter-gate.sh off`` strips
    them; DeletionCostRanks strips Karpenter's only), and A would then rank like B.
    Stripping, not a rollout restart: the pods stay (no new pods, no NodeClaims, nothing to
    wait for), and it is exactly the annotation ``verify burst`` checks."""
    if scenario == "C":
        return []
    cleared = []
    for pod in cluster.burst_pods():
        meta = pod.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(COST)
        if value is None or meta.get("deletionTimestamp") or (scenario == "B" and value.strip() == "1"):
            continue
        cluster.client.patch(cluster.t["Pod"], meta["name"], {"metadata": {"annotations": {COST: None}}},
                             namespace=cluster.s.namespace)
        cleared.append({"name": meta["name"], "cost": value})
    return cleared
