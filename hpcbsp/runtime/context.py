"""The BSP context: one object that carries all per-run state (no globals).

>>> with hpcbsp.BSP() as bsp:            # doctest: +SKIP
...     x = bsp.coarray(4)
...     x.put((bsp.pid + 1) % bsp.nprocs, np.arange(4.0))
...     bsp.sync()

:class:`BSP` is a facade over the runtime's parts, each in its own module: the superstep path
(:mod:`.superstep`, its base class: control step, exchange, sync hooks, the ledger row), the
lifecycle and failure state (:mod:`.lifecycle`), the collectives (:mod:`.collectives`),
checkpoints (:mod:`.checkpoint`) and the interface for extensions such as FA-BSP mailboxes
(:mod:`.extension`, as ``bsp.extension``).
"""
from __future__ import annotations

import json
import time
import warnings
from typing import Any, Callable, NoReturn

import numpy as np
from mpi4py import MPI

from . import arena, collectives, deathwatch, waiting
from .coarray import Coarray
from .control import Kind, signature
from .errors import BSPError, UsageError, env_number
from .extension import Extension, provided
from .launch import check_world
from .partition import Grid, Partitioning
from .queue import Queue
from .superstep import Supersteps
from .var import Var

_perf = time.perf_counter
_NO_INITIAL: Any = object()  # foldl without an initial value


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
        ``"auto"``; see :mod:`hpcbsp.runtime.waiting`.  The mode used is :attr:`wait`.

    Notes
    -----
    Every collective call (``sync``, ``coarray``, ``queue``, ``allreduce``, ``broadcast``,
    ``split``, leaving the ``with`` block) starts with the same small control collective, so ranks
    that make different calls get a :class:`~.errors.Divergence` naming what each did instead of
    a hang.
    """

    def __init__(self, comm: MPI.Comm | None = None, *, timeout: float | None = None,
                 wait: str | None = None):
        from .runner import install_excepthook  # (runner imports this module)

        install_excepthook()  # uncaught errors: one report per rank, and no hang (see runner)
        check_world(MPI.COMM_WORLD.Get_size())
        deathwatch.start(MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size())  # names a silent death
        base = MPI.COMM_WORLD if comm is None else comm
        env_timeout = env_number("HPCBSP_SYNC_TIMEOUT", float, 0.0)  # before anything is made
        shared_elements = arena.wanted()
        comm_ = base.Dup()
        try:
            mode = waiting.resolve(wait, comm_)
        except BSPError:
            comm_.Free()  # every rank raises here: nothing else uses the copy
            raise
        super().__init__(comm_, timeout if timeout is not None else env_timeout, mode, shared_elements)
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
        life = self._life
        if not life.is_open:
            life.release_after_failure()
            return
        if self._outbox.nrecords:
            warnings.warn(f"rank {self.pid}: {self._outbox.nrecords} put/get/send request(s) of "
                          f"superstep {self.superstep} were never delivered: call sync() before "
                          "leaving the BSP block", stacklevel=2)
        try:
            self._agree(Kind.EXIT, 0, lambda: "left the BSP block (or returned from the BSP function)")
            self._release_arena()  # every rank is here: its collective free is matched
        finally:
            life.release()

    def _fail(self, exc: BaseException) -> None:
        """This rank failed: tell the other ranks, or abort the job (see :meth:`Lifecycle.fail`)."""
        self._life.fail(exc)

    # ------------------------------------------------------------------ registration
    def coarray(self, n: int | None = None, dtype: Any = float, *, name: str | None = None,
                scratch: bool = False, layout: Partitioning | Grid | None = None,
                shape: tuple[int, ...] | None = None) -> Coarray:
        """Register an array with ``n`` elements on this rank (collective; n may differ per rank).

        The local part starts zeroed.  Ranks must agree on the dtype.  ``shape`` makes the part
        n-dimensional (instead of ``n``; shapes may differ per rank, the number of dimensions
        may not), addressed by slices with ``c.on(pid)[...]`` (see :mod:`.coarray`).
        ``scratch=True`` marks temporary storage (halos, buffers) that :meth:`checkpoint` does
        not save.  ``layout`` (a :mod:`partitioning <.partition>` over this context's ``nprocs``
        ranks, the same on every rank) says which global elements the parts hold; ``n`` (or for
        a :class:`~.partition.Grid`, ``shape``) then defaults to this rank's share, and a
        checkpoint restored onto another number of ranks is redistributed by it (a coarray
        without a layout restores only onto the rank count it was saved on).  Registration is
        not a superstep and moves no data (h-relation: none; one control step and an
        ``Allgather`` of the sizes).
        """
        dt = np.dtype(dtype)
        where = f"rank {self.pid}: coarray(name={name!r})"
        if shape is not None:
            if n is not None:
                raise UsageError(f"{where}: give n or shape, not both")
            if not isinstance(shape, (tuple, list)) or not all(
                    isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) and d >= 0
                    for d in shape):
                raise UsageError(f"{where}: shape must be a tuple of non-negative integers, got {shape!r}")
            shape = tuple(int(d) for d in shape)
            n = int(np.prod(shape, dtype=np.int64))
        if layout is not None:
            self._check_layout(layout, where)
            share = layout.local_size(self.pid)
            if n is None:
                n = share
                if isinstance(layout, Grid):
                    shape = layout.local_shape(self.pid)
            elif n != share:
                raise UsageError(f"{where}: n={n!r}, but layout {layout!r} gives rank {self.pid} "
                                 f"{share} elements (leave n out)")
        if n is None or isinstance(n, (bool, np.bool_)) or int(n) != n or n < 0:
            raise UsageError(f"rank {self.pid}: coarray size must be a non-negative integer, got {n!r}")
        local = np.zeros(shape if shape is not None else int(n), dtype=dt)
        return self._register_coarray(local, name, scratch, layout, "coarray")

    def _register_coarray(self, local: np.ndarray, name: str | None, scratch: bool,
                          layout: Partitioning | Grid | None, call: str, agreed: bool = False) -> Coarray:
        """The collective part of registering ``local`` as this rank's part: agreement on the
        dtype, the number of dimensions and the layout (unless the caller ``agreed`` already),
        an ``Allgather`` of the sizes (and of the shapes, for parts of more than 1 dimension)."""
        n, dt = local.size, local.dtype
        name = name or f"coarray{len(self._objects)}"
        if layout is not None:
            self._check_layout(layout, f"rank {self.pid}: {call}(name={name!r})")
        if layout is not None and layout.local_size(self.pid) != n:
            raise UsageError(f"rank {self.pid}: {call}(name={name!r}): layout {layout!r} gives rank "
                             f"{self.pid} {layout.local_size(self.pid)} elements, the array has {n}")
        described = json.dumps(layout.describe(), sort_keys=True) if layout is not None else ""
        if not agreed:
            self._agree(Kind.REGISTER, signature(f"coarray {dt.descr} {local.ndim} {described}"),
                        lambda: f"{call}({f'n={n}' if local.ndim == 1 else f'shape={local.shape}'}, "
                                f"dtype={dt}, name={name!r}"
                                + (f", layout={layout!r})" if layout is not None else ")"))
        sizes = np.empty(self.nprocs, dtype=np.int64)
        self.comm.Allgather(np.array([n], dtype=np.int64), sizes)
        shapes = tuple(self.comm.allgather(local.shape)) if local.ndim != 1 else None
        arr = Coarray(self, self._outbox, len(self._objects), local, tuple(sizes.tolist()), name,
                      scratch, layout, shapes)
        self._objects.append(arr)
        return arr

    def _check_layout(self, layout: Any, where: str) -> None:
        if not isinstance(layout, (Partitioning, Grid)):
            raise UsageError(f"{where}: layout must be a partitioning (hpcbsp.runtime.partition: "
                             f"Block, Cyclic, BlockCyclic, Explicit, Grid), got {type(layout).__name__}")
        if layout.p != self.nprocs:
            raise UsageError(f"{where}: layout {layout!r} is over {layout.p} ranks, this context has "
                             f"{self.nprocs}")

    def push_reg(self, array: np.ndarray, *, name: str | None = None, scratch: bool = False,
                 layout: Partitioning | Grid | None = None) -> Coarray:
        """BSPlib's ``bsp_push_reg``: register an existing array as this rank's part of a coarray
        (collective), without copying it: ``local`` *is* ``array`` (of any number of dimensions,
        addressed by flat offset or by ``c.on(pid)[...]``), so the program's own writes to
        ``array`` are what other ranks get, and puts land in it.

        ``array`` must be a writeable C-contiguous numpy array; the ranks must agree on its dtype
        (sizes may differ).  The registration takes effect at once (hpcbsp registers
        collectively, in a control step, so no sync is needed first).  h-relation: none.
        """
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or not array.flags.writeable:
            raise UsageError(f"rank {self.pid}: push_reg(name={name!r}): array must be a writeable "
                             "C-contiguous numpy array")
        return self._register_coarray(array, name, scratch, layout, "push_reg")

    def pop_reg(self, coarray: Coarray) -> None:
        """BSPlib's ``bsp_pop_reg``: deregister ``coarray`` (collective), with BSPlib's delayed
        effect: puts and gets issued in this superstep still take place at the next sync; after
        it, any put or get on it raises a :class:`~.errors.UsageError`, and checkpoints no
        longer save it.  Its memory is the program's again.  h-relation: none.
        """
        if not isinstance(coarray, Coarray) or coarray not in self._objects:
            raise UsageError(f"rank {self.pid}: pop_reg({coarray!r}): not a coarray of this context")
        if coarray.popped_at is not None:
            raise UsageError(f"rank {self.pid}: pop_reg({coarray.name!r}): deregistered already "
                             f"(in superstep {coarray.popped_at})")
        self._agree(Kind.REGISTER, signature(f"pop_reg {self._objects.index(coarray)}"),
                    lambda: f"pop_reg({coarray.name!r})")
        coarray.popped_at = self.superstep

    def var(self, value: Any = 0.0, dtype: Any = None, *, name: str | None = None) -> Var:
        """Register a value with one image on every rank (collective; Bulk's ``var``), each
        image starting at ``value``; see :mod:`hpcbsp.runtime.var`.  The ranks must agree on the
        dtype (default: ``value``'s) and shape.  h-relation: none.
        """
        arr = np.asarray(value, dtype=dtype)
        if arr.dtype.kind == "O":
            raise UsageError(f"rank {self.pid}: var(name={name!r}): the value must be numeric (or a "
                             f"structured record), not {type(value).__name__}")
        name = name or f"var{len(self._objects)}"
        self._agree(Kind.REGISTER, signature(f"var {arr.dtype.descr} {arr.shape}"),
                    lambda: f"var(dtype={arr.dtype}, shape={arr.shape}, name={name!r})")
        c = self._register_coarray(arr.reshape(-1).copy(), name, True, None, "var", agreed=True)
        return Var(c, arr.shape)

    def time(self) -> float:
        """BSPlib's ``bsp_time``: seconds since this context was created, on this rank's clock
        (local: no communication, not synchronised between ranks)."""
        return _perf() - self._created

    def abort(self, message: str) -> NoReturn:
        """BSPlib's ``bsp_abort``: end the whole program from this one rank (not collective).

        Prints ``[hpcbsp] rank R/P aborted the program: MESSAGE`` once and ends every rank with
        a non-zero status (``MPI_Abort``); the other ranks are not asked, wherever they are.
        """
        from .report import abort_job

        abort_job(f"[hpcbsp] rank {self.pid}/{self.nprocs} aborted the program at superstep "
                  f"{self.superstep}: {message}\n")
        raise AssertionError("unreachable")  # abort_job does not return

    def queue(self, dtype: Any, *, name: str | None = None, ragged: bool = False) -> Queue:
        """Register a typed message queue (collective); with ``ragged``, each send is one
        message of any length.  See :mod:`hpcbsp.runtime.queue`.  h-relation: none."""
        dt = np.dtype(dtype)
        name = name or f"queue{len(self._objects)}"
        self._agree(Kind.REGISTER, signature(f"queue {dt.descr} {bool(ragged)}"),
                    lambda: f"queue(dtype={dt}, name={name!r}, ragged={bool(ragged)})")
        q = Queue(self, self._outbox, len(self._objects), dt, name, bool(ragged))
        self._objects.append(q)
        self._queues.append(q)
        return q

    def mailbox(self, handler: Callable[..., object], dtype: Any, **kw: Any) -> Any:
        """Register an FA-BSP mailbox (collective); see :class:`hpcbsp.fabsp.mailbox.Mailbox`.

        ``handler(records)`` runs on the receiving rank with batches of records of ``dtype``.
        (FA-BSP is a layer above the runtime: :mod:`hpcbsp.fabsp` provides this method through
        :func:`.extension.provide` when it is imported, as ``import hpcbsp`` does.)
        """
        return provided("mailbox")(self, handler, dtype, **kw)

    # ------------------------------------------------------------------ collectives
    def gather_all(self, x: Any) -> list[Any]:
        """Every rank's ``x``, as a list in rank order, on every rank (collective; a superstep
        of its own; Bulk's ``gather_all``).

        numpy arrays of one shape and dtype on every rank (structured dtypes included) travel
        as buffers, in one ``Allgather``; anything else is pickled.  h-relation: ``nbytes`` out
        of every rank to each of the ``p - 1`` others, and their ``(p - 1)·nbytes`` into it.
        """
        return collectives.gather_all(self, x)

    def foldl(self, x: Any, fn: Callable[[Any, Any], Any], initial: Any = _NO_INITIAL) -> Any:
        """Fold every rank's ``x`` with ``fn`` from the left, in rank order, and return the
        result on every rank (collective; a superstep of its own; Bulk's ``foldl``).

        ``fn(acc, value)`` is any function of two values (Python, or a Numba-compiled one), on
        any dtype, structured ones included; it need not be associative or commutative: the
        result is ``fn(...fn(fn(initial, x_0), x_1)..., x_{p-1})`` (without ``initial``:
        starting from ``x_0``), computed on every rank in the same order, so every rank gets the
        same bits.  h-relation: that of :meth:`gather_all`.
        """
        return collectives.foldl(self, x, fn, initial, initial is not _NO_INITIAL)

    def allreduce(self, x: Any, op: str = "sum", *, exact: bool = False,
                  out: np.ndarray | None = None) -> Any:
        """Reduce ``x`` element-wise over all ranks and return the result on every rank.

        A superstep of its own (pending puts are delivered first).  ``op`` is one of
        ``sum, prod, min, max, land, lor, band, bor``.  With ``exact=True`` (float64 or narrower,
        or integers; ``op="sum"``) ``x`` is this rank's share of a set of values and the result is the
        correctly rounded sum of *all elements on all ranks*: the same bits for any number of
        ranks and any distribution of the data.

        ``out`` (not with ``exact``): a C-contiguous array of ``x``'s shape and dtype, distinct
        from ``x``, that receives the result and is returned: a loop reducing a large buffer
        then allocates nothing (a C-contiguous ``x`` is sent as it is, without a copy).

        h-relation: ``x.nbytes`` out of and into every rank (counted as one message each way;
        the MPI library's tree or ring moves up to ~2x that); for ``exact`` the fixed-size
        accumulator instead.
        """
        return collectives.allreduce(self, x, op, exact, out)

    def reduce_scatter(self, x: np.ndarray, op: str = "sum", *, out: np.ndarray | None = None) -> np.ndarray:
        """Reduce ``x`` element-wise over all ranks, keeping only this rank's block of the result
        (collective; a superstep of its own).

        ``x`` is a 1-D C-contiguous numeric array of the same length ``n`` on every rank; rank
        ``r``'s block is ``block_range(n, p, r)`` (:class:`hpcbsp.runtime.partition.Block`).
        Returns a view of ``out`` (default: a new array like ``x``) whose elements in this rank's
        block hold the reduction; ``out``'s other elements are used as scratch.  ``op`` as for
        :meth:`allreduce`.  With :meth:`allgather_blocks` this is an allreduce in two supersteps
        that leaves room for work on one block between them (for example updating a shard of the
        weights, as the allreduce training baseline does).

        The reduction runs around a ring of point-to-point messages: each element is combined once
        per rank, in ring order (for floating-point sums the rounding may differ from
        :meth:`allreduce`'s; every rank's block is computed once, so after
        :meth:`allgather_blocks` every rank has the same bits).

        h-relation: about ``(p-1)/p · x.nbytes`` out of and into every rank, in ``p - 1``
        messages each way.
        """
        return collectives.reduce_scatter(self, x, op, out)

    def allgather_blocks(self, buf: np.ndarray) -> np.ndarray:
        """Give every rank every rank's block of ``buf``, in place (collective; a superstep of its
        own).

        ``buf`` is a writeable 1-D C-contiguous numeric array of the same length ``n`` on every
        rank; this rank's block (``block_range(n, p, pid)``, as in :meth:`reduce_scatter`) is its
        contribution, and the other blocks are overwritten with the other ranks'.  Returns ``buf``.

        h-relation: about ``(p-1)/p · buf.nbytes`` out of and into every rank, in ``p - 1``
        messages each way (a ring).
        """
        return collectives.allgather_blocks(self, buf)

    def broadcast(self, x: Any, root: int = 0) -> Any:
        """Return ``root``'s ``x`` on every rank (collective; a superstep of its own).

        numpy arrays travel as buffers (their shape and dtype in a small control message); other
        objects are pickled.  h-relation: ``nbytes`` into every rank, ``(p-1)·nbytes`` out of
        ``root`` (the MPI library's tree spreads that over ranks).
        """
        self.extension.check_pid(root, "broadcast")
        return collectives.broadcast(self, x, root)

    def split(self, color: int | None, key: int | None = None) -> "BSP | None":
        """A BSP context on the ranks that pass the same ``color`` (collective; a superstep).

        Ranks passing ``None`` get ``None``.  The sub-context numbers its ranks by ``key`` (default:
        this rank's pid) and has its own supersteps and ledger.  h-relation: none.
        """
        sub = collectives.split(self, color, key)
        if sub == MPI.COMM_NULL:
            return None
        try:
            return BSP(sub, timeout=self.timeout, wait=self.wait)
        finally:
            sub.Free()

    # ------------------------------------------------------------------ checkpoints
    def checkpoint(self, path: str, *, program: str | None = None, **state: Any) -> str:
        """Save all coarrays and the replicated ``state`` at this superstep boundary (collective).

        Atomic and checksummed; see :mod:`hpcbsp.runtime.checkpoint`.  ``program`` tags the
        checkpoint (default: the main script or module name) so that another program cannot
        restore it by mistake.  Call it right after a ``sync``: pending puts are refused.
        h-relation: none (file I/O; a gather of checksums to rank 0).
        """
        from . import checkpoint as ckpt

        if self._outbox.nrecords:
            raise UsageError(f"rank {self.pid}: checkpoint between supersteps only: "
                             f"{self._outbox.nrecords} request(s) are pending; call sync() first")
        self._agree(Kind.CHECKPOINT, signature(f"checkpoint {sorted(state)}"),
                    lambda: f"checkpoint(state={sorted(state)})")
        return ckpt.save(self, path, program, state)

    def restore(self, path: str, *, program: str | None = None) -> "Any":
        """Load a checkpoint into the registered coarrays (by name) and return it (collective).

        Works on a different number of ranks for coarrays registered with a ``layout``: each is
        redistributed from its saved layout to its current one (one without a layout is refused
        there, with a :class:`~.errors.BadInput` that says so).  Returns a
        :class:`~hpcbsp.runtime.checkpoint.Checkpoint` with ``superstep`` and ``state``; the
        context's superstep counter continues from the saved one.  A missing, truncated,
        modified or foreign checkpoint raises :class:`~.errors.BadInput` on every rank.
        """
        from . import checkpoint as ckpt

        self._agree(Kind.CHECKPOINT, signature("restore"), lambda: f"restore({path!r})")
        result = ckpt.restore(self, path, program)
        self.superstep = result.superstep
        return result
