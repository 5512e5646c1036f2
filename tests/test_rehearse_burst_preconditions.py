"""Which checks prove each scenario of demo 2 in place, and in which order (the report lists
them so, and report.json readers key on their names): the contract docs/rehearse.md gives for
`verify burst` and `burst`. A — nobody writes costs (no policy, no cost on any pod, the gate
off); B — Kyverno may get nodes (admission and background) and update pods, sees bindings, its
policy is Ready, the pods on hybrid nodes carry "1", no other cost, the gate off; C — B's
Kyverno checks and costs, then the gate on, a Karpenter that knows it (1.15.0 or later), may
patch pods, and the NodePool's budget at 100%. Read from recorded runs, whatever each check
found."""

from __future__ import annotations

from pathlib import Path

import pytest

from rehearse.commands.burst.kinds import (C_BUDGET, C_FILTERS, C_FOREIGN_COST, C_GATE_OFF,
                                           C_GATE_ON, C_GATE_VERSION, C_HYBRID_COST,
                                           C_KARPENTER_PATCH, C_KYVERNO_NODES, C_KYVERNO_UPDATE,
                                           C_NO_POLICY, C_POLICY, PRECONDITIONS, check_name)
from rehearse.commands.burst.preconditions import scenario_checks
from rehearse.run.record import read_events

FIXTURES = Path(__file__).parent / "fixtures" / "rehearse"

KYVERNO = [C_KYVERNO_NODES.format(role="admission"), C_KYVERNO_NODES.format(role="background"),
           C_KYVERNO_UPDATE, C_FILTERS, C_POLICY, C_HYBRID_COST]
CONTRACT = {
    "A": [C_NO_POLICY, C_FOREIGN_COST, C_GATE_OFF],
    "B": KYVERNO + [C_FOREIGN_COST, C_GATE_OFF],
    "C": KYVERNO + [C_FOREIGN_COST, C_GATE_ON, C_GATE_VERSION, C_KARPENTER_PATCH, C_BUDGET],
}


def _observed() -> list[dict]:
    return [e for run in ("burst-abc", "burst-b-no-get-nodes", "verify-burst-a",
                          "verify-burst-c-old-karpenter")
            for e in read_events(FIXTURES / run) if e["kind"] == PRECONDITIONS]


@pytest.mark.parametrize("observed", _observed(),
                         ids=lambda e: f"{e['scenario']}-{e['phase']}")
def test_each_scenario_makes_its_own_checks_in_order(observed):
    scenario = observed["scenario"]
    assert [c.name for c in scenario_checks(observed)] == [check_name(scenario, what)
                                                           for what in CONTRACT[scenario]]


@pytest.mark.parametrize("scenario", ["A", "B", "C"])
def test_the_checks_are_made_even_when_nothing_was_read(scenario):
    """A preconditions event with nothing in it (a run cut short, an old recording) still gets
    every check of its scenario, each saying what it lacks."""
    checks = scenario_checks({"scenario": scenario})
    assert [c.name for c in checks] == [check_name(scenario, what) for what in CONTRACT[scenario]]
    assert all(c.seen for c in checks)
