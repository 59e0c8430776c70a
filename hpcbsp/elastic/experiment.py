"""One training run per policy, on the virtual clock or on MPI, from one configuration.

:func:`run_simulated` and :func:`run_mpi` build the same data shards, model, timing and policy,
so the two modes differ only in the transport and the clock.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .data import Dataset, MinibatchGradient, shard
from .models import Model, make_model
from .policies import PolicyOptions, make_policy
from .runlog import RunLog
from .simulator import simulate
from .timing import TimingModel
from .zipline import zipline

__all__ = ["TrainConfig", "PolicyRun", "run_simulated", "run_mpi", "warm_up", "build_model"]


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs besides the policy name (see ``python -m hpcbsp.elastic.train --help``)."""

    timing: TimingModel
    options: PolicyOptions = field(default_factory=PolicyOptions)
    model: str = "softmax"
    hidden: int = 32
    lr: float = 0.05
    batch: int = 16
    duration: float = 10.0
    eval_every: float = 0.25
    seed: int = 0
    timeout: float = 60.0

    @property
    def n_workers(self) -> int:
        return self.timing.n_workers


@dataclass
class PolicyRun:
    """The outcome of one policy: its log, the policy's own statistics, worker-side waits."""

    policy: str
    label: str
    mode: str
    repeat: int
    log: RunLog
    policy_stats: dict[str, Any]
    worker_blocked_s: list[float] | None = None

    @property
    def curve(self) -> list[tuple[float, float, float, int]]:
        return self.log.curve


def build_model(config: TrainConfig, data: Dataset) -> Model:
    return make_model(config.model, data.n_features, data.n_classes, config.hidden)


def warm_up(model: Model, data: Dataset) -> None:
    """Compile (or load from cache) every Numba kernel before the clock starts."""
    w = model.init(0)
    model.grad(w, data.X_train[:2], data.y_train[:2])
    model.evaluate(w, data.X_test[:2], data.y_test[:2])
    zipline(np.array([[1.0, 2.0], [1.5, 2.5]]))


def _worker_grad(config: TrainConfig, model: Model, data: Dataset, worker: int, repeat: int) -> MinibatchGradient:
    part = shard(len(data.y_train), config.n_workers, config.seed)[worker]
    return MinibatchGradient(model, data.X_train[part], data.y_train[part], config.batch,
                             seed=config.seed * 1_000_003 + repeat * 1009 + worker)


def _timing(config: TrainConfig, repeat: int) -> TimingModel:
    return replace(config.timing, seed=config.timing.seed + repeat)


def run_simulated(config: TrainConfig, name: str, data: Dataset, repeat: int = 0) -> PolicyRun:
    """Train with policy ``name`` on the virtual clock for ``config.duration`` virtual seconds."""
    model = build_model(config, data)
    grads = [_worker_grad(config, model, data, w, repeat) for w in range(config.n_workers)]
    policy = make_policy(name, config.options)
    res = simulate(policy, _timing(config, repeat), duration=config.duration,
                   weights=model.init(config.seed), lr=config.lr,
                   grad_fn=lambda w, weights: grads[w](weights),
                   eval_fn=lambda weights: model.evaluate(weights, data.X_test, data.y_test),
                   eval_every=config.eval_every)
    return PolicyRun(name, res.policy, "simulated", repeat, res.log, res.policy_stats)


def run_mpi(comm: Any, config: TrainConfig, name: str, data: Dataset, repeat: int = 0,
            progress: Callable[[str, float, RunLog], None] | None = None) -> PolicyRun | None:
    """Train with policy ``name`` on ``comm`` (rank 0 serves); returns the run on rank 0 only."""
    from .server import serve, work  # MPI only when a real run is asked for

    model = build_model(config, data)
    if comm.Get_rank() == 0:
        policy = make_policy(name, config.options)
        label = policy.describe()
        res = serve(comm, policy, model.init(config.seed), config.lr, duration=config.duration,
                    eval_fn=lambda weights: model.evaluate(weights, data.X_test, data.y_test),
                    eval_every=config.eval_every, timeout=config.timeout,
                    progress=None if progress is None else (lambda t, log: progress(label, t, log)))
        blocked = comm.gather(None, root=0)[1:]
        return PolicyRun(name, res.policy, "mpi", repeat, res.log, res.policy_stats, blocked)
    worker = comm.Get_rank() - 1
    grad = _worker_grad(config, model, data, worker, repeat)
    times = _timing(config, repeat).worker(worker)
    res_w = work(comm, grad, model.n_params, iteration_time=times.next, timeout=config.timeout)
    comm.gather(res_w.blocked_s, root=0)
    return None
