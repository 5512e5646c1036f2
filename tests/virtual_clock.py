"""A clock for poll windows: the test's thread sees a ``time.monotonic`` that moves only when
the code under test sleeps."""

from __future__ import annotations


class VirtualClock:
    """``time.monotonic`` and ``time.sleep`` as the test's thread sees them: a clock that moves
    only when the code under test sleeps, so a poll window is waited out exactly and at once
    (other threads, a fake server's, keep the real ones). A wait that never ends fails."""

    def __init__(self, monkeypatch, max_sleeps: int = 100):
        import threading
        import time

        self.now = 0.0
        self.sleeps: list[float] = []
        owner = threading.get_ident()
        real_monotonic, real_sleep = time.monotonic, time.sleep
        # After the test the clock is the real one again, also for a module that took these
        # functions (``from time import monotonic``) while it ran.
        ours = {0: False}

        def monotonic() -> float:
            return self.now if ours[0] and threading.get_ident() == owner else real_monotonic()

        def sleep(seconds: float) -> None:
            if not ours[0] or threading.get_ident() != owner:
                return real_sleep(seconds)
            assert seconds >= 0, seconds
            self.sleeps.append(seconds)
            assert len(self.sleeps) <= max_sleeps, f"still waiting after {self.now:g} s"
            self.now += seconds

        monkeypatch.setattr(time, "monotonic", monotonic)
        monkeypatch.setattr(time, "sleep", sleep)
        monkeypatch.setitem(ours, 0, True)  # False again when monkeypatch undoes
