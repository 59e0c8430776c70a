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

__all__ = ["SimResult", "Simulation", "simulate"]

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
             max_updates: int | None = None, latency_s: float = 0.0, lr_decay: float = 0.0) -> SimResult:
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
    lr_decay : float
        Inverse-time decay of the step: update ``k`` uses ``lr / (1 + lr_decay * k)``.
    """
    sim = Simulation(policy, timing, duration=duration, weights=weights, lr=lr, grad_fn=grad_fn,
                     eval_fn=eval_fn, eval_every=eval_every, max_updates=max_updates,
                     latency_s=latency_s, lr_decay=lr_decay)
    sim.advance()
    return sim.result()


class Simulation:
    """A simulated run that advances event by event and can be saved and resumed exactly.

    :func:`simulate` is ``Simulation(...).advance()`` followed by :meth:`result`.  Between two
    events the whole run is in :meth:`state` (the coordinator with its policy and log, each
    worker's random stream, the weights each worker pulled, the event queue, the evaluation
    clock); :meth:`load` puts such a state back, after which the run continues with the same
    events, the same draws and the same floating-point operations as if it had not stopped.
    The parameters are those of :func:`simulate`; ``grad_fn`` may hold state of its own (its
    random mini-batches), which its owner saves beside this one.
    """

    def __init__(self, policy: SyncPolicy, timing: TimingModel, *, duration: float,
                 weights: np.ndarray | None = None, lr: float = 0.0, grad_fn: GradFn | None = None,
                 eval_fn: EvalFn | None = None, eval_every: float | None = None,
                 max_updates: int | None = None, latency_s: float = 0.0, lr_decay: float = 0.0):
        if not (np.isfinite(duration) and duration > 0):
            raise ValueError(f"duration must be a positive finite number, got {duration}")
        if not (np.isfinite(latency_s) and latency_s >= 0):
            raise ValueError(f"latency must be a finite number >= 0, got {latency_s}")
        if eval_every and not (np.isfinite(eval_every) and eval_every > 0):
            raise ValueError(f"eval_every must be a positive finite number (or 0: none), got {eval_every}")
        if latency_s + timing.shortest_s(duration) <= 0:
            # Events at one instant for ever: virtual time would never reach the duration.
            raise ValueError("a simulated iteration can take 0 virtual seconds (base time "
                             f"{timing.base_s:g} s x slowdown {min(timing.slowdown):g}, latency "
                             f"{latency_s:g} s): the virtual clock would never advance; give a "
                             "positive iteration time")
        n = timing.n_workers
        self.duration = duration
        self.latency_s = latency_s
        self.grad_fn = grad_fn
        self.eval_fn = eval_fn
        self.eval_every = eval_every
        self.train = grad_fn is not None and weights is not None
        self.coord = Coordinator(policy, n, weights if self.train else None, lr, 0.0,
                                 max_updates=max_updates, lr_decay=lr_decay)
        self.streams = [timing.worker(i) for i in range(n)]
        w0 = self.coord.weights  # (None unless training)
        self.pulled: list[np.ndarray | None] = [None if w0 is None else w0.copy() for _ in range(n)]
        self.events = [(latency_s + self.streams[i].next(0.0), i) for i in range(n)]
        heapq.heapify(self.events)
        self.evals = 0  # evaluation k happens at k * eval_every (no drift from repeated addition)
        self.next_eval = 0.0 if self.train and eval_fn is not None and eval_every else np.inf
        self.end = duration
        self.now = 0.0  # virtual time of the last event handled

    @property
    def done(self) -> bool:
        """True once every worker has been told to stop (no event is left)."""
        return not self.events

    @property
    def next_time(self) -> float:
        """Virtual time of the next event (inf when the run is done)."""
        return self.events[0][0] if self.events else np.inf

    def advance(self, until: float = np.inf) -> None:
        """Handle the events before virtual time ``until`` (all of them by default)."""
        while self.events and self.events[0][0] < until:
            self.step()

    def step(self) -> None:
        """Handle the next event: one worker's push (and the evaluations due before it)."""
        coord = self.coord
        t, w = heapq.heappop(self.events)
        self.now = t
        while not coord.stopping and self.next_eval <= min(t, self.duration):
            # (next_eval is finite only when training with eval_fn and eval_every)
            assert self.eval_fn is not None and self.eval_every and coord.weights is not None
            coord.log.record_eval(self.next_eval, *self.eval_fn(coord.weights))
            self.evals += 1
            self.next_eval = self.evals * self.eval_every
        if not coord.stopping and t >= self.duration:
            coord.stop(self.duration)
        grad = (self.grad_fn(w, self.pulled[w])  # type: ignore[misc, arg-type]
                if self.train and not coord.stopping else None)
        was_stopping = coord.stopping
        out = coord.push(w, grad, t)
        if coord.stopping and not was_stopping:
            self.end = t  # max_updates reached at this push
        for r in out.release:
            if self.train:
                self.pulled[r] = coord.weights.copy()  # type: ignore[union-attr]
            heapq.heappush(self.events, (t + self.latency_s + self.streams[r].next(t), r))

    def result(self) -> SimResult:
        """The finished run (call once, after :meth:`advance` has handled every event)."""
        coord = self.coord
        if not coord.finished:
            raise ProtocolError(f"{coord.policy.describe()} left every worker waiting: the run cannot go on")
        coord.log.duration_s = min(self.end, self.duration)
        if (self.eval_fn is not None and self.train
                and (not coord.log.curve or coord.log.curve[-1][0] < coord.log.duration_s)):
            coord.log.record_eval(coord.log.duration_s, *self.eval_fn(coord.weights))  # type: ignore[arg-type]
        return SimResult(coord.policy.describe(), coord.log, coord.policy.stats, coord.weights)

    def state(self) -> dict[str, Any]:
        """Everything that changes as the run advances (objects for :mod:`.snapshot`)."""
        return {"coord": self.coord, "rngs": [s.rng for s in self.streams],
                "pulled": list(self.pulled), "events": list(self.events), "evals": self.evals,
                "next_eval": self.next_eval, "end": self.end, "now": self.now}

    def load(self, state: dict[str, Any]) -> None:
        """Continue from a :meth:`state` of a run with the same parameters."""
        if len(state["rngs"]) != len(self.streams):
            raise ValueError(f"the saved run has {len(state['rngs'])} workers, this one {len(self.streams)}")
        self.coord = state["coord"]
        for stream, rng in zip(self.streams, state["rngs"]):
            stream.rng = rng
        self.pulled = list(state["pulled"])
        self.events = [tuple(e) for e in state["events"]]
        self.evals, self.next_eval = state["evals"], state["next_eval"]
        self.end, self.now = state["end"], state["now"]
