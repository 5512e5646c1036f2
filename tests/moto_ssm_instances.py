"""SSM managed instances (hybrid activations' registrations) in the moto server of this process.

moto implements SSM activations' neighbours but not the managed instances a hybrid host
registers (``mi-…``): ``DescribeInstanceInformation`` and ``DeregisterManagedInstance`` answer
"not implemented". The cleanups that deregister them run in the real engine's provider host, a
process of its own, so they cannot be patched there; the moto server (tests/moto_server.py)
runs in a thread of the test process, so its SSM responder gains the two operations here,
answering from a table the test fills — the way SSM would after an agent registered.

The answers follow the SSM API reference: ``DescribeInstanceInformation`` filters
``InstanceIds`` and ``ActivationIds`` (a value list each, AND between keys), pages by
``MaxResults``/``NextToken`` and lists ``InstanceId``, ``ActivationId``, ``RegistrationDate``,
``ResourceType: ManagedInstance``; an ``InstanceIds`` filter naming an instance SSM does not
know is ``InvalidInstanceId``, as is deregistering one.
"""

from __future__ import annotations

import datetime
import threading
from dataclasses import dataclass, field

import pytest


@dataclass
class ManagedInstances:
    #: mi-… -> (activation id, registration date).
    registered: dict[str, tuple[str, datetime.datetime]] = field(default_factory=dict)
    #: Every DeregisterManagedInstance answered, in order (instance ids).
    deregistered: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def register(self, instance_id: str, activation_id: str,
                 when: datetime.datetime | None = None) -> None:
        with self.lock:
            self.registered[instance_id] = (
                activation_id, when or datetime.datetime.now(datetime.timezone.utc))

    def ids(self) -> set[str]:
        with self.lock:
            return set(self.registered)


def install(monkeypatch: pytest.MonkeyPatch) -> ManagedInstances:
    """Adds the two operations to moto's SSM responder for the test (undone by monkeypatch)."""
    from moto.core.exceptions import JsonRESTError
    from moto.core.responses import ActionResult, EmptyResult
    from moto.ssm.responses import SimpleSystemManagerResponse

    table = ManagedInstances()

    def unknown(instance_id: str) -> Exception:
        return JsonRESTError("InvalidInstanceId", f"Instance {instance_id} is not registered")

    def describe_instance_information(self) -> ActionResult:
        filters = {f["Key"]: f["Values"] for f in self._get_param("Filters") or []}
        size = int(self._get_param("MaxResults") or 10)
        start = int(self._get_param("NextToken") or 0)
        with table.lock:
            for wanted in filters.get("InstanceIds", []):
                if wanted not in table.registered:
                    raise unknown(wanted)
            rows = [{"InstanceId": i, "ActivationId": a, "RegistrationDate": when,
                     "ResourceType": "ManagedInstance", "PingStatus": "ConnectionLost"}
                    for i, (a, when) in sorted(table.registered.items())
                    if i in filters.get("InstanceIds", [i])
                    and a in filters.get("ActivationIds", [a])]
        answer: dict = {"InstanceInformationList": rows[start:start + size]}
        if start + size < len(rows):
            answer["NextToken"] = str(start + size)
        return ActionResult(answer)

    def deregister_managed_instance(self) -> ActionResult:
        instance_id = self._get_param("InstanceId")
        with table.lock:
            if table.registered.pop(instance_id, None) is None:
                raise unknown(instance_id)
            table.deregistered.append(instance_id)
        return EmptyResult()

    monkeypatch.setattr(SimpleSystemManagerResponse, "describe_instance_information",
                        describe_instance_information, raising=False)
    monkeypatch.setattr(SimpleSystemManagerResponse, "deregister_managed_instance",
                        deregister_managed_instance, raising=False)
    return table
