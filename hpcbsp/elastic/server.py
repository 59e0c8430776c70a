"""The parameter server on MPI: rank 0 of the communicator serves, ranks ``1..n`` are workers
``0..n-1`` (:func:`hpcbsp.elastic.worker.work`); or, sharded, ranks ``0..S-1`` serve one key
range each and ranks ``S..S+n-1`` work (:mod:`.shards`).

This module is the run around the rounds: set-up, the clock, the stop, evaluations and saves, on
rank 0 (the single server, or the leader shard).  One push is one round of
:class:`~.round.ServerRound`, the same on every shard.  The protocol both sides speak, their
h-relations and how they wait are in :mod:`.protocol`; how the weights reach the workers (a
shared-memory window on one node, or messages) in :mod:`.transport`.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ..runtime.superstep.waiting import resolve
from .coordinator import Coordinator
from .evaluator import BackgroundEvaluator
from .policies.base import SyncPolicy
from .protocol import ServerResult, poll_until
from .round import ServerRound
from .runlog import RunLog
from .transport import open_transport
from .wire import wires

__all__ = ["serve"]


def serve(comm: MPI.Comm | None, policy: SyncPolicy, weights: np.ndarray, lr: float, *,
          duration: float | None = None, max_updates: int | None = None,
          eval_fn: Callable[[np.ndarray], tuple[float, float]] | None = None,
          eval_every: float | None = None,
          progress: Callable[[float, RunLog], None] | None = None,
          timeout: float = 60.0, resume: dict[str, Any] | None = None,
          save: Callable[[dict[str, Any]], None] | None = None,
          save_every: float = np.inf, grad_format: str | None = None,
          lr_decay: float = 0.0, wait: str | None = None,
          transport: str | None = None, servers: int = 1) -> ServerResult | None:
    """Run the server on rank 0 of ``comm`` until the run stops; workers run :func:`work`.
    With ``servers`` S > 1, call it on ranks ``0..S-1``: each serves one key range
    (:mod:`.shards`); rank 0 returns the result, the others None.

    h-relation: per push served, ``16 + g P`` bytes in and, when the policy releases or stops
    workers, ``16 + w P`` bytes out to each of them (a header, then the weights in pieces; ``w``,
    ``g``: bytes per weight and per gradient value, see the module docstring); with the shared
    window, 16 bytes out and an 8-byte acknowledgement in per reply, and with the workers'
    gradient slots in it (gradients in the weights' dtype, float16 or bfloat16) 16 bytes in per
    push.

    Parameters
    ----------
    comm : MPI.Comm or None
        Rank 0 is the server, ranks ``1..size-1`` the workers (None: a duplicate of COMM_WORLD).
    policy : SyncPolicy
        Decides when pushes are applied and workers released.
    weights : numpy.ndarray
        Initial flat weights (copied); float32 weights stay float32 (server and wire), any
        other dtype is held and sent as float64.
    lr : float
        SGD step of each update (update ``k`` uses ``lr / (1 + lr_decay * k)``).
    duration : float, optional
        Stop after this many seconds.
    max_updates : int, optional
        Stop once this many updates were applied. At least one stop condition is required.
    eval_fn, eval_every : optional
        ``eval_fn(weights) -> (accuracy, loss)``, on a copy of the weights every ``eval_every``
        seconds and at the end.  It runs in a background thread (:mod:`.evaluator`) while the
        server goes on serving; an evaluation due while the previous one runs is skipped.
    progress : callable, optional
        Called as ``progress(elapsed, log)`` after each evaluation.
    timeout : float
        Longest any single wait may take before :class:`ServerTimeout` is raised.
    resume : dict, optional
        A state that ``save`` was given by an earlier run with the same settings: the run goes
        on from it (its clock continues at the saved elapsed time).  Workers that were computing
        when it was saved lost that iteration; they start again from the current weights.
        Workers that were held stay held, their gradients still with the server.  Its
        ``"coord"`` is taken out of the dict: the run owns it (and a sharded server's leader
        keeps only its key range of it).
    save, save_every : optional
        ``save(state)`` is called between two pushes every ``save_every`` seconds (the state's
        objects are live: write them out before returning).
    grad_format : str, optional
        How the workers send gradients (:data:`.wire.FORMATS`; None: the weights' dtype); the
        workers must be given the same.
    wait : str, optional
        How waits pause between polls: ``"spin"``, ``"yield"`` or ``"auto"`` (default:
        ``$HPCBSP_WAIT``, else ``auto``: yield where a node runs more ranks than cores); agreed
        with the workers (collectively, at the start).
    transport : str, optional
        How the weights reach the workers (:mod:`.transport`): ``"auto"`` (default:
        ``$HPCBSP_PS_TRANSPORT``, else ``auto``: a shared-memory window where every rank is on
        one node, else messages) or ``"messages"``; agreed with the workers (messages if any
        rank asks for them); messages where ``servers`` > 1.
    servers : int
        Server ranks (shards), ``0..servers-1``; the workers must be given the same.
    """
    if duration is None and max_updates is None:
        raise ValueError("serve() needs a stop condition: duration or max_updates")
    if comm is None:
        comm = MPI.COMM_WORLD.Dup()
        try:
            return serve(comm, policy, weights, lr, duration=duration, max_updates=max_updates,
                         eval_fn=eval_fn, eval_every=eval_every, progress=progress, timeout=timeout,
                         resume=resume, save=save, save_every=save_every, grad_format=grad_format,
                         lr_decay=lr_decay, wait=wait, transport=transport, servers=servers)
        finally:
            comm.Free()
    mode = resolve(wait, comm)  # collective, as in every worker's work()
    n = comm.Get_size() - servers
    me = comm.Get_rank()
    if n < 1 or servers < 1:
        raise ValueError(f"the parameter server needs at least 1 server and 1 worker rank: {servers} "
                         f"server(s) of {comm.Get_size()} ranks")
    problem: Exception | None = None
    wired = None
    coord: Coordinator | None = None
    try:
        if me >= servers:
            raise ValueError(f"rank {me} called serve() but is a worker ({servers} server ranks)")
        if me == 0:
            coord = Coordinator(policy, n, weights, lr, 0.0, max_updates=max_updates, lr_decay=lr_decay)
            if resume is not None:
                coord = resume.pop("coord")  # (the caller's dict lets it go: see resume)
                if coord.n_workers != n:
                    raise ValueError(f"the saved run had {coord.n_workers} workers, this one has {n}")
        held = np.asarray(weights) if coord is None else coord.weights
        wired = wires(np.float32 if held.dtype == np.float32 else np.float64, grad_format)  # type: ignore[union-attr]
    except Exception as exc:  # told to the workers in the collective below, then raised
        problem = exc
        held = None
    slot = None if held is None or wired is None else wired[1].slot(wired[0])
    shared = open_transport(comm, transport if servers == 1 else "messages",
                            None if problem is None else str(problem),
                            0 if held is None else held.size,
                            np.dtype(np.float64) if held is None else wired[0].storage,  # type: ignore[index]
                            gradients=servers == 1 and slot is not None, grad_dtype=slot)
    if problem is not None:
        raise problem
    assert wired is not None
    rounds = ServerRound.open(comm, coord, shared, mode, wired, timeout, servers)
    coord = held = None  # (a sharded server's leader keeps its key range only, not the whole run's state)
    with rounds as rnd:
        if rnd.following:
            rnd.follow()
            return None
        result = _lead(rnd, duration=duration, eval_fn=eval_fn, eval_every=eval_every, progress=progress,
                       resume=resume, save=save, save_every=save_every)
    if shared is not None:  # (the weights out of the window, now)
        result.weights = rnd.coord.weights  # type: ignore[assignment]
    return result


def _lead(rnd: ServerRound, *, duration: float | None,
          eval_fn: Callable[[np.ndarray], tuple[float, float]] | None,
          eval_every: float | None, progress: Callable[[float, RunLog], None] | None,
          resume: dict[str, Any] | None, save: Callable[[dict[str, Any]], None] | None,
          save_every: float) -> ServerResult:
    """Rank 0's loop: the clock, the stop, evaluations and saves around the rounds of ``rnd``
    (the single server's, or the leader shard's)."""
    coord, mode, timeout = rnd.coord, rnd.mode, rnd.timeout

    t0 = time.monotonic()
    next_eval = t0 if eval_fn is not None and eval_every else np.inf
    if resume is None:
        for w in range(coord.n_workers):
            rnd.release(w)
    else:
        t0 -= resume["elapsed"]
        next_eval = t0 + resume["next_eval"]
        for w in coord.rejoin():
            rnd.release(w)
    stop_at = t0 + duration if duration is not None else np.inf
    next_save = time.monotonic() + save_every
    stopped_at = np.inf
    evaluator = BackgroundEvaluator(eval_fn) if eval_fn is not None and eval_every else None

    def collect(results: list[tuple[float, float, float, int]]) -> None:
        for t, acc, loss, version in results:
            coord.log.record_eval(t, acc, loss, updates=version)
            if progress is not None:
                progress(t, coord.log)

    while not coord.finished:
        now = time.monotonic()
        if save is not None and now >= next_save and not coord.stopping:
            state = coord if rnd.peers is None else coord.with_arrays(*rnd.whole(held=True))  # type: ignore[arg-type]
            save({"coord": state, "elapsed": now - t0, "next_eval": next_eval - t0})
            next_save = time.monotonic() + save_every
        if not coord.stopping and now >= stop_at:
            stopped_at = now  # before any evaluation: none may be stamped after the run's end
            rnd.stop(now - t0)
            continue
        if evaluator is not None:
            collect(evaluator.results())
            if now >= next_eval and not coord.stopping:
                evaluator.submit(now - t0, rnd.whole()[0], coord.version)  # (skipped while busy)
                while next_eval <= now:
                    next_eval += eval_every  # type: ignore[operator]
        until = np.inf if coord.stopping else min(next_eval, stop_at, next_save)
        w = poll_until(rnd.pending, until, now + timeout, "push from any worker", mode)
        if w is None:
            continue
        rnd.head_recv[w] = MPI.REQUEST_NULL
        was_stopping = coord.stopping
        rnd.take(w, t0)
        if coord.stopping and not was_stopping:
            stopped_at = time.monotonic()  # max_updates reached at this push
    if evaluator is not None:
        collect(evaluator.close())
    coord.log.duration_s = min(stopped_at, stop_at) - t0
    weights = rnd.finish()
    if eval_fn is not None:
        coord.log.record_eval(coord.log.duration_s, *eval_fn(weights))
    return ServerResult(coord.policy.describe(), coord.log, coord.policy.stats, weights)
