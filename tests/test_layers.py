"""The layer framework: layer components, naming, provider, dependency direction, upToLayer."""

from __future__ import annotations

import pytest

from stacks.config import AVAILABLE_LAYERS, LAYERS
from offline.runner import ProgramRun

LAYER_KINDS = {"network": "Network", "cluster": "Cluster", "hybrid": "Hybrid",
               "gateway": "Gateway", "karpenter": "Karpenter", "demo": "Demo"}


def test_layer_order_is_the_documented_one():
    assert LAYERS == ("network", "cluster", "hybrid", "gateway", "karpenter", "demo")
    assert AVAILABLE_LAYERS == LAYERS[: len(AVAILABLE_LAYERS)]


def test_each_built_layer_is_one_top_level_component(dev_run):
    layers = [r for r in dev_run.registrations if r.type.startswith("eks-hybrid-lab:layer:")]
    # Registration order follows asyncio scheduling; creation order follows the dependencies.
    assert sorted((r.type, r.name) for r in layers) == sorted(
        (f"eks-hybrid-lab:layer:{LAYER_KINDS[name]}", name) for name in dev_run.outputs["layers"])
    for layer in layers:
        assert layer.parent.endswith("::pulumi:pulumi:Stack::eks-hybrid-lab-dev")
        # Chaining layers with depends_on would serialize creation across the whole stack.
        assert layer.dependencies == []


def test_every_resource_belongs_to_a_layer_except_the_provider(dev_run):
    outside = [r for r in dev_run.resources() if dev_run.layer_of(r) is None]
    assert [(r.type, r.name) for r in outside] == [("pulumi:providers:aws", "aws")]


def test_children_are_named_from_their_parent(dev_run):
    for reg in dev_run.registrations:
        parent = dev_run.by_urn.get(reg.parent)
        if parent is not None:
            assert reg.name.startswith(parent.name + "-"), f"{reg.name} under {parent.name}"


def test_component_types_and_register_outputs(dev_run):
    components = [r for r in dev_run.registrations if not r.custom]
    assert components
    for component in components:
        assert component.type.startswith("eks-hybrid-lab:"), component.type
        assert component.urn in dev_run.outputs_registered, f"{component.name} never called register_outputs"


def _layer_index(run: ProgramRun, urn: str) -> int:
    layer = run.layer_of(run.by_urn[urn])
    return -1 if layer is None else LAYERS.index(layer)


@pytest.mark.parametrize("up_to", AVAILABLE_LAYERS)
def test_dependencies_never_point_to_a_later_layer(lab, up_to):
    run = lab(upToLayer=up_to)
    for reg in run.registrations:
        own = _layer_index(run, reg.urn)
        for dep in reg.dependencies:
            assert _layer_index(run, dep) <= own, f"{reg.name} depends on later {dep}"


@pytest.mark.parametrize("up_to", AVAILABLE_LAYERS)
def test_up_to_layer_builds_exactly_that_prefix(lab, up_to):
    run = lab(upToLayer=up_to)
    expected = list(LAYERS[: LAYERS.index(up_to) + 1])
    assert run.outputs["layers"] == expected
    assert run.outputs["destroyOrder"] == list(reversed(expected))
    assert {run.layer_of(r) for r in run.resources()} - {None} == set(expected)


def test_lowering_up_to_layer_removes_only_the_layers_above(lab):
    runs = [lab(upToLayer=layer) for layer in AVAILABLE_LAYERS]
    for lower, higher in zip(runs, runs[1:]):
        kept = {r.urn: r for r in higher.registrations}
        for reg in lower.registrations:
            assert reg.urn in kept, f"{reg.name} disappears when a layer is added"
            changed = sorted(k for k in {*kept[reg.urn].inputs, *reg.inputs}
                             if kept[reg.urn].inputs.get(k) != reg.inputs.get(k))
            assert changed == [], f"{reg.name} changes when a layer is added: {changed}"
        assert len(higher.registrations) > len(lower.registrations)


def test_stack_outputs_name_the_layers(dev_run):
    assert dev_run.outputs["notBuilt"] == [l for l in LAYERS if l not in dev_run.outputs["layers"]]
    assert dev_run.outputs["region"] == "ap-northeast-2"
