"""How the parameter server's weights reach the workers: messages, or a shared-memory window.

Where the server and every worker run on one node, the weights live in an MPI shared-memory
window (``MPI_Win_allocate_shared``) that the server updates in place and each worker copies
from: the 4 MiB of a 1 M-parameter float32 model are then copied once, by the worker, instead of
twice (by the server into MPI's shared cells and by the worker out of them), and the server's
core only updates.  A worker acknowledges each reply once it has copied the weights; the server
changes them only when every reply is acknowledged, so no worker ever copies a half-updated
vector.  Anywhere else (or with ``transport="messages"``) the weights travel as messages
(:mod:`.protocol`).

The window is cut into chunks of :data:`CHUNK_BYTES` (:attr:`SharedWeights.chunks`), and after
the weights it holds control words, each on a cache line of its own: ``ready[c]``, the version
whose values chunk ``c`` holds once a streamed update has written it, and ``expect[w]``, the
version the update now streamed to worker ``w`` makes.  An update applied alone and released at
once (ASP's, :class:`.coordinator.Stream`) is *pipelined*: the server updates chunk 0, sets
``expect[w]`` and ``ready[0]`` to the new version, updates chunk 1, and so on; worker ``w``,
which polls ``expect[w]`` while it waits for the reply's header, copies chunk ``c`` as soon as
``ready[c]`` equals ``expect[w]``, while the server updates chunk ``c + 1``.  So the update and
the copy overlap on the two cores instead of adding up.  The header follows the last chunk; the
worker checks that it names the version it copied (a worker that sees the header first copies
the whole vector, as for any other reply).  Safety: a chunk is written only after every reply
that could be reading it is acknowledged (as before), ``expect[w]`` and ``ready[c]`` only grow,
and a worker copies chunk ``c`` only while ``ready[c]`` is the version it was announced; it
checks after the copy that no chunk moved past it (:class:`TornWeights` otherwise).

The gradients come the same way in the weights' dtype or a 16-bit format (``grad_format``
float16 or bfloat16, :meth:`.wire.Wire.slot`; every rank asks in :func:`open_transport`): the
window then holds a slot per worker of ``P`` values of that type (2 bytes a value for the 16-bit
formats, which the worker rounds as it writes them and the server's update decodes as it reads
them, :mod:`hpcbsp.kernels.update`: the messages' bits, without their passes), and two more kinds of control words: ``arrived[w, c]``,
the push (worker ``w``'s count, from 0) whose chunk ``c`` slot ``w`` holds, and ``taken[w]``, the
last push the server has read out of it.  A worker sends its push header first, then writes its
gradient into its slot a chunk at a time, ``Win.Sync`` and ``arrived[w, c]`` after each; the
server, which has the header, reads chunk ``c`` as soon as ``arrived[w, c]`` names the push: under
ASP its pipelined update of chunk ``c`` reads it there (:class:`.coordinator.Stream`'s ``arrive``),
while the worker writes chunk ``c + 1``; any other use (a policy that holds the gradient) waits
for every chunk first.  So the gradient is moved by the worker's core, not by MPI's copy on the
server's, and the receive, the update and the copy back overlap on the two cores.  Safety: the
server sets ``taken[w]`` after it has read the push (checking that no chunk moved past it,
:class:`TornWeights` otherwise) and before any reply to it; the worker writes its next push only
after that reply, and checks ``taken[w]`` first (:class:`TornWeights` if it is not the previous
push).

Memory model: every rank holds the window's passive-target lock (``Lock_all``) for the whole
run.  ``Win.Sync`` is the memory barrier of MPI-3's shared windows (the unified model, which
MPICH and Open MPI implement for them): the server's stores to a chunk, ``Win.Sync``, then the
store to its control word; a worker polls the word with ``Win.Sync`` before each load, and loads
the chunk after.  Non-temporal stores (the server's, a worker's) are fenced (``sfence``) by the kernel before it
returns.  Around the messages (header, acknowledgement) ``Win.Sync`` orders the stores and
loads as before.

How the server writes the window (:class:`WindowStores`): where the two processes' cores sit
decides what a store to a line the worker has just read costs.  On this project's 2-vCPU VM,
in some launches (stretches of minutes, the hypervisor's placement, which the guest cannot
see), the server's update of 1 M float32 weights in the window took 1.5-2.0 ms with ordinary
stores against 0.17 ms in other launches, while the same update with non-temporal stores took
0.31-0.34 ms in both (docs/notes/performance-journal.md, "The bimodal push+pull on one node").  So the server
measures the two kinds of store on its own updates and uses the faster, trying the other now
and then; a worker does the same for its writes of its gradient into its slot, lines the server
has just read.

Memory: the window is ``P × (w + workers × g)`` bytes with the gradient slots (``P`` values:
the weights of ``w`` bytes and a slot per worker of ``g``, the gradients' wire type), ``P × w``
without, on the server's node.  Where
the slots' window would exceed ``$HPCBSP_SLOT_MEMORY_SHARE`` of the node's memory (default a
quarter; :func:`.slots.slot_window_fits`), the gradients travel as messages and rank 0 says so in one
line with the sizes (the weights still use the window).

h-relation: none of its own; a reply becomes a 16-byte header, and each worker returns an
8-byte acknowledgement; with the gradient slots a push is its 16-byte header alone (the control
words are loads and stores, not messages).
"""
from __future__ import annotations

import sys
import time
from typing import Callable

import numpy as np
from mpi4py import MPI

from ..kernels.update import convert, sgd_step
from ..runtime.environment import setting
from ..runtime.superstep.nodes import Nodes
from ..util.choices import TRANSPORTS
from .slots import SLOT_SHARE_ENV, slot_window_fits
from .wire import PIECE_BYTES, pieces

__all__ = ["TRANSPORTS", "TRANSPORT_ENV", "CHUNK_BYTES", "SharedWeights", "TornWeights", "WindowStores",
           "open_transport"]

TRANSPORT_ENV = "HPCBSP_PS_TRANSPORT"
#: About this many bytes of weights per chunk of a pipelined update (see the module docstring):
#: the copy of the last chunk is what the pipeline cannot hide, and each chunk costs the two
#: processes a few microseconds of Python.  The reply's pieces on the messages transport
#: (1 MiB): measured against 256 and 512 KiB and 4 MiB (docs/notes/performance-journal.md, "The
#: bimodal push+pull on one node"), it was as fast
#: as the smaller chunks where the placement is slow and faster where it is fast.
CHUNK_BYTES = PIECE_BYTES
#: Bytes between two control words (one cache line each: a worker polling its word does not
#: pull the line of another's).
LINE = 64


class TransportError(RuntimeError):
    """The ranks could not agree on a transport (a bad choice, or the server failed to start)."""


class TornWeights(RuntimeError):
    """A worker found a chunk of the window changed while it copied it (the protocol broken)."""


class WindowStores:
    """Writes into the window (``stores(target, *args)`` runs ``step(target, *args, streaming=...)``)
    with whichever stores its own writes measure faster: ordinary ones, or non-temporal ones (the
    same bits; see the module docstring).  The server's SGD updates of the weights use one
    (``step`` :func:`~hpcbsp.kernels.update.sgd_step`, the default: ``stores(w, g, lr)``), a
    worker's writes of its gradient into its slot another (``step``
    :func:`~hpcbsp.kernels.update.convert`: ``stores(slot, gradient)``, a copy, or the
    conversion to the slot's type).

    The first two writes try one kind each; after that each write uses the kind with the lower
    mean time per value, except every ``EXPLORE``-th, which tries the other so that a change of
    placement during the run is seen.  (Times are per value of ``target`` because the writes
    come whole or a chunk at a time: :attr:`SharedWeights.chunks`.)  A kind's mean is a running
    one (exponential, weight ``ALPHA`` for the newest) while it stays in use; a kind used again
    after the other starts afresh from its new time (its old mean is stale).  So a change shows
    at the next try, and a try that was luckily fast is undone by the writes after it.
    ``clock`` is for tests (default ``time.perf_counter``).
    """

    ALPHA = 0.25
    #: A try of the other kind every this many writes: in a slow placement each try of ordinary
    #: stores costs about 0.35 ms more than a 1 MiB chunk's non-temporal write, and a placement
    #: lasts minutes, so tries are rare (256 chunk writes: 64 round trips of 4 MiB, some 40 ms).
    EXPLORE = 256

    def __init__(self, clock: Callable[[], float] = time.perf_counter,
                 step: Callable[..., np.ndarray] = sgd_step):
        self._clock = clock
        self._step = step
        self.mean_s: list[float | None] = [None, None]  # [ordinary, non-temporal], seconds per value
        self.used = [0, 0]                              # writes made with each
        self._last: bool | None = None

    def streaming_next(self) -> bool:
        """Whether the next write uses non-temporal stores."""
        n = self.used[0] + self.used[1]
        ordinary, streaming = self.mean_s
        if ordinary is None or streaming is None:
            return ordinary is not None  # one of each first
        best = streaming < ordinary
        return (not best) if n % self.EXPLORE == self.EXPLORE - 1 else best

    def __call__(self, target: np.ndarray, *args: object) -> np.ndarray:
        """``step(target, *args)`` (which writes ``target``, in the window), timed, with the kind
        of store chosen; returns ``target``."""
        streaming = self.streaming_next()
        start = self._clock()
        self._step(target, *args, streaming=streaming)
        took = (self._clock() - start) / max(target.size, 1)
        mean = self.mean_s[streaming]
        if mean is not None and streaming == self._last:
            took = mean + self.ALPHA * (took - mean)
        self.mean_s[streaming] = took
        self.used[streaming] += 1
        self._last = streaming
        return target


class SharedWeights:
    """The weights in a shared-memory window of the server's communicator (see the module
    docstring): ``array`` is rank 0's part, seen by every rank of ``comm``; ``chunks`` its
    chunks, in order; ``ready`` and ``expect`` the control words (views of the window, one per
    chunk and one per worker).  With gradient slots: ``grads[w]`` worker ``w``'s slot (of the
    weights' size, the gradients' wire type), ``arrived[w, c]`` the push whose chunk ``c`` the slot holds, and
    ``taken[w]`` the last push the server has read out of it (control words too)."""

    def __init__(self, win: MPI.Win, array: np.ndarray, ready: np.ndarray, expect: np.ndarray,
                 grads: np.ndarray | None = None, arrived: np.ndarray | None = None,
                 taken: np.ndarray | None = None):
        self.win = win
        self.array = array
        self.chunks = pieces(array.size, array.itemsize, CHUNK_BYTES)
        self.ready = ready
        self.expect = expect
        self.grads = grads
        self.arrived = arrived
        self.taken = taken
        self.stores = WindowStores()  # the server's updates of ``array``
        self.pushes = WindowStores(step=convert)  # a worker's writes of its gradient into its slot

    def _chunk(self, piece: slice) -> int:
        return piece.start // max(self.chunks[0].stop, 1)

    # The server's side of a pipelined update.
    def publish(self, worker: int, piece: slice, version: int) -> None:
        """Chunk ``piece`` (one of :attr:`chunks`) now holds ``version``, which the update being
        streamed to ``worker`` makes: the chunk's stores, then its word (with the first chunk,
        ``expect[worker]`` first)."""
        c = self._chunk(piece)
        self.win.Sync()
        if c == 0:
            self.expect[worker] = version
        self.ready[c] = version

    # The server's side of a push through the window.
    def arrive(self, worker: int, piece: slice, push: int,
               wait: Callable[[Callable[[], bool | None]], object]) -> None:
        """Return once chunk ``piece`` of ``worker``'s slot holds its push number ``push``
        (``wait(test)`` polls ``test`` until it returns True, the caller's bounded wait); the
        caller's loads of it come after."""
        c, arrived, sync = self._chunk(piece), self.arrived[worker], self.win.Sync  # type: ignore[index]

        def written() -> bool | None:
            sync()
            return True if arrived[c] >= push else None

        if arrived[c] < push:
            wait(written)
        sync()

    def take(self, worker: int, push: int) -> None:
        """The server has read push ``push`` out of ``worker``'s slot: the worker may write the
        next.  Raises :class:`TornWeights` if a chunk of the slot moved past ``push`` meanwhile
        (it must not: the worker writes the next push only after this, and the reply)."""
        arrived = self.arrived[worker]  # type: ignore[index]
        self.win.Sync()
        moved = np.flatnonzero(arrived != push)
        if moved.size:
            raise TornWeights(f"chunk {int(moved[0])} of worker {worker}'s gradient in the shared window "
                              f"holds push {int(arrived[moved[0]])}, not {push}, after the server read it")
        self.taken[worker] = push  # type: ignore[index]

    # The worker's side of a push through the window.
    def push(self, worker: int, values: np.ndarray, push: int) -> None:
        """Write ``values`` (push number ``push`` of ``worker``, counted from 0) into the
        worker's slot a chunk at a time, with :attr:`pushes`' stores (values of another float
        dtype, a float64 gradient for float32 weights or any gradient for a 16-bit slot, are
        converted as they are written, straight into the slot: one pass, rounded as the
        messages' encoding rounds, :func:`~hpcbsp.kernels.update.convert`), each chunk's word set after
        its stores, so that the server updates a chunk while the next is written.  Raises
        :class:`TornWeights` if the server has not yet taken the previous push (the protocol
        broken: it takes each push before it replies)."""
        slot, arrived = self.grads[worker], self.arrived[worker]  # type: ignore[index]
        self.win.Sync()
        if self.taken[worker] != push - 1:  # type: ignore[index]
            raise TornWeights(f"worker {worker}: the server has taken push {int(self.taken[worker])} "  # type: ignore[index]
                              f"out of the shared window, not {push - 1}, before push {push}")
        for c, piece in enumerate(self.chunks):
            self.pushes(slot[piece], values[piece])  # (converted to the slot's type as written)
            self.win.Sync()
            arrived[c] = push

    # The worker's side.
    def announced(self, worker: int) -> int:
        """The version last announced to ``worker`` (-1: none yet)."""
        self.win.Sync()
        return int(self.expect[worker])

    def copy_streamed(self, out: np.ndarray, version: int, wait: Callable[[Callable[[], bool | None]], object]) -> None:
        """Copy the weights of ``version`` into ``out`` a chunk at a time, each as soon as it is
        ready; ``wait(test)`` polls ``test`` until it returns True (the caller's bounded wait).
        Raises :class:`TornWeights` if a chunk moved past ``version`` (it must not: the server
        waits for this worker's acknowledgement before it writes a chunk again)."""
        ready, sync = self.ready, self.win.Sync

        def test(c: int) -> bool | None:
            sync()
            return True if ready[c] >= version else None

        for c, piece in enumerate(self.chunks):
            if ready[c] < version:
                wait(lambda c=c: test(c))  # type: ignore[misc]
            sync()
            np.copyto(out[piece], self.array[piece])
        sync()
        moved = np.flatnonzero(ready[:len(self.chunks)] != version)
        if moved.size:
            raise TornWeights(f"chunk {int(moved[0])} of the shared weights holds version "
                              f"{int(ready[moved[0]])}, not {version}, after the copy")

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
                   dtype: np.dtype, gradients: bool = False, grad_dtype: np.dtype | None = None) -> SharedWeights | None:
    """Collective on ``comm`` (the server and every worker, at the start of a run): agree on the
    transport and, for a shared one, make the window of ``count`` values of ``dtype`` on rank 0,
    with a gradient slot per worker of ``count`` values of ``grad_dtype`` (default ``dtype``: a
    16-bit gradient's as :meth:`.wire.Wire.slot` gives it) if every rank gives ``gradients``.

    ``problem`` is this rank's reason not to start (None when it can): every rank then raises
    :class:`TransportError`, the others naming the rank, instead of one rank leaving the others
    waiting in a collective call.  Returns the window, or None for messages.
    """
    choice = _requested(transport)
    if problem is None and choice not in TRANSPORTS:
        problem = (f"transport {choice!r} is not one of {', '.join(TRANSPORTS)} (argument or "
                   f"${TRANSPORT_ENV})")
    one_node = Nodes.of(comm).one_node
    me = comm.Get_rank()
    itemsize = np.dtype(dtype).itemsize
    slot_type = np.dtype(dtype if grad_dtype is None else grad_dtype)
    g_size = slot_type.itemsize
    # One Allreduce, element-wise: whether every rank can start and wants a window, and the
    # least and the greatest number of values, value size and slot type given (the same, or
    # the models or the gradients' formats differ).
    fits, why = slot_window_fits(count, itemsize, comm.Get_size() - 1, grad_itemsize=g_size) \
        if gradients else (True, "")
    mine = np.array([problem is None, choice == "auto" and one_node, count, -count, itemsize, -itemsize,
                     gradients, fits, slot_type.num if gradients else -1,
                     -slot_type.num if gradients else -1000], dtype=np.int64)
    agreed = np.empty_like(mine)
    comm.Allreduce(mine, agreed, op=MPI.MIN)
    ok, shared, slots = bool(agreed[0]), bool(agreed[1]), bool(agreed[6]) and bool(agreed[7])
    if ok and (agreed[2] != -agreed[3] or agreed[4] != -agreed[5]):
        problem = (f"the server and its workers were given different models: {agreed[2]} to "
                   f"{-agreed[3]} values of {agreed[4]} to {-agreed[5]} bytes (this rank: {count} of "
                   f"{itemsize}); give every worker the server's n_params and dtype")
        raise TransportError(f"rank {me}: {problem}")
    if ok and agreed[6] and agreed[8] != -agreed[9]:
        raise TransportError(f"rank {me}: the server and its workers were given different gradient formats "
                             f"(this rank's slots: {slot_type.name}, uint16 for bfloat16); give every worker "
                             "the server's grad_format")
    if not ok:
        first = comm.allreduce(me if problem is not None else comm.Get_size(), op=MPI.MIN)
        raise TransportError(f"rank {me}: {problem}" if problem is not None else
                             f"rank {me}: the parameter server run could not start: rank {first} failed")
    if not shared:
        return None
    if agreed[6] and not agreed[7] and me == 0:
        print(why or "[hpcbsp] parameter server: gradients as messages: a worker's node has too little "
              f"memory for the gradient slots (${SLOT_SHARE_ENV})", file=sys.stderr, flush=True)
    # The weights, the workers' gradient slots, then (each from a cache line's start) a control
    # word per chunk (ready), per worker (expect), per worker and chunk (arrived), per worker (taken).
    workers = comm.Get_size() - 1
    n_chunks = len(pieces(count, itemsize, CHUNK_BYTES))
    n_words = n_chunks + workers + (workers * n_chunks + workers if slots else 0)
    span = -(-count * itemsize // LINE) * LINE
    g_span = -(-count * g_size // LINE) * LINE  # (a slot's, from a line's start)
    words_at = span + (workers * g_span if slots else 0)
    win = MPI.Win.Allocate_shared(words_at + n_words * LINE if me == 0 else 0, 1, comm=comm)  # type: ignore[arg-type]
    buf, _ = win.Shared_query(0)
    raw = np.frombuffer(buf, dtype=np.uint8)  # type: ignore[call-overload]
    words = raw[words_at:words_at + n_words * LINE].view(np.int64)[::LINE // 8]
    grads = arrived = taken = None
    if slots:
        grads = raw[span:span + workers * g_span].view(slot_type).reshape(workers, g_span // g_size)[:, :count]
        at = n_chunks + workers
        arrived = words[at:at + workers * n_chunks].reshape(workers, n_chunks)
        taken = words[at + workers * n_chunks:]
    win.Lock_all()
    if me == 0:
        words[:] = -1  # no version yet
    elif grads is not None:
        # The slot's first touch (its pages' faults), here rather than in the first pushes, where
        # they would pass for the cost of the kind of store tried first (WindowStores).
        grads[me - 1] = 0
    win.Sync()
    comm.Barrier()  # the server's stores above, before any worker's loads
    win.Sync()
    if me == 0 and grads is not None:
        # The server reads every slot once, as it will read each push: so a worker's first
        # writes find the slot's lines as every later write does (just read by the server's
        # core), and its first tries of the two kinds of store measure what they will cost.
        # (Done before the server's first reply, after which a worker may write.)
        for slot in grads:
            slot.sum()
    return SharedWeights(win, raw[:count * itemsize].view(dtype), words[:n_chunks], words[n_chunks:n_chunks + workers],
                         grads, arrived, taken)
