"""A parameter-server worker on MPI: ranks ``1..n`` of the server's communicator (the protocol:
:mod:`.protocol`; the server: :mod:`.server`), or ranks ``S..S+n-1`` of a sharded server's: the
worker then pushes each shard its slice of the gradient and receives each shard's slice of the
weights, all at once (:mod:`.shards`)."""
from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
from mpi4py import MPI

from ..runtime.superstep.waiting import resolve
from .keyranges import worker_pieces
from .protocol import CONTINUE, Tag, WorkerResult, poll_until, wait_all, wait_request
from .transport import SharedWeights, TornWeights, open_transport
from .wire import Wire, wires

__all__ = ["work"]


def work(comm: MPI.Comm | None, grad_fn: Callable[[np.ndarray], np.ndarray], n_params: int, *,
         iteration_time: Callable[[float], float] | None = None, timeout: float = 60.0,
         record_versions: bool = False, dtype: Any = np.float64, grad_format: str | None = None,
         pace: Callable[[float, float], float] | None = None, wait: str | None = None,
         transport: str | None = None, servers: int = 1) -> WorkerResult:
    """Run a worker (rank >= ``servers`` of ``comm``) until the server says stop.

    h-relation: per iteration, ``16 + g P`` bytes out (the push: 2 messages) and ``16 + w P``
    in (the reply: a header, then the weights in pieces; see the module docstring); with the
    shared window, the reply is 16 bytes, 8 more go out (the acknowledgement), and the worker
    copies the ``w P`` bytes of the weights out of the window; with its gradient slot there
    (gradients in the weights' dtype, float16 or bfloat16) the push is 16 bytes, and the worker
    writes the ``g P`` bytes of its gradient into the window (converted as it writes them).

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
    servers : int
        Server ranks (shards) ``0..servers-1``, as given to :func:`serve`.
    """
    if comm is None:
        comm = MPI.COMM_WORLD.Dup()
        try:
            return work(comm, grad_fn, n_params, iteration_time=iteration_time, timeout=timeout,
                        record_versions=record_versions, dtype=dtype, grad_format=grad_format,
                        pace=pace, wait=wait, transport=transport, servers=servers)
        finally:
            comm.Free()
    mode = resolve(wait, comm)  # collective, as in the server's serve()
    problem, wired = None, None
    try:
        wired = wires(dtype, grad_format)
    except ValueError as exc:
        problem = str(exc)
    slot = None if wired is None else wired[1].slot(wired[0])
    shared = open_transport(comm, transport if servers == 1 else "messages", problem, n_params, np.dtype(dtype),
                            gradients=servers == 1 and slot is not None, grad_dtype=slot)
    assert wired is not None  # (else open_transport raised, on every rank)
    with shared if shared is not None else nullcontext():
        return _work(comm, grad_fn, n_params, shared, mode, *wired, iteration_time=iteration_time,
                     timeout=timeout, record_versions=record_versions, pace=pace, servers=servers)


def _work(comm: MPI.Comm, grad_fn: Callable[[np.ndarray], np.ndarray], n_params: int,
          shared: SharedWeights | None, mode: str, in_wire: Wire, out_wire: Wire, *,
          iteration_time: Callable[[float], float] | None, timeout: float, record_versions: bool,
          pace: Callable[[float, float], float] | None, servers: int = 1) -> WorkerResult:
    """A worker's loop, on the transport agreed (:func:`work` checks and sets up); the weights
    come in on ``in_wire``, the gradients go out on ``out_wire``."""
    ranges, parts = worker_pieces(n_params, in_wire.storage.itemsize, servers)
    weights = np.zeros(n_params, dtype=in_wire.storage)
    payload: np.ndarray | None = None  # made at the first gradient that must be encoded first
    heads = np.zeros((servers, 2), dtype=np.int64)  # each shard's reply header
    reply_head = heads[0]
    push_head = np.zeros(2, dtype=np.int64)
    result = WorkerResult()
    t0 = time.monotonic()

    ack = np.zeros(1, dtype=np.int64)

    def post_reply() -> list[MPI.Request]:
        if shared is not None:  # the header alone: the weights are in the window
            return [comm.Irecv(reply_head, source=0, tag=Tag.REPLY)]
        return [comm.Irecv(heads[s], source=s, tag=Tag.REPLY) for s in range(servers)] + \
               [comm.Irecv(weights[piece], source=s, tag=Tag.REPLY_DATA) for s, piece in parts]

    me = comm.Get_rank() - servers
    last = -1  # the version of the last reply

    def receive(reqs: list[MPI.Request], sends: list[MPI.Request] | None = None) -> None:
        """The reply to the push whose ``sends`` are given (on the shared window they may be
        still in flight: the server's update, and so its announcement, comes after it has
        received the gradient; until then the polls of the header make MPI progress)."""
        nonlocal last
        tic = time.monotonic()
        if shared is None:
            wait_all(reqs, timeout, "reply from the server", mode)
            if servers > 1 and (heads != reply_head).any():
                raise RuntimeError(f"worker {me}: the shards replied {heads.tolist()} ([command, version] "
                                   "each): they must agree")
        else:
            deadline = tic + timeout
            head = reqs[0]

            def header_or_announced() -> int | None:  # -1: the header came first
                if head.Test():
                    return -1
                version = shared.announced(me)
                return version if version > last else None

            streamed = poll_until(header_or_announced, np.inf, deadline, "reply from the server", mode)
            if streamed >= 0:  # the update is being made: copy each chunk as it is final
                shared.copy_streamed(weights, streamed, lambda test: poll_until(
                    test, np.inf, deadline, "chunk of the weights from the server", mode))
                wait_request(head, deadline - time.monotonic(), "reply from the server", mode)
                if reply_head[0] == CONTINUE and reply_head[1] != streamed:
                    raise TornWeights(f"worker {me}: copied version {streamed} of the weights, "
                                      f"but the reply is for version {reply_head[1]}")
                result.streamed += 1
            else:
                shared.sync()  # the server's stores before its header, then these loads
                if reply_head[0] == CONTINUE:
                    np.copyto(weights, shared.array)
            if sends:  # (complete by now: the server replied)
                wait_all(sends, deadline - time.monotonic(), "delivery of a push to the server", mode)
            shared.sync()  # these loads, then the acknowledgement that lets the server store
            ack[0] = reply_head[1]
            wait_request(comm.Isend(ack, dest=0, tag=Tag.ACK), timeout, "acknowledgement to the server", mode)
        last = int(reply_head[1])
        result.blocked_s += time.monotonic() - tic
        if record_versions:
            result.versions.append(last)

    receive(post_reply())
    while reply_head[0] == CONTINUE:
        start = time.monotonic()
        grad = grad_fn(weights)
        if not isinstance(grad, np.ndarray) or grad.shape != (n_params,):
            raise ValueError(f"worker {me}: the gradient function returned "
                             f"{type(grad).__name__} {getattr(grad, 'shape', '')}; the model has "
                             f"{n_params} parameters: return a flat array of that length")
        values = out_wire.as_payload(grad)
        if values is None and shared is not None and shared.grads is not None and grad.dtype.kind == "f" \
                and (grad.dtype.itemsize >= 4 or grad.dtype == shared.grads.dtype):
            values = grad  # (converted once, as the push writes it into the slot: no payload)
        if values is None:
            if payload is None:
                payload = out_wire.alloc(1, n_params)[0]
            values = out_wire.encode(grad, payload)
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
        reply = post_reply()  # before the push leaves: the server's reply never waits for it
        sends = [comm.Isend(push_head, dest=s, tag=Tag.PUSH) for s in range(servers)]
        if shared is not None and shared.grads is not None:
            # The header first: the server updates each chunk as soon as it is written here.
            shared.push(me, values, result.iterations)
        else:
            # One shard's slice after the other: shard s applies its slice and replies while the
            # next ones travel (one link carries them all; sent at once, they would all arrive
            # last and every reply wait for the whole push).
            for s, keys in enumerate(ranges):
                sends.append(comm.Isend(values[keys], dest=s, tag=Tag.PUSH_DATA))
                if s < servers - 1:
                    wait_request(sends[-1], timeout, f"delivery of its gradient's slice to shard {s}", mode)
        result.iterations += 1
        if shared is None:
            wait_all(sends, timeout, "delivery of a push to the server", mode)
        receive(reply, sends)
    return result
