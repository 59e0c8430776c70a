"""Test-set evaluations off the parameter server's critical path: one background thread.

The server hands the evaluator a copy of the weights when an evaluation is due and goes on
serving pushes; the thread computes ``eval_fn(weights)`` and the server records the result,
stamped with the time and the version of the copy, the next time it looks.  PyTorch releases
the GIL while it computes, so a torch model's evaluation overlaps the serving (as the allreduce
baseline's evaluator on rank 0 overlaps the workers); a function that holds the GIL (Numba
kernels without ``nogil``) simply runs as before, interleaved with the server.

At most one evaluation is in flight: an evaluation that falls due while the previous one still
runs is skipped, so a slow evaluation thins the curve instead of stalling the server.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable

import numpy as np

__all__ = ["BackgroundEvaluator"]


class BackgroundEvaluator:
    """One thread running ``eval_fn`` on weight snapshots (see the module docstring)."""

    def __init__(self, eval_fn: Callable[[np.ndarray], tuple[float, float]]):
        self.eval_fn = eval_fn
        self._todo: queue.Queue = queue.Queue(maxsize=1)
        self._done: queue.Queue = queue.Queue()
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="hpcbsp-evaluator", daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """True while an evaluation is in flight (its result not yet collected)."""
        return self._busy

    def submit(self, time_s: float, weights: np.ndarray, version: int) -> bool:
        """Evaluate a copy of ``weights`` (taken at ``time_s``, version ``version``); False if busy."""
        if self._busy:
            return False
        self._busy = True
        self._todo.put((time_s, np.array(weights, copy=True), version))
        return True

    def results(self) -> list[tuple[float, float, float, int]]:
        """The finished evaluations ``(time, accuracy, loss, version)`` not collected yet.

        Re-raises an exception ``eval_fn`` raised (in the server's thread, where it belongs).
        """
        out: list[tuple[float, float, float, int]] = []
        while True:
            try:
                item = self._done.get_nowait()
            except queue.Empty:
                return out
            self._busy = False
            if isinstance(item, BaseException):
                raise item
            out.append(item)

    def close(self) -> list[tuple[float, float, float, int]]:
        """Wait for the evaluation in flight, stop the thread; return the uncollected results."""
        self._todo.put(None)
        self._thread.join()
        return self.results()

    def _run(self) -> None:
        while True:
            job = self._todo.get()
            if job is None:
                return
            time_s, weights, version = job
            try:
                acc, loss = self.eval_fn(weights)
                self._done.put((time_s, float(acc), float(loss), int(version)))
            except BaseException as exc:  # noqa: BLE001 - handed to the server's thread
                self._done.put(exc)
