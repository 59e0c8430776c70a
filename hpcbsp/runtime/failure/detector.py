"""The failure detector of a node's watcher: heartbeats between the job's nodes, the verdicts
on silence, and the announcements of deaths that let one node name the first across nodes.

Part of the node's watcher (:mod:`.nodewatch`, which makes one :class:`Detector` and acts on what
it says): the standard library only, and :mod:`hpcbsp.util.procstat` loaded by path when the
watcher runs as a script.

**Heartbeats.**  When the job spans nodes, every context tells each node's watcher where the
others listen (:func:`.deathwatch.introduce`: the host names and UDP ports, gathered over the
context's communicator; :meth:`Detector.meet`).  Every ``PERIOD`` seconds each watcher sends a
datagram (``hb HOST``) to every other node's watcher and looks at its own ranks.  A node whose
ranks all ended says ``bye HOST`` and is not expected any more.  The detector runs beside the
ranks, not in their waits: a superstep that computes for hours is never suspected.  Period and
timeout come from the rank that started the watcher (``$HPCBSP_HEARTBEAT_PERIOD``,
``$HPCBSP_HEARTBEAT_TIMEOUT``, :func:`.deathwatch.heartbeat_settings`, through the watcher's
arguments; a timeout of 0 turns the detector off: no socket, no datagrams).

**Silence.**  A node not heard from for ``TIMEOUT`` seconds (it died, its processes are stopped,
its link is down) ends the job: the next node by name that is still heard (so that all agree,
one line for the job, :meth:`Detector.observer_of`) says ``[hpcbsp] node HOST (rank R) has not
been heard from for T s ...`` and SIGKILLs its ranks, the launcher ends the rest (the other nodes
kill theirs 2.5 periods later if it has not).  A rank of this node stopped (state ``T``, SIGSTOP)
for ``TIMEOUT`` seconds ends the job the same way (:meth:`Detector.silence`).

**First across nodes.**  A watcher that is to name a death first tells the job's other watchers
(``died HOST TIME RANK``: the wall-clock time it saw the pipe close).  A death that may not be the
first (a SIGKILL or an unknown end, on a job spread over nodes) is named only after 0.3 s, in
which the others' announcements come in (:meth:`Detector.listen`); a crash is named at once.  If
another node announced a death earlier by more than :data:`SAME_MOMENT` (10 ms), this watcher
stays quiet and that node names its rank: when one rank is killed, the ranks that the launcher
ends for it later are not named before it.  Deaths closer than that are one moment, as far as
the nodes can tell: the watchers wake up, and the nodes' clocks agree (NTP, PTP), no better;
under Open MPI a rank that loses a peer's connection aborts (``MPI_ERRORS_ARE_FATAL``) a fraction
of a millisecond after the peer died.  Of those, the one seen first speaks and names the others
with it ("within 0.2 ms of rank 3/4 (on node4): either may have died first"); the rest stay
quiet (:meth:`Detector.deaths_elsewhere`).  With the detector off the watchers do not talk, and
each node names its own first death.
"""
from __future__ import annotations

import select
import socket
import time
from typing import Iterable

if __package__:
    from ...util import procstat
else:  # loaded by the watcher's script (python -I -S nodewatch.py), which puts util/ on the path
    import procstat  # type: ignore[no-redef]

__all__ = ["SAME_MOMENT", "Peer", "Detector"]

#: Seconds within which two nodes' first deaths count as one moment: the watchers wake up, and the
#: nodes' clocks agree, no better than that; a rank that an MPI library ends for a lost peer can
#: die a fraction of a millisecond after it.
SAME_MOMENT = 0.01


class Peer:
    """Another node of the job, as this node's watcher hears it."""

    __slots__ = ("host", "address", "ranks", "heard", "done", "died")

    def __init__(self, host: str, address: tuple[str, int], ranks: list[int], heard: float):
        self.host, self.address, self.ranks, self.heard = host, address, ranks, heard
        self.done = False  # its ranks have all ended: not expected any more
        self.died: tuple[float, int] | None = None  # (wall-clock time, rank) of the first death it announced


class Detector:
    """One node's side of the failure detector (see the module docstring): ``host`` is this
    node's name, ``period`` and ``timeout`` the heartbeat's (a timeout of 0: off); the UDP socket
    joins the watcher's ``poll`` set, and the watcher calls :meth:`hear` when it is readable."""

    def __init__(self, host: str, period: float, timeout: float, poll: select.epoll):
        self.host, self.period, self.timeout = host, period, timeout
        self.udp: socket.socket | None = None
        if timeout > 0:
            try:
                self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                self.udp.bind(("", 0))
                self.udp.setblocking(False)
                poll.register(self.udp.fileno(), select.EPOLLIN)
            except OSError:
                self.udp = None  # no IP here: the node's own ranks are still watched
        self.peers: dict[str, Peer] = {}  # the job's other nodes, by host name
        self.stopped: dict[int, float] = {}  # pid -> since when the rank is stopped

    @property
    def port(self) -> int:
        """The UDP port the other nodes' heartbeats reach (0: none)."""
        return self.udp.getsockname()[1] if self.udp is not None else 0

    def fileno(self) -> int | None:
        return self.udp.fileno() if self.udp is not None else None

    # -- heartbeats -------------------------------------------------------------------------
    def send(self, datagram: bytes) -> None:
        """Send ``datagram`` to every node still expected."""
        if self.udp is None:
            return
        for peer in self.peers.values():
            if not peer.done:
                try:
                    self.udp.sendto(datagram, peer.address)
                except OSError:
                    pass  # no route (a cut link): the peer's silence is its own news

    def hear(self, now: float | None = None) -> None:
        """Take in the heartbeats and announced deaths that arrived (heard at ``now``, default
        the clock's now)."""
        assert self.udp is not None
        now = time.monotonic() if now is None else now
        while True:
            try:
                data = self.udp.recv(512)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            word, host, *rest = data.decode(errors="replace").split() + ["", ""]
            peer = self.peers.get(host)
            if peer is not None:
                peer.heard = now
                peer.done |= word == "bye"
                if word == "died" and peer.died is None:
                    try:
                        peer.died = float(rest[0]), int(rest[1])
                    except ValueError:
                        pass

    def meet(self, table: bytes) -> None:
        """Learn the job's other nodes from a rank (lines ``HOST PORT RANK,RANK,...``)."""
        now = time.monotonic()
        for line in table.decode(errors="replace").splitlines()[1:]:
            try:
                host, port, ranks = line.split()
                address = (socket.gethostbyname(host), int(port))
                numbers = [int(x) for x in ranks.split(",")]
            except (ValueError, OSError):
                continue  # a name that does not resolve here: that node cannot be watched
            if not address[0].startswith("127."):  # (another node's name meaning this one: unusable)
                self.add_peer(host, address, numbers, now)

    def add_peer(self, host: str, address: tuple[str, int], ranks: list[int], now: float) -> None:
        """Watch node ``host`` (its watcher's heartbeats come from ``address``), counting its
        silence from ``now``."""
        if host != self.host and host not in self.peers and address[1]:
            self.peers[host] = Peer(host, address, ranks, now)

    # -- silence ----------------------------------------------------------------------------
    def silence(self, now: float, own: Iterable[tuple[int, int, int]]) -> tuple[str, bool] | None:
        """Whether the job ends at ``now``: ``(line, speak)``, the line that says why and whether
        this node says it (a node silent for the timeout, which only its observer names; or one
        of ``own``, this node's ranks as ``(rank, size, pid)``, stopped for the timeout), or None."""
        silent = [p for p in self.peers.values() if not p.done and now - p.heard > self.timeout]
        if silent:
            peer = silent[0]
            ranks = _ranks_text(peer.ranks)
            return (f"[hpcbsp] node {peer.host} ({ranks}) has not been heard from for "
                    f"{now - peer.heard:.0f} s: it died, froze or lost its link; ending the job "
                    f"(HPCBSP_HEARTBEAT_TIMEOUT={self.timeout:g})",
                    self.observer_of(peer.host, {p.host for p in silent}) == self.host)
        for rank, size, pid in own:
            if procstat.probe(pid)[0] != "T":
                self.stopped.pop(pid, None)
                continue
            since = self.stopped.setdefault(pid, now)
            if now - since > self.timeout:
                return (f"[hpcbsp] rank {rank}/{size} (pid {pid} on {self.host}) has been stopped for "
                        f"{now - since:.0f} s (SIGSTOP, or a frozen node); ending the job "
                        f"(HPCBSP_HEARTBEAT_TIMEOUT={self.timeout:g})", True)
        return None

    def observer_of(self, host: str, silent: set[str]) -> str:
        """The node that speaks for lost node ``host``: the next one after it, in the order of the
        names, that this watcher still hears (itself included).  Every node that hears the same
        ones picks the same: one line for the job, not one per node."""
        ring = sorted({host, self.host, *(h for h in self.peers if h not in silent)})
        return ring[(ring.index(host) + 1) % len(ring)]

    # -- announced deaths -------------------------------------------------------------------
    def announce(self, seen: float, rank: int) -> None:
        """Tell the other nodes that ``rank`` of this node died at wall-clock time ``seen``."""
        self.send(b"died %s %.6f %d" % (self.host.encode(), seen, rank))

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

    def deaths_elsewhere(self, seen: float) -> tuple[bool, list[Peer]]:
        """The other nodes' announced deaths against this node's, seen at wall-clock time
        ``seen``: whether one of them speaks instead of this node (it saw its death earlier by
        more than :data:`SAME_MOMENT`, or within it but first: every node that heard the same
        picks the same one), and the nodes whose deaths came within :data:`SAME_MOMENT` of
        this one's (to be named with it)."""
        near = [p for p in self.peers.values() if p.died is not None and abs(p.died[0] - seen) <= SAME_MOMENT]
        first = min([(seen, self.host), *((p.died[0], p.host) for p in near if p.died)])
        earlier = any(p.died is not None and p.died[0] < seen - SAME_MOMENT for p in self.peers.values())
        return earlier or first[1] != self.host, near


def _ranks_text(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:8])) + (f", ... ({len(ranks)} in all)" if len(ranks) > 8 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"
