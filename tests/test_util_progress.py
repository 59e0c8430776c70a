"""The one progress helper (hpcbsp.util.progress): rate-limited lines on stderr, silent when quiet.

The clock is a fake one driven by the test, so the oracle is the hand-computed schedule of lines.
"""
from __future__ import annotations

import io

import pytest

from hpcbsp.util import progress as progress_mod
from hpcbsp.util.progress import Progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(progress_mod.time, "perf_counter", fake)
    return fake


def test_lines_every_two_seconds_with_time_left(clock):
    out = io.StringIO()
    show = Progress("heat", 100, unit="step", stream=out)
    for step in range(1, 101):
        clock.now += 0.125  # 0.125 s per step (exact in binary): a line every 16 steps = 2 s
        show(step)
    lines = out.getvalue().splitlines()
    assert len(lines) == 6  # at steps 16, 32, 48, 64, 80, 96
    # At 2.0 s, 16 of 100 steps: 84 steps left at 0.125 s each = 10.5 s.
    assert lines[0] == "[heat] step 16/100 (16%, 2.0 s elapsed, ~10.5 s left)"
    assert lines[-1] == "[heat] step 96/100 (96%, 12.0 s elapsed, ~0.5 s left)"


def test_a_short_run_prints_nothing_and_quiet_prints_nothing(clock):
    out = io.StringIO()
    show = Progress("short", 10, stream=out)
    for i in range(10):
        clock.now += 0.1  # one second in all
        show(i + 1)
    quiet = Progress("quiet", 10, enabled=False, stream=out)
    clock.now += 100
    quiet(5)
    quiet.note("checkpoint written")
    assert out.getvalue() == ""


def test_limit_and_unknown_total_and_notes(clock):
    out = io.StringIO()
    bound = Progress("jacobi", 500, unit="iteration", limit=True, stream=out)
    free = Progress("sim", None, stream=out)
    clock.now += 3
    bound(42)
    free(7)
    bound.note("checkpoint written to ck at iteration 42")
    assert out.getvalue().splitlines() == [
        "[jacobi] iteration 42 (of at most 500; 3.0 s elapsed)",
        "[sim] 7 (3.0 s elapsed)",
        "[jacobi] checkpoint written to ck at iteration 42",
    ]


def test_a_broken_stream_disables_instead_of_failing(clock):
    class Broken(io.StringIO):
        def write(self, text):
            raise BrokenPipeError

    show = Progress("x", 10, stream=Broken())
    clock.now += 5
    show(1)  # no exception
    assert show.enabled is False
