"""The tests' view of the real Helm engine: a skip marker for machines without helm-python-sdk or
../shared/charts, and the renders of a run's releases."""

from __future__ import annotations

import pytest

from offline import chart_render
from offline.runner import ProgramRun

#: Tests of charts' pods use Helm's own render, never the recorded one.
needs_helm = pytest.mark.skipif(chart_render.engine_problem() is not None,
                                reason=f"Helm cannot render here: {chart_render.engine_problem()}")


def release(run: ProgramRun, name: str) -> chart_render.Release:
    """The registered release of that Helm release name (``cilium``, ``karpenter``, ...)."""
    [found] = [r for r in chart_render.registered_releases(run) if r.name == name]
    return found
