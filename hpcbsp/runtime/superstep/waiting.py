"""How a rank waits for the others: spinning, or giving its core away (``BSP(wait=...)``).

MPI's blocking calls busy-poll (MPICH's, Open MPI's and Intel MPI's by default): a rank that
reached a ``sync`` first keeps its core at 100 % until the last rank arrives.  With one rank per
core that is the fastest way to wait; with more ranks than cores (a laptop, a 2-core CI box, the
BSF validation runs of ``python -m hpcbsp.bench bsf``) the waiting ranks take the cores the
working ones need, and every time measured is a time of oversubscription.

Modes (``BSP(wait=MODE)`` or ``$HPCBSP_WAIT``; the same on every rank):

``spin``
    The control step is a blocking (persistent) ``Allreduce``: lowest latency, a full core per
    waiting rank.
``yield``
    The control step is an ``Iallreduce`` polled with ``Test``: a short spin that yields to the
    scheduler (``SPIN_S``), then sleeps of an eighth of the time waited so far, at most
    ``LONGEST_NAP_S``.  A rank that waits long uses a few per cent of a core; a wait ends up to
    about an eighth (at most a millisecond) later than the last rank's arrival, and an empty
    sync costs more than a spinning one (``python -m hpcbsp.bench sync`` measures both).
``auto`` (default)
    ``yield`` when some node runs more ranks of this communicator than the cores those ranks may
    use (the union of their CPU affinity masks; :meth:`.nodes.Nodes.oversubscribed`), else ``spin``.

The control step begins every collective BSP call (``sync``, ``allreduce``, ``broadcast``,
registration, leaving), and it is where a rank waits for the others, so the choice covers the
waits in a sync, in a farm step and in a collective.  The data exchange and the collective
proper that follow it start only once every rank has arrived and stay blocking MPI calls; MPICH
can be told to yield inside those too with ``MPIR_CVAR_ENABLE_HEAVY_YIELD=1`` in the launch
environment (measured on the development machine: a rank blocked 1 s in a ``Barrier`` used
0.43 s of CPU by default, 0.10 s with that setting, 0.02 s polled with the naps of this module;
``MPIR_CVAR_CH4_PROGRESS_THROTTLE`` and ``MPIR_CVAR_POLLS_BEFORE_YIELD`` made no difference);
Open MPI with ``OMPI_MCA_mpi_yield_when_idle=1`` (its own choice when a node has more ranks than
slots), Intel MPI's busy waits back off with ``I_MPI_THREAD_YIELD`` (:mod:`hpcbsp.util.mpiflavour`).

The resolved mode is agreed by all ranks when the context is created (a MAX reduction: one rank
asking to yield makes all yield), because blocking and non-blocking control steps never match.

**The one rule for an idle poll.**  Every wait that polls (``hpcbsp.util.waiting.poll``, or a
loop of its own) pauses between idle polls with a :class:`Naps` made for that wait from the
context's agreed mode, and with nothing else: the non-blocking control step, a bounded exchange's
messages (:mod:`.exchange.completion`), the arena's closing barrier (:mod:`.arena`), the FA-BSP
engine's quiescence and its wait for a send slot (:mod:`hpcbsp.fabsp.engine`), and the
parameter server's waits (:mod:`hpcbsp.elastic.protocol`).  Per mode:

* ``spin``: ``os.sched_yield()`` (it returns at once when no other process wants the core), or
  nothing where the wait does other work between its tests (mailbox progress); never a timed
  sleep (``time.sleep(0)`` is one: about 60 µs of timer slack on Linux).
* ``yield``: ``os.sched_yield()`` for the first ``SPIN_S`` of the wait, then sleeps of
  ``NAP_FRACTION`` of the time waited so far, between ``FIRST_NAP_S`` and ``LONGEST_NAP_S``.

A wait that did some work counts its time again from there (:meth:`Naps.restart`: the
quiescence after a round that ran handlers).  A rank that failed waits for its peers to hear of
it in ``yield`` whatever the context's mode (:meth:`.control.ControlStep.agree_or_abort`): its
own work is over, and theirs needs the cores.
"""
from __future__ import annotations

import os
import time
from typing import Callable

from mpi4py import MPI

from ...util.choices import RESOLVED_WAIT_MODES, WAIT_MODES
from ..environment import setting
from ..errors import BSPError
from .nodes import Nodes

#: Environment variable that sets the default mode.
WAIT_ENV = "HPCBSP_WAIT"
#: Polling with only a yield to the scheduler at the start of a yielding wait (ranks that
#: arrive together finish here).
SPIN_S = 100e-6
#: A nap is this fraction of the time waited so far, clamped to [FIRST_NAP_S, LONGEST_NAP_S]:
#: a wait overshoots by at most about that fraction, and naps of two ranks that wait for each
#: other (each stage of the control step's reduction needs both) cannot escalate.
NAP_FRACTION = 0.125
FIRST_NAP_S = 20e-6
LONGEST_NAP_S = 1e-3


def requested_mode(wait: str | None) -> str:
    """The mode asked for on this rank: ``wait`` if given, else ``$HPCBSP_WAIT``, else ``auto``
    (a bad ``$HPCBSP_WAIT`` is :class:`~.errors.BadInput`, found already when the context
    started)."""
    mode = wait if wait is not None else setting(WAIT_ENV)
    return str(mode).strip().lower()


def resolve(wait: str | None, comm: MPI.Comm, nodes: Nodes | None = None) -> str:
    """Collective: the mode every rank of ``comm`` uses, ``"spin"`` or ``"yield"``.

    One ``Allreduce`` of the modes asked for, so that a mode given on one rank only, or a bad
    one, is settled the same way on every rank: a bad mode anywhere raises :class:`BSPError` on
    every rank; otherwise ``yield`` anywhere wins over ``auto``, which wins over ``spin``.
    ``auto`` reads ``nodes`` (``comm``'s, :class:`~.nodes.Nodes`; made here when not given),
    which every rank holds alike.
    """
    mode = requested_mode(wait)
    code = _CODES.get(mode, len(_CODES))
    if comm.Get_size() > 1:
        agreed = comm.allreduce(code, op=MPI.MAX)
    else:
        agreed = code
    if agreed == len(_CODES):
        me = comm.Get_rank()
        if code == len(_CODES):
            source = "wait=" if wait is not None else f"${WAIT_ENV}="
            raise BSPError(f"rank {me}: {source}{mode!r} is not a wait mode; choose from {', '.join(WAIT_MODES)}")
        raise BSPError(f"rank {me}: another rank was given a wait mode that is not one of {', '.join(WAIT_MODES)}")
    if comm.Get_size() == 1:
        return "spin"  # nobody to wait for
    if agreed == _CODES["yield"]:
        return "yield"
    if agreed == _CODES["auto"]:
        return "yield" if (nodes if nodes is not None else Nodes.of(comm)).oversubscribed() else "spin"
    return "spin"


_CODES = {"spin": 0, "auto": 1, "yield": 2}


class Naps:
    """The pause between two idle polls of one wait, as the module's rule says for ``mode``
    (``"spin"`` or ``"yield"``; one object per wait: it counts the time waited from its making).
    ``polling_others``: the wait does other work between its tests (then ``spin`` pauses not at
    all)."""

    __slots__ = ("_start", "_call")

    def __init__(self, mode: str, polling_others: bool = False):
        if mode not in RESOLVED_WAIT_MODES:
            raise ValueError(f"a wait pauses as 'spin' or 'yield', not {mode!r}")
        self._start = time.perf_counter()
        if mode == "yield":
            self._call: Callable[[], None] = self._yielding
        else:
            self._call = _nothing if polling_others else _yield

    def __call__(self) -> None:
        self._call()

    def restart(self) -> None:
        """The wait did some work: count its time waited from now (the next naps are short)."""
        self._start = time.perf_counter()

    def _yielding(self) -> None:
        waited = time.perf_counter() - self._start
        if waited < SPIN_S:
            os.sched_yield()
        else:
            time.sleep(min(max(NAP_FRACTION * waited, FIRST_NAP_S), LONGEST_NAP_S))


def _nothing() -> None:
    pass


def _yield() -> None:
    os.sched_yield()
