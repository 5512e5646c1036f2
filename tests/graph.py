"""The graph Pulumi destroys by, built from recorded registrations.

A resource is deleted before everything it depends on: its explicit `depends_on`, the sources
of its inputs, and its provider (a Kubernetes resource goes before the provider, which goes
before the cluster its kubeconfig comes from). So "A is deleted before B" holds exactly when a
dependency path leads from A to B.
"""

from __future__ import annotations

from collections import deque
from typing import Optional

from offline.runner import ProgramRun, Registration


class DestroyGraph:
    def __init__(self, run: ProgramRun):
        self.run = run
        self.edges: dict[str, set[str]] = {}
        for reg in run.registrations:
            targets = set(reg.dependencies)
            if reg.provider:
                targets.add(reg.provider.rsplit("::", 1)[0])
            self.edges[reg.urn] = {t for t in targets if t in run.by_urn}

    def path(self, start: str, goal: str) -> Optional[list[str]]:
        """The shortest dependency path from ``start`` to ``goal`` (URNs), or None."""
        previous: dict[str, Optional[str]] = {start: None}
        queue = deque([start])
        while queue:
            urn = queue.popleft()
            if urn == goal:
                path = []
                while urn is not None:
                    path.append(urn)
                    urn = previous[urn]
                return list(reversed(path))
            for nxt in self.edges.get(urn, ()):
                if nxt not in previous:
                    previous[nxt] = urn
                    queue.append(nxt)
        return None

    def _name(self, urn: str) -> str:
        return self.run.by_urn[urn].name

    def assert_deleted_before(self, first: Registration, then: Registration) -> None:
        """Fails, naming the missing path, unless ``first`` is deleted before ``then``."""
        if self.path(first.urn, then.urn) is None:
            direct = sorted(self._name(u) for u in self.edges[first.urn])
            raise AssertionError(
                f"{first.name} must be deleted before {then.name}, but no dependency path leads "
                f"from {first.name} to {then.name}. {first.name} depends on: {direct}")

    def route(self, first: Registration, then: Registration) -> list[str]:
        return [self._name(u) for u in self.path(first.urn, then.urn) or []]
