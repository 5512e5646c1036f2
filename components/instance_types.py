"""Facts about EC2 instance types: architecture, vCPUs, memory and GPUs, read from the name.

One place for what the config (which host types the demos can size for), the cost estimate
(per-vCPU fees) and the capacity arithmetic (``components/capacity.py``) all need.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Graviton families carry a "g" right after the generation digit (m7g, c7gn, r8gd, t4g, g5g);
# a1 is the first Graviton.
_ARM_FAMILY = re.compile(r"(a1|[a-z]+\d+g[a-z]*)")


def architecture(instance_type: str) -> str:
    """``arm64`` or ``x86_64`` for an instance type name such as m7g.large or m6i.large."""
    family = instance_type.split(".", 1)[0].split("-", 1)[0]
    return "arm64" if _ARM_FAMILY.fullmatch(family) else "x86_64"


_SIZE_VCPUS = {"medium": 1, "large": 2, "xlarge": 4}


def vcpus(instance_type: str) -> int:
    """vCPUs of a standard size name (large 2, xlarge 4, Nxlarge 4N)."""
    size = instance_type.split(".", 1)[1]
    if size in _SIZE_VCPUS:
        return _SIZE_VCPUS[size]
    if size.endswith("xlarge") and size[:-6].isdigit():
        return 4 * int(size[:-6])
    raise ValueError(f"cannot tell the vCPUs of {instance_type}")


#: Memory per vCPU of the instance families the lab uses (general purpose and the G GPU
#: families: 4 GiB; compute 2; memory 8), from the EC2 instance type tables.
_MEMORY_GIB_PER_VCPU = {"m": 4, "g": 4, "c": 2, "r": 8}
#: GPUs of G4dn/G5/G6/G6e sizes: one up to 16xlarge, four at 12xlarge and 24xlarge, eight at 48xlarge.
_GPU_FAMILIES = ("g4dn", "g5", "g6", "g6e")
_MULTI_GPU_SIZES = {"12xlarge": 4, "24xlarge": 4, "48xlarge": 8}


@dataclass(frozen=True)
class Capacity:
    cpu_m: int
    memory_mib: int
    gpus: int


def instance_capacity(instance_type: str) -> Capacity:
    """What the instance has (not what pods get: see ``allocatable``)."""
    family, size = instance_type.split(".", 1)
    cpus = vcpus(instance_type)
    letter = family[0]
    if letter not in _MEMORY_GIB_PER_VCPU:
        raise ValueError(f"no memory figure for the {family} family ({instance_type})")
    gpus = 0
    if family in _GPU_FAMILIES:
        gpus = _MULTI_GPU_SIZES.get(size, 1)
    return Capacity(cpus * 1000, cpus * _MEMORY_GIB_PER_VCPU[letter] * 1024, gpus)
