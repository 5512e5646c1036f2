"""The tests' view of the real Helm engine: a skip marker for machines without helm-python-sdk or
../shared/charts, the renders of a run's releases, a run with one registration's inputs (a
release's values) changed, and one Helm render of identical inputs per test run, shared by the
two test workers."""

from __future__ import annotations

import copy
import functools
import hashlib
import pickle
from dataclasses import replace

import pytest

from offline import chart_render
from offline.runner import ProgramRun
from tests import worker_share

#: Tests of charts' pods use Helm's own render, never the recorded one.
needs_helm = pytest.mark.skipif(chart_render.engine_problem() is not None,
                                reason=f"Helm cannot render here: {chart_render.engine_problem()}")


def release(run: ProgramRun, name: str) -> chart_render.Release:
    """The registered release of that Helm release name (``cilium``, ``karpenter``, ...)."""
    [found] = [r for r in chart_render.registered_releases(run) if r.name == name]
    return found


def with_registration(run: ProgramRun, name: str, change) -> ProgramRun:
    """A copy of ``run`` whose registration ``name`` has its inputs changed by ``change``."""
    regs = []
    for reg in run.registrations:
        if reg.name == name:
            inputs = copy.deepcopy(reg.inputs)
            change(inputs)
            reg = replace(reg, inputs=inputs)
        regs.append(reg)
    return replace(run, registrations=regs)


# --- speed only: the two workers share Helm's renders ---------------------------------------------
# A render costs Helm 0.1-0.3 s for Cilium (most of it generating the Hubble certificates' RSA
# keys, masked in the result) and Kyverno (3.5 MB of CRDs); the rest take milliseconds. Each
# worker caches its renders (chart_render._render_cached), but worksteal spreads a file's tests
# over both workers, so the dev stack's releases, and the inert-value check's renders that other
# tests repeat, were rendered by both. Here one worker renders a given (chart, values, name,
# namespace) and leaves the result — Helm's texts, or its refusal — beside the shared program
# runs (tests/worker_share.py) for the other. Every result is still Helm's render of exactly those
# inputs, on the chart source; only the repeat is saved. Outside xdist nothing is shared.

#: Helm's render of the chart archive, uncached (chart_render's own, under its lru_cache).
_helm_render = chart_render._render_cached.__wrapped__


def _outcome(archive: str, values_json: str, name: str, namespace: str) -> tuple[str, object]:
    """("texts", the render) or ("refused", Helm's error); any other error propagates."""
    import helm_python
    try:
        return "texts", _helm_render(archive, values_json, name, namespace)
    except helm_python.HelmError as error:
        return "refused", error


@functools.lru_cache(maxsize=512)
def _shared_render(archive: str, values_json: str, name: str, namespace: str) -> tuple[tuple[str, str], ...]:
    folder = worker_share.directory("chart-renders")
    if folder is None:
        return _helm_render(archive, values_json, name, namespace)
    key = hashlib.sha256("\0".join((archive, values_json, name, namespace)).encode()).hexdigest()[:32]
    kind, found = worker_share.once(folder, key, lambda: _outcome(archive, values_json, name, namespace))
    if kind == "refused":
        raise found  # Helm's own error (unpickled: same type, message and code)
    return found


_shared_render.__wrapped__ = _helm_render
chart_render._render_cached = _shared_render


# --- speed only: a render's workloads are parsed once per worker ----------------------------------
# The models read every release's workloads on each evaluation (offline/scheduling.py), and a
# worker evaluates the same few configs dozens of times: each time chart_render.render_workloads
# searched Kyverno's 3.5 MB of texts and built the workload objects again with PyYAML (~2 s of
# the suite's CPU). Its result for given inputs is fixed, so the first parse is kept, pickled,
# and later calls get fresh copies of it: the same objects, and callers may still change theirs.

#: chart_render's own render_workloads.
_parse_workloads = chart_render.render_workloads
_parsed: dict[tuple[str, str, str, str], bytes] = {}


@functools.wraps(_parse_workloads)
def _render_workloads(release: chart_render.Release, values=None) -> list[dict]:
    chosen = release.values if values is None else values
    key = (chart_render._archive(release), chart_render.canonical_json(chosen), release.name,
           release.namespace)
    if key not in _parsed:
        found = _parse_workloads(release, values)
        _parsed[key] = pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL)
        return found
    return pickle.loads(_parsed[key])


chart_render.render_workloads = _render_workloads
