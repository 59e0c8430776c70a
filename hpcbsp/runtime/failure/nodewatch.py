"""The node's death watch: one process per job and node that sees its ranks end, in order.

Started by :mod:`.deathwatch` (the first rank of the job on this node to open a BSP context
spawns it; every rank then registers), it runs as ``python -I -S nodewatch.py MARKER FD PERIOD
TIMEOUT``, with the standard library only (its siblings :mod:`.registry`, :mod:`.deaths`,
:mod:`.detector`, :mod:`.protocol`, :mod:`.ending` and :mod:`.nodeclean`, and
``hpcbsp/util/procstat.py``, loaded by path), in a session of its own and out of the ranks'
process tree: Ctrl-C at the terminal and the launcher's kills of the ranks do not reach it, and
it ends by itself once every registered rank has ended.

**Registration** (:mod:`.registry`): a rank hands the watcher the read end of a pipe whose write
end only it holds, over the UNIX socket ``FD``.

**Order of the ends.**  Every pipe sits in one ``epoll`` set.  The kernel closes a process's
pipe as the process exits, in that process's own context, and ``epoll`` queues the readiness in
that order; ``epoll_wait`` hands the events back in the same order however late this watcher runs.
So the first pipe that closed is the first rank of the node that ended, even under heavy load and
even when the launcher killed the other ranks a millisecond later (MPICH's hydra does; it then
reaps them in rank order, so the order the launcher reaps in, or the order of the watchers' waking,
which the watch used before, says nothing).

**What a pipe says** and whether the first silent death is named, and how: :mod:`.deaths`.

**The failure detector** (:mod:`.detector` over :mod:`.protocol`): when the job spans nodes, the
watchers send each other authenticated heartbeats on a ring; a node not heard from, or a rank of
this node stopped, for ``TIMEOUT`` seconds ends the job: the verdict reaches every node, whose
watcher SIGKILLs its ranks; the node that speaks for it says why and, under Slurm, cancels the
job's step (:mod:`.ending`).  Once its ranks have ended the watcher lingers to send the
verdict again, or after an abnormal end to relay the deaths other nodes announce
(:meth:`Watch.linger`).  ``PERIOD`` and ``TIMEOUT`` are the rank's ``$HPCBSP_HEARTBEAT_PERIOD``
and ``$HPCBSP_HEARTBEAT_TIMEOUT`` (a timeout of 0 turns the detector off).

**One line per node.**  Before it prints, the watcher takes the node's failure marker (an atomic
``mkdir``, the same one :func:`.deathwatch.claim_report` takes): whoever has it speaks for the
node.  The watcher removes the marker when the node's last rank has ended, and the ``/dev/shm``
files the ranks had mapped when the job ended abnormally (MPICH leaves its ``mpich_shm_*`` files
behind when its ranks are killed).  Once the first rank is registered it removes the markers
and MPICH segments of this user's earlier jobs on this node that are provably dead (their
launcher is gone; no process maps the segment, and it is older than a minute; :mod:`.nodeclean`).
"""
from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import time
from typing import Callable

if __package__:
    from ...util import procstat
    from . import deaths, ending, nodeclean, registry
    from .detector import Detector
    from .registry import Rank
else:  # run as the watcher's script (python -I -S nodewatch.py): its siblings and util/procstat.py, by path
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:0] = [_here, os.path.join(os.path.dirname(os.path.dirname(_here)), "util")]
    import deaths  # type: ignore[no-redef]
    import ending  # type: ignore[no-redef]
    import nodeclean  # type: ignore[no-redef]
    import procstat  # type: ignore[no-redef]
    import registry  # type: ignore[no-redef]
    from detector import Detector  # type: ignore[no-redef]
    from registry import Rank  # type: ignore[no-redef]

__all__ = ["Watch", "main"]

#: Seconds without any registered rank after which a watcher that got none gives up.
IDLE_LIMIT = 30.0
#: Seconds a watcher that said a line keeps the job's output open: ``srun -K`` drops a line written
#: just before its writer let go of the output (5 times the hold that sufficed for it here).
FORWARD = 0.25
#: Seconds between the scans of the ranks' mapped ``/dev/shm`` files.
SCAN_PERIOD = 2.0


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
        self.spoke: float | None = None  # when this watcher said its line (monotonic clock)
        self.shm: set[str] = set()
        self.launchers: set[int] = set()

    # -- the loop ---------------------------------------------------------------------------
    def serve(self) -> None:
        detector = self.detector
        started = last_scan = last_beat = time.monotonic()
        tick = min(SCAN_PERIOD, detector.period) if detector.timeout > 0 else SCAN_PERIOD
        while self.ranks or (self.ever == 0 and time.monotonic() - started < IDLE_LIMIT):
            try:
                wait = tick if detector.timeout <= 0 else last_beat + detector.period - time.monotonic()
                events = self.poll.poll(min(tick, max(0.0, wait)))  # (the beat on time, not a tick late)
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
                with contextlib.suppress(OSError):
                    nodeclean.remove_stale(self.marker)
            now = time.monotonic()
            if detector.timeout > 0 and self.ranks and now - last_beat >= detector.period:
                self.beat(now)
                last_beat = now
            if self.ranks and now - last_scan >= SCAN_PERIOD:
                self.scan_shm()
                last_scan = now
        self.listener.close()  # a rank still knocking starts a watcher of its own
        self.linger(hold=self.spoke + FORWARD if self.spoke is not None else 0.0, release=_silence)
        detector.leave()  # (none after a verdict) the peers stop expecting this node
        self.finish()

    def linger(self, hold: float = 0.0, release: Callable[[], object] | None = None) -> None:
        """After the ranks have ended, hear the other nodes, saying nothing more: while the verdict
        is to be sent again, and after an abnormal end for a period, relaying the deaths announced
        (flooded node to node: a node whose first death comes later learns it was not the first).
        ``release()`` (letting go of the job's output) is called at ``hold`` (monotonic), or at the end."""
        detector = self.detector
        last = time.monotonic()
        end = max(hold, last + (detector.period if self.abnormal and detector.has_peers() else 0.0))
        while True:
            now = time.monotonic()
            if release is not None and now >= hold:
                release()
                release = None
            if not (relaying := detector.relaying()) and now >= end:
                break
            wait = detector.period / 4 if relaying else min(detector.period / 4, end - now)
            try:
                events = self.poll.poll(max(0.0, min(wait, hold - now) if release else wait))
            except InterruptedError:
                continue
            if any(fd == detector.fileno() for fd, _ in events):
                detector.hear()
            if detector.relaying() and (now := time.monotonic()) - last >= detector.period:
                detector.tick(now, [])
                last = now
        if release is not None:
            release()

    # -- ending the job for the failure detector ---------------------------------------------
    def beat(self, now: float) -> None:
        """One period: the detector's beats and looks (:meth:`.detector.Detector.tick`), its verdict."""
        ends = self.detector.tick(now, [(r.rank, r.size, r.pid) for r in self.ranks.values()])
        if ends is not None and not self.failed:
            self.fail(*ends)

    def fail(self, line: str, speak: bool = True) -> None:
        """End the job for a verdict: say ``line`` when this node speaks for it, SIGKILL every rank
        of this node (every node that learns the verdict does), and have Slurm cancel the job's step
        when this node speaks (:func:`.ending.cancel_step`: a frozen node's ranks cannot be killed
        from here, and plain ``srun`` waits for them).  The deaths that follow stay unnamed."""
        self.failed = self.quiet = True
        with contextlib.suppress(OSError):
            os.mkdir(self.marker)
            self.remove_marker = True
        if speak:
            self.speak(line)
            time.sleep(0.2)  # let the launcher forward the line before the kills end its job
        ending.kill([r.pid for r in self.ranks.values()])
        if speak:
            ending.cancel_step()

    # -- the ranks ---------------------------------------------------------------------------
    def accept(self) -> None:
        r = registry.accept(self.listener, self.detector.meet,
                            b"ok %d %s\n" % (self.detector.port, self.detector.address.encode()))
        if r is None:
            return
        self.ranks[r.fd] = r
        self.ever += 1
        self.poll.register(r.fd, select.EPOLLIN)
        parent = procstat.ppid(r.pid)
        if parent:
            self.launchers.add(parent)
        self.scan_shm(r.pid)

    def on_pipe(self, r: Rank) -> None:
        seen = time.time()  # (the wall clock: compared with other nodes' times, see first_death)
        try:
            data = os.read(r.fd, 64)
        except OSError:
            data = b""
        self.poll.unregister(r.fd)
        os.close(r.fd)
        del self.ranks[r.fd]
        try:
            self.judge_end(r, seen, data.split())
        finally:
            if r.pidfd >= 0:
                os.close(r.pidfd)

    def judge_end(self, r: Rank, seen: float, words: list[bytes]) -> None:
        """What rank ``r``'s pipe said as it closed (``words``) at wall-clock time ``seen``."""
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
        unless its end was no death or another node saw one earlier (:func:`.deaths.judge`)."""
        line = deaths.judge(r, seen, list(self.ranks.values()), self.ever, self.detector)
        if line is None:
            self.quiet = True
            return
        try:
            os.mkdir(self.marker)
        except OSError:
            return  # a rank of this node has said why the job ends (or cannot be helped)
        self.remove_marker = True
        self.speak(line)

    def speak(self, line: str) -> None:
        """Say ``line`` for the user, and note when (the job's output is held :data:`FORWARD`)."""
        self.say(line)
        self.spoke = time.monotonic()

    # -- clean-up ---------------------------------------------------------------------------
    def scan_shm(self, pid: int | None = None) -> None:
        """Remember the ``/dev/shm`` files the ranks (or rank ``pid``) map now."""
        for p in [pid] if pid is not None else [r.pid for r in self.ranks.values()]:
            self.shm.update(nodeclean.mapped_shm(p))

    def finish(self) -> None:
        if self.abnormal and self.shm:
            mapped = set().union(*(nodeclean.mapped_shm(p) for p in nodeclean.children(self.launchers)))
            for path in self.shm - mapped:
                with contextlib.suppress(OSError):
                    os.unlink(path)
        if self.remove_marker:
            with contextlib.suppress(OSError):
                os.rmdir(self.marker)


def _silence() -> None:
    """Let go of the job's output (the launcher waits for every process that holds it)."""
    with contextlib.suppress(OSError):
        os.dup2(null := os.open(os.devnull, os.O_WRONLY), 2)
        os.close(null)


def _to_stderr(line: str) -> None:
    with contextlib.suppress(OSError):  # (an error: the job's output is gone, nobody to tell)
        os.write(2, line.encode() + b"\n")


def main(argv: list[str]) -> int:
    """``nodewatch.py MARKER FD PERIOD TIMEOUT`` (a timeout of 0: no failure detection)."""
    marker, fd, period, timeout = argv[1], int(argv[2]), float(argv[3]), float(argv[4])
    # Ctrl-C, Slurm signalling a step's processes (scancel --signal, a time-limit warning; SIGTERM
    # to a step srun ends for a failed task, which this watcher may be about to name) and a request
    # for the ranks' stacks (SIGUSR1) are for the ranks: this watcher ends when they have ended.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    # Out of the ranks' process tree (this process forks the watcher and exits): a launcher killing
    # the job's tree (srun -K, proctrack/linuxproc) spares the watcher about to name the first death.
    if os.fork() > 0:
        os._exit(0)
    listener = socket.socket(fileno=fd)
    Watch(listener, marker, period, timeout).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
