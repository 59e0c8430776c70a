"""The parameter server on MPI: rank 0 of the communicator serves, ranks ``1..n`` are workers
``0..n-1`` (:func:`hpcbsp.elastic.worker.work`).

The protocol both sides speak, their h-relations and how they wait are in :mod:`.protocol`; how
the weights reach the workers (a shared-memory window on one node, or messages) in
:mod:`.transport`.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
from mpi4py import MPI

from ..runtime.superstep.waiting import resolve
from .coordinator import Coordinator, Stream
from .evaluator import BackgroundEvaluator
from .policies.base import SyncPolicy
from .protocol import CONTINUE, STOP, ServerResult, Tag, poll_until, wait_all, wait_request
from .runlog import RunLog
from .transport import SharedWeights, open_transport
from .wire import Wire, pieces, wires

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
          transport: str | None = None) -> ServerResult:
    """Run the server on rank 0 of ``comm`` until the run stops; workers run :func:`work`.

    h-relation: per push served, ``16 + g P`` bytes in and, when the policy releases or stops
    workers, ``16 + w P`` bytes out to each of them (a header, then the weights in pieces; ``w``,
    ``g``: bytes per weight and per gradient value, see the module docstring); with the shared
    window, 16 bytes out and an 8-byte acknowledgement in per reply, and with the workers'
    gradient slots in it (uncompressed gradients) 16 bytes in per push.

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
        Workers that were held stay held, their gradients still with the server.
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
        rank asks for them).
    """
    if duration is None and max_updates is None:
        raise ValueError("serve() needs a stop condition: duration or max_updates")
    if comm is None:
        comm = MPI.COMM_WORLD.Dup()
        try:
            return serve(comm, policy, weights, lr, duration=duration, max_updates=max_updates,
                         eval_fn=eval_fn, eval_every=eval_every, progress=progress, timeout=timeout,
                         resume=resume, save=save, save_every=save_every, grad_format=grad_format,
                         lr_decay=lr_decay, wait=wait, transport=transport)
        finally:
            comm.Free()
    mode = resolve(wait, comm)  # collective, as in every worker's work()
    n = comm.Get_size() - 1
    if n < 1:
        raise ValueError("the parameter server needs at least 2 ranks (1 server + workers)")
    problem: Exception | None = None
    wired: tuple[Wire, Wire] | None = None
    try:
        coord = Coordinator(policy, n, weights, lr, 0.0, max_updates=max_updates, lr_decay=lr_decay)
        if resume is not None:
            coord = resume["coord"]
            if coord.n_workers != n:
                raise ValueError(f"the saved run had {coord.n_workers} workers, this one has {n}")
            policy = coord.policy
        wired = wires(coord.weights.dtype, grad_format)  # type: ignore[union-attr]
    except Exception as exc:  # told to the workers in the collective below, then raised
        problem = exc
    held = coord.weights if wired is not None else None
    shared = open_transport(comm, transport, None if problem is None else str(problem),
                            0 if held is None else held.size,
                            np.dtype(np.float64) if held is None else held.dtype,
                            gradients=held is not None and wired is not None and wired[1].storage == held.dtype)
    if problem is not None:
        raise problem
    assert wired is not None
    with shared if shared is not None else nullcontext():
        if shared is not None:
            coord.keep_weights_in(shared.array, shared.stores)
        try:
            result = _serve(comm, coord, policy, shared, mode, *wired, duration=duration, eval_fn=eval_fn,
                            eval_every=eval_every, progress=progress, timeout=timeout, resume=resume,
                            save=save, save_every=save_every)
        finally:
            if shared is not None:  # the weights leave the window before it goes
                coord.keep_weights_in(np.empty_like(shared.array))
    result.weights = coord.weights  # type: ignore[assignment]
    return result


def _serve(comm: MPI.Comm, coord: Coordinator, policy: SyncPolicy, shared: SharedWeights | None,
           mode: str, out_wire: Wire, in_wire: Wire, *, duration: float | None,
           eval_fn: Callable[[np.ndarray], tuple[float, float]] | None,
           eval_every: float | None, progress: Callable[[float, RunLog], None] | None, timeout: float,
           resume: dict[str, Any] | None, save: Callable[[dict[str, Any]], None] | None,
           save_every: float) -> ServerResult:
    """The server's loop, on the transport agreed (:func:`serve` checks and sets up); the
    weights go out on ``out_wire``, the gradients come in on ``in_wire``."""
    n = coord.n_workers
    current = coord.weights  # updated in place, and sent from: never rebound during the run
    assert current is not None
    size = current.size
    parts = pieces(size, out_wire.storage.itemsize)
    slots = shared is not None and shared.grads is not None  # the gradients come through the window
    inbox = in_wire.alloc(0 if slots else n, size)
    in_head = np.zeros((n, 2), dtype=np.int64)
    out_head = np.zeros((n, 2), dtype=np.int64)
    head_recv: list[MPI.Request] = [MPI.REQUEST_NULL] * n
    data_recv: list[MPI.Request] = [MPI.REQUEST_NULL] * n
    head_sent: list[MPI.Request] = [MPI.REQUEST_NULL] * n
    # Pieces of the weights being sent, or (shared window) the workers' acknowledgements still
    # to come that they copied the weights: until these complete, the weights must not change.
    in_flight: list[MPI.Request] = []
    acks = np.zeros((n, 1), dtype=np.int64)

    def settle() -> None:
        """Wait until no worker is still receiving or copying the weights (before they change)."""
        wait_all(in_flight, timeout, "delivery of the weights to the workers", mode)
        in_flight.clear()
        if shared is not None:
            shared.sync()  # the workers' loads are done: this rank's next stores come after them

    def send_piece(w: int, piece: slice) -> None:
        in_flight.append(comm.Isend(current[piece], dest=w + 1, tag=Tag.REPLY_DATA))

    def reply(w: int, command: float, streamed: bool = False) -> None:
        # The previous reply to w was received before w pushed again, so this wait is immediate.
        wait_request(head_sent[w], timeout, f"completion of the reply to worker {w}", mode)
        out_head[w] = (command, coord.version)
        if shared is not None:  # the weights are in the window: the header says they are ready
            shared.sync()
            in_flight.append(comm.Irecv(acks[w], source=w + 1, tag=Tag.ACK))
            head_sent[w] = comm.Isend(out_head[w], dest=w + 1, tag=Tag.REPLY)
            return
        head_sent[w] = comm.Isend(out_head[w], dest=w + 1, tag=Tag.REPLY)
        if not streamed:
            for piece in parts:
                send_piece(w, piece)

    def release(w: int, streamed: bool = False) -> None:
        head_recv[w] = comm.Irecv(in_head[w], source=w + 1, tag=Tag.PUSH)
        if not slots:
            data_recv[w] = comm.Irecv(inbox[w], source=w + 1, tag=Tag.PUSH_DATA)
        reply(w, CONTINUE, streamed)

    t0 = time.monotonic()
    next_eval = t0 if eval_fn is not None and eval_every else np.inf
    if resume is None:
        for w in range(n):
            release(w)
    else:
        t0 -= resume["elapsed"]
        next_eval = t0 + resume["next_eval"]
        for w in coord.rejoin():
            release(w)
    stop_at = t0 + duration if duration is not None else np.inf
    next_save = time.monotonic() + save_every

    def arrival(shared: SharedWeights, w: int, push_no: int, deadline: float) -> Callable[[slice], None]:
        """Each chunk of worker ``w``'s gradient, push ``push_no``, read as soon as it is written."""
        def test_until(test: Callable[[], bool | None]) -> None:
            poll_until(test, np.inf, deadline, f"chunk of worker {w}'s gradient", mode)
        return lambda piece: shared.arrive(w, piece, push_no, test_until)

    def pending() -> int | None:
        idx, flag = MPI.Request.Testany(head_recv)
        return idx if flag and idx != MPI.UNDEFINED else None

    stopped_at = np.inf
    evaluator = BackgroundEvaluator(eval_fn) if eval_fn is not None and eval_every else None

    def collect(results: list[tuple[float, float, float, int]]) -> None:
        for t, acc, loss, version in results:
            coord.log.record_eval(t, acc, loss, updates=version)
            if progress is not None:
                progress(t, coord.log)

    def stop_all(now: float) -> None:
        nonlocal stopped_at
        stopped_at = now
        for w in coord.stop(now - t0):
            reply(w, STOP)

    while not coord.finished:
        now = time.monotonic()
        if save is not None and now >= next_save and not coord.stopping:
            save({"coord": coord, "elapsed": now - t0, "next_eval": next_eval - t0})
            next_save = time.monotonic() + save_every
        if not coord.stopping and now >= stop_at:
            stop_all(now)  # before any evaluation: none may be stamped after the run's end
            continue
        if evaluator is not None:
            collect(evaluator.results())
            if now >= next_eval and not coord.stopping:
                evaluator.submit(now - t0, current, coord.version)  # (skipped while busy)
                while next_eval <= now:
                    next_eval += eval_every  # type: ignore[operator]
        until = np.inf if coord.stopping else min(next_eval, stop_at, next_save)
        w = poll_until(pending, until, now + timeout, "push from any worker", mode)
        if w is None:
            continue
        head_recv[w] = MPI.REQUEST_NULL
        if not slots:
            wait_request(data_recv[w], timeout, f"the gradient of worker {w}, after its header", mode)
            data_recv[w] = MPI.REQUEST_NULL
        now = time.monotonic()
        pushed_on = int(in_head[w][0])
        if not coord.stopping and pushed_on != coord.pulled_version[w]:
            raise RuntimeError(f"worker {w} pushed a gradient for version {pushed_on}, "
                               f"but was sent version {coord.pulled_version[w]}")
        was_stopping = coord.stopping
        settle()  # the push may change the weights
        push_no = int(in_head[w][1])
        if shared is not None:  # an update streamed to w makes the next version, a chunk at a time
            stream = Stream(shared.chunks, lambda piece, w=w, v=coord.version + 1:  # type: ignore[misc]
                            shared.publish(w, piece, v), arrival(shared, w, push_no, now + timeout) if slots else None)
        else:  # a piece of the reply sent as soon as it is updated
            stream = Stream(parts, lambda piece, w=w: send_piece(w, piece))  # type: ignore[misc]
        grad = None
        if not coord.stopping:
            grad = shared.grads[w] if shared is not None and shared.grads is not None else in_wire.decode(inbox[w])
        out = coord.push(w, grad, now - t0, stream)
        if shared is not None and slots and grad is not None:
            shared.take(w, push_no)  # (before any reply: w writes its next push only after both)
        if coord.stopping and not was_stopping:
            stopped_at = now  # max_updates reached at this push
        for r in out.release:
            release(r, r in out.streamed)
        for r in out.stop:
            reply(r, STOP, r in out.streamed)
    if evaluator is not None:
        collect(evaluator.close())
    coord.log.duration_s = min(stopped_at, stop_at) - t0
    for w in range(n):
        wait_request(head_sent[w], timeout, f"completion of the last reply to worker {w}", mode)
    settle()
    if eval_fn is not None:
        coord.log.record_eval(coord.log.duration_s, *eval_fn(coord.weights))  # type: ignore[arg-type]
    return ServerResult(policy.describe(), coord.log, policy.stats, coord.weights)  # type: ignore[arg-type]
