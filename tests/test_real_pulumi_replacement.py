"""tests/replacement.py's port of Pulumi's step generator, and tests/graph.py's delete order,
against the real engine on the same graphs (issue 41, "Order"): what a change replaces, updates,
creates and deletes, and in which order, for the shapes the lab has — a hybrid host replaced
delete-first with its Node cleanup deleted ahead of it and created again, an activation replaced
create-first through its token into the host, an update in place with an ignored image, a host
group removed, ``--replace`` of a host — and the general rules those rest on: a cascade of
dependents, a provider asking for delete-before-replace, replaceOnChanges, deletedWith,
retainOnDelete, a replaced resource's output that does not change.

One program (tests/replacement_program.py) holds every graph as disjoint subgraphs, so the
engine runs it four times in all: up, up of the change, up --replace, destroy. The port runs the
same program offline. The engine runs independent steps in parallel (the default, as the lab's
users run it): only orders it guarantees are compared — two steps of one resource, or of two
resources joined by a dependency (tests/replacement_differential.py ``order_violations``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests import replacement_differential as diff
from tests.real_pulumi import PulumiEngine, PulumiProject, pulumi_bindir  # noqa: F401
from tests.replacement_program import PROGRAM

#: ``pulumi up --replace`` of this host in phase 3 (h4 is unchanged by phase 2).
REPLACED_BY_FLAG = "h4-host"


class Runs:
    """The engine's runs and the port's inputs for the three phases."""

    def __init__(self, engine: PulumiEngine, folder: Path):
        self.offline = old, new = [diff.offline_run(diff.phase_spec(p), folder) for p in (1, 2)]
        #: The port's steps for the change, and for --replace of a host after it.
        self.port_change = diff.port_update(old, new, diff.phase_spec(2), folder)
        self.port_flagged = diff.port_update(new, new, diff.phase_spec(2), folder,
                                             replace=[REPLACED_BY_FLAG])
        project = PulumiProject.program(folder / "project", "replacement-diff", PROGRAM,
                                        packages=())
        self.stack = engine.stack(project, "t")
        self.stack.set_config(diff.config_of(diff.phase_spec(1)))
        self.first = self.stack.up()
        assert self.first.ok, self.first.error
        self.stack.set_config(diff.config_of(diff.phase_spec(2)))
        self.preview = self.stack.preview()
        assert self.preview.ok, self.preview.error
        self.change = self.stack.up()
        assert self.change.ok, self.change.error
        urn = next(s.urn for s in self.change.steps() if s.name == REPLACED_BY_FLAG)
        self.flagged = self.stack.up(replace=[urn])
        assert self.flagged.ok, self.flagged.error
        self.destroy = self.stack.destroy()
        assert self.destroy.ok, self.destroy.error


@pytest.fixture(scope="module")
def runs(pulumi_bindir, tmp_path_factory) -> Iterator[Runs]:  # noqa: F811
    folder = tmp_path_factory.mktemp("replacement-diff")
    with PulumiEngine(pulumi_bindir, folder / "engine", deadline=120) as engine:
        yield Runs(engine, folder)


def _compare(port: list, engine_run, graphs, orders: bool = True) -> None:
    engine = diff.engine_ops(engine_run)
    assert diff.by_resource(port) == diff.by_resource(engine), (
        "port vs engine ops differ:\n"
        + "\n".join(f"{n}: port {p} engine {e}" for n in sorted(
            set(diff.by_resource(port)) | set(diff.by_resource(engine)))
            if (p := diff.by_resource(port).get(n)) != (e := diff.by_resource(engine).get(n))))
    if orders:  # a preview runs no step: its events say nothing of an order
        assert diff.order_violations(port, engine, diff.connected(graphs)) == []


def test_the_first_up_creates_every_resource(runs):
    created = diff.by_resource(diff.engine_ops(runs.first))
    assert created == {r.name: ["create"] for r in runs.offline[0].resources()
                       if r.type.startswith("pulumi-python:dynamic")}


def test_a_change_steps_as_the_port_says(runs):
    _compare(runs.port_change, runs.change, runs.offline)


def test_a_preview_of_the_change_steps_as_the_port_says(runs):
    """The preview plans the same steps as the up. It too leaves s-2 alone: a replaced
    dynamic resource's planned outputs are its inputs (the dynamic provider has no preview of
    its own: provider_plugin.go Create returns the inputs as the state), so an echoed input is
    known, not unknown."""
    _compare(runs.port_change, runs.preview, runs.offline, orders=False)


def test_the_lab_s_host_shapes_step_as_the_lab_expects(runs):
    """What tests/test_replacement.py asserts on the port, read from the engine: the host
    deleted before its replacement is created, its Node cleanup deleted before it and created
    after it, the token created first and its old copy deleted at the end, the sweep updated."""
    engine = diff.engine_ops(runs.change)

    def at(name: str, op: str) -> tuple[int, int]:
        step = engine[diff.Op(name, op)]
        return step.started, step.finished

    for p in ("h1", "h2"):
        assert at(f"{p}-node", "delete-replaced")[1] < at(f"{p}-host", "delete-replaced")[0]
        assert at(f"{p}-host", "delete-replaced")[1] < at(f"{p}-host", "create-replacement")[0]
        assert at(f"{p}-host", "create-replacement")[1] < at(f"{p}-node", "create-replacement")[0]
        assert diff.by_resource(o for o in engine if o.name == f"{p}-sweep") == {
            f"{p}-sweep": ["update"]}
        assert f"{p}-cilium" not in diff.by_resource(engine)
    assert at("h2-tok", "create-replacement")[1] < at("h2-host", "create-replacement")[0]
    assert at("h2-host", "create-replacement")[1] < at("h2-tok", "delete-replaced")[0]
    assert diff.by_resource(o for o in engine if o.name.startswith("h3-")) == {
        "h3-host": ["update"]}


def test_replace_by_flag_steps_as_the_port_says(runs):
    _compare(runs.port_flagged, runs.flagged, runs.offline[1:])


def test_destroy_deletes_in_the_graph_model_s_order(runs):
    _, new = runs.offline
    violations, checked = diff.destroy_violations(new, runs.destroy)
    assert checked > 20  # not vacuous: the host groups' and the chains' edges
    assert violations == []
    deleted = {s.name for s in runs.destroy.steps() if s.op == "delete"}
    assert deleted >= {r.name for r in new.resources()}
