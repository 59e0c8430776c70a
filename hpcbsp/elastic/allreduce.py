"""The allreduce baseline on MPI: synchronous data parallelism without a parameter server.

Ranks ``1..n`` of the communicator are the workers, as in a parameter-server run, so both use
the same workers and the same shards; rank 0 only evaluates (it plays no part in training).
Every step each worker

1. computes the gradient of its next mini-batch on its own copy of the weights,
2. sleeps as the pacing asks (``--slowdown``, as a server worker does),
3. sums the gradients over the workers, in one of two ways:

   * **bucketed** (the default, ``bucket_bytes`` given; :mod:`.buckets`): as DDP does, the
     gradient is cut into buckets (1 MiB, then 25 MiB by default, from the last parameters
     backwards) and, with a gradient source that has hooks (a torch model:
     ``gradients=model``), each bucket's ``MPI.Iallreduce`` starts while the backward pass
     computes the next; then every worker applies ``weights -= lr * sum / n`` to its own copy
     (one compiled pass).  Worker 0's "stop" vote is one more 8-byte ``Iallreduce``.  With
     ``factor_rows``, the large Linear layers' weights are summed from their sufficient factors
     instead (:mod:`.torch.factors`: each worker's batch rows of output gradient and input,
     allgathered, multiplied on every worker).
   * **sharded** (``bucket_bytes=None``): as a ZeRO-1 optimiser shards the update
     (:func:`allreduce_step`): ``bsp.reduce_scatter`` leaves each worker the sum of one block,
     the worker applies ``weights -= lr * sum / n`` to that block of the weights, and
     ``bsp.allgather_blocks`` passes the updated blocks around (the last element of the buffer
     carries worker 0's vote, so the decision to end the run costs no extra message);

4. so every worker holds the same weights after every step, which are BSP's (the mean of all
   ``n`` gradients per update).  Both sums are MPI's float sums (``MPI.SUM``: the order of the
   additions is the library's); neither is the exact sum of ``bsp.allreduce(exact=True)``.  The
   sharded step gives every worker the same bits by construction; the bucketed one relies on
   MPI's allreduce giving every rank the same result, as MPICH and Open MPI do (and as DDP
   relies on its backend).

Evaluation stays off the workers' critical path as in a server run: when an evaluation is due,
worker 0 sends a copy of its weights to rank 0 (non-blocking: a header of three float64
``[command, time, updates]`` and the weights), and rank 0 records the accuracy at worker 0's
time stamp.

h-relation per step: each worker sends and receives about ``2 (n-1)/n · (P + 1) w`` bytes
(``w`` bytes per value): the reduce-scatter and the allgather of the sharded step (two MPI
collectives, ``ceil(log2 n)`` rounds each for short buffers), or MPI's allreduce of each bucket
(a factored layer: an allgather of ``B (in + out) w`` bytes from every worker instead);
worker 0 also sends ``24 + w P`` bytes to rank 0 per evaluation.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ..kernels.update import sgd_step
from ..runtime.api.distribution import block_range
from .buckets import DEFAULT_BUCKET_BYTES, BucketedReduce
from .protocol import ServerResult, ServerTimeout, WorkerResult, poll_until, wait_request
from .runlog import RunLog

__all__ = ["run_allreduce", "allreduce_step", "HEAD_TAG", "WEIGHTS_TAG"]

HEAD_TAG = 7111
WEIGHTS_TAG = 7112
_SNAPSHOT, _FINAL = 0.0, 1.0


def run_allreduce(comm: MPI.Comm, grad_fn: Callable[[np.ndarray], np.ndarray] | None,
                  weights: np.ndarray, lr: float, *, duration: float | None = None,
                  max_updates: int | None = None,
                  eval_fn: Callable[[np.ndarray], tuple[float, float]] | None = None,
                  eval_every: float | None = None,
                  progress: Callable[[float, RunLog], None] | None = None,
                  pace: Callable[[float, float], float] | None = None,
                  timeout: float = 60.0, lr_decay: float = 0.0, gradients: Any = None,
                  bucket_bytes: int | None = DEFAULT_BUCKET_BYTES,
                  factor_rows: int = 0) -> ServerResult | WorkerResult:
    """Train with allreduce on ranks ``1..n`` of ``comm``; rank 0 evaluates (collective on ``comm``).

    h-relation: see the module docstring.

    Parameters
    ----------
    comm : MPI.Comm
        Rank 0 evaluates, ranks ``1..size-1`` are the workers.
    grad_fn : callable or None
        On workers: ``grad_fn(weights) -> gradient`` (its next mini-batch); None on rank 0.
    weights : numpy.ndarray
        Initial flat weights, the same on every rank (float32 stays float32).
    lr, lr_decay : float
        SGD step: step ``k`` does ``weights -= lr / (1 + lr_decay * k) * mean(gradients)``, as
        the server does.
    duration, max_updates : optional
        Stop after ``duration`` seconds (worker 0's clock) or ``max_updates`` steps; at least one.
    eval_fn, eval_every : optional
        ``eval_fn(weights) -> (accuracy, loss)`` (used on rank 0), every ``eval_every`` seconds
        (the same on every rank; at worker 0's first step boundary after it is due) and at the end.
    progress : callable, optional
        On rank 0: ``progress(elapsed, log)`` after each evaluation.
    pace : callable, optional
        On workers: ``pace(start, compute) -> seconds`` the iteration should take (as in
        :func:`.worker.work`); the worker sleeps for the rest before the allreduce.
    timeout : float
        Longest wait of rank 0 for worker 0's next message beyond the run's duration, and of a
        worker for a send (or the bucketed allreduce) to complete.
    gradients : optional
        On workers, for the bucketed sum: the model whose backward pass ``grad_fn`` runs, with
        ``sizes``, ``gradient_vector()`` (where ``grad_fn``'s gradient lands),
        ``weight_vector()`` (its weights, which the steps then update in place) and
        ``on_gradient(callback)`` (:class:`hpcbsp.elastic.torch.TorchModel` on the CPU): the
        buckets then start during the backward pass.  Without it (or on another device) the
        buckets start after ``grad_fn``.
    bucket_bytes : int or None
        The buckets' size (default 25 MiB, the first 1 MiB, as DDP's), or None for the sharded
        step (see the module docstring).  The same on every worker.
    factor_rows : int
        With ``gradients`` (a torch model on the CPU) and the bucketed sum: the Linear layers
        whose weight holds more values than ``factor_rows x (in + out)`` have their gradients'
        sum made from their sufficient factors (:mod:`hpcbsp.elastic.torch.factors`: each
        worker's mini-batch rows of output gradient and input, allgathered) instead of an
        allreduce; ``factor_rows`` is the largest batch a step may have, the same batch on
        every worker.  0 (the default): no factors.

    Returns
    -------
    ServerResult on rank 0 (its ``log`` as a server run's: pushes = applied = steps per worker,
    staleness 0, ``wait_s`` = time each worker spent in the allreduce), WorkerResult elsewhere.
    """
    from hpcbsp.runtime.api.context import BSP

    if duration is None and max_updates is None:
        raise ValueError("run_allreduce() needs a stop condition: duration or max_updates")
    n = comm.Get_size() - 1
    if n < 1:
        raise ValueError("the allreduce baseline needs at least 2 ranks (1 evaluator + workers)")
    rank = comm.Get_rank()
    dtype = np.float32 if np.asarray(weights).dtype == np.float32 else np.float64
    w = np.array(weights, dtype=dtype).ravel()
    workers = comm.Split(MPI.UNDEFINED if rank == 0 else 1, rank)
    comm.Barrier()
    t0 = time.monotonic()
    if rank == 0:
        log, final = _observe(comm, n, w, eval_fn, progress,
                              timeout + (duration if duration is not None else 0.0))
        stats = (comm.gather(None, root=0) or [])[1:]
        for k, st in enumerate(stats):
            log.pushes[k] = st["steps"]
            log.applied[k] = st["applied"]
            log.wait_s[k] = st["blocked_s"]
            log.push_times.extend((k, t) for t in st["push_times"])
        log.push_times.sort(key=lambda e: e[1])
        log.staleness.extend([0] * int(log.applied.sum()))
        return ServerResult("allreduce", log, {"steps": log.updates,
                                               "compute_s": [st["compute_s"] for st in stats]},
                            final)
    assert grad_fn is not None
    try:
        if bucket_bytes is None:
            with BSP(workers) as bsp:
                st = _train(_Sharded(bsp, w), comm, grad_fn, lr, n, duration, max_updates,
                            eval_every, pace, t0, timeout, lr_decay)
        else:
            stepper = _Bucketed(workers, w, gradients, bucket_bytes, timeout, factor_rows)
            try:
                st = _train(stepper, comm, grad_fn, lr, n, duration, max_updates, eval_every, pace,
                            t0, timeout, lr_decay)
            finally:
                stepper.close()
    finally:
        workers.Free()
    comm.gather(st, root=0)
    return WorkerResult(iterations=st["steps"], blocked_s=st["blocked_s"])


def allreduce_step(bsp: Any, buf: np.ndarray, w: np.ndarray, nxt: np.ndarray, scale: float) -> bool:
    """One step of the baseline: sum ``buf`` (``P`` gradient values, then the stop vote) over the
    workers and, unless someone voted to stop, make ``nxt[:P] = w[:P] - scale * sum``.

    ``buf``, ``w`` and ``nxt`` are ``P + 1`` long (``w[P]`` and ``nxt[P]`` are scratch).  The
    update is sharded, as a ZeRO-1 optimiser shards it: ``bsp.reduce_scatter`` leaves each worker
    the sum of one block of ``buf`` (in ``nxt``), the worker updates that block of the weights
    alone (one compiled pass, numpy's rounding), and ``bsp.allgather_blocks`` gives every worker
    every updated block.  So each weight is updated once, by one worker, and every worker ends
    with the same bits; the step allocates nothing.  The caller swaps ``w`` and ``nxt`` after a
    step that returns False; on True (a stop: the vote's sum travels in ``nxt[P]`` with the new
    weights, from whichever worker's block holds element ``P``) ``w`` holds the weights,
    unchanged by this step.

    h-relation: about ``2 (p-1)/p · buf.nbytes`` out of and into every worker (MPI's
    reduce-scatter and allgather, two supersteps).
    """
    P = buf.size - 1
    bsp.reduce_scatter(buf, out=nxt)
    lo, hi = block_range(buf.size, bsp.nprocs, bsp.pid)
    top = min(hi, P)  # the last block ends with the vote's sum, which is passed on as it is
    if top > lo:
        sgd_step(w[lo:top], nxt[lo:top], scale, out=nxt[lo:top])
    bsp.allgather_blocks(nxt)
    return bool(nxt[P] > 0)


class _Sharded:
    """The sharded step (:func:`allreduce_step`) on ``bsp``: the weights and the next step's,
    swapped after every step, each with one spare element, where the stop vote's sum travels."""

    def __init__(self, bsp: Any, w: np.ndarray):
        self.bsp, self.P = bsp, w.size
        self.leader = bsp.pid == 0
        self.buf = np.zeros(w.size + 1, dtype=w.dtype)
        self.cur, self.nxt = np.zeros_like(self.buf), np.zeros_like(self.buf)
        self.cur[:w.size] = w

    @property
    def weights(self) -> np.ndarray:
        return self.cur[:self.P]

    def step(self, grad: np.ndarray, vote: bool, scale: float) -> bool:
        self.buf[:self.P] = grad
        self.buf[self.P] = 1.0 if vote else 0.0
        stop = allreduce_step(self.bsp, self.buf, self.cur, self.nxt, scale)
        if not stop:
            self.cur, self.nxt = self.nxt, self.cur
        return stop


class _Bucketed:
    """The bucketed step (:class:`.buckets.BucketedReduce` on ``comm``), then every worker's
    update of its own weights.  With ``model`` (hooks), the sum is of the model's gradient
    vector, its buckets started from the backward pass, its large Linear layers' weights summed
    from their sufficient factors with ``factor_rows``; else of a buffer of our own."""

    def __init__(self, comm: MPI.Comm, w: np.ndarray, model: Any, bucket_bytes: int, timeout: float,
                 factor_rows: int = 0):
        self.leader, self.timeout = comm.Get_rank() == 0, timeout
        if model is not None and str(getattr(model, "device", "cpu")) != "cpu":
            model = None  # (its vectors are copies off the device: summed after the gradient)
        self.weights = w
        if model is not None:  # the model's own weights: updated in place, loaded with no copy
            self.weights = model.weight_vector()
            self.weights[:] = w
        vector = model.gradient_vector() if model is not None else np.zeros_like(w)
        if vector.dtype != w.dtype:
            raise ValueError(f"rank {comm.Get_rank()}: run_allreduce: the model's gradients are "
                             f"{vector.dtype}, its weights {w.dtype}")
        sizes = model.sizes if model is not None else [w.size]
        self.factors = None
        if model is not None and factor_rows:
            from .torch.factors import LinearFactors

            self.factors = LinearFactors(comm, model, factor_rows)
        self.reduce = BucketedReduce(comm, vector, sizes, bucket_bytes,
                                     skip=self.factors.params if self.factors is not None else ())
        self.model = model
        if model is not None:
            model.on_gradient(self.reduce.ready)

    def step(self, grad: np.ndarray, vote: bool, scale: float) -> bool:
        vector = self.reduce.vector
        if not (grad is vector or (grad.shape == vector.shape and
                                   grad.__array_interface__["data"][0] == vector.__array_interface__["data"][0])):
            np.copyto(vector, grad)  # (a gradient source without hooks: summed after it returns)
        if self.factors is not None:
            self.factors.finish(self.timeout)
        stop = self.reduce.finish(int(vote), self.timeout) > 0
        if not stop:
            sgd_step(self.weights, vector, scale)
        return stop

    def close(self) -> None:
        if self.model is not None:
            self.model.on_gradient(None)
        if self.factors is not None:
            self.factors.close()


def _train(stepper: Any, comm: MPI.Comm, grad_fn: Callable[[np.ndarray], np.ndarray],
           lr: float, n: int, duration: float | None, max_updates: int | None,
           eval_every: float | None, pace: Callable[[float, float], float] | None, t0: float,
           timeout: float, lr_decay: float) -> dict[str, Any]:
    leader = stepper.leader
    head = np.zeros(3)
    snap = np.empty_like(stepper.weights)
    sent: list[MPI.Request] = []
    step = 0
    compute_s = blocked_s = 0.0
    push_times: list[float] = []
    next_eval = 0.0 if eval_every else np.inf
    scale = float(lr) / n  # a Python float: rounded to the weights' dtype, as numpy does (NEP 50)

    def send(command: float, at: float, updates: int) -> None:
        for req in sent:
            wait_request(req, timeout, "delivery of the weights to rank 0 (evaluator)")
        sent.clear()
        head[:] = (command, at, updates)
        snap[:] = stepper.weights
        sent.extend([comm.Isend(head, dest=0, tag=HEAD_TAG), comm.Isend(snap, dest=0, tag=WEIGHTS_TAG)])

    stop_at = t0 + duration if duration is not None else np.inf
    while True:
        now = time.monotonic()
        if leader and now - t0 >= next_eval and now < stop_at:
            send(_SNAPSHOT, now - t0, step)
            while next_eval <= now - t0:
                next_eval += eval_every  # type: ignore[operator]
        start = time.monotonic()
        grad = grad_fn(stepper.weights)
        compute = time.monotonic() - start
        compute_s += compute
        if pace is not None:
            left = pace(start - t0, compute) - (time.monotonic() - start)
            if left > 0:
                time.sleep(left)
        done = time.monotonic()
        push_times.append(done - t0)
        if lr_decay:
            scale = lr / (1.0 + lr_decay * step) / n
        voted_stop = stepper.step(grad, leader and done >= stop_at, scale)
        blocked_s += time.monotonic() - done
        step += 1
        if voted_stop:  # worker 0 voted to stop: this step's gradients are not applied
            stopped = done
            break
        if max_updates is not None and step >= max_updates:
            stopped = time.monotonic()
            break
    applied = step - (1 if voted_stop else 0)
    if leader:
        send(_FINAL, min(stopped, stop_at) - t0, applied)
        for req in sent:
            wait_request(req, timeout, "delivery of the final weights to rank 0 (evaluator)")
    return {"steps": step, "applied": applied, "compute_s": compute_s, "blocked_s": blocked_s,
            "push_times": push_times}


def _observe(comm: MPI.Comm, n: int, w: np.ndarray,
             eval_fn: Callable[[np.ndarray], tuple[float, float]] | None,
             progress: Callable[[float, RunLog], None] | None,
             wait_s: float) -> tuple[RunLog, np.ndarray]:
    log = RunLog(n)
    head = np.zeros(3)
    while True:
        deadline = time.monotonic() + wait_s
        req = comm.Irecv(head, source=1, tag=HEAD_TAG)
        try:
            poll_until(lambda: True if req.Test() else None, np.inf, deadline,
                       "message from worker 0 of the allreduce run")
        except ServerTimeout:
            req.Cancel()
            raise
        comm.Recv(w, source=1, tag=WEIGHTS_TAG)
        command, at, updates = float(head[0]), float(head[1]), int(head[2])
        log.updates = updates
        if command == _FINAL:
            log.duration_s = at
            if eval_fn is not None:
                log.record_eval(at, *eval_fn(w))
            break
        if eval_fn is not None:
            log.record_eval(at, *eval_fn(w))
            if progress is not None:
                progress(at, log)
    return log, w
