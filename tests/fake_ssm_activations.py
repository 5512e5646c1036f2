"""A stand-in for SSM hybrid activations, answering DescribeActivations on a real botocore client.

moto (5.2.6 here) implements neither CreateActivation nor DescribeActivations: both raise
"The … action has not been implemented". This table answers DescribeActivations the way the SSM
API reference describes it: ``Filters`` of ``FilterKey`` ``ActivationIds`` /
``DefaultInstanceName`` / ``IamRole`` (a value list each), an ``ActivationList`` of ``Activation``
objects with ``RegistrationLimit``, ``RegistrationsCount`` ("the number of managed nodes already
registered with this activation"), ``Expired``, ``DefaultInstanceName`` (the name pulumi-aws's
``aws.ssm.Activation`` gives it: terraform-provider-aws internal/service/ssm/activation.go
``resourceActivationCreate``) and ``Tags``. ``register`` counts a registration; deregistering a
managed node gives none back (DeregisterManagedInstance's reference: a machine registering again
needs an activation not already used up), so the table has no way to lower a count.

Like tests/fake_ssm.py, it hooks the client's own events: botocore validates every request
against the SSM service model before the table sees it, and the client points at a closed
loopback port, so a call that escaped the hooks fails and never reaches AWS.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Optional

import boto3
import pytest
from botocore.awsrequest import AWSResponse

NOWHERE = "http://127.0.0.1:9"


@dataclass
class Activation:
    activation_id: str
    name: str
    limit: int
    count: int = 0
    expired: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    created: datetime.datetime = field(
        default_factory=lambda: datetime.datetime(2026, 12, 1, tzinfo=datetime.timezone.utc))

    def listed(self) -> dict[str, Any]:
        return {"ActivationId": self.activation_id, "DefaultInstanceName": self.name,
                "Description": f"stand-in {self.name}", "IamRole": "hybrid-nodes-role",
                "RegistrationLimit": self.limit, "RegistrationsCount": self.count,
                "ExpirationDate": self.created + datetime.timedelta(days=30),
                "Expired": self.expired, "CreatedDate": self.created,
                "Tags": [{"Key": k, "Value": v} for k, v in self.tags.items()]}


@dataclass
class FakeActivations:
    activations: dict[str, Activation] = field(default_factory=dict)
    #: Error code answered instead, once per entry, before the table is read.
    failures: list[str] = field(default_factory=list)
    #: Every DescribeActivations request, in order.
    calls: list[dict] = field(default_factory=list)

    def add(self, activation_id: str, name: str, limit: int, count: int = 0,
            **more: Any) -> Activation:
        self.activations[activation_id] = Activation(activation_id, name, limit, count, **more)
        return self.activations[activation_id]

    def register(self, activation_id: str) -> None:
        """A machine registers (SSM refuses it past the limit)."""
        activation = self.activations[activation_id]
        assert activation.count < activation.limit, "SSM refuses a registration past the limit"
        activation.count += 1

    def answer(self, params: dict) -> tuple[int, dict]:
        self.calls.append(params)
        if self.failures:
            code = self.failures.pop(0)
            status = 500 if code.startswith("Internal") else 400
            return status, {"Error": {"Code": code, "Message": f"{code} (stand-in)"},
                            "ResponseMetadata": {"HTTPStatusCode": status}}
        filters = {f["FilterKey"]: f["FilterValues"] for f in params.get("Filters", [])}
        rows = [a.listed() for a in self.activations.values()
                if a.activation_id in filters.get("ActivationIds", [a.activation_id])
                and a.name in filters.get("DefaultInstanceName", [a.name])]
        return 200, {"ActivationList": rows}

    def client(self, region: str) -> Any:
        client = boto3.session.Session().client(
            "ssm", region_name=region, endpoint_url=NOWHERE, aws_access_key_id="testing",
            aws_secret_access_key="testing")
        pending: list[dict] = []

        def remember(params: dict, **_kwargs: Any) -> None:
            pending.append(dict(params))

        def respond(model: Any, **_kwargs: Any) -> Optional[tuple[AWSResponse, dict]]:
            assert model.name == "DescribeActivations", f"unexpected SSM call {model.name}"
            status, parsed = self.answer(pending.pop())
            return AWSResponse(NOWHERE, status, {}, None), parsed

        client.meta.events.register("before-parameter-build.ssm.*", remember)
        client.meta.events.register("before-call.ssm.*", respond)
        return client


def install(monkeypatch: pytest.MonkeyPatch, region: str) -> FakeActivations:
    """Makes ``boto3.client("ssm", region_name=region)`` the stand-in; other services as they
    are."""
    from tests.fake_ssm import install_ssm_client

    return install_ssm_client(monkeypatch, region, FakeActivations())


def install_in_moto(monkeypatch: pytest.MonkeyPatch) -> FakeActivations:
    """Adds DescribeActivations, answered from a new table, to moto's SSM responder — for boto3
    in another process (the real engine's dynamic provider host) talking to the moto server in
    this one (tests/moto_server.py). Undone by ``monkeypatch``."""
    from moto.core.exceptions import JsonRESTError
    from moto.core.responses import ActionResult
    from moto.ssm.responses import SimpleSystemManagerResponse

    table = FakeActivations()

    def describe_activations(self) -> ActionResult:
        status, answer = table.answer({"Filters": self._get_param("Filters") or []})
        if status != 200:
            error = answer["Error"]
            raise JsonRESTError(error["Code"], error["Message"])
        return ActionResult(answer)

    monkeypatch.setattr(SimpleSystemManagerResponse, "describe_activations",
                        describe_activations, raising=False)
    return table
