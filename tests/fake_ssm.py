"""A stateful stand-in for the two SSM calls the Node cleanup makes, on a real botocore client.

moto does not implement SSM managed instances. botocore's Stubber needs every call listed in
order, which does not suit a cleanup that loops over a node list; this fake answers from a table
of registrations instead. It hooks the client's own events the way Stubber does, so botocore
still validates every request against the SSM service model before the fake sees it, and an
error answer becomes the ClientError the real service would raise. The client points at a closed
loopback port: a call that escaped the hooks would fail, never reach AWS.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import boto3
import pytest
from botocore.awsrequest import AWSResponse

NOWHERE = "http://127.0.0.1:9"


@dataclass
class FakeSsm:
    #: Managed instance id -> the activation it registered through.
    registrations: dict[str, str] = field(default_factory=dict)
    #: Managed instance id -> when it registered (SSM's RegistrationDate), where a test says.
    registered_at: dict[str, Any] = field(default_factory=dict)
    #: (operation, instance id) -> error code answered instead, once per entry in the list.
    failures: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    #: Every call as (operation, params, what ``watch`` returned then), in order.
    calls: list[tuple[str, dict, Any]] = field(default_factory=list)
    #: Called at each call, to record what else was true at that moment (the Node list, say).
    watch: Callable[[], Any] = lambda: None

    def of(self, operation: str) -> list[dict]:
        return [params for op, params, _ in self.calls if op == operation]

    @property
    def deregistered(self) -> list[str]:
        return [p["InstanceId"] for p in self.of("DeregisterManagedInstance")]

    def answer(self, operation: str, params: dict) -> tuple[int, dict]:
        self.calls.append((operation, params, self.watch()))
        if operation == "DescribeInstanceInformation":
            filters = {f["Key"]: f["Values"] for f in params.get("Filters", [])}
            wanted = filters.get("InstanceIds")
            [instance_id] = wanted if wanted else [""]
        else:
            instance_id = params["InstanceId"]
        queued = self.failures.get((operation, instance_id))
        if queued:
            code = queued.pop(0)
            status = 500 if code.startswith("Internal") else 400
            return status, {"Error": {"Code": code, "Message": f"{code} (fake)"},
                            "ResponseMetadata": {"HTTPStatusCode": status}}
        if operation == "DeregisterManagedInstance":
            if self.registrations.pop(instance_id, None) is None:
                return 400, {"Error": {"Code": "InvalidInstanceId", "Message": "not valid"},
                             "ResponseMetadata": {"HTTPStatusCode": 400}}
            return 200, {}
        found = [{"InstanceId": iid, "ActivationId": activation, "ResourceType": "ManagedInstance",
                  "PingStatus": "ConnectionLost",
                  **({"RegistrationDate": self.registered_at[iid]}
                     if iid in self.registered_at else {})}
                 for iid, activation in self.registrations.items()
                 if (not wanted or iid in wanted)
                 and activation in filters.get("ActivationIds", [activation])]
        return 200, {"InstanceInformationList": found}

    def client(self, region: str) -> Any:
        # Clients from one session: botocore reads the SSM model anew for every session, and
        # each client has its own copy of the events, so the hooks below stay this client's.
        client = _session().client(
            "ssm", region_name=region, endpoint_url=NOWHERE, aws_access_key_id="testing",
            aws_secret_access_key="testing")
        pending: list[dict] = []

        def remember(params: dict, **_kwargs: Any) -> None:
            pending.append(dict(params))

        def respond(model: Any, **_kwargs: Any) -> Optional[tuple[AWSResponse, dict]]:
            status, parsed = self.answer(model.name, pending.pop())
            return AWSResponse(NOWHERE, status, {}, None), parsed

        client.meta.events.register("before-parameter-build.ssm.*", remember)
        client.meta.events.register("before-call.ssm.*", respond)
        return client


@functools.lru_cache(maxsize=None)
def _session() -> Any:
    return boto3.session.Session()


def install(monkeypatch: pytest.MonkeyPatch, region: str) -> FakeSsm:
    """Makes ``boto3.client("ssm", region_name=region)`` the fake; other services unchanged."""
    return install_ssm_client(monkeypatch, region, FakeSsm())


def install_ssm_client(monkeypatch: pytest.MonkeyPatch, region: str, fake: Any) -> Any:
    """Makes ``boto3.client("ssm", region_name=region)`` answer ``fake.client(region)`` (any
    SSM stand-in with that method); other services unchanged. Returns ``fake``."""
    real_client = boto3.client

    def client(service: str, *args: Any, **kwargs: Any) -> Any:
        if service != "ssm":
            return real_client(service, *args, **kwargs)
        assert kwargs.get("region_name") == region, kwargs
        assert "endpoint_url" not in kwargs, kwargs
        return fake.client(region)

    monkeypatch.setattr(boto3, "client", client)
    return fake
