"""The BSP context: one object that carries all per-run state (no globals).

>>> with hpcbsp.BSP() as bsp:            # doctest: +SKIP
...     x = bsp.coarray(4)
...     x.put((bsp.pid + 1) % bsp.nprocs, np.arange(4.0))
...     bsp.sync()
"""
from __future__ import annotations

import os
import pickle
import time
import warnings
import weakref
from typing import Any, Callable, Protocol

import numpy as np
from mpi4py import MPI

from . import deathwatch, waiting
from .coarray import Coarray
from .control import ControlStep, Kind, signature
from .errors import BSPError, env_number
from .exchange import Outbox, Traffic, exchange
from .launch import check_world
from .ledger import Ledger
from .queue import Queue
from .report import abort_job, format_failure

_MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX,
            "land": MPI.LAND, "lor": MPI.LOR, "band": MPI.BAND, "bor": MPI.BOR}

_SYNC = int(Kind.SYNC)
_perf = time.perf_counter

#: Live contexts of this process, so that a failure at top level can warn their peers.
_LIVE: "weakref.WeakSet[BSP]" = weakref.WeakSet()


def _mark_peers_told(exc: BaseException) -> None:
    """Record on ``exc`` that every other rank has been told of it (no abort needed)."""
    try:
        exc.hpcbsp_peers_told = True  # type: ignore[attr-defined]
    except AttributeError:  # an exception type that takes no attributes
        pass


def _positive_seconds(x: Any) -> bool:
    """True for a finite number of seconds above zero (not a bool, not a string)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_)) \
        and 0 < x < float("inf")


def _nap() -> None:
    time.sleep(0.001)


class SyncHook(Protocol):
    """A participant in ``sync`` besides puts, gets and queues (FA-BSP mailboxes)."""

    def progress(self) -> None:
        """Move messages without blocking (called while this rank waits in a sync)."""

    def quiesce(self) -> Traffic:
        """Collective: return when no message is in flight anywhere; report this superstep's traffic."""


class BSP:
    """A BSP computer of ``nprocs`` processors on an MPI communicator.

    Parameters
    ----------
    comm
        The communicator to run on; it is duplicated, so hpcbsp's traffic never mixes with the
        caller's.  Default: ``MPI.COMM_WORLD``.
    timeout
        Seconds a collective BSP call may wait for the other ranks before it raises
        :class:`BSPError` on this rank (default: ``$HPCBSP_SYNC_TIMEOUT`` or no limit).  Give every
        rank the same setting.
    wait
        How a rank waits for the others in a collective call: ``"spin"`` (busy-poll, lowest
        latency), ``"yield"`` (poll with growing sleeps, gives the core away) or ``"auto"``
        (yield when a node runs more ranks than it has cores).  Default: ``$HPCBSP_WAIT`` or
        ``"auto"``; see :mod:`hpcbsp.runtime.waiting`.  The mode used is :attr:`wait`.

    Notes
    -----
    Every collective call (``sync``, ``coarray``, ``queue``, ``allreduce``, ``broadcast``,
    ``split``, leaving the ``with`` block) starts with the same small control collective, so ranks
    that make different calls get a :class:`BSPError` naming what each did instead of a hang.
    """

    def __init__(self, comm: MPI.Comm | None = None, *, timeout: float | None = None,
                 wait: str | None = None):
        from .runner import install_excepthook  # (runner imports this module)

        install_excepthook()  # uncaught errors: one report per rank, and no hang (see runner)
        check_world(MPI.COMM_WORLD.Get_size())
        deathwatch.start(MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size())  # names a silent death
        base = MPI.COMM_WORLD if comm is None else comm
        env_timeout = env_number("HPCBSP_SYNC_TIMEOUT", float, 0.0)  # before anything is made
        self.comm: MPI.Comm = base.Dup()
        try:
            #: How this context's ranks wait for one another: "spin" or "yield" (agreed by all).
            self.wait: str = waiting.resolve(wait, self.comm)
        except BSPError:
            self.comm.Free()  # every rank raises here: nothing else uses the copy
            raise
        self.pid: int = self.comm.Get_rank()
        self.nprocs: int = self.comm.Get_size()
        self.superstep: int = 0
        self.timeout = timeout if timeout is not None else env_timeout
        self.ledger = Ledger(self.comm)
        self._ledger_rows = self.ledger._rows  # the sync fast path appends rows directly
        self._sync_label: str | None = None
        self._describe_sync = lambda: f"sync(label={self._sync_label!r})"  # only on divergence
        self._control = ControlStep(self.comm)
        self._control.wait_mode = self.wait
        self._control.nonblocking = self.timeout is not None or self.wait == "yield"
        self._control.track_arrivals = self.timeout is not None
        self._outbox = Outbox(self.nprocs, self.pid)
        self._objects: list[Coarray | Queue] = []
        self._queues: list[Queue] = []
        self._hooks: list[SyncHook] = []
        self._progress: list[Callable[[], None]] = []
        self._close_hooks: list[Callable[[], None]] = []
        self._t0 = time.perf_counter()
        self._t_mark = self._t0
        self._state = "open"  # open -> closed | failed
        #: Set with state "failed" when every rank saw the failure in the same control step (a
        #: divergence, or another rank's failure): the communicator is then quiet on all ranks
        #: and can be freed.  Not after this rank timed out alone.
        self._failed_together = False
        #: True while a sync may take the inlined path: open, no sync hooks, no timeout.
        self._plain = self.timeout is None
        _LIVE.add(self)

    def __repr__(self) -> str:
        return f"BSP(pid={self.pid}, nprocs={self.nprocs}, superstep={self.superstep}, {self._state})"

    # ------------------------------------------------------------------ context management
    def __enter__(self) -> "BSP":
        return self

    def __exit__(self, exc_type: type | None, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
        else:
            self._fail(exc)

    def close(self) -> None:
        """Leave the BSP program (collective).  Raises :class:`BSPError` if other ranks are still
        synchronising instead of leaving too."""
        if self._state != "open":
            self._release_after_failure()
            return
        if self._outbox.nrecords:
            warnings.warn(f"rank {self.pid}: {self._outbox.nrecords} put/get/send request(s) of "
                          f"superstep {self.superstep} were never delivered: call sync() before "
                          "leaving the BSP block", stacklevel=2)
        try:
            self._agree(Kind.EXIT, 0, lambda: "left the BSP block (or returned from the BSP function)")
        finally:
            self._release()

    def _fail(self, exc: BaseException) -> None:
        """This rank failed: tell the other ranks at their next collective call, or abort the job.

        The others see the failure as a :class:`BSPError` (``remote=True``) from the control step
        they are in or enter next.  If they do not get there within ``$HPCBSP_ABORT_GRACE``
        seconds (default 10: they may be stuck in local work or in MPI calls of their own), the
        whole job is aborted so that nothing hangs.
        """
        if self._state != "open":
            _LIVE.discard(self)  # the ranks already agreed on the failure (or timed out)
            self._release_after_failure()
            return
        grace = float(os.environ.get("HPCBSP_ABORT_GRACE", "10"))
        describe = f"failed at superstep {self.superstep} with {type(exc).__name__}: {exc}"

        def abort() -> None:
            abort_job(format_failure(exc, MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size())
                      + f"[hpcbsp] rank {self.pid}: the other ranks did not reach a BSP call within "
                        f"{grace:g} s of this failure; aborting the job\n")

        try:
            self._control.agree_or_abort(Kind.FAIL, self.superstep, lambda: describe, grace, abort,
                                         progress=[_nap, *self._progress])
        except BSPError:
            pass  # the expected outcome when the others are in another call: they know now
        _mark_peers_told(exc)
        self._release()

    def _set_state(self, state: str) -> None:
        self._state = state
        self._plain = False

    def _failed(self, exc: BSPError) -> None:
        """A control step raised ``exc``: no further collective call can be matched."""
        self._set_state("failed")
        # Only a failure that every rank saw in the same completed step (not a timeout, not a
        # mailbox handler's error raised while this rank waited) leaves the communicator quiet.
        self._failed_together = exc.agreed

    def _release_after_failure(self) -> None:
        """Free the MPI resources of a context whose ranks all saw it fail (once).  Without this,
        a program that catches divergences and carries on would run out of communicators (MPICH
        has about 2048 per process)."""
        if self._failed_together:
            self._failed_together = False
            self._release("failed")

    def _release(self, state: str = "closed") -> None:
        self._set_state(state)
        self._failed_together = False  # released once, whatever happens next
        try:
            for fn in reversed(self._close_hooks):
                fn()  # may re-raise a mailbox handler's error: the frees below happen anyway
        finally:
            _LIVE.discard(self)
            self._control.free()
            try:
                self.comm.Free()
            except MPI.Exception:
                pass

    # ------------------------------------------------------------------ registration
    def coarray(self, n: int, dtype: Any = float, *, name: str | None = None,
                scratch: bool = False) -> Coarray:
        """Register an array with ``n`` elements on this rank (collective; n may differ per rank).

        The local part starts zeroed.  Ranks must agree on the dtype.  ``scratch=True`` marks
        temporary storage (halos, buffers) that :meth:`checkpoint` does not save.  Registration is not a
        superstep and moves no data (h-relation: none; one control step and an ``Allgather`` of
        the sizes).
        """
        dt = np.dtype(dtype)
        if int(n) != n or n < 0:
            raise BSPError(f"rank {self.pid}: coarray size must be a non-negative integer, got {n!r}")
        name = name or f"coarray{len(self._objects)}"
        self._agree(Kind.REGISTER, signature(f"coarray {dt.descr}"),
                    lambda: f"coarray(n={n}, dtype={dt}, name={name!r})")
        sizes = np.empty(self.nprocs, dtype=np.int64)
        self.comm.Allgather(np.array([n], dtype=np.int64), sizes)
        arr = Coarray(self, len(self._objects), np.zeros(int(n), dtype=dt), tuple(sizes.tolist()), name,
                      scratch)
        self._objects.append(arr)
        return arr

    def queue(self, dtype: Any, *, name: str | None = None) -> Queue:
        """Register a typed message queue (collective).  h-relation: none."""
        dt = np.dtype(dtype)
        name = name or f"queue{len(self._objects)}"
        self._agree(Kind.REGISTER, signature(f"queue {dt.descr}"),
                    lambda: f"queue(dtype={dt}, name={name!r})")
        q = Queue(self, len(self._objects), dt, name)
        self._objects.append(q)
        self._queues.append(q)
        return q

    def mailbox(self, handler: Callable[[np.ndarray], object], dtype: Any, **kw: Any) -> Any:
        """Register an FA-BSP mailbox (collective); see :class:`hpcbsp.fabsp.mailbox.Mailbox`.

        ``handler(records)`` runs on the receiving rank with batches of records of ``dtype``.
        """
        # FA-BSP is a layer above the runtime; it is imported here, on use, so that the runtime
        # does not depend on it at import time.
        from ..fabsp.mailbox import Mailbox

        return Mailbox(self, handler, dtype, **kw)

    def _add_sync_hook(self, hook: SyncHook) -> None:
        """Register a sync participant (used by FA-BSP mailboxes; call collectively)."""
        self._hooks.append(hook)
        self._progress.append(hook.progress)
        self._control.nonblocking = True  # waiting in a sync must keep mailboxes moving
        self._plain = False

    def _add_close_hook(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` when this context closes or fails (free communicators, buffers)."""
        self._close_hooks.append(fn)

    # ------------------------------------------------------------------ supersteps
    def sync(self, label: str | None = None, *, timeout: float | None = None) -> None:
        """End the superstep: deliver all puts, gets and queue records, then start the next one.

        A sync with nothing to move anywhere costs one small ``Allreduce`` (the control step).
        ``timeout`` (seconds; default: the context's ``timeout``) bounds this sync's wait for the
        other ranks: on expiry it raises :class:`~hpcbsp.runtime.errors.SyncTimeout` naming the
        ranks that never arrived, after which the job cannot go on (uncaught, it ends the job).
        Every rank must give the same ``timeout`` to the same sync; it costs ``p - 1`` small
        messages per rank to know who arrived.  h-relation: that of the superstep's puts, gets
        and queue records.
        """
        self._sync_label = label  # for _describe_sync, called only if the ranks diverge
        if timeout is not None or not self._plain:
            if timeout is not None and not _positive_seconds(timeout):
                raise BSPError(f"rank {self.pid}: sync(label={label!r}, timeout={timeout!r}): the timeout "
                               "must be a positive number of seconds")
            t0, traffic = self._begin(_SYNC, 0, self._describe_sync, timeout=timeout)
            self._end(label, t0, traffic)
            return
        # The plain path, inlined: an empty sync is one control step (a persistent Allreduce)
        # plus about a microsecond of Python.
        t0 = _perf()
        outbox = self._outbox
        try:
            any_data, any_gets = self._control.agree(_SYNC, self.superstep, 0, self._describe_sync,
                                                     outbox.nrecords, outbox.gets_count)
        except BSPError as exc:
            self._failed(exc)
            raise
        for q in self._queues:
            q._clear()
        mark = self._t_mark
        if any_data:
            traffic = exchange(self.comm, outbox, self._objects, any_gets)
            outbox.reset()
            t1 = _perf()
            self._ledger_rows.append((self.superstep, label, t0 - mark, t1 - t0, traffic.bytes_out,
                                      traffic.bytes_in, traffic.msgs_out, traffic.msgs_in, mark - self._t0))
        else:
            t1 = _perf()
            self._ledger_rows.append((self.superstep, label, t0 - mark, t1 - t0, 0, 0, 0, 0, mark - self._t0))
        self.superstep += 1
        self._t_mark = t1

    def progress(self) -> None:
        """Let FA-BSP mailboxes send full buffers, receive and run handlers during long compute."""
        for hook in self._hooks:
            hook.progress()

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
        if op not in _MPI_OPS:
            raise BSPError(f"rank {self.pid}: allreduce op {op!r} is not one of {', '.join(_MPI_OPS)}")
        arr = np.asarray(x)
        if arr.dtype == object:
            raise BSPError(f"rank {self.pid}: allreduce needs numeric data, got {type(x).__name__}")
        if exact:
            if op != "sum" or arr.dtype.kind not in "fiub":
                raise BSPError(f"rank {self.pid}: exact=True needs op='sum' on real numbers")
            if arr.dtype.kind == "f" and arr.itemsize > 8:
                raise BSPError(f"rank {self.pid}: exact=True sums float64 values (or narrower, or "
                               f"integers); {arr.dtype} would be rounded first: convert it yourself "
                               "if that is what you want")
            if out is not None:
                raise BSPError(f"rank {self.pid}: allreduce(exact=True) returns a float, not into out=")
            return self._exact_sum(arr)
        if out is not None and (not isinstance(out, np.ndarray) or out.shape != arr.shape
                                or out.dtype != arr.dtype or not out.flags.c_contiguous
                                or not out.flags.writeable or np.shares_memory(out, arr)):
            raise BSPError(f"rank {self.pid}: allreduce out= must be a writeable C-contiguous array "
                           f"of shape {arr.shape} and dtype {arr.dtype}, not overlapping x")
        desc = f"allreduce(op={op!r}, dtype={arr.dtype}, shape={arr.shape})"
        t0, traffic = self._begin(Kind.ALLREDUCE, signature(desc), lambda: desc, counted=True)
        # MPI only reads the send buffer: a C-contiguous array goes as it is (no copy); anything
        # else is copied (np.array keeps 0-d arrays 0-d, unlike ascontiguousarray).
        send = arr if arr.ndim and arr.flags.c_contiguous else np.array(arr, order="C")
        if out is None:
            out = np.empty_like(send)
        self.comm.Allreduce(send, out, op=_MPI_OPS[op])
        self._count_collective(traffic, send.nbytes)
        self._end(f"allreduce:{op}", t0, traffic)
        return out[()] if arr.ndim == 0 else out

    def _exact_sum(self, arr: np.ndarray) -> float:
        from .. import kernels

        desc = "allreduce(op='sum', exact=True)"
        t0, traffic = self._begin(Kind.ALLREDUCE, signature(desc), lambda: desc, counted=True)
        state = kernels.exact_sum_state(arr)  # any shape and stride; 64-bit integers exactly
        total = np.empty_like(state)
        self.comm.Allreduce(state, total, op=MPI.SUM)
        self._count_collective(traffic, state.nbytes)
        self._end("allreduce:exact-sum", t0, traffic)
        return float(kernels.exact_sum_round(total))

    def broadcast(self, x: Any, root: int = 0) -> Any:
        """Return ``root``'s ``x`` on every rank (collective; a superstep of its own).

        numpy arrays travel as buffers (their shape and dtype in a small control message); other
        objects are pickled.  h-relation: ``nbytes`` into every rank, ``(p-1)·nbytes`` out of
        ``root`` (the MPI library's tree spreads that over ranks).
        """
        self._check_pid(root, "broadcast")
        desc = f"broadcast(root={root})"
        t0, traffic = self._begin(Kind.BROADCAST, signature(desc), lambda: desc, counted=True)
        is_root = self.pid == root
        meta = (x.shape, x.dtype.str) if is_root and isinstance(x, np.ndarray) and x.dtype.kind != "O" else None
        meta = self.comm.bcast(meta if is_root else None, root=root)
        if meta is not None:
            buf = np.ascontiguousarray(x) if is_root else np.empty(meta[0], dtype=np.dtype(meta[1]))
            self.comm.Bcast(buf, root=root)
            result, nbytes = buf, buf.nbytes
        else:
            result = self.comm.bcast(x if is_root else None, root=root)
            nbytes = len(pickle.dumps(result)) if is_root else 0
        if is_root:
            traffic.bytes_out += nbytes * (self.nprocs - 1)
            traffic.msgs_out += self.nprocs - 1
        else:
            traffic.bytes_in += nbytes if meta is None else result.nbytes
            traffic.msgs_in += 1
        self._end(f"broadcast:{root}", t0, traffic)
        return result

    def split(self, color: int | None, key: int | None = None) -> "BSP | None":
        """A BSP context on the ranks that pass the same ``color`` (collective; a superstep).

        Ranks passing ``None`` get ``None``.  The sub-context numbers its ranks by ``key`` (default:
        this rank's pid) and has its own supersteps and ledger.  h-relation: none.
        """
        t0, traffic = self._begin(Kind.SPLIT, 0, lambda: f"split(color={color})")
        sub = self.comm.Split(MPI.UNDEFINED if color is None else int(color),
                              self.pid if key is None else int(key))
        self._end("split", t0, traffic)
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
            raise BSPError(f"rank {self.pid}: checkpoint between supersteps only: "
                           f"{self._outbox.nrecords} request(s) are pending; call sync() first")
        self._agree(Kind.CHECKPOINT, signature(f"checkpoint {sorted(state)}"),
                    lambda: f"checkpoint(state={sorted(state)})")
        return ckpt.save(self, path, program, state)

    def restore(self, path: str, *, program: str | None = None) -> "Any":
        """Load a checkpoint into the registered coarrays (by name) and return it (collective).

        Works on a different number of ranks: each coarray is read as one global array (the parts
        in rank order) and redistributed by this run's part sizes.  Returns a
        :class:`~hpcbsp.runtime.checkpoint.Checkpoint` with ``superstep`` and ``state``; the
        context's superstep counter continues from the saved one.  A missing, truncated,
        modified or foreign checkpoint raises :class:`BSPError` on every rank.
        """
        from . import checkpoint as ckpt

        self._agree(Kind.CHECKPOINT, signature("restore"), lambda: f"restore({path!r})")
        result = ckpt.restore(self, path, program)
        self.superstep = result.superstep
        return result

    # ------------------------------------------------------------------ internals
    def _check_pid(self, pid: Any, what: str) -> int:
        if isinstance(pid, (bool, np.bool_)) or not isinstance(pid, (int, np.integer)) \
                or not 0 <= pid < self.nprocs:
            raise BSPError(f"rank {self.pid}: {what}: pid {pid!r} is not a rank of this BSP program "
                           f"(0..{self.nprocs - 1})")
        return int(pid)

    def _agree(self, kind: Kind, sig: int, describe: Callable[[], str],
               has_data: bool = False, has_gets: bool = False,
               with_progress: bool = True, timeout: float | None = None) -> tuple[bool, bool]:
        """The control step; ``timeout`` (this call's own, else the context's) bounds the wait."""
        if self._state != "open":
            raise BSPError(f"rank {self.pid}: this BSP context is {self._state}; no collective "
                           "call can be made on it any more")
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit if limit is not None else None
        try:
            return self._control.agree(kind, self.superstep, sig, describe, has_data, has_gets,
                                       self._progress if with_progress else (), deadline,
                                       timed=timeout is not None)
        except BSPError as exc:
            # The ranks disagreed and all of them know it (or this rank timed out): no further
            # collective call could be matched, so _fail must not start one.
            self._failed(exc)
            raise

    def _begin(self, kind: Kind, sig: int, describe: Callable[[], str],
               counted: bool = False, timeout: float | None = None) -> tuple[float, Traffic | None]:
        """Start a superstep-ending call: control step, mailbox quiescence, bulk exchange.

        Returns the start time and the traffic so far (None when nothing moved, unless
        ``counted``: then always a Traffic for the caller to add its collective's bytes to).
        """
        t0 = time.perf_counter()
        outbox = self._outbox
        any_data, any_gets = self._agree(kind, sig, describe, outbox.nrecords > 0, bool(outbox.gets_count),
                                         timeout=timeout)
        traffic = None
        if self._hooks:
            traffic = Traffic()
            for hook in self._hooks:
                traffic.add(hook.quiesce())
            # Handlers that ran during quiescence may have put or sent: agree again, so that
            # their data moves in this sync, not the next.  No mailbox progress while waiting
            # here: the mailboxes are in the next superstep already, and a faster rank's records
            # of that superstep must not be handled before this rank gets there.
            any_data, any_gets = self._agree(kind, sig, describe, outbox.nrecords > 0,
                                             bool(outbox.gets_count), with_progress=False,
                                             timeout=timeout)
        for q in self._queues:
            q._clear()
        if any_data:
            moved = exchange(self.comm, outbox, self._objects, any_gets)
            outbox.reset()
            if traffic is None:
                traffic = moved
            else:
                traffic.add(moved)
        if counted and traffic is None:
            traffic = Traffic()
        return t0, traffic

    def _end(self, label: str | None, t0: float, traffic: Traffic | None) -> None:
        t1 = time.perf_counter()
        mark = self._t_mark
        if traffic is None:
            self.ledger.append_row(self.superstep, label, t0 - mark, t1 - t0, 0, 0, 0, 0, mark - self._t0)
        else:
            self.ledger.append_row(self.superstep, label, t0 - mark, t1 - t0, traffic.bytes_out,
                                   traffic.bytes_in, traffic.msgs_out, traffic.msgs_in, mark - self._t0)
        self.superstep += 1
        self._t_mark = t1

    def _count_collective(self, traffic: Traffic, nbytes: int) -> None:
        if self.nprocs > 1:
            traffic.bytes_out += nbytes
            traffic.bytes_in += nbytes
            traffic.msgs_out += 1
            traffic.msgs_in += 1
