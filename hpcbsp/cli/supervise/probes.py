"""Checking many hosts at once, a bounded number at a time, with one verdict per host.

:func:`probe` runs one command per host (``ssh HOST true``, or the local cluster's ``rsh HOST
true``: :func:`hpcbsp.util.jobcommand.probe_command`), at most ``in_flight`` of them at any
moment (:data:`IN_FLIGHT`, 64: 4,096 hosts are never 4,096 processes of this one), each in a
session of its own and bounded by ``timeout`` seconds from its start (then its process group is
killed).  Each host gets one verdict:

* ``answered``: the command exited 0;
* ``refused``: it exited with another status (ssh's 255: no route, refused, a key not accepted);
* ``timed out``: it still ran after ``timeout`` seconds;
* ``could not fork``: the command could not be started (no such program, no process or memory
  left for one): this says nothing of the host, and it is **not** an answer.

Only ``answered`` (or ``up in Slurm``, where :mod:`.hosts` asked Slurm instead) is a host that
answers (:attr:`Probe.answers`).  The whole check takes at most
about ``ceil(hosts / in_flight) * timeout`` seconds, and far less when hosts answer or refuse
at once, as live ones and most dead ones do (ssh's own connect timeout is 5 s).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

#: Probes running at once, at most.
IN_FLIGHT = 64
#: The verdicts of a probe.
ANSWERED, REFUSED, TIMED_OUT, NO_FORK = "answered", "refused", "timed out", "could not fork"
#: The verdicts of a node whose state Slurm gave instead (:mod:`.hosts`).
UP, DOWN = "up in Slurm", "down in Slurm"


@dataclass(frozen=True)
class Probe:
    """One host's verdict, and the detail behind it (an exit status, an error)."""

    verdict: str
    detail: str = ""

    @property
    def answers(self) -> bool:
        return self.verdict in (ANSWERED, UP)


def probe(commands: Mapping[str, Sequence[str]], timeout: float, in_flight: int = IN_FLIGHT,
          poll_s: float = 0.02) -> dict[str, Probe]:
    """Run ``commands`` (``{host: argv}``), at most ``in_flight`` at once, each for at most
    ``timeout`` seconds; ``{host: Probe}`` in the order of ``commands``."""
    if in_flight < 1:
        raise ValueError(f"in_flight must be at least 1, not {in_flight}")
    waiting = list(commands.items())
    waiting.reverse()  # (popped from the end: the hosts start in their order)
    running: dict[str, tuple[subprocess.Popen[bytes], float]] = {}
    found: dict[str, Probe] = {}
    while waiting or running:
        while waiting and len(running) < in_flight:
            host, argv = waiting.pop()
            try:
                proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, start_new_session=True)
            except OSError as exc:  # (ENOENT, EACCES, EAGAIN, ENOMEM: no process, no answer)
                found[host] = Probe(NO_FORK, f"{argv[0] if argv else '(empty command)'}: {exc.strerror or exc}")
                continue
            running[host] = (proc, time.monotonic() + timeout)
        now = time.monotonic()
        for host, (proc, deadline) in list(running.items()):
            code = proc.poll()
            if code is None and now <= deadline:
                continue
            if code is None:
                _kill(proc)
                found[host] = Probe(TIMED_OUT, f"{timeout:g} s")
            else:
                found[host] = Probe(ANSWERED) if code == 0 else Probe(REFUSED, f"exit {code}")
            del running[host]
        if running:
            time.sleep(poll_s)
    return {host: found[host] for host in commands}


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.wait()


def summary(found: Mapping[str, Probe]) -> str | None:
    """One line on the hosts that could not be checked (``could not fork``), or None."""
    failed = [h for h, p in found.items() if p.verdict == NO_FORK]
    if not failed:
        return None
    detail = found[failed[0]].detail
    return (f"could not start the check of {len(failed)} host{'s' if len(failed) > 1 else ''} ({detail}): "
            "counted as not answering")
