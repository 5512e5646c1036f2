"""What the scheduler counts for a pod: its CPU, memory and GPU requests, read from its
containers, sidecars, init containers and pod-level requests as kube-scheduler reads them
(``offline/scheduling.py`` places pods by them; tests/test_real_placement.py holds the count
to the real scheduler's)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Sequence

_MEMORY_UNITS = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 ** 2,
                 "K": 1000 / 1024 ** 2, "M": 1000 ** 2 / 1024 ** 2, "G": 1000 ** 3 / 1024 ** 2}


def cpu_millis(quantity: Any) -> int:
    text = str(quantity)
    if text.endswith("m"):
        return int(float(text[:-1]))
    return int(round(float(text) * 1000))


def memory_mib(quantity: Any) -> int:
    text = str(quantity)
    match = re.fullmatch(r"([\d.]+)([A-Za-z]*)", text)
    if not match:
        raise ValueError(f"not a memory quantity: {quantity!r}")
    number, unit = float(match.group(1)), match.group(2)
    return int(number / 1024 ** 2) if not unit else int(number * _MEMORY_UNITS[unit])


@dataclass(frozen=True)
class Request:
    cpu_m: int = 0
    memory_mib: int = 0
    gpus: int = 0

    def __add__(self, other: "Request") -> "Request":
        return Request(self.cpu_m + other.cpu_m, self.memory_mib + other.memory_mib,
                       self.gpus + other.gpus)

    def fits(self, free: "Request") -> bool:
        return (self.cpu_m <= free.cpu_m and self.memory_mib <= free.memory_mib
                and self.gpus <= free.gpus)

    def __sub__(self, other: "Request") -> "Request":
        return Request(self.cpu_m - other.cpu_m, self.memory_mib - other.memory_mib,
                       self.gpus - other.gpus)


def _container_request(container: Mapping) -> Request:
    requests = ((container.get("resources") or {}).get("requests") or {})
    return Request(cpu_millis(requests.get("cpu", 0)),
                   memory_mib(requests.get("memory", 0)),
                   int(float(requests.get("nvidia.com/gpu", 0))))


def _larger(a: Request, b: Request) -> Request:
    return Request(max(a.cpu_m, b.cpu_m), max(a.memory_mib, b.memory_mib), max(a.gpus, b.gpus))


def pod_request(containers: Sequence[Mapping], init_containers: Sequence[Mapping] = (),
                pod_resources: Optional[Mapping] = None) -> Request:
    """What the scheduler counts for a pod (kubernetes ``k8s.io/component-helpers/resource``
    ``PodRequests``, ``AggregateContainerRequests``), per resource: its containers' sum plus
    its sidecars' (init containers with ``restartPolicy: Always``, which keep running), or
    more if an init container, with the sidecars started before it, needs more; CPU and memory
    the pod's own ``resources.requests`` sets replace the containers' figures."""
    total = Request()
    for c in containers:
        total = total + _container_request(c)
    sidecars = Request()
    init = Request()
    for c in init_containers:
        r = _container_request(c)
        if c.get("restartPolicy") == "Always":
            total = total + r
            sidecars = sidecars + r
            init = _larger(init, sidecars)
        else:
            init = _larger(init, r + sidecars)
    total = _larger(total, init)
    pod_level = (pod_resources or {}).get("requests") or {}
    if "cpu" in pod_level:
        total = replace(total, cpu_m=cpu_millis(pod_level["cpu"]))
    if "memory" in pod_level:
        total = replace(total, memory_mib=memory_mib(pod_level["memory"]))
    return total
