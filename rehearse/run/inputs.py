"""What a command needs before it starts: the stack outputs its collector reads and the shape
of its options, checked before a run folder exists, so input the tool cannot use is one line
(exit 2) and leaves nothing behind.

A command module may declare ``LAYERS`` ((layer, why it is needed), ...), ``OUTPUTS`` (the
outputs its collector reads) and ``check_inputs(given)`` for what a name alone does not say (a
block's fields, an option's range, a stack named); ``given`` has the ``outputs`` and the
``options`` a collector's context will have. The collectors keep their own checks: these are
the same rules said before anything runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence


@dataclass(frozen=True)
class Given:
    """What a run would start from: the stack's outputs and the command's options."""
    outputs: Any
    options: dict[str, Any] = field(default_factory=dict)
    #: The Pulumi project folder (--work-dir), where a stack's Pulumi.<stack>.yaml is.
    work_dir: Optional[Path] = None


def check(module: Any, command: str, given: Given, also: Sequence[str] = ()) -> None:
    """Raises RunError (one line) for input ``command`` cannot use; ``also``: outputs every
    command reads besides its collector's (the region, the kubeconfig), named in the same line."""
    for layer, why in getattr(module, "LAYERS", ()):
        given.outputs.require_layer(layer, why)
    given.outputs.require(tuple(also) + tuple(getattr(module, "OUTPUTS", ())), command)
    checker = getattr(module, "check_inputs", None)
    if checker is not None:
        checker(given)
