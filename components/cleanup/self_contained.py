"""Making a dynamic provider class survive being pickled into the Pulumi state.

Pulumi stores a dynamic resource's provider object in the state (dill) and unpickles it in a
separate process at delete time — with the code of the last `pulumi up`, and not necessarily
with this project importable. dill pickles a class defined in a project module *by reference*
(``components.cleanup.x.Provider``), which that process cannot import. Marking the class and
each of its functions as belonging to ``__main__`` makes dill pickle them *by value*.

The rules that follow for a provider class:
- keep all logic in its methods (a module-level helper would again be pickled by reference);
- import boto3 and everything else inside the methods;
- everything ``delete`` needs must be in the resource's outputs (``delete`` gets only those);
- keep nothing of a call on the object or its class, not even per thread: one unpickled object
  serves every concurrent call of its class (aws_session.py says why); what a call knows is
  made in the call and passed down as arguments.

The pickle must also be the same bytes for the same code in every process — the state stores
it as an input, and a changed input is an update of the cleanup at every preview. pickle writes
an object seen before in the same pickle as a reference to it, so which strings are one object
shows in the bytes. The names of comprehensions and lambdas (``<listcomp>``, ``<genexpr>``,
``<lambda>`` …) are one shared object when the compiler makes the code from source, and one
object per module when it comes from a module's ``.pyc`` (marshal shares only within a file): a
provider whose methods come from several modules pickled differently after a fresh checkout
than later. The decorator makes each such name the interned string, the same in every process.
And pickling an instance makes copyreg cache ``__slotnames__`` on its class the first time: a
provider class that is also the base of another (the stale-node sweep's) would pickle into the
subclass's provider with or without it, depending on which was pickled first in the process.
The decorator sets it (none of these classes has slots), so it is there from the start.
"""

from __future__ import annotations

import inspect
import sys
import types
from typing import TypeVar

T = TypeVar("T", bound=type)


def _canonical(code: types.CodeType) -> types.CodeType:
    """``code`` with its names, and those of the code objects it holds, interned."""
    consts = tuple(_canonical(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_name=sys.intern(code.co_name),
                        co_qualname=sys.intern(code.co_qualname), co_consts=consts)


def self_contained(cls: T) -> T:
    """Class decorator: pickle ``cls`` and its methods by value (see the module docstring)."""
    cls.__module__ = "__main__"
    cls.__slotnames__ = []  # what copyreg._slotnames would cache at the first pickle
    for value in list(vars(cls).values()):
        function = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
        if inspect.isfunction(function):
            function.__module__ = "__main__"
            function.__code__ = _canonical(function.__code__)
    return cls
