"""The life of a BSP context: how it opens, then closed or failed, and what a failure does.

:func:`start` is what opening a context does before its state is made (process-wide guards,
the check of the ``HPCBSP_*`` variables and the settings read from them, the context's own
communicator and the agreed wait mode).

One :class:`Lifecycle` per context owns its state (like LPF's single FATAL state)::

    open --close()----------------------------------> closed   (every rank left together)
    open --a control step raised (divergence, a peer's
           failure, a timeout)-----------------------> failed
    open --this rank failed (an exception left the
           BSP block or function)--------------------> closed   (after telling the peers)

and the resources that go with it: the close hooks (FA-BSP engines, ...), the control step's
persistent request and the context's communicator, each released once.  After a failure that
every rank saw in one completed control step (:attr:`ControlStep.settled`), the communicator is
quiet on every rank and is freed when the program leaves the block; after a timeout, which only
this rank saw, it is left alone (a collective may still be in flight).

:data:`LIVE` holds the open contexts of this process, so that an uncaught exception at top level
(:func:`hpcbsp.runtime.failure.guards.excepthook`) can tell their peers.  ``$HPCBSP_ABORT_GRACE`` (read
by :func:`abort_grace`, the one place) bounds how long a failing rank waits for its peers to
hear of it before it aborts the job.
"""
from __future__ import annotations

from typing import Callable, Sequence

from mpi4py import MPI

from .. import environment
from ..errors import BSPError, UsageError
from ..failure import deathwatch, lines
from ..failure.guards import LIVE, install_excepthook
from ..failure.report import abort_job, format_failure
from ..launch import check_world
from . import arena, waiting
from .control import ControlStep, Kind
from .nodes import Nodes

#: The open contexts' lifecycles in this process (an uncaught failure tells their peers).


def abort_grace() -> float:
    """Seconds a failed rank gives its peers to hear of the failure before the job is aborted
    (``$HPCBSP_ABORT_GRACE``, default 10)."""
    return float(environment.setting("HPCBSP_ABORT_GRACE"))


def start(comm: MPI.Comm | None, timeout: float | None,
          wait: str | None) -> tuple[MPI.Comm, float | None, str, bool, Nodes]:
    """Open a context on ``comm`` (default ``MPI.COMM_WORLD``; collective over it).

    Installs the report of an uncaught error (one per rank), checks every ``HPCBSP_*`` variable
    set (:func:`.environment.check`: a bad value is :class:`~.errors.BadInput` on every rank
    before anything is made or computed, an unknown name a warning), installs the other
    process-wide guards (the world-size check, the watch that names a rank that died without a
    word), reads the settings (``$HPCBSP_SYNC_TIMEOUT`` where ``timeout`` is None, the arena's),
    duplicates ``comm``, learns which of its ranks share a node (:meth:`.nodes.Nodes.of`) and
    agrees on the wait mode on the copy (:func:`.waiting.resolve`).  Returns ``(the copy,
    timeout, wait mode, shared_elements, nodes)``, the arguments of
    :class:`~.superstep.Supersteps`.
    """
    install_excepthook()
    environment.check(MPI.COMM_WORLD.Get_rank())
    check_world(MPI.COMM_WORLD.Get_size())
    deathwatch.start(MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size())
    base = MPI.COMM_WORLD if comm is None else comm
    env_timeout = environment.setting("HPCBSP_SYNC_TIMEOUT")
    shared_elements = arena.wanted()
    copy = base.Dup()
    deathwatch.introduce(copy)  # the nodes' watchers watch each other (the failure detector)
    nodes = Nodes.of(copy)
    try:
        mode = waiting.resolve(wait, copy, nodes)
    except BSPError:
        copy.Free()  # every rank raises here: nothing else uses the copy
        raise
    return copy, timeout if timeout is not None else env_timeout, mode, shared_elements, nodes


def _mark_peers_told(exc: BaseException) -> None:
    """Record on ``exc`` that every other rank has been told of it (no abort needed)."""
    try:
        exc.hpcbsp_peers_told = True  # type: ignore[attr-defined]
    except AttributeError:  # an exception type that takes no attributes
        pass


class Lifecycle:
    """State and release of one context (see the module docstring).

    Parameters
    ----------
    pid
        This rank in the context (for messages).
    comm
        The context's communicator, freed on release.
    control
        The context's control step (its persistent request is freed on release; its
        ``settled`` flag says whether a failure left the communicator quiet).
    progress
        The callables that keep FA-BSP mailboxes moving while this rank waits (the context's
        list, shared, so hooks added later count).
    superstep
        Returns the context's current superstep (for the failure report).
    on_leave_open
        Called once when the state leaves ``open`` (the context turns its fast sync path off).
    """

    def __init__(self, pid: int, comm: MPI.Comm, control: ControlStep,
                 progress: Sequence[Callable[[], object]], superstep: Callable[[], int],
                 on_leave_open: Callable[[], None]):
        self.pid = pid
        self.state = "open"  # open -> closed | failed
        self._comm = comm
        self._control = control
        self._progress = progress
        self._superstep = superstep
        self._on_leave_open = on_leave_open
        self._close_hooks: list[Callable[[], None]] = []
        #: Set with state "failed" when every rank saw the failure in the same control step;
        #: cleared once the context is released.
        self._failed_together = False
        LIVE.add(self)

    @property
    def superstep(self) -> int:
        """The context's current superstep (for reports)."""
        return self._superstep()

    @property
    def is_open(self) -> bool:
        return self.state == "open"

    def check_open(self) -> None:
        """Raise :class:`UsageError` unless a collective call may still be made."""
        if self.state != "open":
            raise UsageError(f"rank {self.pid}: this BSP context is {self.state}; no collective "
                             "call can be made on it any more")

    def add_close_hook(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` when the context is released (closed, or failed and left)."""
        self._close_hooks.append(fn)

    def control_step_failed(self) -> None:
        """A control step raised: no further collective call can be matched."""
        self._set_state("failed")
        # Only a failure that every rank saw in the same completed step (not a timeout, not a
        # mailbox handler's error raised while this rank waited) leaves the communicator quiet.
        self._failed_together = self._control.settled

    def fail(self, exc: BaseException) -> None:
        """This rank failed: tell the other ranks at their next collective call, or abort the job.

        The others see the failure as a :class:`~.errors.PeerFailed` from the control step they
        are in or enter next.  If they do not get there within :func:`abort_grace` seconds (they
        may be stuck in local work or in MPI calls of their own), the whole job is aborted so
        that nothing hangs.
        """
        if self.state != "open":
            LIVE.discard(self)  # the ranks already agreed on the failure (or timed out)
            self.release_after_failure()
            return
        grace = abort_grace()
        describe = f"failed at superstep {self._superstep()} with {type(exc).__name__}: {exc}"

        def abort() -> None:
            rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
            abort_job(format_failure(exc, rank, size)
                      + lines.rank_says(rank, size, f"the other ranks did not reach a BSP call within {grace:g} s "
                                                    "of this failure; aborting the job") + "\n")

        try:
            self._control.agree_or_abort(Kind.FAIL, self._superstep(), lambda: describe, grace, abort,
                                         progress=self._progress)
        except BSPError:
            pass  # the expected outcome when the others are in another call: they know now
        _mark_peers_told(exc)
        self.release()

    def release_after_failure(self) -> None:
        """Free the MPI resources of a context whose ranks all saw it fail (once).  Without this,
        a program that catches divergences and carries on would run out of communicators (MPICH
        has about 2048 per process)."""
        if self._failed_together:
            self._failed_together = False
            self.release("failed")

    def release(self, state: str = "closed", settle: bool = False) -> None:
        """Run the close hooks (last added first) and free the communicator, once (``settle``:
        every rank agreed to leave, so the roll call's last messages are awaited collectively:
        :meth:`.rollcall.RollCall.close`)."""
        self._set_state(state)
        self._failed_together = False  # released once, whatever happens next
        try:
            for fn in reversed(self._close_hooks):
                fn()  # may re-raise a mailbox handler's error: the frees below happen anyway
        finally:
            LIVE.discard(self)
            self._control.free(settle)
            try:
                self._comm.Free()
            except MPI.Exception:
                pass

    def _set_state(self, state: str) -> None:
        if self.state == "open":
            self._on_leave_open()
        self.state = state
