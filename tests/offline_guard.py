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
