"""The BSP context: one object that carries all per-run state (no globals).

>>> with hpcbsp.BSP() as bsp:            # doctest: +SKIP
...     x = bsp.coarray(4)
...     x.put((bsp.pid + 1) % bsp.nprocs, np.arange(4.0))
...     bsp.sync()

:class:`BSP` is a facade over the runtime's parts, each in its own module: the superstep path
(:mod:`.superstep`, its base class: control step, exchange, sync hooks, the ledger row), the
lifecycle and failure state (:mod:`.lifecycle`: opening, leaving, failing), registration of
coarrays, vars and queues (:mod:`.registration`), the collectives (:mod:`.collectives`),
checkpoints (:mod:`.checkpoint`) and the interface for extensions such as FA-BSP mailboxes
(:mod:`.extension`, as ``bsp.extension``).  Its methods document what users call (and the
h-relation each adds); the modules check the arguments and make the calls.
"""
from __future__ import annotations

import time
from typing import Any, Callable, NoReturn

import numpy as np
from mpi4py import MPI

from ..failure import lines
from ..failure.report import abort_job
from ..superstep import lifecycle
from ..superstep.lateness import threshold
from ..superstep.supersteps import Supersteps
from . import checkpoint as ckpt
from . import collectives, registration
from .coarray import Coarray
from .extension import Extension, provided
from .partition import Grid, Partitioning
from .queue import Queue
from .var import Var

_perf = time.perf_counter


class BSP(Supersteps):
    """A BSP computer of ``nprocs`` processors on an MPI communicator.

    Parameters
    ----------
    comm
        The communicator to run on; it is duplicated, so hpcbsp's traffic never mixes with the
        caller's.  Default: ``MPI.COMM_WORLD``.
    timeout
        Seconds a collective BSP call may wait for the other ranks before it raises
        :class:`~.errors.SyncTimeout` on this rank (default: ``$HPCBSP_SYNC_TIMEOUT`` or no
        limit).  Give every rank the same setting.
    wait
        How a rank waits for the others in a collective call: ``"spin"`` (busy-poll, lowest
        latency), ``"yield"`` (poll with growing sleeps, gives the core away) or ``"auto"``
        (yield when a node runs more ranks than it has cores).  Default: ``$HPCBSP_WAIT`` or
        ``"auto"``; see :mod:`hpcbsp.runtime.superstep.waiting`.  The mode used is :attr:`wait`.
    lateness
        A threshold in milliseconds (or ``"off"``): rank 0 writes a line to stderr when one rank
        arrived last at the sync, later than the earliest by more than this, in 8 of the last 10
        supersteps (one more word in the control step's reduction; no new message).  Default:
        ``$HPCBSP_LATENESS`` or off; see :mod:`hpcbsp.runtime.superstep.lateness`.  Give every
        rank the same setting.

    Notes
    -----
    Every collective call (``sync``, ``coarray``, ``queue``, ``allreduce``, ``broadcast``,
    ``split``, leaving the ``with`` block) starts with the same small control collective, so ranks
    that make different calls get a :class:`~.errors.Divergence` naming what each did instead of
    a hang.
    """

    def __init__(self, comm: MPI.Comm | None = None, *, timeout: float | None = None,
                 wait: str | None = None, lateness: float | str | None = None):
        rank = (MPI.COMM_WORLD if comm is None else comm).Get_rank()
        if lateness is not None:  # (a bad keyword before any collective; the variable's in start)
            threshold(lateness, rank)
        started = lifecycle.start(comm, timeout, wait)
        super().__init__(*started, lateness=threshold(lateness, rank))
        self._created = _perf()
        #: The interface for extensions of the runtime (FA-BSP mailboxes, checkpoints).
        self.extension = Extension(self)

    def __repr__(self) -> str:
        return f"BSP(pid={self.pid}, nprocs={self.nprocs}, superstep={self.superstep}, {self._life.state})"

    # ------------------------------------------------------------------ context management
    def __enter__(self) -> "BSP":
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
        else:
            self._fail(exc)

    def close(self) -> None:
        """Leave the BSP program (collective).  Raises :class:`~.errors.Divergence` if other
        ranks are still synchronising instead of leaving too."""
        self._leave()

    def _fail(self, exc: BaseException) -> None:
        """This rank failed: tell the other ranks, or abort the job (see :meth:`Lifecycle.fail`)."""
        self._life.fail(exc)

    # ------------------------------------------------------------------ registration
    def coarray(self, n: int | None = None, dtype: Any = float, *, name: str | None = None,
                scratch: bool = False, layout: Partitioning | Grid | None = None,
                shape: tuple[int, ...] | None = None) -> Coarray:
        """Register an array with ``n`` elements on this rank (collective; n may differ per rank).

        The local part starts zeroed; ranks must agree on the dtype.  ``shape`` (instead of
        ``n``; it may differ per rank, its number of dimensions may not) makes the part
        n-dimensional, addressed by slices with ``c.on(pid)[...]`` (:mod:`.coarray`).
        ``scratch=True`` marks temporary storage (halos, buffers) that :meth:`checkpoint` does
        not save.  ``layout`` (a :mod:`partitioning <.partition>` over this context's ranks, the
        same on every rank) says which global elements the parts hold: ``n`` (for a
        :class:`~.partition.Grid`, ``shape``) then defaults to this rank's share, and a checkpoint
        restored onto another number of ranks is redistributed by it (without a layout, only onto
        the rank count it was saved on).  Not a superstep; h-relation: none (one control step
        and an ``Allgather`` of the sizes; :mod:`.registration`).
        """
        return registration.coarray(self, n, dtype, name, scratch, layout, shape)

    def push_reg(self, array: np.ndarray, *, name: str | None = None, scratch: bool = False,
                 layout: Partitioning | Grid | None = None) -> Coarray:
        """BSPlib's ``bsp_push_reg``: register a writeable C-contiguous ``array`` of any shape as
        this rank's part of a coarray (collective), without copying it: ``local`` *is* ``array``,
        so the program's own writes are what other ranks get, and puts land in it.  The ranks
        must agree on the dtype (sizes may differ).  It takes effect at once (registration is a
        control step, so no sync is needed first).  h-relation: none.
        """
        return registration.push_reg(self, array, name, scratch, layout)

    def pop_reg(self, coarray: Coarray) -> None:
        """BSPlib's ``bsp_pop_reg``: deregister ``coarray`` (collective), with BSPlib's delayed
        effect: this superstep's puts and gets on it still take place at the next sync; after it,
        a put or get on it raises :class:`~.errors.UsageError` and checkpoints skip it; its memory
        is the program's again.  h-relation: none."""
        registration.pop_reg(self, coarray)

    def var(self, value: Any = 0.0, dtype: Any = None, *, name: str | None = None) -> Var:
        """Register a value with one image on every rank, each starting at ``value`` (collective;
        Bulk's ``var``; :mod:`hpcbsp.runtime.api.var`).  The ranks must agree on the dtype (default:
        ``value``'s) and shape.  h-relation: none."""
        return registration.var(self, value, dtype, name)

    def queue(self, dtype: Any, *, name: str | None = None, ragged: bool = False) -> Queue:
        """Register a typed message queue (collective); with ``ragged``, each send is one
        message of any length.  See :mod:`hpcbsp.runtime.api.queue`.  h-relation: none."""
        return registration.queue(self, dtype, name, ragged)

    def mailbox(self, handler: Callable[..., object], dtype: Any, **kw: Any) -> Any:
        """Register an FA-BSP mailbox (collective); see :class:`hpcbsp.fabsp.mailbox.Mailbox`.
        ``handler(records)`` runs on the receiving rank with batches of records of ``dtype``.
        (:mod:`hpcbsp.fabsp`, a layer above the runtime, provides this method through
        :func:`.extension.provide` when imported, as ``import hpcbsp`` does.)"""
        return provided("mailbox")(self, handler, dtype, **kw)

    def time(self) -> float:
        """BSPlib's ``bsp_time``: seconds since this context was created, on this rank's clock
        (local: no communication, not synchronised between ranks)."""
        return _perf() - self._created

    def abort(self, message: str) -> NoReturn:
        """BSPlib's ``bsp_abort``: end the whole program from this one rank (not collective).
        Prints ``[hpcbsp] rank R/P aborted the program: MESSAGE`` once and ends every rank with
        a non-zero status (``MPI_Abort``); the other ranks are not asked, wherever they are."""
        abort_job(lines.aborted(self.pid, self.nprocs, self.superstep, message) + "\n")
        raise AssertionError("unreachable")  # abort_job does not return

    # ------------------------------------------------------------------ collectives
    def gather_all(self, x: Any) -> list[Any]:
        """Every rank's ``x``, in rank order, on every rank (collective; a superstep of its own;
        Bulk's ``gather_all``).  numpy arrays of one shape and dtype on every rank (structured
        ones included) travel as buffers in one ``Allgather``; anything else is pickled.
        h-relation: ``nbytes`` out of every rank to each of the ``p - 1`` others, and their
        ``(p - 1)·nbytes`` into it."""
        return collectives.gather_all(self, x)

    def foldl(self, x: Any, fn: Callable[[Any, Any], Any], initial: Any = collectives.NO_INITIAL) -> Any:
        """Fold every rank's ``x`` with ``fn`` from the left, in rank order; the result on every
        rank (collective; a superstep of its own; Bulk's ``foldl``).  ``fn(acc, value)`` is any
        function of two values (Python or Numba), on any dtype; it need not be associative or
        commutative: the result is ``fn(...fn(fn(initial, x_0), x_1)..., x_{p-1})`` (without
        ``initial``: from ``x_0``), computed on every rank in the same order, so every rank gets
        the same bits.  h-relation: that of :meth:`gather_all`."""
        return collectives.foldl(self, x, fn, initial)

    def allreduce(self, x: Any, op: str = "sum", *, exact: bool = False,
                  out: np.ndarray | None = None) -> Any:
        """Reduce ``x`` element-wise over all ranks; the result on every rank (a superstep of
        its own: pending puts are delivered first).  ``op``: ``sum, prod, min, max, land, lor,
        band, bor``.  ``exact=True`` (``op="sum"``; float64 or narrower, or integers): ``x`` is
        this rank's share of a set of values, and the result is the correctly rounded sum of all
        elements on all ranks, the same bits for any number of ranks and any distribution.
        ``out`` (not with ``exact``): a C-contiguous array of ``x``'s shape and dtype, distinct
        from ``x``, that receives the result and is returned: a loop reducing a large buffer then
        allocates nothing (a C-contiguous ``x`` is sent without a copy).

        h-relation: ``x.nbytes`` out of and into every rank (one message each way; the MPI
        library's tree or ring moves up to ~2x that); for ``exact``, the fixed-size accumulator.
        """
        return collectives.allreduce(self, x, op, exact, out)

    def reduce_scatter(self, x: np.ndarray, op: str = "sum", *, out: np.ndarray | None = None) -> np.ndarray:
        """Reduce ``x`` element-wise over all ranks, keeping only this rank's block of the result
        (collective; a superstep of its own).  ``x``: a 1-D C-contiguous numeric array of one
        length ``n`` on every rank; rank ``r``'s block is ``block_range(n, p, r)``
        (:class:`hpcbsp.runtime.api.partition.Block`).  Returns a view of ``out`` (default: a new
        array like ``x``) whose elements in this rank's block hold the reduction (the others are
        scratch); ``op`` as for :meth:`allreduce`.  With :meth:`allgather_blocks`, an allreduce
        in two supersteps with room for work on one block between them (as the allreduce
        training baseline updates its shard of the weights).  One ``MPI_Reduce_scatter`` (the
        library's algorithm: ``ceil(log2 p)`` rounds for short buffers) combines each element
        once per rank, in the library's order, so floating-point sums may round unlike
        :meth:`allreduce`'s and unlike another rank count's; each block is reduced once, on its
        owner, so after :meth:`allgather_blocks` every rank has the same bits.  Where MPI defines
        no such op on the dtype (sums and bitwise ops of booleans, min/max of complex numbers),
        numpy's ufunc reduces, in a user-defined op.  h-relation: ``x.nbytes`` less this rank's
        block out of every rank, ``p - 1`` times its block into it (one block to or from each
        other rank: ``p - 1`` messages each way; the library combines them on the way)."""
        return collectives.reduce_scatter(self, x, op, out)

    def allgather_blocks(self, buf: np.ndarray) -> np.ndarray:
        """Give every rank every rank's block of ``buf``, in place (collective; a superstep of its
        own).  ``buf``: a writeable 1-D C-contiguous numeric array of one length ``n`` on every
        rank; this rank's block (``block_range(n, p, pid)``, as in :meth:`reduce_scatter`) is its
        contribution, the others are overwritten with the other ranks'.  Returns ``buf``.  One
        in-place ``MPI_Allgatherv`` (the library's algorithm: ``ceil(log2 p)`` rounds for short
        buffers).  h-relation: this rank's block to each of the ``p - 1`` others, every other
        block into it (``p - 1`` messages each way; the library forwards them on the way)."""
        return collectives.allgather_blocks(self, buf)

    def broadcast(self, x: Any, root: int = 0) -> Any:
        """Return ``root``'s ``x`` on every rank (collective; a superstep of its own).  numpy
        arrays travel as buffers (shape and dtype in a small control message); other objects are
        pickled.  h-relation: ``nbytes`` into every rank, ``(p-1)·nbytes`` out of ``root`` (the
        MPI library's tree spreads that over ranks)."""
        return collectives.broadcast(self, x, root)

    def split(self, color: int | None, key: int | None = None) -> "BSP | None":
        """A BSP context on the ranks that pass the same ``color`` (collective; a superstep).
        Ranks passing ``None`` get ``None``.  The sub-context numbers its ranks by ``key`` (default:
        this rank's pid) and has its own supersteps and ledger.  h-relation: none."""
        return collectives.split(self, color, key, lambda sub: BSP(sub, timeout=self.timeout, wait=self.wait))

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, path: str, *, program: str | None = None, per_node: bool = False,
                   **state: Any) -> str:
        """Save all coarrays and the replicated ``state`` at this superstep boundary (collective).
        Atomic and checksummed; see :mod:`hpcbsp.runtime.api.checkpoint`.  ``program`` tags the
        checkpoint (default: the main script or module name) so that another program cannot
        restore it by mistake.  ``per_node=True`` writes one data file per node instead of one per
        rank (a node's ranks send their parts to its lowest rank).  Call it right after a
        ``sync``: pending puts are refused.  h-relation: none (file I/O; a gather of each rank's
        index row to rank 0; with ``per_node``, of a node's parts to its lowest rank)."""
        return ckpt.save(self, path, program, state, per_node)

    def restore(self, path: str, *, program: str | None = None) -> ckpt.Checkpoint:
        """Load a checkpoint into the registered coarrays (by name) and return it (collective):
        a :class:`~hpcbsp.runtime.api.checkpoint.Checkpoint` with ``superstep`` and ``state``; the
        context's superstep counter continues from the saved one.  Coarrays registered with a
        ``layout`` are redistributed from the saved layout to the current one, so it works on
        another number of ranks (one without a layout is refused there, with a
        :class:`~.errors.BadInput` that says so).  A missing, truncated, modified or foreign
        checkpoint raises :class:`~.errors.BadInput` on every rank.  Each rank reads only the
        saved parts that overlap its own."""
        return ckpt.restore(self, path, program)
