"""Supersteps: the control step, the exchange, sync hooks and the ledger row, in one path.

Every call that ends a superstep (``sync``, and the collectives ``allreduce``, ``broadcast`` and
``split``) goes through :meth:`Supersteps.sync`, which

1. enters the control step (every rank makes the same collective call, so diverged programs
   raise instead of hanging; see :mod:`.control`), with mailbox progress and the context's
   timeout where needed;
2. lets the sync hooks (FA-BSP engines) reach quiescence, and agrees again if their handlers
   put or sent;
3. delivers puts, gets and queue records (:func:`.exchange.exchange`) when any rank has some;
4. runs the collective's own MPI call, if the superstep is a collective's (a :class:`Step`);
5. appends the superstep's one ledger row and starts the next superstep.

The plain case (an open context without sync hooks or timeout, a ``sync`` with nothing to move)
is one control step, a persistent ``Allreduce`` started and waited for in one compiled call
(:mod:`.native`), plus about a hundred nanoseconds of Python: when this rank has nothing pending,
that call also reads the clock around the step and appends the ledger row itself when no rank has
data (``ControlStep.empty_step``), so that ``sync`` makes no other call than it; step 5 is
then only the counter.  While the context stays plain, not even the method's frame is left:
the instance's ``sync`` is then a compiled function (:func:`~hpcbsp.kernels.controlstep.plain_sync`) that
makes that call and counts the superstep itself, and hands any other call (records pending, a
queue, a timeout) to the method.  Every step runs exactly as in the general path: the same
record, the same agreement, the same row.

Leaving a context together (``BSP.close``) is one more control step of this path's kind
(:meth:`Supersteps._leave`), after which the shared arena is freed and the context released.
"""
from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Protocol, cast

import numpy as np
from mpi4py import MPI

from ...kernels.controlstep import plain_sync
from ...kernels.syncstate import Counter
from ..errors import BadInput, BSPError, SyncTimeout, UsageError
from .arena import Arena
from .control import ControlStep, Kind
from .exchange import ExchangeTimeout, bulk_exchange, exchange
from .lateness import watch
from .ledger import Ledger, Traffic
from .lifecycle import Lifecycle, abort_grace
from .nodes import Nodes
from .outbox import Data, Extra, Outbox, agreed

if TYPE_CHECKING:  # the objects a context holds (api/ builds on this package)
    from ..api.coarray import Coarray
    from ..api.queue import Queue

_SYNC = int(Kind.SYNC)
_Agree = Callable[[int, int, int, int, int], int]  # the compiled control step (ControlStep.blocking_step)
_perf = time.perf_counter


def _positive_seconds(x: Any) -> bool:
    """True for a finite number of seconds above zero (not a bool, not a string)."""
    return bool(isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))
                and 0 < x < float("inf"))


class SyncHook(Protocol):
    """A participant in ``sync`` besides puts, gets and queues (an FA-BSP engine)."""

    def progress(self) -> None:
        """Move messages without blocking (called while this rank waits in a sync)."""

    def quiesce(self) -> Traffic:
        """Collective: return when no message is in flight anywhere; report this superstep's traffic."""


class Step(NamedTuple):
    """A collective that ends a superstep: what the control step compares, and its MPI call.

    ``run(traffic)`` is called on every rank after the superstep's puts were delivered; it makes
    the collective's MPI call and adds what it moved to ``traffic``.
    """

    kind: Kind
    sig: int
    describe: Callable[[], str]
    run: Callable[[Traffic], None]


class Supersteps:
    """The superstep state of a context (its base class): counter, outbox, registered objects,
    sync hooks, control step, ledger, and the one path that ends a superstep.

    ``wait`` is the agreed wait mode, ``"spin"`` or ``"yield"`` (:mod:`.waiting`).
    ``shared_elements``: packed element puts may use the node's shared arena (:mod:`.arena`;
    never in a context with a timeout, whose exchanges are bounded).  ``nodes``: which ranks of
    ``comm`` share a node (:class:`~.nodes.Nodes`; learnt here, collectively, when not given).
    ``lateness``: the live lateness threshold in seconds (0.0: off; :mod:`.lateness`).
    """

    def __init__(self, comm: MPI.Comm, timeout: float | None, wait: str = "spin", shared_elements: bool = True,
                 nodes: Nodes | None = None, lateness: float = 0.0):
        self.comm: MPI.Comm = comm
        self.pid: int = comm.Get_rank()
        self.nprocs: int = comm.Get_size()
        self._count = Counter()  # the superstep counter (kept in C: the compiled sync moves it)
        self.timeout = timeout
        #: How this context's ranks wait for one another: "spin" or "yield" (agreed by all).
        self.wait = wait
        self.ledger = Ledger(comm)
        self._record = self.ledger.add
        self._rows = self.ledger.rows  # (the compiled empty sync appends its row to this store itself)
        self._sync_label: str | None = None
        self._describe_sync = lambda: f"sync(label={self._sync_label!r})"  # only on divergence
        #: The live lateness threshold in seconds (0.0: off; :mod:`.lateness`).
        self.lateness = lateness
        try:
            self._control = ControlStep(comm, watch(self._rows, self.pid, lateness, lambda: self.hosts))
        except BadInput:  # every rank raises here (they disagree on a setting): nothing uses the copy
            comm.Free()
            raise
        #: Which ranks share a node, their hosts and cores (the one place this context learns it).
        self.nodes: Nodes = nodes if nodes is not None else Nodes.of(comm)
        #: The host of every rank, so that a timeout names where the missing rank ran.
        self.hosts: list[str] = list(self.nodes.hosts)
        self._control.hosts = self.hosts
        self._control.wait_mode = wait
        self._control.nonblocking = timeout is not None or wait == "yield"
        self._control.track_arrivals = timeout is not None
        self._outbox = Outbox(self.nprocs, self.pid)
        if self.nprocs > 1:
            self._outbox.arena = Arena(comm, allowed=shared_elements and timeout is None,
                                       one_node=self.nodes.one_node, wait=wait)
        self._objects: list[Coarray | Queue] = []
        self._queues: list[Queue] = []
        self._hooks: list[SyncHook] = []
        self._progress: list[Callable[[], None]] = []
        #: True while a sync may take the inlined path: open, no sync hooks, no timeout.
        self._plain = timeout is None
        self._life = Lifecycle(self.pid, comm, self._control, self._progress, lambda: self.superstep,
                               self._leave_plain)
        self._life.add_close_hook(self.ledger.end_stream)  # a streaming ledger writes its last rows
        if self._outbox.arena is not None:  # (freed by _leave when the ranks leave together)
            self._life.add_close_hook(self._outbox.arena.close)
        self._fast_sync()

    @property
    def superstep(self) -> int:
        """The number of supersteps this context has ended (the current one's index)."""
        return self._count.value

    @superstep.setter
    def superstep(self, value: int) -> None:
        self._count.value = value

    @property
    def elements_transport(self) -> str:
        """How ``put_elements`` records reach other ranks now: ``"arena"`` (the node's shared
        window, :mod:`.arena`) or ``"messages"``."""
        arena = self._outbox.arena
        return "arena" if arena is not None and arena.half_bytes > 0 else "messages"

    def _leave(self) -> None:
        """Leave the context with the other ranks (collective; ``BSP.close``): warn of requests
        never delivered, agree on the exit, free the shared arena (bounded by the abort grace;
        matched, since every rank agreed to leave) and release the context."""
        life = self._life
        if not life.is_open:
            life.release_after_failure()
            return
        if self._outbox.nrecords:
            warnings.warn(f"rank {self.pid}: {self._outbox.nrecords} put/get/send request(s) of "
                          f"superstep {self.superstep} were never delivered: call sync() before "
                          "leaving the BSP block", stacklevel=3)
        agreed = False
        try:
            self._agree(Kind.EXIT, 0, lambda: "left the BSP block (or returned from the BSP function)")
            agreed = True
            if self._outbox.arena is not None:
                self._outbox.arena.close(grace=abort_grace())
        finally:
            life.release(settle=agreed)

    def _leave_plain(self) -> None:
        self._plain = False
        self._fast_sync()

    # ------------------------------------------------------------------ the superstep path
    def sync(self, label: str | None = None, *, timeout: float | None = None,
             _step: Step | None = None) -> None:
        """End the superstep: deliver all puts, gets and queue records, then start the next one.

        A sync with nothing to move anywhere costs one small ``Allreduce`` (the control step).
        ``label`` names the superstep in the ledger.  ``timeout`` (seconds; default: the
        context's ``timeout``) bounds this sync's wait for the other ranks: on expiry it raises
        :class:`~.errors.SyncTimeout` naming the ranks that never arrived, after which the job
        cannot go on (uncaught, it ends the job).  Every rank must give the same ``timeout`` to
        the same sync; it costs ``p - 1`` small messages per rank to know who arrived.
        h-relation: that of the superstep's puts, gets and queue records.  (``_step`` is the
        runtime's own: the collectives end their supersteps through this same path.)
        """
        # The plain sync with its control step compiled (.native).  With nothing pending on this
        # rank, one compiled call also times the superstep and, when no rank has data, appends its
        # ledger row: then only the counter is left to do here.
        empty = self._control.empty_step if self._plain else None
        if empty is not None and _step is None and timeout is None:
            outbox = self._outbox
            if not (outbox.nrecords or self._queues):
                code = empty(_SYNC, self.superstep, label, self._rows)
                if code:
                    self._finish_empty(code, label)
                else:
                    self.superstep += 1
                return
            t0 = _perf()
            code = cast(_Agree, self._control.blocking_step)(_SYNC, self.superstep, 0, *outbox.levels())
            traffic = self._after_fast_step(code, label)
        else:
            t0 = _perf()
            self._sync_label = label  # for _describe_sync, called only if the ranks diverge
            if timeout is not None and not _positive_seconds(timeout):
                raise UsageError(f"rank {self.pid}: sync(label={label!r}, timeout={timeout!r}): the "
                                 "timeout must be a positive number of seconds")
            if self._plain and _step is None and timeout is None:  # the control step in Python
                try:
                    data, extra = self._control.agree(_SYNC, self.superstep, 0, self._describe_sync,
                                                      *self._outbox.levels())
                except BSPError:
                    self._life.control_step_failed()
                    raise
                traffic = self._deliver(data, extra)
            else:
                traffic = self._begin(_step, timeout)
        self._end(label, t0, traffic)

    def _end(self, label: str | None, t0: float, traffic: Traffic | None) -> None:
        """The one finisher: every superstep of every kind but the empty one of the compiled path
        ends here, with one ledger row (raw times: the ledger computes the durations when it is
        read), and the next superstep begins."""
        self._record((self.superstep, label, t0, _perf(), traffic))
        if traffic is not None and traffic.to:
            bytes_to = self.ledger.bytes_to
            for dest, nbytes in traffic.to.items():
                bytes_to[dest] += nbytes
        self.superstep += 1

    def _finish_empty(self, code: int, label: str | None) -> None:
        """The rest of a plain sync whose compiled empty step (``empty_step``, or the
        :func:`~hpcbsp.kernels.controlstep.plain_sync` standing for ``sync``) returned ``code``,
        not 0: another rank has data or gets (or the ranks diverged, which raises)."""
        t0 = self._control.empty_started
        self._end(label, t0, self._after_fast_step(code, label))

    def _fast_sync(self) -> None:
        """Let the compiled :func:`~hpcbsp.kernels.controlstep.plain_sync` stand for ``sync`` on
        this instance while the context is plain and its control step compiled and blocking, and
        take it away otherwise (called whenever one of those changes).  Not where a subclass
        overrides ``sync``: its method must be what runs."""
        step = self._control.record_step if self._plain else None
        if step is None or type(self).sync is not Supersteps.sync:
            self.__dict__.pop("sync", None)
            return
        fast = plain_sync(step, self._rows, _SYNC, self._count, self._outbox, self._queues,
                          Supersteps.sync.__get__(self), self._finish_empty)
        fast.__doc__ = Supersteps.sync.__doc__  # help(bsp.sync) says what the method says
        self.__dict__["sync"] = fast

    def _after_fast_step(self, code: int, label: str | None) -> Traffic | None:
        """The plain sync after its compiled control step returned ``code`` (the levels as
        :func:`~.outbox.agreed` reads them, or ``DIVERGED``): deliver what there is (None if
        nothing moved)."""
        if code < 0:
            self._sync_label = label
            try:
                self._control.diverged(_SYNC, self.superstep, self._describe_sync)
            finally:
                self._life.control_step_failed()
        return self._deliver(*agreed(code))

    def _deliver(self, data: int, extra: int) -> Traffic | None:
        """The plain sync's delivery, ``data`` and ``extra`` the agreed levels
        (:class:`~.outbox.Data`, :class:`~.outbox.Extra`): clear the queues' last messages, then
        move the superstep's puts, gets and records if any rank has some for another rank (in
        a bulk exchange where they are all large puts, at most one per destination, and no rank
        has anything else; without learning what comes from whom where every rank repeats the
        last one's), or apply this rank's own without a message if none has.  Returns
        the traffic (None if nothing moved)."""
        for q in self._queues:
            q._clear()
        if data in (Data.BULK, Data.REPEAT) and extra == Extra.NONE:
            traffic = bulk_exchange(self.comm, self._outbox, self._objects, repeat=data == Data.REPEAT)
        elif data or self._outbox.nrecords:  # (sparse where no rank asked for the dense exchange)
            traffic = exchange(self.comm, self._outbox, self._objects, extra >= Extra.GETS, local=not data,
                               wait=self.wait, sparse=extra != Extra.DENSE)
        else:
            return None
        self._outbox.reset()
        return traffic

    def progress(self) -> None:
        """Let FA-BSP mailboxes send full buffers, receive and run handlers during long compute."""
        for hook in self._hooks:
            hook.progress()

    def _begin(self, step: Step | None, timeout: float | None = None) -> Traffic | None:
        """The general path up to the ledger row: control step with progress and timeout, sync
        hooks, exchange, the collective's call.  Returns the traffic (None when nothing moved
        and no collective ran)."""
        if step is None:
            kind, sig, describe = _SYNC, 0, self._describe_sync
        else:
            kind, sig, describe = step.kind, step.sig, step.describe
        outbox = self._outbox
        # (Never a bulk exchange here: its collectives could not honour a timeout.)
        any_data, any_gets = self._agree(kind, sig, describe, outbox.remote > 0, bool(outbox.gets_count),
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
            any_data, any_gets = self._agree(kind, sig, describe, outbox.remote > 0,
                                             bool(outbox.gets_count), with_progress=False,
                                             timeout=timeout)
        for q in self._queues:
            q._clear()
        if any_data or outbox.nrecords:  # (no rank has data for another: this rank's own, locally)
            moved = self._exchange(any_gets, self.timeout if timeout is None else timeout, local=not any_data)
            outbox.reset()
            if traffic is None:
                traffic = moved
            else:
                traffic.add(moved)
        if step is not None:
            if traffic is None:
                traffic = Traffic()
            step.run(traffic)
        return traffic

    def _exchange(self, any_gets: bool, limit: float | None, local: bool = False) -> Traffic:
        """Deliver the superstep's data (``local``: only this rank's own records, no message);
        with a timeout (``limit`` seconds), every wait of the exchange is bounded by it and a
        peer that stopped inside the exchange is named."""
        if limit is None or local:
            return exchange(self.comm, self._outbox, self._objects, any_gets, local=local)
        try:
            return exchange(self.comm, self._outbox, self._objects, any_gets,
                            deadline=time.monotonic() + limit, wait=self.wait)
        except ExchangeTimeout as stuck:
            self._life.control_step_failed()  # messages are left half done: no collective may follow
            raise SyncTimeout(
                f"rank {self.pid}: the data exchange of superstep {self.superstep} timed out after "
                f"{limit:g} s waiting for {self._control.name_ranks([stuck.rank])}; it stopped "
                "inside the exchange (its node died or its link went down)") from None

    def _agree(self, kind: int, sig: int, describe: Callable[[], str],
               has_data: bool = False, has_gets: bool = False,
               with_progress: bool = True, timeout: float | None = None) -> tuple[bool, bool]:
        """A control step of this context: every rank must make the same call (``kind`` and
        ``sig`` at this superstep), else every rank raises.  Waits with mailbox progress and
        within ``timeout`` (this call's own, else the context's).  Returns whether any rank has
        data for another (``has_data``: this rank has) and whether any has gets."""
        self._life.check_open()
        limit = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit if limit is not None else None
        try:
            # (Always the dense exchange here, which answers gets too: a rank with data says so.)
            data, extra = self._control.agree(kind, self.superstep, sig, describe,
                                              Data.GENERAL if has_data else Data.NONE,
                                              Extra.DENSE if has_data else Extra.GETS if has_gets else Extra.NONE,
                                              self._progress if with_progress else (), deadline,
                                              timed=timeout is not None)
        except BSPError:
            # The ranks disagreed and all of them know it (or this rank timed out): no further
            # collective call could be matched, so a failure report must not start one.
            self._life.control_step_failed()
            raise
        if data in (Data.BULK, Data.REPEAT):  # another rank offered a bulk exchange: it is in a plain sync
            self._life.control_step_failed()
            raise BSPError(f"rank {self.pid}: at superstep {self.superstep} this rank's call (a sync with a "
                           "timeout or hooks, or a collective) met a plain sync on another rank: give every "
                           "rank the same timeout and make the same calls")
        return data == Data.GENERAL, extra >= Extra.GETS

    def _add_sync_hook(self, hook: SyncHook) -> None:
        self._hooks.append(hook)
        self._progress.append(hook.progress)
        self._control.nonblocking = True  # waiting in a sync must keep mailboxes moving
        self._leave_plain()
