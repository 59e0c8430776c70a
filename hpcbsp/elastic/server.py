"""The parameter server on MPI: rank 0 serves, ranks ``1..n`` are workers ``0..n-1``.

Protocol (point-to-point on an explicit communicator; :mod:`.wire` has the layouts).  A push or
a reply is a header message of two int64 and the ``P`` values, sent straight from the sender's
own array (no copy into a message buffer):

* reply, server -> worker: header ``[command, version]`` (tag ``REPLY_TAG``), then the weights
  in their own dtype (float64 for the numpy models, float32 for torch models) in pieces
  (:func:`.wire.pieces`, tag ``REPLY_DATA_TAG``; MPI keeps their order); the server sends one
  at the start and one per release; ``command`` is ``CONTINUE`` or ``STOP``.
* push, worker -> server: header ``[version computed on, iteration]`` (tag ``PUSH_TAG``), then
  the gradient (tag ``PUSH_DATA_TAG``), in the weights' dtype or a compressed format
  (``grad_format``: float16 or bfloat16, decoded to float32 by the server before the policy
  sees it).

A worker pushes once per reply and waits for the next reply, so the server sees every push time
(its clock at receipt) and can withhold a reply: that is all a policy needs.  The server keeps
one push posted per computing worker and serves whichever arrives first.  A worker posts the
receives of its next reply before it pushes, so the server's reply never waits for them.

The server sends the weights from the array it updates, so it changes them only when no piece
of them is in flight (the workers receiving them are waiting, so this is short).  When a push is
applied alone and its worker released at once (ASP), the update is made a piece at a time and
each piece sent as soon as it is final (:class:`.coordinator.Stream`): the reply travels while
the rest is updated, on the worker's core.

Where the server and every worker are on one node, the weights do not travel at all
(:mod:`.transport`, ``transport="auto"``): they live in a shared-memory window that the server
updates in place; a reply is its header alone, after which the worker copies the weights out of
the window and acknowledges (8 bytes).  The server changes the weights only when every reply
has been acknowledged.

h-relation per iteration of worker ``w``: the worker sends ``16 + g P`` bytes and receives
``16 + w P`` bytes (``w``, ``g``: bytes per weight and per gradient value: 8 for float64, 4 for
float32, 2 for float16/bfloat16), in 2 messages out and ``1 + ceil(w P / 2^20)`` in; the server
receives and sends ``n`` such pushes and replies per round of pushes.  With the shared window a
reply is 16 bytes in 1 message, and the worker sends a third message, the 8-byte
acknowledgement, and copies the ``w P`` bytes out of the window itself.

Both sides take the communicator explicitly; ``None`` means a private duplicate of
``MPI.COMM_WORLD`` (made and freed collectively by the server and every worker), so the
protocol's tags cannot meet other traffic.

Every wait polls instead of blocking inside MPI, so that it is bounded by ``timeout`` (a broken
run fails instead of hanging), and between polls it does what the wait mode says
(:mod:`hpcbsp.runtime.waiting`; ``wait=`` of :func:`serve` and :func:`work`, ``$HPCBSP_WAIT``,
agreed by all ranks at the start): ``spin`` where every rank has a core (lowest latency;
``python -m hpcbsp.bench elastic`` measures it, docs/performance.md), ``yield``
where ranks share cores (a rank blocked in MPI would spin on the core a worker's compute needs:
short yields, then naps of an eighth of the time waited).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from mpi4py import MPI

from ..runtime.waiting import Naps, resolve
from ..util.waiting import poll
from .coordinator import Coordinator, Stream
from .evaluator import BackgroundEvaluator
from .policies.base import SyncPolicy
from .runlog import RunLog
from .transport import SharedWeights, open_transport
from .wire import Wire, pieces, wire_for

__all__ = ["serve", "work", "ServerResult", "WorkerResult", "PUSH_TAG", "REPLY_TAG", "PUSH_DATA_TAG",
           "REPLY_DATA_TAG", "CONTINUE", "STOP", "ServerTimeout", "poll", "wait_request"]

PUSH_TAG = 7101
REPLY_TAG = 7102
PUSH_DATA_TAG = 7103
REPLY_DATA_TAG = 7104
ACK_TAG = 7105
CONTINUE = 0
STOP = 1


class ServerTimeout(TimeoutError):
    """A wait of the parameter server or a worker exceeded its bound."""


@dataclass
class ServerResult:
    """What rank 0 returns."""

    policy: str
    log: RunLog
    policy_stats: dict[str, Any]
    weights: np.ndarray


@dataclass
class WorkerResult:
    """What a worker rank returns: its iterations, time spent waiting for replies, versions seen."""

    iterations: int = 0
    blocked_s: float = 0.0
    versions: list[int] = field(default_factory=list)


def _poll(test: Callable[[], Any], until: float, timeout_at: float, what: str, mode: str = "yield") -> Any:
    """Call ``test()`` until it returns something other than None, pausing between as the wait
    ``mode`` says (``"spin"`` or ``"yield"``, :class:`hpcbsp.runtime.waiting.Naps`).

    Returns None when ``until`` (a soft deadline, ``time.monotonic`` clock) passes; raises
    :class:`ServerTimeout` when ``timeout_at`` passes.
    """
    return poll(test, deadline=timeout_at, until=until, pause=Naps(mode),
                expired=lambda: ServerTimeout(f"parameter server: no {what} within the timeout"))


def _wait(req: MPI.Request, timeout: float, what: str, mode: str = "yield") -> None:
    deadline = time.monotonic() + timeout
    _poll(lambda: True if req.Test() else None, np.inf, deadline, what, mode)


def _wait_all(reqs: list[MPI.Request], timeout: float, what: str, mode: str = "yield") -> None:
    deadline = time.monotonic() + timeout
    _poll(lambda: True if MPI.Request.Testall(reqs) else None, np.inf, deadline, what, mode)


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
    window, 16 bytes out and an 8-byte acknowledgement in per reply.

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
    try:
        if grad_format is not None:
            Wire(grad_format)  # a bad format is refused here, where every rank hears of it
        coord = Coordinator(policy, n, weights, lr, 0.0, max_updates=max_updates, lr_decay=lr_decay)
        if resume is not None:
            coord = resume["coord"]
            if coord.n_workers != n:
                raise ValueError(f"the saved run had {coord.n_workers} workers, this one has {n}")
            policy = coord.policy
    except Exception as exc:  # told to the workers in the collective below, then raised
        problem = exc
    held = None if problem is not None else coord.weights
    shared = open_transport(comm, transport, None if problem is None else str(problem),
                            0 if held is None else held.size, np.float64 if held is None else held.dtype)
    if problem is not None:
        raise problem
    failure: BaseException | None = None
    try:
        if shared is not None:
            coord.keep_weights_in(shared.array)
        result = _serve(comm, coord, policy, shared, mode, duration=duration, eval_fn=eval_fn,
                        eval_every=eval_every, progress=progress, timeout=timeout, resume=resume,
                        save=save, save_every=save_every, grad_format=grad_format)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        if shared is not None:  # the weights leave the window before it goes
            coord.keep_weights_in(np.empty_like(shared.array))
            shared.close(failure)
    result.weights = coord.weights  # type: ignore[assignment]
    return result


def _serve(comm: MPI.Comm, coord: Coordinator, policy: SyncPolicy, shared: SharedWeights | None,
           mode: str, *, duration: float | None, eval_fn: Callable[[np.ndarray], tuple[float, float]] | None,
           eval_every: float | None, progress: Callable[[float, RunLog], None] | None, timeout: float,
           resume: dict[str, Any] | None, save: Callable[[dict[str, Any]], None] | None,
           save_every: float, grad_format: str | None) -> ServerResult:
    """The server's loop, on the transport agreed (:func:`serve` checks and sets up)."""
    n = coord.n_workers
    current = coord.weights  # updated in place, and sent from: never rebound during the run
    assert current is not None
    size = current.size
    out_wire = wire_for(current.dtype)
    in_wire = Wire(grad_format or out_wire.format)
    parts = pieces(size, out_wire.storage.itemsize)
    inbox = in_wire.alloc(n, size)
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
        _wait_all(in_flight, timeout, "delivery of the weights to the workers", mode)
        in_flight.clear()
        if shared is not None:
            shared.sync()  # the workers' loads are done: this rank's next stores come after them

    def send_piece(w: int, piece: slice) -> None:
        in_flight.append(comm.Isend(current[piece], dest=w + 1, tag=REPLY_DATA_TAG))

    def reply(w: int, command: float, streamed: bool = False) -> None:
        # The previous reply to w was received before w pushed again, so this wait is immediate.
        _wait(head_sent[w], timeout, f"completion of the reply to worker {w}", mode)
        out_head[w] = (command, coord.version)
        if shared is not None:  # the weights are in the window: the header says they are ready
            shared.sync()
            in_flight.append(comm.Irecv(acks[w], source=w + 1, tag=ACK_TAG))
            head_sent[w] = comm.Isend(out_head[w], dest=w + 1, tag=REPLY_TAG)
            return
        head_sent[w] = comm.Isend(out_head[w], dest=w + 1, tag=REPLY_TAG)
        if not streamed:
            for piece in parts:
                send_piece(w, piece)

    def release(w: int, streamed: bool = False) -> None:
        head_recv[w] = comm.Irecv(in_head[w], source=w + 1, tag=PUSH_TAG)
        data_recv[w] = comm.Irecv(inbox[w], source=w + 1, tag=PUSH_DATA_TAG)
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
                evaluator.submit(now - t0, coord.weights, coord.version)  # (skipped while busy)
                while next_eval <= now:
                    next_eval += eval_every  # type: ignore[operator]
        until = np.inf if coord.stopping else min(next_eval, stop_at, next_save)
        w = _poll(pending, until, now + timeout, "push from any worker", mode)
        if w is None:
            continue
        head_recv[w] = MPI.REQUEST_NULL
        _wait(data_recv[w], timeout, f"the gradient of worker {w}, after its header", mode)
        data_recv[w] = MPI.REQUEST_NULL
        now = time.monotonic()
        pushed_on = int(in_head[w][0])
        if not coord.stopping and pushed_on != coord.pulled_version[w]:
            raise RuntimeError(f"worker {w} pushed a gradient for version {pushed_on}, "
                               f"but was sent version {coord.pulled_version[w]}")
        was_stopping = coord.stopping
        settle()  # the push may change the weights
        stream = None if shared is not None else \
            Stream(parts, lambda piece, w=w: send_piece(w, piece))  # type: ignore[misc]
        out = coord.push(w, None if coord.stopping else in_wire.decode(inbox[w]), now - t0, stream)
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
        _wait(head_sent[w], timeout, f"completion of the last reply to worker {w}", mode)
    settle()
    if eval_fn is not None:
        coord.log.record_eval(coord.log.duration_s, *eval_fn(coord.weights))  # type: ignore[arg-type]
    return ServerResult(policy.describe(), coord.log, policy.stats, coord.weights)  # type: ignore[arg-type]


def work(comm: MPI.Comm | None, grad_fn: Callable[[np.ndarray], np.ndarray], n_params: int, *,
         iteration_time: Callable[[float], float] | None = None, timeout: float = 60.0,
         record_versions: bool = False, dtype: Any = np.float64, grad_format: str | None = None,
         pace: Callable[[float, float], float] | None = None, wait: str | None = None,
         transport: str | None = None) -> WorkerResult:
    """Run a worker (rank >= 1 of ``comm``) until the server says stop.

    h-relation: per iteration, ``16 + g P`` bytes out (the push: 2 messages) and ``16 + w P``
    in (the reply: a header, then the weights in pieces; see the module docstring); with the
    shared window, the reply is 16 bytes, 8 more go out (the acknowledgement), and the worker
    copies the ``w P`` bytes of the weights out of the window.

    Parameters
    ----------
    comm : MPI.Comm or None
        The communicator the server uses (None: a duplicate of COMM_WORLD, as in :func:`serve`).
    grad_fn : callable
        ``grad_fn(weights) -> gradient`` (a flat array, ``n_params`` long).  A gradient already
        in the wire's dtype (1-D, C-contiguous) is sent from the array itself: it may be a
        buffer that ``grad_fn`` reuses, as it is not read after the next call begins.
    n_params : int
        Number of parameters.
    iteration_time : callable, optional
        ``iteration_time(start) -> seconds``: the injected iteration time (``start`` is seconds
        since this worker began); the worker sleeps for whatever the gradient left of it.
    pace : callable, optional
        ``pace(start, compute) -> seconds``: the iteration time given the gradient's measured
        compute time (for example ``compute * slowdown``); the worker sleeps for the rest.
        Takes the place of ``iteration_time``.
    timeout : float
        Longest wait for a reply before :class:`ServerTimeout`.
    record_versions : bool
        Keep the version of every weights received (for tests).
    dtype : numpy dtype
        The weights' dtype as the server sends them (float64, or float32 for float32 weights).
    grad_format : str, optional
        How gradients are sent (:data:`.wire.FORMATS`; None: as ``dtype``); the server's must match.
    wait : str, optional
        The wait mode, as for :func:`serve` (agreed with the server and the other workers).
    transport : str, optional
        How the weights arrive, as for :func:`serve` (agreed with the server and the others).
    """
    if comm is None:
        comm = MPI.COMM_WORLD.Dup()
        try:
            return work(comm, grad_fn, n_params, iteration_time=iteration_time, timeout=timeout,
                        record_versions=record_versions, dtype=dtype, grad_format=grad_format,
                        pace=pace, wait=wait, transport=transport)
        finally:
            comm.Free()
    mode = resolve(wait, comm)  # collective, as in the server's serve()
    problem = None
    try:
        in_wire = wire_for(dtype)
        Wire(grad_format or in_wire.format)
    except ValueError as exc:
        problem = str(exc)
    shared = open_transport(comm, transport, problem, n_params, np.dtype(dtype))
    failure: BaseException | None = None
    try:
        return _work(comm, grad_fn, n_params, shared, mode, iteration_time=iteration_time,
                     timeout=timeout, record_versions=record_versions, dtype=dtype,
                     grad_format=grad_format, pace=pace)
    except BaseException as exc:
        failure = exc
        raise
    finally:
        if shared is not None:
            shared.close(failure)


def _work(comm: MPI.Comm, grad_fn: Callable[[np.ndarray], np.ndarray], n_params: int,
          shared: SharedWeights | None, mode: str, *, iteration_time: Callable[[float], float] | None,
          timeout: float, record_versions: bool, dtype: Any, grad_format: str | None,
          pace: Callable[[float, float], float] | None) -> WorkerResult:
    """A worker's loop, on the transport agreed (:func:`work` checks and sets up)."""
    in_wire = wire_for(dtype)
    out_wire = Wire(grad_format or in_wire.format)
    weights = in_wire.alloc(1, n_params)[0]
    payload: list[np.ndarray] = []  # made at the first gradient that must be encoded first
    reply_head = np.zeros(2, dtype=np.int64)
    push_head = np.zeros(2, dtype=np.int64)
    parts = pieces(n_params, in_wire.storage.itemsize)
    result = WorkerResult()
    t0 = time.monotonic()

    ack = np.zeros(1, dtype=np.int64)

    def post_reply() -> list[MPI.Request]:
        if shared is not None:  # the header alone: the weights are in the window
            return [comm.Irecv(reply_head, source=0, tag=REPLY_TAG)]
        return [comm.Irecv(reply_head, source=0, tag=REPLY_TAG)] + \
               [comm.Irecv(weights[piece], source=0, tag=REPLY_DATA_TAG) for piece in parts]

    def receive(reqs: list[MPI.Request]) -> None:
        tic = time.monotonic()
        _wait_all(reqs, timeout, "reply from the server", mode)
        if shared is not None:
            shared.sync()  # the server's stores before its header, then these loads
            if reply_head[0] == CONTINUE:
                np.copyto(weights, shared.array)
            shared.sync()  # these loads, then the acknowledgement that lets the server store
            ack[0] = reply_head[1]
            _wait(comm.Isend(ack, dest=0, tag=ACK_TAG), timeout, "acknowledgement to the server", mode)
        result.blocked_s += time.monotonic() - tic
        if record_versions:
            result.versions.append(int(reply_head[1]))

    receive(post_reply())
    while reply_head[0] == CONTINUE:
        start = time.monotonic()
        grad = grad_fn(weights)
        if not isinstance(grad, np.ndarray) or grad.shape != (n_params,):
            raise ValueError(f"worker {comm.Get_rank() - 1}: the gradient function returned "
                             f"{type(grad).__name__} {getattr(grad, 'shape', '')}; the model has "
                             f"{n_params} parameters: return a flat array of that length")
        values = out_wire.as_payload(grad)
        if values is None:
            if not payload:
                payload.append(out_wire.alloc(1, n_params)[0])
            values = out_wire.encode(grad, payload[0])
        compute = time.monotonic() - start
        target = None
        if pace is not None:
            target = pace(start - t0, compute)
        elif iteration_time is not None:
            target = iteration_time(start - t0)
        if target is not None:
            left = target - (time.monotonic() - start)
            if left > 0:
                time.sleep(left)
        push_head[:] = (reply_head[1], result.iterations)
        result.iterations += 1
        reply = post_reply()  # before the push leaves: the server's reply never waits for it
        sends = [comm.Isend(push_head, dest=0, tag=PUSH_TAG), comm.Isend(values, dest=0, tag=PUSH_DATA_TAG)]
        _wait_all(sends, timeout, "delivery of a push to the server", mode)
        receive(reply)
    return result


#: The bounded, sleeping waits, for this package's other MPI driver (:mod:`.allreduce`).
poll_until = _poll
wait_request = _wait
