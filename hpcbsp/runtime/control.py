"""The control step: the one small collective every BSP-wide operation begins with.

Every operation that involves all ranks of a BSP context (``sync``, registration, ``allreduce``,
``broadcast``, ``split``, leaving the context, reporting a failure) starts with the *same* MPI call:
an ``Allreduce(MAX)`` of a few int64 words holding what this rank is doing (``kind``), its
superstep, a signature of the operation's arguments, and whether it has data to move.  Because
every rank enters the same collective whatever it is doing, a program whose ranks diverged (one
registers a coarray while another syncs, one left while others wait) cannot hang in mismatched
MPI collectives: the disagreement is seen by all ranks in that one step, they gather a
description of what each was doing, and every rank raises the same :class:`BSPError`.

The words are sent as ``[v, -v]`` so one MAX reduction yields both the maximum and the minimum of
every field; equal minimum and maximum means all ranks agree.

h-relation: none (control data, a few words; it is the ``l`` of the superstep).
"""
from __future__ import annotations

import enum
import hashlib
import time
from typing import Callable, Sequence

import numpy as np
from mpi4py import MPI

from .errors import BSPError


class Kind(enum.IntEnum):
    """What a rank is doing when it enters the control step."""

    SYNC = 1
    REGISTER = 2
    ALLREDUCE = 3
    BROADCAST = 4
    SPLIT = 5
    EXIT = 6
    FAIL = 7


# Field positions in the control record.
_KIND, _STEP, _SIG, _DATA, _GETS = range(5)
_NFIELDS = 5


def signature(text: str) -> int:
    """A 62-bit hash of ``text`` that is the same in every process (unlike ``hash``)."""
    digest = hashlib.blake2b(text.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 2


class Agreement:
    """The outcome of one control step, seen identically on every rank."""

    __slots__ = ("any_data", "any_gets")

    def __init__(self, any_data: bool, any_gets: bool):
        self.any_data = any_data
        self.any_gets = any_gets


class ControlStep:
    """Runs control steps on one communicator (that of a BSP context)."""

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self._send = np.zeros(2 * _NFIELDS, dtype=np.int64)
        self._recv = np.zeros(2 * _NFIELDS, dtype=np.int64)

    def agree(
        self,
        kind: Kind,
        superstep: int,
        sig: int,
        *,
        has_data: bool = False,
        has_gets: bool = False,
        describe: Callable[[], str],
        progress: Sequence[Callable[[], object]] = (),
        deadline: float | None = None,
    ) -> Agreement:
        """Enter the control step; return what all ranks agreed on or raise :class:`BSPError`.

        ``describe`` is called only when ranks disagree, to say what this rank was doing.
        ``progress`` callables run while waiting (FA-BSP mailboxes keep delivering messages, so a
        rank that reached the sync early does not block senders that are still computing).
        ``deadline`` (a ``time.monotonic()`` value) bounds the wait; on expiry a
        :class:`BSPError` is raised on this rank (the job cannot continue collectively).
        """
        s = self._send
        s[_KIND] = int(kind)
        s[_STEP] = superstep
        s[_SIG] = sig
        s[_DATA] = 1 if has_data else 0
        s[_GETS] = 1 if has_gets else 0
        s[_NFIELDS:] = -s[:_NFIELDS]
        # Always the non-blocking form: a blocking and a non-blocking collective must not match
        # each other (MPI standard), and the failure path needs the non-blocking one.
        req = self.comm.Iallreduce(s, self._recv, op=MPI.MAX)
        if not progress and deadline is None:
            req.Wait()
        else:
            self._wait(req, progress, deadline, kind, superstep)
        hi = self._recv[:_NFIELDS]
        lo = -self._recv[_NFIELDS:]
        if hi[_KIND] != lo[_KIND] or hi[_STEP] != lo[_STEP] or hi[_SIG] != lo[_SIG]:
            self._diverged(kind, superstep, describe)
        return Agreement(bool(hi[_DATA]), bool(hi[_GETS]))

    def _wait(self, req: MPI.Request, progress: Sequence[Callable[[], object]],
              deadline: float | None, kind: Kind, superstep: int) -> None:
        while not req.Test():
            for fn in progress:
                fn()
            if deadline is not None and time.monotonic() > deadline:
                raise BSPError(
                    f"rank {self.comm.Get_rank()}: {kind.name.lower()} at superstep {superstep} "
                    "timed out waiting for the other ranks (some rank is stuck in local work, "
                    "dead, or never calls sync)")
            if not progress:
                time.sleep(0)  # yield the core: ranks are often oversubscribed

    def _diverged(self, kind: Kind, superstep: int, describe: Callable[[], str]) -> None:
        """All ranks saw a disagreement: gather what each was doing and raise the same error."""
        mine = (int(kind), superstep, describe())
        everyone = self.comm.allgather(mine)
        failed = [(r, d) for r, (k, _, d) in enumerate(everyone) if k == Kind.FAIL]
        me = self.comm.Get_rank()
        if failed:
            who = "; ".join(f"rank {r} {d}" for r, d in failed)
            raise BSPError(f"stopping because {who}", remote=(int(kind) != Kind.FAIL))
        groups: dict[str, list[int]] = {}
        for r, (_, step, d) in enumerate(everyone):
            groups.setdefault(f"{d} at superstep {step}", []).append(r)
        parts = [f"{_ranks(rs)}: {d}" for d, rs in groups.items()]
        raise BSPError(
            f"the ranks of this BSP program diverged (seen on rank {me}): " + "; ".join(parts)
            + ". Every rank must make the same sequence of collective BSP calls (sync, coarray, "
            "queue, allreduce, broadcast, split) and leave the BSP block together.")


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))
