"""Which pods a ReplicaSet scale-in deletes, in order, and the rule that decided each
(REFERENCE §6) — being built (issue 12). The interface below is fixed; ``forecast`` is the one
function other modules call."""

from __future__ import annotations

import argparse
import datetime
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

TITLE = "which pods a scale-in removes, and why"


@dataclass(frozen=True)
class Victim:
    """One pod the controller deletes, in deletion order."""

    name: str
    node: str
    #: Why it goes before the next pod kept (or the next victim): the first rule of
    #: ``ActivePodsWithRanks.Less`` that differs, in words ("pod-deletion-cost 0 < 1",
    #: "4 pods of this Deployment on its node vs 3", "Ready 40 s ago vs 9 min ago").
    rule: str
    #: True when every rule ties with the pod it was compared with: the controller breaks such
    #: ties at random, so this choice is not decided.
    tie: bool = False
    cost: int = 0
    rank: int = 0


@dataclass(frozen=True)
class Forecast:
    replicas_before: int
    replicas_after: int
    delete: list[Victim] = field(default_factory=list)
    #: The active pods sorted in the controller's order (first = deleted first), names only.
    order: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        raise NotImplementedError


def forecast(pods: Sequence[dict], related: Sequence[dict], replicas: int,
             now: datetime.datetime) -> Forecast:
    """The pods (Pod objects as the API returns them, dicts) the ReplicaSet controller deletes
    when ``pods``' ReplicaSet scales to ``replicas``; ``related`` are the pods of all the
    Deployment's ReplicaSets (they set each pod's rank). ``now`` is the controller's clock."""
    raise NotImplementedError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def main(args: argparse.Namespace) -> int:
    raise NotImplementedError
