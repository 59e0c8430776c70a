"""Naming the ranks that never came to a control step whose deadline passed: a roll call.

A control step with a deadline (a context's ``timeout``, ``$HPCBSP_SYNC_TIMEOUT``, or
``sync(timeout=)``) is watched on its own non-blocking ``Iallreduce``, polled against the
deadline: while no deadline passes, no message is sent besides that collective's (before, every
rank announced its arrival at every step to every other: ``2 (p-1)`` messages per rank per
superstep).  Every rank waiting in such a step answers roll calls between its polls.

When a rank's deadline passes it does not give up at once.  Rank ``r`` waits
``PRIORITY_S * min(r, PRIORITY_CAP)`` more (the step may still complete), then:

- if some rank's roll call for this step came meanwhile (it answered it), it waits for that
  rank's *verdict*, the ranks that answered, and names the others;
- otherwise it calls the roll itself: one message to every other rank, ``[step]``; the ranks in
  the step (or past it) answer ``[step, their step]`` at their next poll; after ``ROLL_CALL_S``
  (unless the step completes meanwhile) it sends the verdict (a bitmap of the ranks that
  answered) to each rank that answered, and names the ranks that did not.

So where rank 0 came, it alone calls the roll, and the whole round costs ``p - 1`` roll calls,
an answer and a verdict per rank that came: O(p) messages in all, once, when the job is failing
anyway.  Ranks that time out together before any roll call reaches them call their own (each
O(p)); a rank whose verdict never comes calls its own.  The step numbers are the ranks' counts
of their non-blocking control steps, the same on every rank for the same step.

Closing.  Roll calls, answers and verdicts can still be in flight when the step they were about
completes (a stale call answered at the late rank's next poll, an answer to a caller that stopped
listening), and a message left on a freed communicator made Open MPI 5 hang in the next
communicator's ``Split_type``.  So each rank counts the messages it sends to each rank
(:attr:`RollCall.sent_to`) and those it receives (:attr:`RollCall.received`), and
:meth:`RollCall.close` with ``settle=True`` (the context's normal end, after its last step, which
every rank took part in; and only where this context took non-blocking control steps: the same
on every rank, so a context without deadlines pays nothing) is collective: one ``allreduce``
says whether any rank sent any, and then one ``Reduce_scatter_block`` of the counts tells each
rank how many are addressed to it, which it receives (they were all sent before the senders
came to the collective, so they arrive) before the communicator is freed.  (The first collective
is non-blocking and waits at most ``SETTLE_S``: a rank whose exit step timed out while the
others' completed does not come, and does not hang them.)  A barrier alone would
not do: MPI orders no point-to-point message with a collective, so a message sent before it may
still be in flight after it.  Where the context ends after a failure (a rank may be gone),
``close`` stays local: it receives what has come and lets its sends go, and a message still in
flight can reach the freed communicator (the job is failing; the library may report it).

h-relation: none (control data; nothing at all while no deadline passes); at a normal close
after non-blocking steps, the allreduce of one integer, and a ``Reduce_scatter_block`` of ``p``
integers only after a roll call.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
from mpi4py import MPI

from ...util.waiting import poll

#: A roll call, ``[step]``: "are you in my control step?", sent by a rank whose deadline passed.
TAG_ROLL = 77
#: The answer to a roll call: ``[step asked, the answering rank's step]``.
TAG_HERE = 78
#: The caller's verdict: ``step`` (8 bytes), then the bitmap of the ranks that answered.
TAG_VERDICT = 79
#: How long a caller collects the answers to its roll call, in seconds: a rank that waits in the
#: step answers at its next poll.
ROLL_CALL_S = 1.0
#: How much longer than the caller a rank that answered a roll call waits for its verdict.
VERDICT_SLACK_S = 1.0
#: How long a settling ``close`` waits for the messages the counts say are on their way, in
#: seconds (they were sent before the collective: only a broken library makes it expire).
SETTLE_S = 30.0
#: Rank ``r`` calls the roll ``PRIORITY_S * min(r, PRIORITY_CAP)`` after its deadline, so that
#: one rank (the lowest that came) calls it and the others receive its call first.
PRIORITY_S = 0.1
PRIORITY_CAP = 10


class RollCall:
    """One rank's side of the roll calls on ``comm`` (a control step's communicator)."""

    def __init__(self, comm: MPI.Comm):
        self.comm = comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        #: The number of this rank's current non-blocking control step.
        self.step = 0
        self._status = MPI.Status()
        self._sent: list[tuple[MPI.Request, np.ndarray]] = []  # until complete, with their buffers
        self._called: dict[int, float] = {}  # step -> when a roll call for it came
        self._verdicts: dict[int, np.ndarray] = {}  # step -> the ranks that answered (bools)
        self._vbuf = np.empty(8 + (self.size + 7) // 8, dtype=np.uint8)
        #: Roll-call messages (calls, answers, verdicts) this rank sent to each rank.
        self.sent_to = np.zeros(self.size, dtype=np.int64)
        #: Roll-call messages this rank received.
        self.received = 0

    def begin_step(self) -> None:
        """This rank enters its next non-blocking control step."""
        self.step += 1
        if self._called or self._verdicts:  # only after a roll call: forget older steps'
            self._called = {s: t for s, t in self._called.items() if s >= self.step}
            self._verdicts = {s: v for s, v in self._verdicts.items() if s >= self.step}

    def answer(self) -> None:
        """Answer the roll calls that came, keep the verdicts that came (called at every poll
        of a step with a deadline)."""
        comm, status = self.comm, self._status
        while comm.Iprobe(MPI.ANY_SOURCE, TAG_ROLL, status):
            asked = np.empty(1, dtype=np.int64)
            caller = status.Get_source()
            comm.Recv(asked, caller, TAG_ROLL)
            self.received += 1
            self._called.setdefault(int(asked[0]), time.monotonic())
            reply = np.array([asked[0], self.step], dtype=np.int64)
            self._sent.append((comm.Isend(reply, caller, TAG_HERE), reply))
            self.sent_to[caller] += 1
        while comm.Iprobe(MPI.ANY_SOURCE, TAG_VERDICT, status):
            comm.Recv(self._vbuf, status.Get_source(), TAG_VERDICT)
            self.received += 1
            step = int(self._vbuf[:8].view(np.int64)[0])
            self._verdicts[step] = np.unpackbits(self._vbuf[8:], count=self.size).astype(bool)
        if self._sent:
            self._sent = [(r, b) for r, b in self._sent if not r.Test()]

    def close(self, settle: bool = False) -> None:
        """Before the communicator is freed: receive the roll calls, answers and verdicts still
        addressed to this rank and let go of this rank's sends.  ``settle`` (collective: the
        context's normal end, every rank calls it): first make sure every one sent has arrived
        (see the module docstring); otherwise local, never waits, receives only what has come."""
        comm, status = self.comm, self._status
        scratch = np.empty(max(2, self._vbuf.size // 8 + 1), dtype=np.int64)
        expected = None
        until = time.monotonic() + SETTLE_S
        if settle and self.step and self._any_sent(until):  # (only non-blocking steps can send any)
            incoming = np.zeros(1, dtype=np.int64)
            comm.Reduce_scatter_block([self.sent_to, MPI.INT64_T], [incoming, MPI.INT64_T], op=MPI.SUM)
            expected = int(incoming[0])
        while True:
            for tag in (TAG_ROLL, TAG_HERE, TAG_VERDICT):
                while comm.Iprobe(MPI.ANY_SOURCE, tag, status):
                    comm.Recv(scratch, status.Get_source(), tag)
                    self.received += 1
            if expected is None or self.received >= expected or time.monotonic() > until:
                break
            time.sleep(0.001)
        for request, _ in self._sent:
            if not request.Test():
                request.Free()  # MPI completes the send; nothing here waits for it
        self._sent = []

    def _any_sent(self, until: float) -> bool:
        """Collective: whether any rank sent a roll-call message; False where a rank has not come
        by ``until`` (one whose last step timed out: the request is left to complete, or not, on
        the communicator freed next, which MPI allows)."""
        mine = np.array([int(self.sent_to.any())], dtype=np.int64)
        out = np.zeros(1, dtype=np.int64)
        req = self.comm.Iallreduce([mine, MPI.INT64_T], [out, MPI.INT64_T], op=MPI.MAX)
        while not req.Test():
            if time.monotonic() > until:
                return False
            time.sleep(0.0005)
        return bool(out[0])

    def missing(self, req: MPI.Request, pause: Callable[[], object]) -> list[int] | None:
        """This rank's deadline passed in its step :attr:`step` (``req``: the step's collective):
        the ranks that never came (by a verdict, received or made), or None where the step
        completed meanwhile.  ``pause``: what to do between polls (it calls :meth:`answer`)."""
        step = self.step
        done = lambda: True if req.Test() else None  # noqa: E731

        def decided() -> bool | None:
            if req.Test():
                return True
            self.answer()
            return False if step in self._verdicts else None

        # Let a roll call of a lower rank come first; wait for a verdict if one did.
        if poll(done, until=time.monotonic() + PRIORITY_S * min(self.rank, PRIORITY_CAP), pause=pause):
            return None
        self.answer()
        if step in self._called and step not in self._verdicts:
            until = max(time.monotonic(), self._called[step] + ROLL_CALL_S + VERDICT_SLACK_S)
            if poll(decided, until=until, pause=pause):
                return None
        present = self._verdicts.get(step)
        if present is None:
            present = self._call(req, pause)
            if present is None:
                return None
        present[self.rank] = True  # (a verdict whose caller missed this rank's late answer)
        return [int(q) for q in np.flatnonzero(~present)]

    def _call(self, req: MPI.Request, pause: Callable[[], object]) -> np.ndarray | None:
        """Call the roll for :attr:`step`; send the verdict to the ranks that answered and return
        it (None where the step completed meanwhile)."""
        comm, me, p, step = self.comm, self.rank, self.size, self.step
        ask = np.array([step], dtype=np.int64)
        self._sent.extend((comm.Isend(ask, q, TAG_ROLL), ask) for q in range(p) if q != me)
        self.sent_to += 1
        self.sent_to[me] -= 1
        present = np.zeros(p, dtype=bool)
        present[me] = True
        got = np.empty(2, dtype=np.int64)
        status = self._status

        def heard() -> bool | None:
            if req.Test():
                return True
            self.answer()
            while comm.Iprobe(MPI.ANY_SOURCE, TAG_HERE, status):
                comm.Recv(got, status.Get_source(), TAG_HERE)
                self.received += 1
                if got[0] == step and got[1] >= step:  # (an older roll call's answer is dropped)
                    present[status.Get_source()] = True
            return None

        # Every rank that answered has entered the step: where all did, it is about to complete.
        if poll(heard, until=time.monotonic() + ROLL_CALL_S, pause=pause):
            return None
        verdict = np.empty_like(self._vbuf)
        verdict[:8].view(np.int64)[0] = step
        verdict[8:] = np.packbits(present)
        self._sent.extend((comm.Isend(verdict, int(q), TAG_VERDICT), verdict)
                          for q in np.flatnonzero(present) if q != me)
        self.sent_to[present] += 1
        self.sent_to[me] -= 1
        return present
