"""A moto server on 127.0.0.1, for boto3 code that runs in another process (a pickled provider,
the real Pulumi engine's dynamic provider host) and so cannot be patched in-process."""

from __future__ import annotations

import functools
from typing import Iterator

import pytest


def serve(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Yields the URL of a moto server on an ephemeral loopback port, in a thread of this
    process, and stops it afterwards. For a fixture: ``yield from serve(monkeypatch)``."""
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
