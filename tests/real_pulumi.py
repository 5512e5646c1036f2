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

import functools
import sys
from pathlib import Path
from typing import Iterator

import pytest

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
    from moto.moto_server import threaded_moto_server
    from moto.server import ThreadedMotoServer

    make_server = threaded_moto_server.make_server

    def quick_make_server(*args, **kwargs):
        # Speed only: stop() waits for the serve loop's next look, every 0.5 s by default.
        server = make_server(*args, **kwargs)
        server.serve_forever = functools.partial(server.serve_forever, poll_interval=0.02)
        return server

    monkeypatch.setattr(threaded_moto_server, "make_server", quick_make_server)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
