"""How the parameter server's weights reach the workers: messages, or a shared-memory window.

Where the server and every worker run on one node, the weights live in an MPI shared-memory
window (``MPI_Win_allocate_shared``) that the server updates in place and each worker copies
from when a reply's header tells it to: the 4 MiB of a 1 M-parameter float32 model are then
copied once, by the worker, instead of twice (by the server into MPI's shared cells and by the
worker out of them), and the server's core only updates.  A worker acknowledges each reply once
it has copied the weights; the server changes them only when every reply is acknowledged, so no
worker ever copies a half-updated vector.  Anywhere else (or with ``transport="messages"``) the
weights travel as messages (:mod:`.protocol`).

Memory model: every rank holds the window's passive-target lock (``Lock_all``) for the whole
run, and ``Win.Sync`` orders the shared stores and loads around the messages that announce them
(the separate-memory model of MPI-3 shared windows, which MPICH implements as unified).

How the server writes the window (:class:`WindowStores`): where the two processes' cores sit
decides what a store to a line the worker has just read costs.  On this project's 2-vCPU VM,
in some launches (stretches of minutes, the hypervisor's placement, which the guest cannot
see), the server's update of 1 M float32 weights in the window took 1.5-2.0 ms with ordinary
stores against 0.17 ms in other launches, while the same update with non-temporal stores took
0.31-0.34 ms in both (docs/performance.md, "The bimodal push+pull on one node").  So the server
measures the two kinds of store on its own updates and uses the faster, trying the other now
and then.  Even with non-temporal stores a slow placement leaves the window behind messages (the
worker then reads the weights from memory, not from a cache), so ``auto`` first probes the new
window (:func:`slow_window`: the workers read it, the server writes it both ways, twice) and
sends the weights as messages where ordinary stores take more than ``SLOW_FACTOR`` times as long
as non-temporal ones.  ``window`` skips the probe.

h-relation: none of its own; a reply becomes a 16-byte header, and each worker returns an
8-byte acknowledgement.
"""
from __future__ import annotations

import sys
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

from ..kernels.update import sgd_step
from ..runtime.arena import on_one_node
from ..runtime.environment import setting

__all__ = ["TRANSPORTS", "TRANSPORT_ENV", "SharedWeights", "WindowStores", "open_transport", "slow_window"]

TRANSPORTS = ("auto", "window", "messages")
#: ``auto`` sends messages where ordinary stores into the window take this many times as long as
#: non-temporal ones (fast placements: about 0.6; slow ones: 5-8).
SLOW_FACTOR = 2.0
#: Windows smaller than this are not probed (the probe would cost more than it could save).
PROBE_MIN_BYTES = 256 * 1024
TRANSPORT_ENV = "HPCBSP_PS_TRANSPORT"


class TransportError(RuntimeError):
    """The ranks could not agree on a transport (a bad choice, or the server failed to start)."""


class WindowStores:
    """The server's SGD update of the weights in the window, with whichever stores its own
    updates measure faster: ordinary ones, or non-temporal ones (``sgd_step(..., streaming=True)``,
    the same bits; see the module docstring).

    The first two updates try one kind each; after that each update uses the kind with the lower
    mean time, except every ``EXPLORE``-th, which tries the other so that a change of placement
    during the run is seen.  A kind's mean is a running one (exponential, weight ``ALPHA`` for the
    newest) while it stays in use; a kind used again after the other starts afresh from its new
    time (its old mean is stale).  So a change shows at the next try, and a try that was luckily
    fast is undone by the updates after it.  ``clock`` and ``step`` are for tests (default
    ``time.perf_counter`` and :func:`~hpcbsp.kernels.update.sgd_step`).
    """

    ALPHA = 0.25
    EXPLORE = 64

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 step: Callable[..., np.ndarray] = sgd_step):
        self._clock = clock
        self._step = step
        self.mean_s: list[float | None] = [None, None]  # [ordinary, non-temporal]
        self.used = [0, 0]                              # updates made with each
        self._last: bool | None = None

    def streaming_next(self) -> bool:
        """Whether the next update uses non-temporal stores."""
        n = self.used[0] + self.used[1]
        ordinary, streaming = self.mean_s
        if ordinary is None or streaming is None:
            return ordinary is not None  # one of each first
        best = streaming < ordinary
        return (not best) if n % self.EXPLORE == self.EXPLORE - 1 else best

    def sgd_step(self, w: np.ndarray, g: np.ndarray, lr: float) -> np.ndarray:
        """``w -= lr * g`` in place (the window's weights), timed, with the kind of store chosen."""
        streaming = self.streaming_next()
        start = self._clock()
        self._step(w, g, lr, streaming=streaming)
        took = self._clock() - start
        mean = self.mean_s[streaming]
        if mean is not None and streaming == self._last:
            took = mean + self.ALPHA * (took - mean)
        self.mean_s[streaming] = took
        self.used[streaming] += 1
        self._last = streaming
        return w


class SharedWeights:
    """The weights in a shared-memory window of the server's communicator (see the module
    docstring): ``array`` is rank 0's part, seen by every rank of ``comm``."""

    def __init__(self, win: MPI.Win, array: np.ndarray):
        self.win = win
        self.array = array
        self.stores = WindowStores()  # the server's updates of ``array``

    def __enter__(self) -> "SharedWeights":
        return self

    def __exit__(self, kind: object, error: BaseException | None, trace: object) -> None:
        self.close(error)

    def sync(self) -> None:
        """Order this rank's stores to and loads from the window against its messages."""
        self.win.Sync()

    def close(self, error: BaseException | None = None) -> None:
        """Collective on the server's communicator: release the window.

        With ``error`` (the run is ending on this rank because of it), one line naming it goes
        to stderr first: the release waits for every other rank to end its run, which may take
        up to their timeout, and the error should not wait with it.
        """
        if error is not None:
            print(f"[hpcbsp] rank {MPI.COMM_WORLD.Get_rank()}: {type(error).__name__}: {error} "
                  "(releasing the parameter server's shared window, which waits for the other "
                  "ranks to stop)", file=sys.stderr, flush=True)
        self.win.Unlock_all()
        self.win.Free()


def _requested(transport: str | None) -> str:
    return str(transport if transport is not None else setting(TRANSPORT_ENV)).strip().lower()


def open_transport(comm: MPI.Comm, transport: str | None, problem: str | None, count: int,
                   dtype: np.dtype) -> SharedWeights | None:
    """Collective on ``comm`` (the server and every worker, at the start of a run): agree on the
    transport and, for a shared one, make the window of ``count`` values of ``dtype`` on rank 0.

    ``problem`` is this rank's reason not to start (None when it can): every rank then raises
    :class:`TransportError`, the others naming the rank, instead of one rank leaving the others
    waiting in a collective call.  Returns the window, or None for messages.
    """
    choice = _requested(transport)
    if problem is None and choice not in TRANSPORTS:
        problem = (f"transport {choice!r} is not one of {', '.join(TRANSPORTS)} (argument or "
                   f"${TRANSPORT_ENV})")
    one_node = on_one_node(comm)
    me = comm.Get_rank()
    itemsize = np.dtype(dtype).itemsize
    # One Allreduce, element-wise: whether every rank can start and wants a window, and the
    # least and the greatest number of values and value size given (they must be the same).
    mine = np.array([problem is None, choice != "messages" and one_node, count, -count, itemsize, -itemsize],
                    dtype=np.int64)
    agreed = np.empty_like(mine)
    comm.Allreduce(mine, agreed, op=MPI.MIN)
    ok, shared = bool(agreed[0]), bool(agreed[1])
    if ok and (agreed[2] != -agreed[3] or agreed[4] != -agreed[5]):
        problem = (f"the server and its workers were given different models: {agreed[2]} to "
                   f"{-agreed[3]} values of {agreed[4]} to {-agreed[5]} bytes (this rank: {count} of "
                   f"{itemsize}); give every worker the server's n_params and dtype")
        raise TransportError(f"rank {me}: {problem}")
    if not ok:
        first = comm.allreduce(me if problem is not None else comm.Get_size(), op=MPI.MIN)
        raise TransportError(f"rank {me}: {problem}" if problem is not None else
                             f"rank {me}: the parameter server run could not start: rank {first} failed")
    if not shared:
        return None
    win = MPI.Win.Allocate_shared(max(count * itemsize, 1) if me == 0 else 0, itemsize, comm=comm)  # type: ignore[arg-type]
    buf, _ = win.Shared_query(0)
    raw = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    win.Lock_all()
    # (A worker given another size than the server's sees another length here: its caller
    # checks, inside the run that closes the window.)
    weights = SharedWeights(win, raw[:raw.size // itemsize * itemsize].view(dtype))
    probe = comm.allreduce(choice == "auto", op=MPI.LAND) and count * itemsize >= PROBE_MIN_BYTES
    if probe and slow_window(comm, weights):
        weights.close()
        return None
    return weights


def slow_window(comm: MPI.Comm, weights: SharedWeights, repeats: int = 2) -> bool:
    """Collective on the server's communicator, on a new window (all zeros): whether ordinary
    stores into it, right after the workers read it, take more than :data:`SLOW_FACTOR` times as
    long as non-temporal ones (the fastest of ``repeats`` tries each).  The server decides; every
    rank returns its answer.  The window is left all zeros (each pass writes ``0 - 0 * 0``)."""
    me = comm.Get_rank()
    array = weights.array
    zeros = np.zeros(array.size if me == 0 else 0, dtype=array.dtype)
    scratch = np.empty(array.size if me != 0 else 0, dtype=array.dtype)
    best = [np.inf, np.inf]  # [ordinary, non-temporal]
    for streaming in [False, True] * repeats:
        weights.sync()
        comm.Barrier()
        if me != 0:
            np.copyto(scratch, array)  # as a worker pulls: the lines are in its cache now
        weights.sync()
        comm.Barrier()
        weights.sync()
        if me == 0:
            start = time.perf_counter()
            sgd_step(array, zeros, 0.0, streaming=streaming)
            best[streaming] = min(best[streaming], time.perf_counter() - start)
    weights.sync()
    return bool(comm.bcast(best[0] > SLOW_FACTOR * best[1] if me == 0 else None, root=0))
