"""The control step: the one small collective every BSP-wide operation begins with.

Every operation that involves all ranks of a BSP context (``sync``, registration, ``allreduce``,
``broadcast``, ``split``, leaving the context, reporting a failure) starts with the *same* MPI call:
an ``Allreduce(MAX)`` of a few int64 words holding what this rank is doing (``kind``), its
superstep, a signature of the operation's arguments, and what it has to move (levels of
:class:`~.outbox.Data` and :class:`~.outbox.Extra`: the maximum over the ranks says how the
superstep's data travel, and whether all ranks gave the same data level: :func:`~.outbox.agreed`).
Because every rank enters the same collective whatever it is doing, a program whose ranks diverged (one
registers a coarray while another syncs, one left while others wait) cannot hang in mismatched
MPI collectives: the disagreement is seen by all ranks in that one step, they gather a
description of what each was doing, and every rank raises the same :class:`BSPError`.

The words are sent as ``[v, -v]`` so one MAX reduction yields both the maximum and the minimum of
every field; equal minimum and maximum means all ranks agree.

The blocking step is a persistent ``Allreduce`` (set up once, started and waited for at every
step) or a plain blocking one, whichever the MPI library runs faster
(``$HPCBSP_CONTROL_COLLECTIVE``, by default :attr:`~hpcbsp.util.flavours.Flavour.control_collective`:
blocking under Open MPI, whose persistent collectives take twice as long).  The two never match
each other, so the ranks agree on it in one ``Allreduce`` when the step is made.

With a deadline (a timeout) the step is the non-blocking one, polled against the deadline; when
it passes, the ranks that never came are named after a roll call (:mod:`.rollcall`), so that
watching a deadline costs no message while it does not pass.

With a lateness watch (:mod:`.lateness`, ``$HPCBSP_LATENESS``) the record has a sixth field, this
rank's work packed with its rank, whose MAX and negated MAX say who arrived last and by how much
(12 words instead of 10; whether it is on is agreed when the step is made, with the collective).

h-relation: none (control data, a few words; it is the ``l`` of the superstep).
"""
from __future__ import annotations

import enum
import hashlib
import struct
import threading
import time
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
from mpi4py import MPI

from ...util.mpiflavour import running_flavour
from ...util.waiting import poll
from ..environment import setting
from ..errors import BadInput, BSPError, Divergence, PeerFailed, SyncTimeout
from ..failure import lines
from .lateness import LATE_RECORD
from .native import compiled_allreduce_step, compiled_step
from .outbox import UNIFORM, Data, Extra, agreed
from .rollcall import RollCall
from .waiting import Naps

if TYPE_CHECKING:
    from ...kernels.controlstep import Lateness, RecordStep
    from ...kernels.syncstate import Rows


class Kind(enum.IntEnum):
    """What a rank is doing when it enters the control step."""

    SYNC = 1
    REGISTER = 2
    ALLREDUCE = 3
    BROADCAST = 4
    SPLIT = 5
    EXIT = 6
    FAIL = 7
    CHECKPOINT = 8
    GATHER = 9
    REDUCE_SCATTER = 10
    ALLGATHER = 11


# Field positions in the control record.
_KIND, _STEP, _SIG, _DATA, _GETS = range(5)
_NFIELDS = 5
_RECORD = struct.Struct(f"<{2 * _NFIELDS}q")
_pack_into, _unpack_from = _RECORD.pack_into, _RECORD.unpack_from  # bound once: the hot path
_MAX = MPI.MAX
_IN_PLACE = MPI.IN_PLACE


def signature(text: str) -> int:
    """A 62-bit hash of ``text`` that is the same in every process (unlike ``hash``)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


class ControlStep:
    """Runs control steps on one communicator (that of a BSP context).

    ``nonblocking`` selects ``Iallreduce`` (needed to make progress on FA-BSP mailboxes or to
    honour a timeout while waiting) instead of the cheaper blocking step (a persistent
    or a plain ``Allreduce``: :attr:`collective`).  It must be the same on every rank at every step
    (blocking, persistent and non-blocking collectives never match one another), which
    holds because it changes only at collective calls (mailbox registration) or by a setting that
    every rank shares (the context's timeout).
    """

    def __init__(self, comm: MPI.Comm, lateness: Lateness | None = None):
        self.comm = comm
        #: The lateness watch whose field the record carries (:mod:`.lateness`), or None.
        self.lateness = lateness
        record = _RECORD if lateness is None else LATE_RECORD
        #: With a timeout, a rank whose deadline passes names the ranks that never came to the
        #: step by a roll call (:mod:`.rollcall`: O(p) messages, once), which every rank waiting
        #: in such a step answers.  A step whose deadline does not pass sends nothing: the
        #: deadline is watched on the step's own non-blocking collective.
        self.track_arrivals = False
        #: How the non-blocking step waits between polls: "spin" or "yield" (see waiting).
        self.wait_mode = "spin"
        #: True once a control step ended in a disagreement that every rank saw (a divergence or
        #: a reported failure): no collective is left half done, so the communicator is quiet on
        #: every rank and can be freed.  Not after a timeout, which only this rank saw.
        self.settled = False
        #: The host of every rank (set by the context when a timeout applies: errors name them).
        self.hosts: Sequence[str] | None = None
        self._roll = RollCall(comm)
        self._sbuf = bytearray(record.size)
        self._rbuf = bytearray(record.size)
        self._sspec = [self._sbuf, MPI.INT64_T]
        self._rspec = [self._rbuf, MPI.INT64_T]
        # The blocking step: a persistent collective (MPI-4), set up once (Start + Wait measured
        # 0.8x a Barrier under MPICH, where a plain Allreduce of the same record takes 1.3x), or
        # a plain Allreduce where the library runs that faster, or lacks persistent collectives
        # (MPI-3).  Set up collectively, like the context that owns this step.
        # Its own buffer: the non-blocking path replaces _rbuf at every step.
        self._pbuf = bytearray(record.size)
        self._pspec = [self._pbuf, MPI.INT64_T]
        self._rsize = record.size
        #: ``"persistent"`` or ``"blocking"``: the blocking step's collective (the same on every rank).
        self.collective = _agreed_collective(comm, lateness is not None)
        self._persistent: MPI.Prequest | None = None
        if self.collective == "persistent":
            try:
                self._persistent = comm.Allreduce_init(_IN_PLACE, [self._pbuf, MPI.INT64_T], _MAX)
            except (NotImplementedError, AttributeError, MPI.Exception):
                self.collective = "blocking"  # on every rank: they run the same library
        # The same step, packed, started, waited for and checked in one compiled call (.native):
        # the empty sync's floor.  None where the MPI library's functions cannot be found for
        # sure; the Python path below makes the same collective, so ranks may mix them.
        self._compiled = (compiled_step(self._persistent, self._pbuf) if self._persistent is not None
                          else compiled_allreduce_step(comm, self._pbuf))
        if self._compiled is not None and lateness is not None:
            self._compiled.watch(lateness)
        #: The compiled blocking step's ``agree(kind, superstep, sig, data, extra)`` (levels:
        #: :class:`~.outbox.Data`, :class:`~.outbox.Extra`), returning the agreed ``data |
        #: extra << 2`` (each the highest of any rank, ``| UNIFORM`` where all gave the same
        #: data: :func:`~.outbox.agreed` reads it), or ``DIVERGED`` (then call
        #: :meth:`diverged`); None when the step is non-blocking or not compiled.  The empty
        #: sync's hot path calls it directly.
        self.blocking_step: Callable[[int, int, int, int, int], int] | None = None
        #: The same step for a rank with nothing pending, timed and recorded in one compiled call:
        #: ``empty_step(kind, superstep, label, rows)`` returns what ``blocking_step`` would with
        #: no data and no gets, and when that is 0 it has appended the superstep's ledger row
        #: ``(superstep, label, t_start, t_end, None)`` to ``rows`` (otherwise ``t_start`` is in
        #: :attr:`empty_started`).  None exactly when ``blocking_step`` is.
        self.empty_step: Callable[[int, int, str | None, Rows], int] | None = None
        #: The compiled step behind ``blocking_step`` and ``empty_step`` (None exactly when they are).
        self.record_step: RecordStep | None = None
        self.nonblocking = False

    @property
    def nonblocking(self) -> bool:
        return self._nonblocking

    @nonblocking.setter
    def nonblocking(self, value: bool) -> None:
        self._nonblocking = bool(value)
        compiled = self._compiled if not value else None
        self.record_step = compiled
        self.blocking_step = compiled.agree if compiled is not None else None
        self.empty_step = compiled.agree_row if compiled is not None else None

    @property
    def empty_started(self) -> float:
        """When the last ``empty_step`` that appended no row began (``time.perf_counter``'s clock)."""
        return self._compiled.started if self._compiled is not None else float("nan")

    def agree(
        self,
        kind: int,
        superstep: int,
        sig: int,
        describe: Callable[[], str],
        data: int = Data.NONE,
        extra: int = Extra.NONE,
        progress: Sequence[Callable[[], object]] = (),
        deadline: float | None = None,
        timed: bool = False,
        wait: str | None = None,
    ) -> tuple[int, int]:
        """Enter the control step with ``data`` and ``extra`` (:class:`~.outbox.Data` and
        :class:`~.outbox.Extra`: what this rank has for others, and besides); return both as
        agreed by all ranks (the highest level of any rank; :func:`~.outbox.agreed`).

        Raises :class:`~.errors.Divergence` on every rank if the ranks disagree on the kind of
        call, the superstep or the signature (:class:`~.errors.PeerFailed` if some rank reported
        a failure).  ``describe`` is called only then, to say what this rank was
        doing.  In non-blocking mode, ``progress`` callables run while waiting (FA-BSP mailboxes
        keep delivering messages, so a rank that reached the sync early does not block senders
        that are still computing) and ``deadline`` (a ``time.monotonic()`` value) bounds the
        wait; on expiry a :class:`~.errors.SyncTimeout` is raised on this rank.  ``timed=True``
        makes this one step non-blocking with arrival tracking whatever the defaults (a per-call
        timeout, which every rank must give to the same call), so that ``deadline`` bounds it and
        the error names the ranks that never arrived.  ``wait``: how the non-blocking step pauses
        between its polls (:class:`.waiting.Naps`; default the context's :attr:`wait_mode`).

        This is the hot path of an empty sync (one ``pack_into``, one ``Allreduce``, one
        ``unpack``); keep it that way.
        """
        blocking = not (self._nonblocking or timed)
        if blocking and self._compiled is not None:  # one compiled call (.native)
            code = self._compiled.agree(kind, superstep, sig, data, extra)
            if code < 0:
                self.diverged(kind, superstep, describe)
            return agreed(code)
        d = int(data)
        g = int(extra)
        persistent = self._persistent
        late = self.lateness
        if persistent is not None and blocking:  # in place, set up once
            buf = self._pbuf
            if late is None:
                _pack_into(buf, 0, kind, superstep, sig, d, g, -kind, -superstep, -sig, -d, -g)
            else:
                late.pack(buf, kind, superstep, sig, d, g)
            persistent.Start()
            persistent.Wait()
        elif blocking:  # in place: one buffer, no copy inside MPI (the compiled step's, too)
            buf = self._pbuf
            if late is None:
                _pack_into(buf, 0, kind, superstep, sig, d, g, -kind, -superstep, -sig, -d, -g)
            else:
                late.pack(buf, kind, superstep, sig, d, g)
            self.comm.Allreduce(_IN_PLACE, self._pspec, _MAX)
        else:
            if late is None:
                _pack_into(self._sbuf, 0, kind, superstep, sig, d, g, -kind, -superstep, -sig, -d, -g)
            else:
                late.pack(self._sbuf, kind, superstep, sig, d, g)
            # Fresh buffers: if this wait is abandoned (an exception in a progress hook), MPI may
            # still read and write them, so the next step must not reuse them.
            self._sbuf, self._rbuf = bytearray(self._sbuf), bytearray(self._rsize)
            self._sspec, self._rspec = [self._sbuf, MPI.INT64_T], [self._rbuf, MPI.INT64_T]
            self._roll.begin_step()
            req = self.comm.Iallreduce(self._sspec, self._rspec, _MAX)
            self._wait(req, progress, deadline, Kind(kind), superstep, self.track_arrivals or timed,
                       self.wait_mode if wait is None else wait)
            buf = self._rbuf
        r = _unpack_from(buf) if late is None else late.unpack(buf)
        # Every rank gave the same kind, superstep and signature exactly when the maximum of each
        # equals its minimum (the maximum of its negation, negated).  Literal indices: this is
        # the empty sync's hot path (_KIND, _STEP, _SIG = 0, 1, 2; _NFIELDS = 5).
        if r[0] + r[5] or r[1] + r[6] or r[2] + r[7]:
            self.diverged(kind, superstep, describe)
        return agreed(r[3] | r[4] << 2 | (r[3] + r[8] == 0) * UNIFORM)  # (as the compiled step's code)

    def free(self, settle: bool = False) -> None:
        """Release the persistent request and the roll call's messages (before the communicator
        is freed; ``settle``: collective, the context's normal end, :meth:`.RollCall.close`)."""
        self._roll.close(settle)
        if self._compiled is not None:
            self._compiled.close()  # a caller that kept blocking_step gets an error, not a crash
        self._compiled = None
        self.record_step = None
        self.blocking_step = None
        self.empty_step = None
        if self._persistent is not None:
            try:
                self._persistent.Free()
            except MPI.Exception:
                pass
            self._persistent = None

    def agree_or_abort(self, kind: int, superstep: int, describe: Callable[[], str],
                       grace: float, on_timeout: Callable[[], None],
                       progress: Sequence[Callable[[], object]] = ()) -> None:
        """A control step that calls ``on_timeout()`` (which aborts the job) if the other ranks
        do not join within ``grace`` seconds.  Used to report a failure: a non-blocking step then
        waits in ``yield`` mode whatever the context's (this rank's work is over, the others'
        needs the cores; :mod:`.waiting`)."""
        if self.nonblocking:
            try:
                self.agree(kind, superstep, 0, describe, progress=progress,
                           deadline=time.monotonic() + grace, wait="yield")
            except SyncTimeout:
                on_timeout()
                raise
            return
        # Blocking mode: a watchdog thread aborts (mpi4py initialises MPI_THREAD_MULTIPLE).
        watchdog = threading.Timer(grace, on_timeout)
        watchdog.daemon = True
        watchdog.start()
        try:
            self.agree(kind, superstep, 0, describe)
        finally:
            watchdog.cancel()

    def name_ranks(self, ranks: Sequence[int]) -> str:
        """``"rank 2 (on node3)"`` or ``"ranks 2 (on node3), 3 (on node4)"``: hosts where known."""
        return ("rank " if len(ranks) == 1 else "ranks ") + self._with_hosts(ranks)

    def _with_hosts(self, ranks: Sequence[int]) -> str:
        return lines.ranks_on_hosts(ranks, self.hosts)

    def _wait(self, req: MPI.Request, progress: Sequence[Callable[[], object]],
              deadline: float | None, kind: Kind, superstep: int, tracked: bool, mode: str) -> None:
        """Poll ``req`` until it completes or ``deadline`` passes (then raise :class:`SyncTimeout`).
        ``tracked``: answer roll calls while waiting, and call one when the deadline passes, so
        that the error names the ranks that never came."""
        def expired(missing: str) -> SyncTimeout:
            return SyncTimeout(
                f"rank {self.comm.Get_rank()}: {kind.name.lower()} at superstep {superstep} "
                f"timed out waiting for the other ranks ({missing}); they are stuck in local "
                "work, dead, or never call sync")

        nap = Naps(mode, polling_others=bool(progress))
        roll = self._roll

        def keep_moving() -> None:
            for fn in progress:
                fn()
            if tracked:
                roll.answer()
            nap()  # give the core away, as the wait mode says

        pause = keep_moving if progress or tracked else nap
        test = lambda: True if req.Test() else None  # noqa: E731
        if not tracked:
            poll(test, deadline=deadline, pause=pause,
                 expired=lambda: expired("the ranks that are late are not tracked"))
            return
        if poll(test, until=deadline, pause=pause):
            return
        missing = roll.missing(req, pause)
        if missing is not None:
            raise expired("ranks not arrived: " + (self._with_hosts(missing) if missing
                                                  else "none, every rank answered the roll call"))

    def diverged(self, kind: int, superstep: int, describe: Callable[[], str]) -> None:
        """All ranks saw a disagreement in this control step: gather what each was doing on the
        lowest rank, which words it in one message (each group of ranks that did the same thing
        as ranges, :func:`~hpcbsp.runtime.failure.lines.diverged`), and raise that same error
        (:class:`~.errors.Divergence`, or :class:`~.errors.PeerFailed`) on every rank.  Only the
        lowest rank's :class:`~.errors.Divergence` says it ``reports`` it: the job prints it once.
        (Collective: one ``gather`` and one ``bcast``; no rank holds every description but the lowest.)"""
        kind = Kind(kind)
        mine = (int(kind), superstep, describe())
        everyone = self.comm.gather(mine, root=0)
        verdict: tuple[str, str, int] | None = None
        if everyone is not None:  # (the lowest rank)
            failed = [(r, d) for r, (k, _, d) in enumerate(everyone) if k == Kind.FAIL]
            if failed:
                survivor = next((r for r, (k, _, _) in enumerate(everyone) if k != Kind.FAIL), -1)
                verdict = ("failed", lines.peers_failed(failed), survivor)
            else:
                groups: dict[str, list[int]] = {}
                for r, (_, step, d) in enumerate(everyone):
                    groups.setdefault(f"{d} at superstep {step}", []).append(r)
                verdict = ("diverged", lines.diverged(groups), 0)
        what, message, reporter = self.comm.bcast(verdict, root=0)
        self.settled = True
        reports = self.comm.Get_rank() == reporter  # one rank prints it for the job
        if what == "failed":
            if int(kind) == Kind.FAIL:  # this rank failed too: it knows (its _fail swallows this)
                raise BSPError(message)
            raise PeerFailed(message, reports=reports)
        raise Divergence(message, reports=reports)


def requested_collective() -> str:
    """The blocking step's collective this process asks for, ``"persistent"`` or ``"blocking"``:
    ``$HPCBSP_CONTROL_COLLECTIVE``, or for ``auto`` the one the running MPI library runs faster
    (:attr:`~hpcbsp.util.flavours.Flavour.control_collective`)."""
    wanted = setting("HPCBSP_CONTROL_COLLECTIVE")
    return running_flavour().control_collective if wanted == "auto" else wanted


def _agreed_collective(comm: MPI.Comm, lateness: bool = False) -> str:
    """:func:`requested_collective`, checked to be the same on every rank of ``comm``, and so is
    whether the record carries the lateness field (collective: one ``Allreduce`` of four words)."""
    wanted = requested_collective()
    code = 1 if wanted == "blocking" else 0
    both = np.array([code, -code, int(lateness), -int(lateness)], dtype=np.int64)
    if comm.Get_size() > 1:
        comm.Allreduce(_IN_PLACE, both, _MAX)
    if both[0] + both[1]:
        raise BadInput(f"rank {comm.Get_rank()}: HPCBSP_CONTROL_COLLECTIVE gives {wanted} here and the other "
                       "kind on another rank (the two never match): give every rank the same value")
    if both[2] + both[3]:
        raise BadInput(f"rank {comm.Get_rank()}: the lateness watch is {'on' if lateness else 'off'} here and "
                       "not on another rank (HPCBSP_LATENESS or BSP(lateness=)): give every rank the same value")
    return wanted

