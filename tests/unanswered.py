"""Endpoints that do not answer, for the real Pulumi tier's bad-input tests
(tests/test_real_pulumi_unanswered.py), and the checks that a run left nothing behind.

- :class:`SilentServer`: a loopback socket that accepts every connection and never sends a
  byte — a server that is up but does not answer (a hung apiserver, a black-holed proxy). It
  counts what it accepted, so a test knows the client did reach it (not a refused connect).
- :func:`closed_port`: a loopback port nothing listens on (the connect is refused at once).
- :func:`engine_processes`: the live processes that carry an engine's ``PULUMI_HOME`` in their
  environment — every process the engine's CLI started inherits it, whichever session or
  process group it put itself in, so this does not rely on the runner's own bookkeeping.
"""

from __future__ import annotations

import socket
import ssl
import threading
from pathlib import Path
from typing import Optional


class SilentServer:
    """``with SilentServer() as server: server.url("https")`` — accepts, reads and discards,
    never answers; every connection is closed when the ``with`` ends. With ``tls`` (a folder
    holding ``cert.pem`` and ``key.pem``) it completes the TLS handshake first and then
    answers nothing: a server whose TLS front is up and whose HTTP behind it hangs."""

    def __init__(self, tls: Optional[Path] = None) -> None:
        self._tls = None
        if tls is not None:
            self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self._tls.load_cert_chain(tls / "cert.pem", tls / "key.pem")
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self.accepted = 0
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closing = False
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def url(self, scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}"

    def __enter__(self) -> "SilentServer":
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._closing = True
        # shutdown() wakes the accept() below; close() alone does not on Linux.
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._thread.join(5)
        with self._lock:
            for conn in self._open:
                conn.close()
            self._open.clear()

    def _accept(self) -> None:
        while not self._closing:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self._open.append(conn)
            # Drain what the client sends (a TLS ClientHello, a request) so its writes never
            # block; answer nothing.
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    def _drain(self, conn: socket.socket) -> None:
        try:
            if self._tls is not None:
                conn.settimeout(30)
                conn = self._tls.wrap_socket(conn, server_side=True)
                conn.settimeout(None)
                with self._lock:
                    self._open.append(conn)
            _drain(conn)
        except OSError:
            pass


def _drain(conn: socket.socket) -> None:
    try:
        while conn.recv(65536):
            pass
    except OSError:
        pass


def closed_port() -> int:
    """A loopback port that was free a moment ago and that nothing listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def engine_processes(home: Path) -> list[str]:
    """``pid command`` of each live process whose environment has ``PULUMI_HOME=<home>``."""
    marker = f"PULUMI_HOME={home}".encode()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if marker not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if state != "Z":
            found.append(f"{proc.name} {command.strip()[:160]}")
    return found


def leftovers(folder: Path) -> list[str]:
    """What is left in ``folder`` (a TMPDIR given to a run), relative to it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []
