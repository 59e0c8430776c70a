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
import warnings
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from . import collectives, deathwatch, waiting
from .coarray import Coarray
from .control import Kind, signature
from .errors import BSPError, UsageError, env_number
from .extension import Extension, provided
from .launch import check_world
from .partition import Grid, Partitioning
from .queue import Queue
from .superstep import Supersteps


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
        comm_ = base.Dup()
        try:
            mode = waiting.resolve(wait, comm_)
        except BSPError:
            comm_.Free()  # every rank raises here: nothing else uses the copy
            raise
        super().__init__(comm_, timeout if timeout is not None else env_timeout, mode)
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
        finally:
            life.release()

    def _fail(self, exc: BaseException) -> None:
        """This rank failed: tell the other ranks, or abort the job (see :meth:`Lifecycle.fail`)."""
        self._life.fail(exc)

    # ------------------------------------------------------------------ registration
    def coarray(self, n: int | None = None, dtype: Any = float, *, name: str | None = None,
                scratch: bool = False, layout: Partitioning | Grid | None = None) -> Coarray:
        """Register an array with ``n`` elements on this rank (collective; n may differ per rank).

        The local part starts zeroed.  Ranks must agree on the dtype.  ``scratch=True`` marks
        temporary storage (halos, buffers) that :meth:`checkpoint` does not save.  ``layout``
        (a :mod:`partitioning <.partition>` over this context's ``nprocs`` ranks, the same on
        every rank) says which global elements the parts hold; ``n`` then defaults to this
        rank's share, and a checkpoint restored onto another number of ranks is redistributed by
        it (a coarray without a layout restores only onto the rank count it was saved on).
        Registration is not a superstep and moves no data (h-relation: none; one control step
        and an ``Allgather`` of the sizes).
        """
        dt = np.dtype(dtype)
        where = f"rank {self.pid}: coarray(name={name!r})"
        described = ""
        if layout is not None:
            if not isinstance(layout, (Partitioning, Grid)):
                raise UsageError(f"{where}: layout must be a partitioning (hpcbsp.runtime.partition: "
                                 f"Block, Cyclic, BlockCyclic, Explicit, Grid), got {type(layout).__name__}")
            if layout.p != self.nprocs:
                raise UsageError(f"{where}: layout {layout!r} is over {layout.p} ranks, this context has "
                                 f"{self.nprocs}")
            share = layout.local_size(self.pid)
            if n is None:
                n = share
            elif n != share:
                raise UsageError(f"{where}: n={n!r}, but layout {layout!r} gives rank {self.pid} "
                                 f"{share} elements (leave n out)")
            described = json.dumps(layout.describe(), sort_keys=True)
        if n is None or isinstance(n, (bool, np.bool_)) or int(n) != n or n < 0:
            raise UsageError(f"rank {self.pid}: coarray size must be a non-negative integer, got {n!r}")
        name = name or f"coarray{len(self._objects)}"
        self._agree(Kind.REGISTER, signature(f"coarray {dt.descr} {described}"),
                    lambda: f"coarray(n={n}, dtype={dt}, name={name!r}"
                            + (f", layout={layout!r})" if layout is not None else ")"))
        sizes = np.empty(self.nprocs, dtype=np.int64)
        self.comm.Allgather(np.array([n], dtype=np.int64), sizes)
        arr = Coarray(self, self._outbox, len(self._objects), np.zeros(int(n), dtype=dt), tuple(sizes.tolist()), name,
                      scratch, layout)
        self._objects.append(arr)
        return arr

    def queue(self, dtype: Any, *, name: str | None = None) -> Queue:
        """Register a typed message queue (collective).  h-relation: none."""
        dt = np.dtype(dtype)
        name = name or f"queue{len(self._objects)}"
        self._agree(Kind.REGISTER, signature(f"queue {dt.descr}"),
                    lambda: f"queue(dtype={dt}, name={name!r})")
        q = Queue(self, self._outbox, len(self._objects), dt, name)
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
