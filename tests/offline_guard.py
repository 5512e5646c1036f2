"""A guard for code that must not reach out: a dynamic provider's create() runs under the
offline plan, so any network or boto3 call there is a bug."""

from __future__ import annotations

import socket

import boto3
import boto3.session
import pytest


def forbid_network(monkeypatch: pytest.MonkeyPatch, what: str = "create()") -> None:
    """Makes every socket connection and every boto3 client or session fail the test."""
    def reached_out(*_args, **_kwargs):
        raise AssertionError(f"{what} reached out")

    monkeypatch.setattr(socket.socket, "connect", reached_out)
    monkeypatch.setattr(socket, "create_connection", reached_out)
    monkeypatch.setattr(boto3, "client", reached_out)
    monkeypatch.setattr(boto3.session, "Session", reached_out)


LOOPBACK = ("127.0.0.1", "::1", "localhost")


def loopback_connect(connect):
    """``socket.socket.connect`` that fails the test for any address but this machine's (a
    Unix socket path is local too): the rehearsal tests talk to the emulator and moto only."""
    def guarded(sock, address, *args):
        host = address[0] if isinstance(address, tuple) else address
        if isinstance(host, str) and host not in LOOPBACK and "/" not in host:
            raise AssertionError(f"the test reached out to {address!r}")
        return connect(sock, address, *args)

    return guarded


def forbid_non_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", loopback_connect(socket.socket.connect))
