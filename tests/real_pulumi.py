"""The real Pulumi tier: the Pulumi CLI, its Python language host and pulumi-kubernetes that
engines/build.py builds (engines/pulumi_engine.py), for the tests that ask what the real engine
decides about the program — config, order, dynamic providers, Kubernetes objects.

- ``pulumi_bindir`` (session): the folder of built binaries; without them every test that asks
  for it is skipped with one line naming the missing binary and the command that builds it.
- ``pulumi_engine``: a :class:`PulumiEngine` of the test's own (home, local backend and
  passphrase in its temporary folder), closed when the test ends.
- ``moto_url``: a moto server on 127.0.0.1 for the dynamic providers' boto3 calls.

Import the fixtures into a test module: ``from tests.real_pulumi import pulumi_bindir,
pulumi_engine, moto_url  # noqa: F401``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

from tests import moto_server
from tests.conftest import PROJECT_DIR

sys.path.insert(0, str(PROJECT_DIR / "engines"))
from pulumi_engine import (EngineError, EngineStack, PulumiEngine, PulumiProject,  # noqa: E402,F401
                           Run, pulumi_engine_folder)


@pytest.fixture(scope="session")
def pulumi_bindir() -> Path:
    folder, why = pulumi_engine_folder()
    if folder is None:
        pytest.skip(why)
    return folder


@pytest.fixture
def pulumi_engine(pulumi_bindir: Path, tmp_path: Path) -> Iterator[PulumiEngine]:
    with PulumiEngine(pulumi_bindir, tmp_path / "engine") as engine:
        yield engine


@pytest.fixture
def moto_url(monkeypatch) -> Iterator[str]:
    """A moto server on 127.0.0.1 (an ephemeral port), in a thread of this process."""
    yield from moto_server.serve(monkeypatch)
