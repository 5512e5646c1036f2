"""Speed only: a result the two xdist workers would both compute (a program run, a Helm render)
is computed by one and left, pickled, for the other.

Under xdist the workers' temporary directories share a parent that pytest keeps for the run
(and removes a few runs later); ``tests/conftest.py`` names it here at the session's start.
Outside xdist there is no other worker, and nothing is shared."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path
from typing import Callable, Optional, TypeVar

T = TypeVar("T")

#: The parent both workers' temporary directories share (None outside xdist).
PARENT: Optional[Path] = None


def directory(name: str) -> Optional[Path]:
    """The shared folder ``name`` (made on first use), or None outside xdist."""
    if PARENT is None:
        return None
    found = PARENT / name
    found.mkdir(exist_ok=True)
    return found


def once(folder: Path, key: str, compute: Callable[[], T], wait: float = 60.0) -> T:
    """``compute()``'s result, computed by whichever worker claims ``key`` first. A worker that
    finds the key claimed waits for the result, and computes it itself if the claimant gave up
    (``compute`` raised) or takes over ``wait`` seconds (a minute unless a caller knows its
    computation takes longer). The result is written to a side file and then
    renamed, so a half-written one is never read."""
    result, claim = folder / f"{key}.pickle", folder / f"{key}.claim"
    try:
        os.close(os.open(claim, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        deadline = time.monotonic() + wait
        while claim.exists() and not result.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        if result.exists():
            return pickle.loads(result.read_bytes())
        return compute()
    try:
        value = compute()
    except BaseException:
        claim.unlink()
        raise
    partial = result.with_suffix(".partial")
    partial.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    partial.rename(result)
    return value
