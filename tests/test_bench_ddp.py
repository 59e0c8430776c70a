"""The arithmetic of ``python -m hpcbsp.bench ddp`` (hpcbsp/bench/ddp.py) and its bad input.

Oracles: hand-computed cases (a ring allreduce's bytes at a line rate, rates, ratios); the exit
status and the one line of a refused command.
"""
from __future__ import annotations

import subprocess
import sys

import numpy as np
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


def test_the_ceiling_is_the_forward_the_backward_until_the_largest_gradient_and_the_bare_allreduce() -> None:
    from hpcbsp.bench.ddp import PHASES, ceiling_s, phase_lines

    assert ceiling_s(0.0025, 0.004, 0.040) == pytest.approx(0.0465)
    # Two steps of (1 + 1.5) ms forward, 4 ms to the largest gradient, 1 + 39 + 0.5 after: 47 ms a
    # step; the ceiling 2.5 + 4 + 40 ms = 46.5 ms, 21.5 steps/s, against DDP's 17: 1.27x.
    rows = np.array([[0.001, 0.0015, 0.004, 0.001, 0.039, 0.0005]] * 2)
    assert rows.shape[1] == len(PHASES)
    step, ceiling = phase_lines(rows, 0.040, 17.0)
    assert "median of 2 (ms)" in step and "a step 47.0 (21.3 steps/s)" in step
    assert "2.5 + 4.0 + 40.0 = 46.5 ms, 21.5 steps/s = 1.27x DDP's median" in ceiling
    assert "1.2x needs 20.4 steps/s" in ceiling


def test_the_timed_steps_are_the_trainers_sgd_steps() -> None:
    """Oracle: the same steps by hand on a copy of the model (gradient on the same mini-batches,
    ``w -= lr * g``: one worker's sum is its gradient), to the bit."""
    torch = pytest.importorskip("torch")
    from mpi4py import MPI

    from hpcbsp.bench.ddp import PHASES, measure_phases
    from hpcbsp.elastic.data import MinibatchGradient, make_teacher
    from hpcbsp.elastic.torch import TorchModel, build_net

    data = make_teacher(n_samples=200, n_features=16, n_classes=4, teacher_hidden=8, seed=1)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        net, _ = build_net("student", 16, 4, hidden=32, depth=2)
        models.append(TorchModel(net, n_features=16, n_classes=4))
    timed, hand = models
    rows = measure_phases(MPI.COMM_SELF, timed, MinibatchGradient(timed, data.X_train, data.y_train, 8, seed=3),
                          steps=3, bucket_bytes=256, lr=0.1)
    assert rows.shape == (3, len(PHASES)) and np.all(rows >= 0) and np.all(rows.sum(axis=1) > 0)
    grad = MinibatchGradient(hand, data.X_train, data.y_train, 8, seed=3)
    w = hand.get_weights()
    for _ in range(3):
        w = w - np.float32(0.1) * grad(w)
    assert timed.get_weights().tobytes() == w.tobytes()
