"""The failure detector's protocol, apart from its sockets: a state machine fed with datagrams
and clock ticks that returns the datagrams to send and the job's verdict.

The same code runs in every node's watcher (:mod:`.detector` puts it on a UDP socket) and in the
simulation of ``python -m hpcbsp.bench detector`` (thousands of members in one event loop).
Standard library only: the watcher runs as a script with ``python -I -S``.

**Members.**  The job's nodes are numbered ``0 .. n-1`` in one order that every node shares (the
introduction's table, sorted by host name) and form a ring.  A node that has said goodbye (its
ranks ended normally) is left out of the ring by the nodes that heard it; its goodbye names the
nearest members it knows have left too, so that the news of a run of neighbours that left in any
order reaches the member beside the run.

**Heartbeats: a ring of observers** (the detector of ULFM, Bosilca et al., SC 2016).  Every
``period`` each member sends one heartbeat to each of its ``K`` predecessors on the ring, its
observers, and looks at its ``K`` successors, the members it observes: ``K`` datagrams per
period and ``2K`` neighbours per node, whatever the number of nodes.  Any authenticated datagram
from a member counts as hearing it.  A member whose own ticks stopped for more than three periods
(its watcher was stalled or stopped) counts the silences afresh: it does not accuse the others of
its own stall.

**Verdicts.**  A successor not heard for ``timeout`` seconds is given up.  Its nearest observer
that still hears the nodes between them (the first predecessor still heard) is the *speaker*: it
issues the verdict and says the line.  An observer farther away waits ``FOLLOW`` periods for the
speaker's verdict and, hearing none (the speaker still hears the node: a partial loss), issues it
itself.  A member may also give itself up (:meth:`Member.give_up`: a rank of its node stopped).
A verdict is flooded: the first time a member learns it, it sends it to the members ``+1, +2, +4,
..., +2^(m-1)`` places on (``2^m >= n``), so that it reaches every node in about ``log2 n`` hops
even when some are lost, each member forwarding ``log2 n`` datagrams once; it sends it again to
its ring neighbours for :data:`RELAY` periods, and answers every heartbeat with it.  Every member
that knows a verdict ends its ranks: the whole job ends.

**Announced deaths.**  A member that saw one of its ranks die floods ``died`` (its wall-clock
time and the rank) the same way, so that the earliest death across nodes is the one named.

**Authentication.**  Every datagram is ``MAGIC kind sender seq body HMAC-SHA256(key, all before)``;
the key is the job's secret (32 random bytes made by the job's first rank, handed to the watchers
over their UNIX sockets only).  A datagram whose MAC is wrong is dropped and counted as forged;
one whose sequence number (per sender, one counter over all its datagrams) was seen already, or is
more than :data:`WINDOW` behind the highest seen, is dropped and counted as replayed (a sliding
window as IPsec's: datagrams reordered within it are taken).  So nobody without the key can
make a node be given up, kept alive, or a job end.

What counts as alive is the node's watcher answering, not progress of a superstep: a superstep
that computes for hours is never suspected.
"""
from __future__ import annotations

import hashlib
import hmac
import struct
from typing import NamedTuple

__all__ = ["HB", "BYE", "VERDICT", "DIED", "SILENT", "STOPPED", "K", "FOLLOW", "RELAY", "WINDOW",
           "Verdict", "Member", "seal", "unseal"]

HB, BYE, VERDICT, DIED = 1, 2, 3, 4
#: Why a verdict was reached: the subject was not heard for the timeout; a rank of the subject's
#: own node was stopped that long.
SILENT, STOPPED = 1, 2
#: Members each member observes (and observers it beats to).
K = 2
#: Periods a farther observer waits for the speaker's verdict before it issues the verdict itself.
FOLLOW = 3
#: Periods a member that knows a verdict sends it again to its ring neighbours.
RELAY = 3
#: How far behind the highest sequence number seen from a sender a datagram may still be taken.
WINDOW = 64
#: Members that have left that a goodbye names besides its sender (the nearest ones).
GONE = 64

MAGIC = b"hbw1"
_HEAD = struct.Struct(">4sBIQ")
_VERDICT = struct.Struct(">IIBd")  # subject, speaker, reason, seconds silent
_DIED = struct.Struct(">Idi")      # origin, wall-clock time, rank
MAC_SIZE = 32

Send = tuple[int, bytes]  # (member index, datagram)


class Verdict(NamedTuple):
    """The job's end: ``subject`` (the member given up, or the one whose rank stopped), the member
    that says the line (``speaker``), ``reason`` (:data:`SILENT` or :data:`STOPPED`) and how long
    the speaker had not heard the subject (seconds)."""

    subject: int
    speaker: int
    reason: int
    silent_for: float


def seal(key: bytes, kind: int, sender: int, seq: int, body: bytes) -> bytes:
    """One datagram: the header, ``body`` and the MAC over both."""
    msg = _HEAD.pack(MAGIC, kind, sender, seq) + body
    return msg + hmac.digest(key, msg, hashlib.sha256)


def unseal(key: bytes, data: bytes) -> tuple[int, int, int, bytes] | None:
    """``(kind, sender, seq, body)`` of an authentic datagram, None for any other bytes."""
    if len(data) < _HEAD.size + MAC_SIZE or not data.startswith(MAGIC):
        return None
    msg, mac = data[:-MAC_SIZE], data[-MAC_SIZE:]
    if not hmac.compare_digest(mac, hmac.digest(key, msg, hashlib.sha256)):
        return None
    _, kind, sender, seq = _HEAD.unpack_from(msg)
    return kind, sender, seq, msg[_HEAD.size:]


class Member:
    """Member ``me`` of ``n`` (see the module docstring), keyed with the job's ``key``, created at
    ``now`` (a silence is counted from then at the latest).  Feed it :meth:`tick` every ``period``
    and :meth:`receive` every datagram; send what they return.  :attr:`verdict` is the job's end
    once known; :attr:`deaths` the deaths announced by others."""

    def __init__(self, me: int, n: int, key: bytes, period: float, timeout: float, now: float,
                 k: int = K):
        if not 0 <= me < n or len(key) < 16:
            raise ValueError("a member index within 0..n-1 and a key of at least 16 bytes")
        self.me, self.n, self.key, self.period, self.timeout, self.k = me, n, key, period, timeout, k
        self.last_tick: float | None = None  # this member's own last tick
        self.seq = 0
        self.heard: dict[int, float] = {}    # last time each observed member was heard
        self.done: set[int] = set()          # members that said goodbye
        self.windows: dict[int, tuple[int, int]] = {}  # sender -> (highest seq, bitmap of those below)
        self.verdict: Verdict | None = None
        self.learnt: float | None = None     # when this member learnt the verdict
        self.relays = 0                      # retransmissions of the verdict left
        self.waiting_since: float | None = None  # a farther observer waiting for the speaker
        self.deaths: dict[int, tuple[float, int]] = {}  # origin -> (wall-clock time, rank)
        self.counts = {"sent": 0, "received": 0, "forged": 0, "replayed": 0}

    # -- the ring ---------------------------------------------------------------------------
    def _walk(self, step: int, count: int) -> list[int]:
        """The ``count`` nearest members in direction ``step`` (+1, -1) that have not said goodbye."""
        out, i = [], self.me
        for _ in range(self.n - 1):
            i = (i + step) % self.n
            if i not in self.done:
                out.append(i)
                if len(out) == count:
                    break
        return out

    def observed(self) -> list[int]:
        """The members this one observes: its ``k`` nearest successors still in the ring."""
        return self._walk(1, self.k)

    def observers(self) -> list[int]:
        """The members that observe this one: its ``k`` nearest predecessors still in the ring."""
        return self._walk(-1, self.k)

    def _send(self, to: list[int], kind: int, body: bytes = b"") -> list[Send]:
        out = []
        for i in to:
            if i != self.me:
                self.seq += 1
                out.append((i, seal(self.key, kind, self.me, self.seq, body)))
        self.counts["sent"] += len(out)
        return out

    def _fan(self) -> list[int]:
        """Where a flooded datagram goes first: ``+1, +2, +4, ...`` places on."""
        out, step = [], 1
        while step < self.n:
            out.append((self.me + step) % self.n)
            step *= 2
        return out

    # -- the clock --------------------------------------------------------------------------
    def tick(self, now: float) -> list[Send]:
        """One period at ``now``: the heartbeats, and a verdict on a silent member."""
        if self.verdict is not None:
            if self.relays <= 0:
                return []
            self.relays -= 1
            return self._send(list(dict.fromkeys(self._walk(1, self.k) + self._walk(-1, self.k))), VERDICT,
                              self._verdict_body())
        out = self._send(self.observers(), HB)
        watched = self.observed()
        stalled = self.last_tick is not None and now - self.last_tick > 3 * self.period
        self.last_tick = now
        for i in watched:
            self.heard[i] = max(self.heard.get(i, now), now) if stalled else self.heard.get(i, now)
        silent = [i for i in watched if now - self.heard[i] > self.timeout]
        if not silent:
            self.waiting_since = None
            return out
        subject = silent[0]
        if subject == watched[0]:  # the nearest observer still hearing the others: the speaker
            return out + self._issue(Verdict(subject, self.me, SILENT, now - self.heard[subject]), now)
        if self.waiting_since is None:
            self.waiting_since = now
        elif now - self.waiting_since >= FOLLOW * self.period:  # the speaker has not spoken
            return out + self._issue(Verdict(subject, self.me, SILENT, now - self.heard[subject]), now)
        return out

    def give_up(self, now: float, reason: int = STOPPED) -> list[Send]:
        """This member ends the job itself (a rank of its node stopped for the timeout)."""
        if self.verdict is not None:
            return []
        return self._issue(Verdict(self.me, self.me, reason, 0.0), now)

    def _issue(self, verdict: Verdict, now: float) -> list[Send]:
        self.verdict, self.learnt, self.relays = verdict, now, RELAY
        return self._send(self._fan() + self._walk(-1, self.k), VERDICT, self._verdict_body())

    def _verdict_body(self) -> bytes:
        assert self.verdict is not None
        v = self.verdict
        return _VERDICT.pack(v.subject, v.speaker, v.reason, v.silent_for)

    def announce(self, seen: float, rank: int) -> list[Send]:
        """Flood that ``rank`` of this node died at wall-clock time ``seen``."""
        return self._send(self._fan(), DIED, _DIED.pack(self.me, seen, rank))

    def leave(self) -> list[Send]:
        """Goodbye: this node's ranks all ended normally (sent to the ring neighbours both ways,
        with the nearest members it knows have left: so that a member whose neighbours left in any
        order learns of each of them, and does not wait for one that has gone)."""
        near = sorted(self.done, key=lambda i: min((i - self.me) % self.n, (self.me - i) % self.n))
        body = struct.pack(f">{min(len(near), GONE)}I", *near[:GONE])
        return self._send(list(dict.fromkeys(self._walk(1, self.k) + self._walk(-1, self.k))), BYE, body)

    # -- datagrams --------------------------------------------------------------------------
    def _fresh(self, sender: int, seq: int) -> bool:
        """Whether ``seq`` from ``sender`` is new (and remember it)."""
        top, seen = self.windows.get(sender, (0, 0))
        if seq > top:
            shift = seq - top
            self.windows[sender] = (seq, ((seen << shift) | (1 << (shift - 1))) & ((1 << WINDOW) - 1)
                                    if shift <= WINDOW else 0)
            return True
        back = top - seq
        if back == 0 or back > WINDOW or seen >> (back - 1) & 1:
            return False
        self.windows[sender] = (top, seen | 1 << (back - 1))
        return True

    def receive(self, data: bytes, now: float) -> list[Send]:
        """Take in one datagram heard at ``now``; returns what to send in answer."""
        opened = unseal(self.key, data)
        if opened is None:
            self.counts["forged"] += 1
            return []
        kind, sender, seq, body = opened
        if not 0 <= sender < self.n or sender == self.me:
            self.counts["forged"] += 1  # authentic but not a member: a key shared with another job
            return []
        if not self._fresh(sender, seq):
            self.counts["replayed"] += 1
            return []
        self.counts["received"] += 1
        self.heard[sender] = now
        if kind == BYE:
            for gone in (sender, *struct.unpack(f">{len(body) // 4}I", body[:len(body) // 4 * 4])):
                if gone < self.n and gone != self.me:
                    self.done.add(gone)
                    self.heard.pop(gone, None)
        elif kind == VERDICT and len(body) == _VERDICT.size:
            if self.verdict is None:
                subject, speaker, reason, silent_for = _VERDICT.unpack(body)
                if subject < self.n and speaker < self.n:
                    self.verdict, self.learnt, self.relays = Verdict(subject, speaker, reason, silent_for), now, RELAY
                    return self._send(self._fan(), VERDICT, self._verdict_body())
        elif kind == DIED and len(body) == _DIED.size:
            origin, seen, rank = _DIED.unpack(body)
            if origin < self.n and origin != self.me and origin not in self.deaths:
                self.deaths[origin] = (seen, rank)
                return self._send(self._fan(), DIED, body)
        elif kind == HB and self.verdict is not None:
            return self._send([sender], VERDICT, self._verdict_body())  # it has not heard: tell it
        return []
