"""One training run per policy, on the virtual clock or on MPI, from one configuration.

:func:`run_simulated` and :func:`run_mpi` build the same data shards, model, timing and policy,
so the two modes differ only in the transport and the clock.

Iteration times on MPI (``TrainConfig.compute``):

* ``sleep`` (the numpy models' default): a worker's iteration lasts the timing model's sample,
  ``base_delay * slowdown * noise``; it sleeps for whatever its gradient left of that.
* ``real`` (the torch models' default): a worker's iteration lasts its *measured* compute time
  ``c`` times the timing model's factor ``slowdown * noise`` (the model with ``base_delay = 1``):
  it sleeps ``c * (factor - 1)`` after computing.  A worker slowed by real load is slower
  still; ``--slowdown 1,1,1,1 --jitter 0`` leaves the real times alone.

On the virtual clock every iteration lasts the timing model's sample (``sleep``'s rule).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hpcbsp.elastic.data import Dataset, MinibatchGradient, shard
from hpcbsp.elastic.keyranges import shard_memory
from hpcbsp.elastic.models import TORCH_MODELS, Model, make_model
from hpcbsp.elastic.policies import PolicyOptions, make_policy
from hpcbsp.elastic.protocol import ServerResult
from .resume import CheckpointError, CheckpointPlan
from hpcbsp.elastic.runlog import RunLog
from hpcbsp.elastic.simulator import Simulation
from hpcbsp.elastic.timing import TimingModel
from hpcbsp.elastic.wire import Wire, wires
from hpcbsp.elastic.zipline import zipline
from hpcbsp.util.text import byte_size

__all__ = ["TrainConfig", "PolicyRun", "resolve_compute", "run_simulated", "run_mpi", "warm_up", "build_model",
           "model_info", "model_report", "servers_report"]


def resolve_compute(compute: str, model: str) -> str:
    """The iteration-time mode that ``compute`` (``--compute``: real, sleep or auto) means for
    ``model``: ``auto`` is real for the torch models and sleep for the numpy ones."""
    if compute == "auto":
        return "real" if model in TORCH_MODELS else "sleep"
    return compute


@dataclass(frozen=True)
class TrainConfig:
    """Everything a run needs besides the policy name (see ``python -m hpcbsp.apps.elastic.train --help``)."""

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
    depth: int = 2            # hidden layers / residual blocks of a torch model
    device: str = "cpu"       # where a torch model computes
    threads: int = 1          # torch threads per rank
    compute: str = "auto"     # iteration times on MPI: real, sleep, or auto (real for torch models)
    grad_format: str | None = None  # gradients on the wire: None (the weights' dtype), float16, bfloat16
    teacher_dim: int = 64     # --dataset teacher: inputs per sample
    samples: int | None = None  # samples of the dataset, train and test (None: the dataset's own)
    lr_decay: float = 0.0     # update k uses lr / (1 + lr_decay * k)
    servers: int = 1          # parameter-server ranks on MPI, one key range each (hpcbsp.elastic.shards)

    @property
    def n_workers(self) -> int:
        return self.timing.n_workers

    @property
    def real_compute(self) -> bool:
        """True when MPI workers pace by their measured compute time (see the module docstring)."""
        return resolve_compute(self.compute, self.model) == "real"


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
    resumed_at: float | None = None  # the (virtual) time of the checkpoint it resumed from
    finished_before: bool = False    # read complete from its checkpoint: nothing was run again

    @property
    def curve(self) -> Sequence[tuple[float, float, float, int]]:
        return self.log.curve


def build_model(config: TrainConfig, data: Dataset) -> Model:
    return make_model(config.model, data.n_features, data.n_classes, config.hidden,
                      depth=config.depth, device=config.device, threads=config.threads)


def model_info(config: TrainConfig, model: Model | None) -> dict[str, Any]:
    """What the run report says about the model: its name, size, dtype and (torch) threads."""
    info: dict[str, Any] = {"name": config.model, "compute": "real" if config.real_compute else "sleep",
                            "grad_dtype": config.grad_format}
    if model is not None:
        info["parameters"] = model.n_params
        info["dtype"] = np.dtype(model.dtype).name
        describe = getattr(model, "describe", None)
        if callable(describe):
            info.update(describe())
    return info


def model_report(config: TrainConfig, model: Model, simulated: bool = False) -> str:
    """One line for the start of a run: the model, its size and dtype, torch threads and device."""
    info = model_info(config, model)
    line = (f"model {info['name']}: {info['parameters']:,} {info['dtype']} parameters; "
            f"iteration time: {'virtual clock' if simulated else info['compute']}")
    if "torch" in info:
        line += (f"; torch {info['torch']}, {info['torch_threads']} thread(s) per rank, "
                 f"device {info['device']}")
    if config.grad_format:
        line += f"; gradients sent as {config.grad_format}"
    return line


def servers_report(config: TrainConfig, model: Model) -> str:
    """One line for the start of a sharded run (``config.servers`` > 1): the key ranges and the
    buffers each server rank holds (:func:`~hpcbsp.elastic.keyranges.shard_memory`)."""
    weights, grads = wires(model.dtype, config.grad_format)
    memory = shard_memory(model.n_params, config.servers, config.n_workers, weights.storage.itemsize,
                          grads.storage.itemsize)
    return (f"servers: {config.servers} ranks, one key range each (at most "
            f"{memory.weights // weights.storage.itemsize:,} parameters), one per node as far as the job has "
            f"nodes; each holds {memory.text()} (the leader {byte_size(model.n_params * weights.storage.itemsize)} "
            "more while it gathers the weights for an evaluation or a checkpoint)")


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


def run_simulated(config: TrainConfig, name: str, data: Dataset, repeat: int = 0,
                  checkpoint: CheckpointPlan | None = None,
                  progress: Callable[[float], None] | None = None) -> PolicyRun:
    """Train with policy ``name`` on the virtual clock for ``config.duration`` virtual seconds.

    With ``checkpoint``, the run saves itself every ``checkpoint.every`` virtual seconds and
    once finished, and with ``checkpoint.restart`` continues from its last save: the result is
    bit-identical to an uninterrupted run's.  ``progress`` is called with the virtual time
    reached, every hundredth of the duration (the events handled are the same either way).
    """
    model = build_model(config, data)
    grads = [_worker_grad(config, model, data, w, repeat) for w in range(config.n_workers)]
    if config.grad_format is None or name == "allreduce":  # (allreduce sums at full precision)
        grad_fn = lambda w, weights: grads[w](weights)  # noqa: E731
    else:  # what the server would decode from a compressed push
        wire = Wire(config.grad_format)
        grad_fn = lambda w, weights: wire.roundtrip(grads[w](weights))  # noqa: E731
    sim = Simulation(make_policy(name, config.options), _timing(config, repeat),
                     duration=config.duration, weights=model.init(config.seed), lr=config.lr,
                     grad_fn=grad_fn, lr_decay=config.lr_decay,
                     eval_fn=lambda weights: model.evaluate(weights, data.X_test, data.y_test),
                     eval_every=config.eval_every)
    resumed_at, finished_before = None, False
    if checkpoint is not None:
        path, settings = checkpoint.for_run(config, "simulated", name, repeat, data.name)
        state = checkpoint.load(path, settings) if checkpoint.restart else None
        if state is not None:
            sim.load(state["sim"])
            for grad, rng in zip(grads, state["minibatch_rngs"]):
                grad.rng = rng
            resumed_at, finished_before = sim.now, sim.done
        while not sim.done:
            sim.advance(until=checkpoint.next_save(sim.next_time))
            checkpoint.save(path, settings, {"sim": sim.state(),
                                             "minibatch_rngs": [g.rng for g in grads]})
            if progress is not None:
                progress(sim.now)
    if progress is not None:
        while not sim.done:
            sim.advance(until=sim.next_time + config.duration / 100)
            progress(sim.now)
    sim.advance()
    res = sim.result()
    return PolicyRun(name, res.policy, "simulated", repeat, res.log, res.policy_stats,
                     resumed_at=resumed_at, finished_before=finished_before)


def run_mpi(comm: Any, config: TrainConfig, name: str, data: Dataset, repeat: int = 0,
            progress: Callable[[str, float, RunLog], None] | None = None,
            checkpoint: CheckpointPlan | None = None) -> PolicyRun | None:
    """Train with policy ``name`` on ``comm`` (rank 0 serves); returns the run on rank 0 only.

    With ``checkpoint``, the server saves its state every ``checkpoint.every`` seconds and once
    finished; with ``checkpoint.restart`` the run goes on from the last save (a finished one is
    not run again).  The workers of a resumed run draw from fresh random streams (one set per
    restart), so the mini-batches of the saved history are not drawn again.  Raises :class:`CheckpointError` on every
    rank if rank 0 cannot use its checkpoint.

    ``name == "allreduce"`` runs the serverless baseline (:mod:`.allreduce`) on the same workers;
    its checkpoint is written once, when it finished (a killed allreduce run starts again).

    With ``config.servers`` S > 1 the server is sharded (:mod:`hpcbsp.elastic.shards`): the ranks
    are reordered so that the S server ranks sit one per node where the job spans nodes, the
    workers are the others; the allreduce baseline runs on the same workers and rank 0 (the
    other server ranks sit it out).
    """
    from mpi4py import MPI

    from hpcbsp.elastic.shards import placed

    if config.servers == 1:
        return _run_mpi(comm, config, name, data, repeat, progress, checkpoint)
    rank = comm.Get_rank()
    if name == "allreduce":
        part = comm.Split(0 if rank == 0 or rank >= config.servers else MPI.UNDEFINED, rank)
    else:
        part = placed(comm, config.servers)
    if part == MPI.COMM_NULL:
        return None
    try:
        return _run_mpi(part, config, name, data, repeat, progress, checkpoint)
    finally:
        part.Free()


def _run_mpi(comm: Any, config: TrainConfig, name: str, data: Dataset, repeat: int,
             progress: Callable[[str, float, RunLog], None] | None,
             checkpoint: CheckpointPlan | None) -> PolicyRun | None:
    """:func:`run_mpi` on ``comm``, its ranks ``0..servers-1`` the server's."""
    from hpcbsp.elastic.allreduce import run_allreduce
    from hpcbsp.elastic.server import serve  # MPI only when a real run is asked for
    from hpcbsp.elastic.worker import work

    servers = 1 if name == "allreduce" else config.servers
    model = build_model(config, data)
    if comm.Get_rank() == 0:
        saved = _SavedRun(checkpoint, config, name, repeat, data.name)
        comm.bcast((saved.restarts, saved.done, saved.error, saved.elapsed), root=0)
        if saved.error is not None:
            raise CheckpointError(saved.error)
        state = saved.state
        if saved.done:
            assert state is not None
            return PolicyRun(name, state["label"], "mpi", repeat, state["log"], state["stats"],
                             state["blocked"], resumed_at=state["log"].duration_s,
                             finished_before=True)
        policy = make_policy(name, config.options)
        label = policy.describe()
        show = None if progress is None else (lambda t, log: progress(label, t, log))
        if name == "allreduce":
            w0 = model.init(config.seed)
            res = run_allreduce(comm, None, w0, config.lr, duration=config.duration,
                                eval_fn=lambda weights: model.evaluate(weights, data.X_test, data.y_test),
                                eval_every=config.eval_every, progress=show, timeout=config.timeout,
                                lr_decay=config.lr_decay)
            assert isinstance(res, ServerResult)  # (rank 0's)
            run = PolicyRun(name, res.policy, "mpi", repeat, res.log, res.policy_stats,
                            [float(x) for x in res.log.wait_s])
        else:
            served = serve(comm, policy, model.init(config.seed), config.lr, duration=config.duration,
                           eval_fn=lambda weights: model.evaluate(weights, data.X_test, data.y_test),
                           eval_every=config.eval_every, timeout=config.timeout,
                           progress=show, resume=state,
                           save=None if checkpoint is None else saved.save_progress,
                           save_every=np.inf if checkpoint is None else checkpoint.every,
                           grad_format=config.grad_format, lr_decay=config.lr_decay, servers=servers)
            assert served is not None  # (rank 0's)
            blocked = comm.gather(None, root=0)[servers:]
            run = PolicyRun(name, served.policy, "mpi", repeat, served.log, served.policy_stats, blocked,
                            resumed_at=None if state is None else state["elapsed"])
        saved.save_finished(run)
        return run
    restarts, done, error, elapsed = comm.bcast(None, root=0)
    if error is not None:
        raise CheckpointError(error)
    if done:
        return None
    if comm.Get_rank() < servers:  # a shard of the server: the leader's decisions on its key range
        serve(comm, make_policy(name, config.options), model.init(config.seed), config.lr,
              duration=config.duration, timeout=config.timeout, grad_format=config.grad_format,
              lr_decay=config.lr_decay, servers=servers)
        comm.gather(None, root=0)
        return None
    worker = comm.Get_rank() - servers
    grad = _worker_grad(config, model, data, worker, repeat)
    timing = _timing(config, repeat)
    if config.real_compute:  # the model's factor alone: slowdown * noise (see the module docstring)
        timing = replace(timing, base_s=1.0)
    times = timing.worker(worker)
    if restarts:
        grad.rng = np.random.default_rng([config.seed, repeat, worker, restarts, 1])
        times.rng = np.random.default_rng([config.timing.seed, repeat, worker, restarts, 2])
    # A resumed worker's clock starts at the run's elapsed time (for --change-at).
    if config.real_compute:
        pace = lambda start, compute: compute * times.next(start + elapsed)  # noqa: E731
    else:
        pace = lambda start, compute: times.next(start + elapsed)  # noqa: E731
    if name == "allreduce":
        run_allreduce(comm, grad, model.init(config.seed), config.lr, duration=config.duration,
                      eval_every=config.eval_every, pace=pace, timeout=config.timeout,
                      lr_decay=config.lr_decay,  # (a torch model's buckets start during backward)
                      gradients=model if hasattr(model, "on_gradient") else None)
        return None
    res_w = work(comm, grad, model.n_params, pace=pace, timeout=config.timeout,
                 dtype=model.dtype, grad_format=config.grad_format, servers=servers)
    comm.gather(res_w.blocked_s, root=0)
    return None


class _SavedRun:
    """Rank 0's side of one MPI run's checkpoint (``plan`` None: none is kept): the state read
    back for a restart, and the saves while and once it runs."""

    def __init__(self, plan: CheckpointPlan | None, config: TrainConfig, name: str, repeat: int,
                 dataset: str):
        self.plan = plan
        self.state: dict[str, Any] | None = None
        self.error: str | None = None
        if plan is not None:
            self.path, self.settings = plan.for_run(config, "mpi", name, repeat, dataset)
            try:
                self.state = plan.load(self.path, self.settings) if plan.restart else None
            except CheckpointError as exc:
                self.error = str(exc)
        state = self.state
        self.restarts = 0 if state is None else state["restarts"] + 1
        self.done = state is not None and bool(state["done"])
        self.elapsed = 0.0 if state is None or self.done else float(state["elapsed"])

    def save_progress(self, server_state: dict[str, Any]) -> None:
        """The server's state during the run (``serve(save=...)``)."""
        self._save({"done": False, "restarts": self.restarts, **server_state})

    def save_finished(self, run: PolicyRun) -> None:
        """The finished run, complete: a restart reads it instead of running it again."""
        self._save({"done": True, "restarts": self.restarts, "label": run.label, "log": run.log,
                    "stats": run.policy_stats, "blocked": run.worker_blocked_s})

    def _save(self, content: dict[str, Any]) -> None:
        if self.plan is not None:
            self.plan.save(self.path, self.settings, content)
