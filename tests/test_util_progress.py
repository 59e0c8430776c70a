"""The one progress helper (hpcbsp.util.progress): rate-limited lines on stderr, silent when quiet.

The clock is a fake one driven by the test, so the oracle is the hand-computed schedule of lines.
"""
from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
import time

import pytest
from mpi_helpers import clean_env

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


# -- parse round trip, a terminal or not, HPCBSP_PROGRESS, a bench end to end ----------------------

@pytest.mark.parametrize("total,unit,limit,done", [(1000, "step", False, 120), (None, "", False, 7),
                                                   (500, "iteration", True, 42), (30.0, "s", False, 12.5),
                                                   (2_000_000, "run", False, 1_234_567)])
def test_every_line_parses_back(clock, total, unit, limit, done):
    """Oracle: the values the line was made from."""
    out = io.StringIO()
    show = Progress("bench bsf", total, unit=unit, limit=limit, stream=out)
    clock.now += 2.5
    show(done, "K = 3: 12.000 ms per iteration")
    got = progress_mod.parse(out.getvalue())
    assert got == progress_mod.Reported("bench bsf", unit, float(done), None if limit else total), out.getvalue()


def test_off_a_terminal_quiet_unless_forced(clock, monkeypatch):
    class NotATerminal(io.StringIO):
        def isatty(self) -> bool:
            return False

    err = NotATerminal()
    monkeypatch.setattr(progress_mod.sys, "stderr", err)
    for var in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID", "SLURM_STEP_ID",
                "HYDI_CONTROL_FD", "PMI_FD", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv(progress_mod.PROGRESS_ENV, raising=False)
    off = Progress("off", 10)  # stderr, not a terminal: nothing
    monkeypatch.setenv(progress_mod.PROGRESS_ENV, "1")
    forced = Progress("forced", 10)
    monkeypatch.setenv(progress_mod.PROGRESS_ENV, "0")
    silenced = Progress("silenced", 10, stream=err)  # even a stream given
    clock.now += 5
    for show in (off, forced, silenced):
        show(3)
    assert err.getvalue().splitlines() == ["[forced] 3/10 (30%, 5.0 s elapsed, ~11.7 s left)"]
    assert progress_mod.child_env() == {progress_mod.PROGRESS_ENV: "0"}


CHILD = ("from hpcbsp.util.progress import Progress\n"
         "show = Progress('child', 4, unit='step', every_s=0.0)\n"
         "show(1)\n")


def _child_stderr(env: dict[str, str], *, terminal: bool) -> str:
    """What the child's Progress wrote to its stderr: a pseudo-terminal's or a pipe's."""

    if not terminal:
        return subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                              timeout=60).stderr
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=slave)
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child has gone and closed its side
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(timeout=60)
    finally:
        os.close(master)
    return b"".join(chunks).decode().replace("\r\n", "\n")


@pytest.mark.serial_only
def test_a_terminal_gets_the_lines_a_pipe_does_not():
    env = clean_env()
    env.pop(progress_mod.PROGRESS_ENV, None)
    on_terminal = _child_stderr(env, terminal=True)
    assert [progress_mod.parse(line) for line in on_terminal.splitlines()] == [
        progress_mod.Reported("child", "step", 1.0, 4.0)], on_terminal
    assert _child_stderr(env, terminal=False) == ""
    assert progress_mod.parse(_child_stderr({**env, progress_mod.PROGRESS_ENV: "1"}, terminal=False)) \
        == progress_mod.Reported("child", "step", 1.0, 4.0)


@pytest.mark.serial_only
def test_a_bench_prints_parseable_lines_and_the_same_stdout():
    """bench detector (a seeded simulation, no MPI) with HPCBSP_PROGRESS=1: every stderr line is a
    progress line, and stdout is that of the same run with --quiet, which writes no stderr."""

    argv = [sys.executable, "-m", "hpcbsp.bench", "detector", "--nodes", "64", "256", "--seconds", "40",
            "--failures", "1"]
    t0 = time.monotonic()
    shown = subprocess.run(argv, env=clean_env(HPCBSP_PROGRESS="1"), capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    quiet = subprocess.run([*argv, "--quiet"], env=clean_env(), capture_output=True, text=True, timeout=300)
    assert shown.returncode == quiet.returncode == 0, shown.stderr + quiet.stderr
    assert shown.stdout == quiet.stdout and quiet.stderr == ""
    lines = shown.stderr.splitlines()
    reported = [progress_mod.parse(line) for line in lines]
    assert all(r is not None and r.label == "bench detector" and r.unit == "case" and r.total == 8 for r in reported), lines
    assert [r.done for r in reported if r] == sorted(r.done for r in reported if r)
    # The first line comes 2 s after the bench's progress helper is made, at a case's end; the
    # process's time adds Python's start and the imports (over 2 s on a loaded 2-core runner: CI
    # saw a run of 4.0 s with none), and the last case may end just short of the 2 s.
    if took > 7.0:
        assert lines, f"no progress line in {took:.1f} s"
