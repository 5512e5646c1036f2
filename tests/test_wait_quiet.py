"""engines/control_plane.py ``ControlPlane.wait_quiet``: an answer is taken only once it has
held for the quiet time (the real tier waits on it for rollouts and placements that pass through
states that look final). No engine runs: a plane with no processes has nothing to die."""

from __future__ import annotations

import itertools

import pytest

from tests.real_cluster import ControlPlane


def test_a_passing_answer_is_not_taken_the_one_that_holds_is(tmp_path):
    plane = ControlPlane(tmp_path)
    # None, then a step that looks final for three readings, then the final one.
    answers = itertools.chain([None], [("1", 6, "2", 2)] * 3,
                              itertools.repeat(("1", 6, "2", 4)))
    assert plane.wait_quiet("a rollout", lambda: next(answers), quiet=1.0, timeout=10,
                            interval=0.04) == ("1", 6, "2", 4)


def test_an_answer_that_keeps_changing_times_out_naming_the_wait(tmp_path):
    plane = ControlPlane(tmp_path)
    counter = itertools.count()
    with pytest.raises(TimeoutError, match=r"a rollout to hold for 0\.2 s \(last: \d+\)"):
        plane.wait_quiet("a rollout", lambda: next(counter), quiet=0.2, timeout=0.5,
                         interval=0.02)


def test_none_never_counts_as_quiet(tmp_path):
    plane = ControlPlane(tmp_path)
    with pytest.raises(TimeoutError, match=r"last: None"):
        plane.wait_quiet("nothing", lambda: None, quiet=0.05, timeout=0.3, interval=0.02)
