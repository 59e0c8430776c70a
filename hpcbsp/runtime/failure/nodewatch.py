"""The node's death watch: one process per job and node that sees its ranks end, in order.

Started by :mod:`.deathwatch` (the first rank of the job on this node to open a BSP context
spawns it; every rank then registers), it runs as ``python -I -S nodewatch.py MARKER FD PERIOD
TIMEOUT``, with the standard library only (its siblings :mod:`.detector` and :mod:`.nodeclean`,
and ``hpcbsp/util/procstat.py``, loaded by path), in a session of its own: Ctrl-C at the terminal
and the launcher's kills of the ranks do not reach it, and it ends by itself once every
registered rank has ended.

**Registration.**  ``FD`` is a listening UNIX socket (an abstract name, private to the node's
network namespace, derived from the job's key).  A rank connects, sends ``"RANK SIZE PID\\n"``
with the read end of a pipe whose write end only it holds (``SCM_RIGHTS``), and waits for
``ok PORT`` (the watcher's heartbeat port).  Connections from another user are refused (``SO_PEERCRED``).

**Order of the ends.**  Every pipe sits in one ``epoll`` set.  The kernel closes a process's
pipe as the process exits, in that process's own context, and ``epoll`` queues the readiness in
that order; ``epoll_wait`` hands the events back in the same order however late this watcher runs.
So the first pipe that closed is the first rank of the node that ended, even under heavy load and
even when the launcher killed the other ranks a millisecond later (MPICH's hydra does; it then
reaps them in rank order, so the order the launcher reaps in, or the order of the watchers' waking,
which the watch used before, says nothing).

**What a pipe says.**  A rank writes one word before its pipe closes: ``bye`` (a normal exit,
``atexit``), ``claimed`` (it reported its own failure and aborts the job: the launcher's kills that
follow are no news) or ``owner`` (it was interrupted and said so itself, taking the node's failure
marker; see :func:`.deathwatch.claim_report`) or ``stopped`` (SIGTERM ended it: the job is being
stopped).  A pipe that closes without a word is a rank that
died silently.  For the first one only (the rest follow from it) the watcher reads how it ended
from ``/proc/PID/stat`` while the launcher has not reaped it (:func:`verdict`): HUP, INT, TERM and
plain exits are a job being stopped, not a death, and stay quiet; a crash (SEGV, BUS, ABRT, ...)
is named; SIGKILL (the out-of-memory killer, a kill from outside) is named plainly when every rank
of the job is on this node (the order is then the job's order); on a job spread over nodes a rank
of another node may have died first and the launcher killed this one for it, so unless another
rank of this node still runs 0.3 s later, the line says that doubt.  Across nodes only the first
death is named: the watchers announce their deaths to each other (:mod:`.detector`).

**The failure detector** (:mod:`.detector`): when the job spans nodes, the watchers send each
other heartbeats; a node not heard from, or a rank of this node stopped, for ``TIMEOUT`` seconds
ends the job: this watcher says why (or leaves it to the node that speaks for a lost one) and
SIGKILLs its ranks.  ``PERIOD`` and ``TIMEOUT`` are the rank's ``$HPCBSP_HEARTBEAT_PERIOD`` and
``$HPCBSP_HEARTBEAT_TIMEOUT`` (a timeout of 0 turns the detector off).

**One line per node.**  Before it prints, the watcher takes the node's failure marker (an atomic
``mkdir``, the same one :func:`.deathwatch.claim_report` takes): whoever has it speaks for the
node.  The watcher removes the marker when the node's last rank has ended, and the ``/dev/shm``
files the ranks had mapped when the job ended abnormally (MPICH leaves its ``mpich_shm_*`` files
behind when its ranks are killed).  Once the first rank is registered it removes the markers and MPICH segments of this
user's earlier jobs on this node that are provably dead (their launcher is gone; no process maps
the segment, and it is older than a minute; :mod:`.nodeclean`).
"""
from __future__ import annotations

import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Callable, NamedTuple

if __package__:
    from ...util import procstat
    from . import ending, nodeclean
    from .detector import Detector
else:  # run as the watcher's script (python -I -S nodewatch.py): its siblings and util/procstat.py, by path
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [_here, os.path.join(os.path.dirname(os.path.dirname(_here)), "util")]
    import ending  # type: ignore[no-redef]
    import nodeclean  # type: ignore[no-redef]
    import procstat  # type: ignore[no-redef]
    from detector import Detector  # type: ignore[no-redef]

__all__ = ["verdict", "Rank", "Watch", "main"]

#: Seconds without any registered rank after which a watcher that got none gives up.
IDLE_LIMIT = 30.0
#: Seconds between the scans of the ranks' mapped ``/dev/shm`` files.
SCAN_PERIOD = 2.0
_STOPS = {signal.SIGHUP, signal.SIGINT, signal.SIGTERM}


def verdict(code: int | None, all_here: bool) -> tuple[str, str]:
    """What to say about the node's first silent death, from its wait status ``code`` (None once
    reaped) and whether every rank of the job is on this node.

    Returns ``(kind, how)``: kind ``"quiet"`` (a stopped job or a plain exit: no silent death),
    ``"sure"`` (name the rank plainly) or ``"maybe"`` (name it, saying that a rank of another
    node may have died first); ``how`` is the words for the cause.
    """
    if code is None:
        return ("sure" if all_here else "maybe"), "killed by a signal or crashed"
    sig = code & 0x7F
    if sig == 0 or sig in _STOPS:
        return "quiet", ""
    if sig == signal.SIGKILL:
        return ("sure" if all_here else "maybe"), \
            "killed by SIGKILL (out of memory, or a kill from outside)"
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = f"signal {sig}"
    return "sure", f"crashed with {name}"  # launchers end ranks with SIGKILL: a crash is its own


class Rank(NamedTuple):
    """A registered rank of this node: its number in the job of ``size``, its pid, and the read
    end of its pipe (``fd``; -1 for none)."""

    rank: int
    size: int
    pid: int
    fd: int


class Watch:
    """The event loop (see the module docstring).  ``say`` writes one line for the user."""

    def __init__(self, listener: socket.socket, marker: str, period: float, timeout: float,
                 say: Callable[[str], object] | None = None, host: str | None = None):
        self.listener = listener
        self.marker = marker
        self.say = say or _to_stderr
        self.host = host or socket.gethostname()
        self.poll = select.epoll()
        self.poll.register(listener.fileno(), select.EPOLLIN)
        self.detector = Detector(self.host, period, timeout, self.poll)
        self.failed = False  # this watcher has ended the job
        self.tidied = False  # earlier jobs' leftovers removed (remove_stale)
        self.ranks: dict[int, Rank] = {}  # by pipe fd
        self.ever = 0  # ranks registered so far
        self.quiet = False  # the job ends with a report of its own, or is being stopped
        self.decided = False  # the first silent death has been dealt with
        self.abnormal = False  # some rank ended without "bye"
        self.remove_marker = False  # this watcher, or a rank it watches, made the marker
        self.shm: set[str] = set()
        self.launchers: set[int] = set()

    # -- the loop ---------------------------------------------------------------------------
    def serve(self) -> None:
        detector = self.detector
        started = last_scan = last_beat = time.monotonic()
        tick = min(SCAN_PERIOD, detector.period) if detector.timeout > 0 else SCAN_PERIOD
        while self.ranks or (self.ever == 0 and time.monotonic() - started < IDLE_LIMIT):
            try:
                events = self.poll.poll(tick)
            except InterruptedError:
                continue
            for fd, _ in events:  # in the order they became ready
                if fd == self.listener.fileno():
                    if self.ranks or not self.ever:  # (a watcher whose ranks ended takes no more)
                        self.accept()
                elif fd in self.ranks:
                    self.on_pipe(self.ranks[fd])
                elif fd == detector.fileno():
                    detector.hear()
                    if not self.failed and (ends := detector.ending()) is not None:
                        self.fail(*ends)  # another node's verdict: the whole job ends
            if self.ever and not self.tidied:  # (after the first rank's answer: it waits for it)
                self.tidied = True
                try:
                    nodeclean.remove_stale(self.marker)
                except OSError:
                    pass
            now = time.monotonic()
            if detector.timeout > 0 and self.ranks and now - last_beat >= detector.period:
                self.beat(now)
                last_beat = now
            if self.ranks and now - last_scan >= SCAN_PERIOD:
                self.scan_shm()
                last_scan = now
        self.listener.close()  # a rank still knocking starts a watcher of its own
        self.linger()
        detector.leave()  # (none after a verdict) the peers stop expecting this node
        self.finish()

    def linger(self) -> None:
        """After a verdict, go on sending it (and answering the nodes that have not heard it) for
        the protocol's relay periods, although this node's ranks have ended."""
        detector = self.detector
        last = time.monotonic()
        while detector.relaying():
            try:
                events = self.poll.poll(detector.period / 4)
            except InterruptedError:
                continue
            if any(fd == detector.fileno() for fd, _ in events):
                detector.hear()
            if (now := time.monotonic()) - last >= detector.period:
                detector.tick(now, [])
                last = now

    # -- ending the job for the failure detector ---------------------------------------------
    def beat(self, now: float) -> None:
        """One period: the detector's heartbeats and looks (:meth:`.detector.Detector.tick`); end
        the job when it says so."""
        ends = self.detector.tick(now, [(r.rank, r.size, r.pid) for r in self.ranks.values()])
        if ends is not None and not self.failed:
            self.fail(*ends)

    def fail(self, line: str, speak: bool = True) -> None:
        """End the job for a verdict: say ``line`` when this node speaks for it, SIGKILL every
        rank of this node (every node that learns the verdict does), and have Slurm cancel the
        job's step when this node speaks (:func:`.ending.cancel_step`: a frozen node's ranks cannot
        be killed from here, and plain ``srun`` waits for them).  The deaths that follow are the
        verdict's doing and stay unnamed."""
        self.failed = self.quiet = True
        try:
            os.mkdir(self.marker)
            self.remove_marker = True
        except OSError:
            pass
        if speak:
            self.say(line)
            time.sleep(0.2)  # let the launcher forward the line before the kills end its job
        ending.kill([r.pid for r in self.ranks.values()])
        if speak:
            ending.cancel_step()

    # -- the ranks ---------------------------------------------------------------------------
    def accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5.0)
            try:
                creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                _, uid, _ = struct.unpack("3i", creds)
                msg, fds, _, _ = socket.recv_fds(conn, 65536, 1)
                if uid == os.getuid() and not fds and msg.startswith(b"peers\n"):
                    while chunk := conn.recv(65536):
                        msg += chunk
                    self.detector.meet(msg)
                    return
            except OSError:
                return
            if uid != os.getuid() or len(fds) != 1:
                for fd in fds:
                    os.close(fd)
                return
            try:
                rank, size, pid = (int(x) for x in msg.split())
            except ValueError:
                os.close(fds[0])
                return
            self.ranks[fds[0]] = Rank(rank, size, pid, fds[0])
            self.ever += 1
            self.poll.register(fds[0], select.EPOLLIN)
            parent = procstat.ppid(pid)
            if parent:
                self.launchers.add(parent)
            self.scan_shm(pid)
            try:
                conn.sendall(b"ok %d %s\n" % (self.detector.port, self.detector.address.encode()))
            except OSError:
                pass

    def on_pipe(self, r: Rank) -> None:
        seen = time.time()  # (the wall clock: compared with other nodes' times, see first_death)
        try:
            data = os.read(r.fd, 64)
        except OSError:
            data = b""
        self.poll.unregister(r.fd)
        os.close(r.fd)
        del self.ranks[r.fd]
        words = data.split()
        if b"bye" in words:
            return
        self.abnormal = True
        if b"claimed" in words or b"owner" in words or b"stopped" in words:
            self.quiet = True
            self.remove_marker |= b"owner" in words
            return
        if self.quiet or self.decided:
            return
        self.decided = True
        self.first_death(r, seen)

    def first_death(self, r: Rank, seen: float) -> None:
        """Name rank ``r``, whose pipe closed first on this node (at wall-clock time ``seen``),
        unless its end was no death or another node saw one earlier (the module docstring)."""
        _, code = procstat.probe(r.pid)
        all_here = self.ever >= r.size  # every rank of the job registered on this node
        kind, how = verdict(code, all_here)
        if kind != "quiet" and not how.startswith("crashed"):
            if code is None:
                time.sleep(0.1)  # reaped before this look: let the others' ends show
            if self.others_stopping():
                kind = "quiet"  # the job is being stopped (scancel, a time limit, Ctrl-C)
        if kind == "quiet":
            self.quiet = True
            return
        self.detector.announce(seen, r.rank)
        if kind == "maybe":
            self.detector.listen(0.3)  # for the other nodes' deaths, and to see whether this node's go on
            if any(procstat.running(o.pid) for o in self.ranks.values()):
                kind = "sure"  # another rank of this node goes on: this one died first here
        earlier, together = self.detector.deaths_elsewhere(seen)
        if earlier:
            self.quiet = True  # that node names its rank: this one was ended for it
            return
        if together:
            gap = max(abs(t - seen) for _, t, _ in together)
            others = ", ".join(f"rank {rank}/{r.size} (on {host})" for host, _, rank in together)
            how += f", within {gap * 1e3:.1f} ms of {others}: either may have died first"
        elif kind == "maybe":
            how += " (the launcher was ending the job: a rank on another node may have died first)"
        try:
            os.mkdir(self.marker)
        except OSError:
            return  # a rank of this node has said why the job ends (or cannot be helped)
        self.remove_marker = True
        self.say(f"[hpcbsp] rank {r.rank}/{r.size} (pid {r.pid} on {socket.gethostname()}) "
                 f"died without a report: {how}")

    def others_stopping(self) -> bool:
        """Whether another rank of the node ended by HUP, INT or TERM (the job is being stopped;
        a launcher ends ranks for a failure with SIGKILL)."""
        for o in self.ranks.values():
            state, code = procstat.probe(o.pid)
            if state in ("Z", "X", "x") and code is not None and (code & 0x7F) in _STOPS:
                return True
        return False

    # -- clean-up ---------------------------------------------------------------------------
    def scan_shm(self, pid: int | None = None) -> None:
        """Remember the ``/dev/shm`` files the ranks (or rank ``pid``) map now."""
        for p in [pid] if pid is not None else [r.pid for r in self.ranks.values()]:
            self.shm.update(nodeclean.mapped_shm(p))

    def finish(self) -> None:
        try:
            os.close(2)  # nothing more to say: nobody reading the job's output waits for this
        except OSError:
            pass
        if self.abnormal and self.shm:
            mapped = set().union(*(nodeclean.mapped_shm(p) for p in nodeclean.children(self.launchers)))
            for path in self.shm - mapped:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        if self.remove_marker:
            try:
                os.rmdir(self.marker)
            except OSError:
                pass


def _to_stderr(line: str) -> None:
    try:
        os.write(2, line.encode() + b"\n")
    except OSError:
        pass  # the job's output is gone (its node's launcher was killed too): nobody to tell


def main(argv: list[str]) -> int:
    """``nodewatch.py MARKER FD PERIOD TIMEOUT`` (a timeout of 0: no failure detection)."""
    marker, fd, period, timeout = argv[1], int(argv[2]), float(argv[3]), float(argv[4])
    # Ctrl-C, Slurm signalling every process of a step (scancel --signal, a time-limit warning:
    # SIGUSR1/2 would end this process by default; SIGTERM to all of a step that srun ends
    # because a task failed, while this watcher may still be about to name it) and a request for
    # the ranks' stacks (SIGUSR1) are for the ranks: this watcher ends when they have ended, and
    # says why if it must.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    listener = socket.socket(fileno=fd)
    Watch(listener, marker, period, timeout).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
