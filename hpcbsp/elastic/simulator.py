"""A virtual-clock run of the parameter server: the same policies, simulated iteration times.

Time advances from event to event (a worker's push), so a run with 1,000 workers or many
virtual minutes takes seconds and its outcome is exact and repeatable. With a gradient function
the weights are trained for real (each worker computes on the weights it pulled at its release,
so staleness acts as it would); without one only the timing is simulated.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .coordinator import Coordinator, ProtocolError
from .policies.base import SyncPolicy
from .runlog import RunLog
from .timing import TimingModel

__all__ = ["SimResult", "simulate"]

GradFn = Callable[[int, np.ndarray], np.ndarray]
EvalFn = Callable[[np.ndarray], tuple[float, float]]


@dataclass
class SimResult:
    """A finished simulated run."""

    policy: str
    log: RunLog
    policy_stats: dict[str, Any]
    weights: np.ndarray | None


def simulate(policy: SyncPolicy, timing: TimingModel, *, duration: float,
             weights: np.ndarray | None = None, lr: float = 0.0, grad_fn: GradFn | None = None,
             eval_fn: EvalFn | None = None, eval_every: float | None = None,
             max_updates: int | None = None, latency_s: float = 0.0) -> SimResult:
    """Run ``policy`` on ``timing.n_workers`` simulated workers for ``duration`` virtual seconds.

    Parameters
    ----------
    policy : SyncPolicy
        The policy object (reset here).
    timing : TimingModel
        Iteration times; its ``slowdown`` fixes the number of workers.
    duration : float
        Virtual seconds; pushes at or after it are answered with "stop".
    weights, lr, grad_fn : optional
        Initial weights, SGD step, and ``grad_fn(worker, pulled_weights) -> gradient``; without
        ``grad_fn`` only timing is simulated.
    eval_fn, eval_every : optional
        ``eval_fn(weights) -> (accuracy, loss)`` recorded every ``eval_every`` virtual seconds
        (and at the end).
    max_updates : int, optional
        Stop once this many updates were applied.
    latency_s : float
        Added to every iteration (the push/pull round trip).
    """
    if duration <= 0:
        raise ValueError(f"duration must be positive, got {duration}")
    n = timing.n_workers
    train = grad_fn is not None and weights is not None
    coord = Coordinator(policy, n, weights if train else None, lr, 0.0, max_updates=max_updates)
    streams = [timing.worker(i) for i in range(n)]
    pulled: list[np.ndarray | None] = [coord.weights.copy() if train else None for _ in range(n)]
    events = [(latency_s + streams[i].next(0.0), i) for i in range(n)]
    heapq.heapify(events)
    evals = 0  # evaluation k happens at k * eval_every (no drift from repeated addition)
    next_eval = 0.0 if train and eval_fn is not None and eval_every else np.inf
    end = duration
    while events:
        t, w = heapq.heappop(events)
        while not coord.stopping and next_eval <= min(t, duration):
            coord.log.record_eval(next_eval, *eval_fn(coord.weights))  # type: ignore[misc]
            evals += 1
            next_eval = evals * eval_every  # type: ignore[operator]
        if not coord.stopping and t >= duration:
            coord.stop(duration)
        grad = grad_fn(w, pulled[w]) if train and not coord.stopping else None  # type: ignore[misc, arg-type]
        was_stopping = coord.stopping
        out = coord.push(w, grad, t)
        if coord.stopping and not was_stopping:
            end = t  # max_updates reached at this push
        for r in out.release:
            if train:
                pulled[r] = coord.weights.copy()  # type: ignore[union-attr]
            heapq.heappush(events, (t + latency_s + streams[r].next(t), r))
    if not coord.finished:
        raise ProtocolError(f"{policy.describe()} left every worker waiting: the run cannot go on")
    coord.log.duration_s = min(end, duration)
    if eval_fn is not None and train and (not coord.log.curve or coord.log.curve[-1][0] < coord.log.duration_s):
        coord.log.record_eval(coord.log.duration_s, *eval_fn(coord.weights))  # type: ignore[arg-type]
    return SimResult(policy.describe(), coord.log, policy.stats, coord.weights)
