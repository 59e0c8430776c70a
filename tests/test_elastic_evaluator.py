"""The server's background evaluator: results carry the snapshot's time and version, a busy
evaluator skips, the snapshot is a copy, and an error reaches the server's thread."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from hpcbsp.elastic.evaluator import BackgroundEvaluator


def test_results_are_stamped_with_the_snapshot_and_a_busy_evaluator_skips() -> None:
    gate = threading.Event()

    def eval_fn(w: np.ndarray) -> tuple[float, float]:
        gate.wait(10)
        return float(w.sum()), float(w.max())

    ev = BackgroundEvaluator(eval_fn)
    w = np.array([1.0, 2.0])
    assert ev.submit(0.5, w, 7) and ev.busy
    w[:] = 100.0  # the server goes on changing its weights: the evaluation sees the copy
    assert not ev.submit(0.75, w, 8)  # in flight: skipped
    assert ev.results() == []
    gate.set()
    deadline = time.monotonic() + 10
    got = []
    while not got and time.monotonic() < deadline:
        got = ev.results()
        time.sleep(0.01)
    assert got == [(0.5, 3.0, 2.0, 7)] and not ev.busy
    assert ev.submit(1.0, w, 9)
    assert ev.close() == [(1.0, 200.0, 100.0, 9)]


def test_an_error_in_the_evaluation_is_raised_in_the_caller() -> None:
    def eval_fn(w):
        raise ValueError("X has 3 columns, the model takes 4")

    ev = BackgroundEvaluator(eval_fn)
    ev.submit(0.0, np.zeros(1), 0)
    with pytest.raises(ValueError, match="the model takes 4"):
        ev.close()
