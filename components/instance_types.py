"""Facts about EC2 instance type names."""

from __future__ import annotations

import re

# Graviton families carry a "g" right after the generation digit (m7g, c7gn, r8gd, t4g, g5g);
# a1 is the first Graviton.
_ARM_FAMILY = re.compile(r"(a1|[a-z]+\d+g[a-z]*)")


def architecture(instance_type: str) -> str:
    """``arm64`` or ``x86_64`` for an instance type name such as m7g.large or m6i.large."""
    family = instance_type.split(".", 1)[0].split("-", 1)[0]
    return "arm64" if _ARM_FAMILY.fullmatch(family) else "x86_64"
