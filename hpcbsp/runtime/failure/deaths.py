"""Death verdicts: what a rank's pipe said as it closed, and whether and how the node's first
silent death is named (the node's watcher, :mod:`.nodewatch`, says the line).

**What a pipe says.**  A rank writes one word before its pipe closes: ``bye`` (a normal exit,
``atexit``), ``claimed`` (it reported its own failure and aborts the job: the launcher's kills that
follow are no news) or ``owner`` (it was interrupted and said so itself, taking the node's failure
marker; see :func:`.deathwatch.claim_report`) or ``stopped`` (SIGTERM ended it: the job is being
stopped).  A pipe that closes without a word is a rank that
died silently.  For the first one only (the rest follow from it) the watcher reads how it ended
(:func:`verdict`) from ``/proc/PID/stat`` while the launcher has not reaped it, and after that
through the pidfd it holds (Linux 6.15 and later keep the status: :func:`.procstat.probe`): HUP, INT, TERM and
plain exits are a job being stopped, not a death, and stay quiet; a crash (SEGV, BUS, ABRT, ...)
is named; SIGKILL (the out-of-memory killer, a kill from outside) is named plainly when every rank
of the job is on this node (the order is then the job's order); on a job spread over nodes a rank
of another node may have died first and the launcher killed this one for it, so unless another
rank of this node still runs :data:`LOCAL_WAIT` later, the line says that doubt.  Across nodes
only the first death is named: the watchers announce their deaths to each other
(:mod:`.detector`) and listen :data:`LISTEN` for the others' before they speak.  A watcher held
off the CPU for longer than :data:`~.detector.SAME_MOMENT` (a badly overloaded node) announces
late, and a second node may then name its rank too, each line with the doubt said.

**Speaking before the launcher ends the job.**  A launcher that ends a job for a failed rank
(``srun -K``, ``mpiexec``) stops forwarding the job's output once the ranks' ends have reached it,
tens of milliseconds later, and may kill the watchers with the ranks: a line said later is lost.
So the watcher waits no longer than its evidence needs: :data:`LISTEN` for the other nodes, and
for this node's other ranks only until they have all ended (a launcher ending them ends them
together) or :data:`LOCAL_WAIT` has passed.

Standard library only (loaded by path by the watcher's script).
"""
from __future__ import annotations

import signal
import socket
import time

if __package__:
    from ...util import procstat
    from . import lines
    from .detector import SAME_MOMENT, Detector
    from .registry import Rank
else:  # loaded by the watcher's script (python -I -S nodewatch.py), which puts util/ on the path
    import lines  # type: ignore[no-redef]
    import procstat  # type: ignore[no-redef]
    from detector import SAME_MOMENT, Detector  # type: ignore[no-redef]
    from registry import Rank  # type: ignore[no-redef]

__all__ = ["LISTEN", "LOCAL_WAIT", "verdict", "judge"]

#: Seconds a watcher in doubt listens for the other nodes' deaths before it speaks: one
#: :data:`~.detector.SAME_MOMENT`, for two watchers that judge at the same moment to hear each
#: other (a datagram takes well under a millisecond; a busy node holds a watcher off the CPU for
#: a few) and agree on the one line; short against the launcher's ending of the job.
LISTEN = SAME_MOMENT
#: Seconds it waits at most to see whether another rank of this node goes on (then this one died
#: first here); it stops waiting once all of them have ended.
LOCAL_WAIT = 0.3

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


def judge(r: Rank, seen: float, others: list[Rank], ever: int, detector: Detector) -> str | None:
    """The line that names rank ``r``, whose pipe closed first on this node (at wall-clock time
    ``seen``; ``others`` the node's ranks still registered, ``ever`` how many registered), or
    None when its end was no death or another node saw one earlier (the module docstring)."""
    _, code = procstat.probe(r.pid, r.pidfd)
    all_here = ever >= r.size  # every rank of the job registered on this node
    kind, how = verdict(code, all_here)
    if kind != "quiet" and not how.startswith("crashed"):
        if code is None:
            time.sleep(0.1)  # reaped before this look: let the others' ends show
        if _others_stopping(others):
            kind = "quiet"  # the job is being stopped (scancel, a time limit, Ctrl-C)
    if kind == "quiet":
        return None
    detector.announce(seen, r.rank)
    if kind == "maybe" and _one_goes_on(others, detector):
        kind = "sure"  # another rank of this node goes on: this one died first here
    earlier, together = detector.deaths_elsewhere(seen)
    if earlier:
        return None  # that node names its rank: this one was ended for it
    if together:
        gap = max(abs(t - seen) for _, t, _ in together)
        names = ", ".join(f"rank {rank}/{r.size} (on {host})" for host, _, rank in together)
        how += f", within {gap * 1e3:.1f} ms of {names}: either may have died first"
    elif kind == "maybe":
        how += " (the launcher was ending the job: a rank on another node may have died first)"
    return lines.rank_died(r.rank, r.size, r.pid, socket.gethostname(), how)


def _one_goes_on(others: list[Rank], detector: Detector) -> bool:
    """Whether one of this node's ranks ``others`` still runs :data:`LOCAL_WAIT` from now
    (False as soon as all have ended); the other nodes' deaths heard meanwhile, :data:`LISTEN`
    at least."""
    deadline = time.monotonic() + LOCAL_WAIT
    detector.listen(LISTEN)
    while True:
        going = [o for o in others if procstat.running(o.pid)]
        if not going or time.monotonic() >= deadline:
            return bool(going)
        detector.listen(min(0.005, max(0.0, deadline - time.monotonic())))


def _others_stopping(others: list[Rank]) -> bool:
    """Whether another rank of the node ended by HUP, INT or TERM (the job is being stopped;
    a launcher ends ranks for a failure with SIGKILL)."""
    for o in others:
        state, code = procstat.probe(o.pid, o.pidfd)
        if state in ("Z", "X", "x") and code is not None and (code & 0x7F) in _STOPS:
            return True
    return False
