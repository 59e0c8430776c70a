"""The one wait-with-deadline loop (hpcbsp.util.waiting.poll), by hand-counted cases."""
from __future__ import annotations

import time

import pytest

from hpcbsp.util.waiting import BUSY, poll


def test_returns_the_first_result_and_pauses_between_idle_calls():
    results = iter([None, None, "done"])
    pauses = []
    assert poll(lambda: next(results), pause=lambda: pauses.append(1)) == "done"
    assert len(pauses) == 2


def test_a_hard_deadline_raises_what_expired_returns():
    with pytest.raises(TimeoutError, match="late"):
        poll(lambda: None, deadline=time.monotonic() + 0.02, expired=lambda: TimeoutError("late"))


def test_a_soft_bound_returns_none():
    t0 = time.monotonic()
    assert poll(lambda: None, until=t0 + 0.02, pause=lambda: time.sleep(1e-3)) is None
    assert time.monotonic() - t0 >= 0.02


def test_a_busy_wait_is_not_cut_short_and_patience_delays_the_pause():
    # 30 busy calls take longer than the deadline; the wait must still end with the result.
    calls = {"n": 0}

    def test():
        calls["n"] += 1
        if calls["n"] <= 30:
            time.sleep(0.002)
            return BUSY
        return "finished"

    assert poll(test, deadline=time.monotonic() + 0.01, expired=lambda: AssertionError("cut short")) == "finished"
    # patience=3: the pause runs from the 4th idle call in a row on; a BUSY call resets the count.
    seq = iter([None, None, None, None, BUSY, None, None, None, None, None, 1])
    pauses = []
    assert poll(lambda: next(seq), patience=3, pause=lambda: pauses.append(1)) == 1
    assert len(pauses) == 1 + 2
