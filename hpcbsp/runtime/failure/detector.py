"""The failure detector of a node's watcher: the protocol (:mod:`.protocol`) on a UDP socket,
the verdict on a stopped rank of this node, the lines that say why a job ends, and the
announcements of deaths that let one node name the first across nodes.

Part of the node's watcher (:mod:`.nodewatch`, which makes one :class:`Detector` and acts on what
it says): the standard library only, :mod:`.protocol` and :mod:`hpcbsp.util.procstat` loaded by
path when the watcher runs as a script.

**The job's nodes.**  When the job spans nodes, the first context tells each node's watcher who
the others are (:func:`.deathwatch.introduce`: host names, the address and UDP port each watcher
listens on, the ranks, and the job's secret, 32 random bytes made by the context's first rank
and sent through MPI; :meth:`Detector.meet`, over the watcher's UNIX socket, which takes only its
own user's connections).  The first introduction makes the ring; later ones change nothing.
The socket is bound to the address by which the others reach this node (its host name's), not
to every interface.  Entries on a loopback address are left out (unless every one is: one
machine), and so are nodes whose watcher has no socket.

**Verdicts.**  The protocol gives a node up when it has not been heard from for ``TIMEOUT``
seconds (it died, its processes are stopped, its link is down): its nearest observer that still
hears the others says ``[hpcbsp] node HOST (rank R) has not been heard from for T s ...``, and
every node that learns the verdict ends its ranks.  A rank of this node stopped (state ``T``,
SIGSTOP) for ``TIMEOUT`` seconds ends the job the same way, this node speaking
(:meth:`Detector.tick`).  The detector runs beside the ranks, not in their waits: a superstep
that computes for hours is never suspected.  Period and timeout come from the rank that started
the watcher (``$HPCBSP_HEARTBEAT_PERIOD``, ``$HPCBSP_HEARTBEAT_TIMEOUT``,
:func:`.deathwatch.heartbeat_settings`; a timeout of 0 turns the detector off: no socket).

**First across nodes.**  A watcher that is to name a death first floods ``died`` (the wall-clock
time it saw the pipe close, and the rank).  A death that may not be the first (a SIGKILL or an
unknown end, on a job spread over nodes) is named only after 0.3 s, in which the others'
announcements come in (:meth:`Detector.listen`); a crash is named at once.  If another node
announced a death earlier by more than :data:`SAME_MOMENT` (10 ms), this watcher stays quiet and
that node names its rank.  Deaths closer than that are one moment, as far as the nodes can tell
(the watchers wake up, and the nodes' clocks agree, no better; under Open MPI a rank that loses a
peer's connection aborts a fraction of a millisecond after the peer died): the one seen first
speaks and names the others with it ("within 0.2 ms of rank 3/4 (on node4): either may have died
first"); the rest stay quiet (:meth:`Detector.deaths_elsewhere`).  With the detector off the
watchers do not talk, and each node names its own first death.
"""
from __future__ import annotations

import select
import socket
import time
from typing import Iterable

if __package__:
    from ...util import procstat
    from . import lines
    from .protocol import SILENT, Member
else:  # loaded by the watcher's script (python -I -S nodewatch.py), which puts util/ on the path
    import lines  # type: ignore[no-redef]
    import procstat  # type: ignore[no-redef]
    from protocol import SILENT, Member  # type: ignore[no-redef]

__all__ = ["SAME_MOMENT", "Detector", "own_address"]

#: Seconds within which two nodes' first deaths count as one moment (see the module docstring).
SAME_MOMENT = 0.01
#: Copies of the goodbye (datagrams may be lost).
BYES = 3


def own_address() -> str:
    """The address by which the job's other nodes reach this one: its host name's (loopback
    where the name does not resolve: then no other node reaches it)."""
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class Detector:
    """One node's side of the failure detector (see the module docstring): ``host`` is this
    node's name, ``period`` and ``timeout`` the heartbeat's (a timeout of 0: off); the UDP socket,
    bound to ``address`` (default :func:`own_address`), joins the watcher's ``poll`` set, and the
    watcher calls :meth:`hear` when it is readable."""

    def __init__(self, host: str, period: float, timeout: float, poll: select.epoll,
                 address: str | None = None):
        self.host, self.period, self.timeout = host, period, timeout
        self.udp: socket.socket | None = None
        if timeout > 0:
            try:
                self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self.udp.bind((address or own_address(), 0))
                self.udp.setblocking(False)
                poll.register(self.udp.fileno(), select.EPOLLIN)
            except OSError:
                self.udp = None  # no IP here: the node's own ranks are still watched
        self.member: Member | None = None
        self.hosts: list[str] = []                 # the ring, by member index
        self.addresses: list[tuple[str, int]] = []
        self.ranks: list[list[int]] = []
        self.stopped: dict[int, float] = {}  # pid -> since when the rank is stopped
        self.acted = False  # the verdict has been handed to the watcher

    @property
    def port(self) -> int:
        """The UDP port the other nodes' datagrams reach (0: none)."""
        return self.udp.getsockname()[1] if self.udp is not None else 0

    @property
    def address(self) -> str:
        """The address the socket is bound to ("" without one)."""
        return self.udp.getsockname()[0] if self.udp is not None else ""

    def fileno(self) -> int | None:
        return self.udp.fileno() if self.udp is not None else None

    def has_peers(self) -> bool:
        """Whether this node hears the job's other nodes (the detector is on, the job spans nodes)."""
        return self.udp is not None and self.member is not None

    # -- the job's nodes --------------------------------------------------------------------
    def meet(self, table: bytes) -> None:
        """Learn the job's nodes and secret from a rank's table (``peers``, ``key HEX``, then lines
        ``HOST ADDRESS PORT RANK,RANK,...``); the first table only."""
        if self.member is not None or self.udp is None:
            return
        lines = table.decode(errors="replace").splitlines()
        try:
            key = bytes.fromhex(lines[1].split()[1]) if lines[1].startswith("key ") else b""
        except (IndexError, ValueError):
            return
        entries = []
        for line in lines[2:]:
            try:
                host, address, port, ranks = line.split()
                entries.append((host, address, int(port), [int(x) for x in ranks.split(",")]))
            except ValueError:
                continue
        entries = [e for e in entries if e[2]]
        if not all(e[1].startswith("127.") for e in entries):
            entries = [e for e in entries if not e[1].startswith("127.")]
        entries.sort()
        hosts = [e[0] for e in entries]
        if self.host not in hosts or len(set(hosts)) != len(hosts) or len(hosts) < 2 or len(key) < 16:
            return
        self.hosts = hosts
        self.addresses = [(e[1], e[2]) for e in entries]
        self.ranks = [e[3] for e in entries]
        self.member = Member(hosts.index(self.host), len(hosts), key, self.period, self.timeout,
                             time.monotonic())

    # -- datagrams --------------------------------------------------------------------------
    def _out(self, sends: list[tuple[int, bytes]]) -> None:
        if self.udp is None:
            return
        for to, data in sends:
            try:
                self.udp.sendto(data, self.addresses[to])
            except OSError:
                pass  # no route (a cut link): the peer's silence is its own news

    def hear(self, now: float | None = None) -> None:
        """Take in the datagrams that arrived (heard at ``now``, default the clock's now)."""
        if self.udp is None:
            return
        now = time.monotonic() if now is None else now
        while True:
            try:
                data = self.udp.recv(512)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            if self.member is not None:
                self._out(self.member.receive(data, now))

    def leave(self) -> None:
        """This node's ranks all ended normally: the others stop expecting it."""
        if self.member is not None and self.member.verdict is None:
            for _ in range(BYES):
                self._out(self.member.leave())

    def relaying(self) -> bool:
        """Whether the verdict is still to be sent again (the watcher lingers for it)."""
        return self.member is not None and self.member.verdict is not None and self.member.relays > 0

    # -- verdicts ---------------------------------------------------------------------------
    def tick(self, now: float, own: Iterable[tuple[int, int, int]]) -> tuple[str, bool] | None:
        """One period at ``now``: the protocol's tick and a look at ``own``, this node's ranks as
        ``(rank, size, pid)``.  Returns ``(line, speak)`` once, when the job is to end: the line
        that says why and whether this node says it; None otherwise."""
        if self.member is not None:
            self._out(self.member.tick(now))
        for rank, size, pid in own:
            if procstat.probe(pid)[0] != "T":
                self.stopped.pop(pid, None)
                continue
            since = self.stopped.setdefault(pid, now)
            if now - since > self.timeout and not self.acted:
                if self.member is not None:
                    self._out(self.member.give_up(now))
                self.acted = True
                return lines.rank_stopped(rank, size, pid, self.host, now - since, self.timeout), True
        return self.ending()

    def ending(self) -> tuple[str, bool] | None:
        """The protocol's verdict, once: ``(line, speak)`` (see :meth:`tick`), or None."""
        m = self.member
        if m is None or m.verdict is None or self.acted:
            return None
        self.acted = True
        v = m.verdict
        host = self.hosts[v.subject]
        if v.reason == SILENT:
            line = lines.node_silent(host, self.ranks[v.subject], v.silent_for, self.timeout)
        else:
            line = lines.node_ended(host)
        return line, v.speaker == m.me

    def counts(self) -> dict[str, int]:
        """The protocol's counters (datagrams sent, received, forged, replayed)."""
        return dict(self.member.counts) if self.member is not None else {}

    # -- announced deaths -------------------------------------------------------------------
    def announce(self, seen: float, rank: int) -> None:
        """Tell the other nodes that ``rank`` of this node died at wall-clock time ``seen``."""
        if self.member is not None:
            self._out(self.member.announce(seen, rank))

    def listen(self, seconds: float) -> None:
        """Take in the other nodes' datagrams for ``seconds`` (a plain sleep without the detector)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.udp is None:
                time.sleep(left)
                return
            try:
                ready, _, _ = select.select([self.udp], [], [], left)
            except InterruptedError:
                continue
            if ready:
                self.hear()

    def deaths_elsewhere(self, seen: float) -> tuple[bool, list[tuple[str, float, int]]]:
        """The other nodes' announced deaths against this node's, seen at wall-clock time
        ``seen``: whether one of them speaks instead of this node (it saw its death earlier by
        more than :data:`SAME_MOMENT`, or within it but first: every node that heard the same
        picks the same one), and the deaths within :data:`SAME_MOMENT` of this one's, as
        ``(host, time, rank)`` (to be named with it)."""
        deaths = [(self.hosts[i], t, r) for i, (t, r) in self.member.deaths.items()] if self.member else []
        near = [d for d in deaths if abs(d[1] - seen) <= SAME_MOMENT]
        first = min([(seen, self.host), *((t, h) for h, t, _ in near)])
        earlier = any(t < seen - SAME_MOMENT for _, t, _ in deaths)
        return earlier or first[1] != self.host, near

