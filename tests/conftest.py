"""Shared fixtures: run the real program offline with a given config and look at what registers."""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import pytest

PROJECT_DIR = Path(__file__).resolve().parent.parent
if str(PROJECT_DIR) not in sys.path:
    sys.path.insert(0, str(PROJECT_DIR))

from stacks.config import PROJECT  # noqa: E402
from stacks.offline import ProgramRun, _config_string, load_stack_config, run_program  # noqa: E402

#: The dev stack's config: the defaults, written out, in ap-northeast-2.
DEV_CONFIG = load_stack_config("dev")


def lab_config(**overrides: Any) -> dict[str, str]:
    """The dev stack's config with some settings changed (camelCase keys; None removes one).

    Keys without a namespace are the lab's; ``aws_region`` stands for ``aws:region``.
    """
    config = dict(DEV_CONFIG)
    for key, value in overrides.items():
        full = "aws:region" if key == "aws_region" else (key if ":" in key else f"{PROJECT}:{key}")
        if value is None:
            config.pop(full, None)
        else:
            config[full] = _config_string(value)
    return config


@functools.lru_cache(maxsize=None)
def _cached_run(items: tuple[tuple[str, str], ...]) -> ProgramRun:
    return run_program(dict(items))


def run_lab(**overrides: Any) -> ProgramRun:
    """Runs __main__.py under mocks with the dev config plus ``overrides``. Runs are
    deterministic, so identical configs share one run; treat the result as read-only."""
    return _cached_run(tuple(sorted(lab_config(**overrides).items())))


@pytest.fixture
def lab():
    """``lab(**overrides)`` runs the program and returns what registered (a ProgramRun)."""
    return run_lab


@pytest.fixture(scope="session")
def dev_run() -> ProgramRun:
    return run_lab()

