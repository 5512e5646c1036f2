"""Making a dynamic provider class survive being pickled into the Pulumi state.

Pulumi stores a dynamic resource's provider object in the state (dill) and unpickles it in a
separate process at delete time — with the code of the last `pulumi up`, and not necessarily
with this project importable. dill pickles a class defined in a project module *by reference*
(``components.cleanup.x.Provider``), which that process cannot import. Marking the class and
each of its functions as belonging to ``__main__`` makes dill pickle them *by value*.

The rules that follow for a provider class:
- keep all logic in its methods (a module-level helper would again be pickled by reference);
- import boto3 and everything else inside the methods;
- everything ``delete`` needs must be in the resource's outputs (``delete`` gets only those).
"""

from __future__ import annotations

import inspect
from typing import TypeVar

T = TypeVar("T", bound=type)


def self_contained(cls: T) -> T:
    """Class decorator: pickle ``cls`` and its methods by value (see the module docstring)."""
    cls.__module__ = "__main__"
    for value in vars(cls).values():
        function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if inspect.isfunction(function):
            function.__module__ = "__main__"
    return cls
