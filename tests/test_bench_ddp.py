"""The arithmetic of ``python -m hpcbsp.bench ddp`` (hpcbsp/bench/ddp.py) and its bad input.

Oracles: hand-computed cases (a ring allreduce's bytes at a line rate, rates, ratios); the exit
status and the one line of a refused command.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

from hpcbsp.bench.ddp import ring_seconds, round_ratios, steps_per_s


def test_the_ring_bound_is_twice_n_minus_1_over_n_of_the_bytes_at_the_line_rate() -> None:
    # 4.5 MB between 2 workers at 1 Gbit/s: each sends 4.5 MB = 36 Mbit: 36 ms.
    assert ring_seconds(4_500_000, 2, 1e9) == pytest.approx(0.036)
    # 4 workers: 2 * 3/4 * 8 MB = 12 MB = 96 Mbit at 100 Mbit/s: 0.96 s.
    assert ring_seconds(8_000_000, 4, 100e6) == pytest.approx(0.96)
    assert ring_seconds(8_000_000, 1, 1e9) == 0.0  # alone: nothing crosses a link


def test_rates_and_the_ratios_of_each_round() -> None:
    assert steps_per_s(200, 4.0) == 50.0
    assert steps_per_s(1, 0.0) == float("inf")
    assert round_ratios([30.0, 24.0], [20.0, 30.0]) == [1.5, 0.8]


@pytest.mark.parametrize("args,word", [(["--steps", "0"], "--steps"), (["--link-rate", "fast"], "link rate")])
def test_bad_arguments_are_one_line_and_exit_2(args, word) -> None:
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "ddp", *args], capture_output=True,
                          text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and word in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_one_rank_is_refused_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "ddp"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "mpiexec -n 3" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
