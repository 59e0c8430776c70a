"""One launch of a supervised job: start it, pass its output through, read it, end it when told.

:func:`run_job` starts the launcher's command (``mpiexec ...`` or ``srun ...``) in a session of
its own, so that the supervisor alone decides which signals reach it, and copies the job's
stdout and stderr to its own as the bytes come, feeding every complete line to a
:class:`~.signs.Signs`.  The launcher's own lines on the job's stdout (hydra's ``Sending Ctrl-C
...``, its ``BAD TERMINATION`` banner) go to stderr (:mod:`.output`: a line waits at most a
fifth of a second to be told apart).  The job is ended by the supervisor only when

* the user interrupts the supervisor (Ctrl-C, SIGTERM; :class:`Stop` records it): the launcher
  gets the signal the supervisor got, SIGINT or SIGTERM, and passes it on to the ranks (hydra
  does; srun gets SIGINT twice, which ends its step), so that the ranks name the signal the
  user sent; or
* the failure detector said it ended the job (its line for a silent node or a stopped rank,
  :attr:`.signs.Signs.ended`) and the launcher still runs :data:`DETECTOR_GRACE` seconds later:
  the ranks are gone, and what it waits for is a frozen or lost node's launcher process (hydra's
  ssh to that node, which only ``MPIEXEC_TIMEOUT`` would bound): its whole process group gets
  SIGTERM (``ended_by`` ``"detector"``); or
* a line has said that a node was lost (or a rank was killed) and the job still runs
  :data:`LOSS_GRACE` seconds later: the runtime and the launcher normally end it within a
  second or two, this bounds the time to a restart where they do not (SIGINT).

Either way, whatever still runs :data:`STOP_GRACE` seconds later is killed (SIGKILL to the
launcher's process group), and once the launcher has ended, the files the job's processes held
open in ``/dev/shm`` and the temporary folder when it was asked to end, and that its MPI
removes only at a normal end, are removed (:mod:`.leftovers`: only those, found through the
job's process ids).  After the launcher ends, its output is read until the pipes close or
:data:`DRAIN_S` seconds have passed (a process of a cut-off node may hold them open).
"""
from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import BinaryIO, Mapping, Sequence

from ...util.flavours import UNKNOWN, Flavour
from ...util.mpiflavour import own_patterns
from . import leftovers
from .output import ERR, Sorter
from .signs import Signs

#: Seconds a job may go on after a line said it lost a node, before the supervisor ends it.
LOSS_GRACE = 10.0
#: Seconds the launcher may go on after the failure detector said it ended the job.
DETECTOR_GRACE = 2.0
#: Seconds between asking a job to end (SIGINT) and killing what is left of it.
STOP_GRACE = 5.0
#: Seconds the job's output is read after its launcher ended.
DRAIN_S = 3.0


@dataclass
class Stop:
    """Set by the supervisor's signal handlers: the signal that asked it to stop, or None."""

    signum: int | None = None

    def handler(self, signum: int, frame: object) -> None:
        self.signum = signum


@dataclass
class Ended:
    """How one launch ended."""

    code: int                 #: the launcher's exit status (128 + N when a signal N ended it)
    signs: Signs              #: what its output said
    started: float            #: time.monotonic() at the start
    ended: float              #: ... and when the launcher had ended
    ended_by: str | None      #: "interrupt", "detector" or "loss" when the supervisor ended it, else None
    removed: tuple[str, ...] = ()  #: the job's leftover files removed after the supervisor ended it


def run_job(argv: Sequence[str], env: Mapping[str, str], stop: Stop, *, srun: bool = False,
            out: BinaryIO | None = None, err: BinaryIO | None = None, flavour: Flavour = UNKNOWN) -> Ended:
    """Run ``argv`` to its end (see the module docstring); ``out``/``err`` default to this
    process's stdout and stderr; ``flavour``: the MPI of the launcher (its own lines and its
    leftover files; UNKNOWN: those of every MPI known)."""
    out = out if out is not None else sys.stdout.buffer
    err = err if err is not None else sys.stderr.buffer
    sorter = Sorter(*own_patterns(flavour))
    held: dict[str, tuple[int, int]] = {}  # the job's leftover-prone files, when it was asked to end
    signs = Signs()
    started = time.monotonic()
    proc = subprocess.Popen(list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stderr is not None
    stdout_fd = proc.stdout.fileno()
    sel = selectors.DefaultSelector()
    pending: dict[int, bytearray] = {}
    for pipe, sink in ((proc.stdout, out), (proc.stderr, err)):
        os.set_blocking(pipe.fileno(), False)
        sel.register(pipe.fileno(), selectors.EVENT_READ, sink)
        pending[pipe.fileno()] = bytearray()
    ended_by: str | None = None
    asked_at: float | None = None  # when the supervisor asked the job to end
    ended: float | None = None
    while sel.get_map():
        now = time.monotonic()
        if ended is None and proc.poll() is not None:
            ended = now
        if ended is not None and now - ended > DRAIN_S:
            break
        if ended is None and asked_at is None:
            if stop.signum is not None:
                ended_by = "interrupt"
            elif signs.ended is not None and now - signs.ended > DETECTOR_GRACE:
                ended_by = "detector"
            elif signs.first_loss is not None and now - signs.first_loss > LOSS_GRACE:
                ended_by = "loss"
            if ended_by is not None:
                asked_at = now
                held.update(leftovers.collect(proc.pid, flavour))
                if ended_by == "detector":
                    _signal_group(proc, signal.SIGTERM)
                else:
                    _interrupt(proc, srun, stop.signum if ended_by == "interrupt" else None)
        if ended is None and asked_at is not None and now - asked_at > STOP_GRACE:
            _kill_group(proc)
        for piece in sorter.tick(now):
            _write(err if piece[0] == ERR else out, piece[1])
        for key, _ in sel.select(timeout=0.1):
            fd = int(key.fd)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                sel.unregister(fd)
                _scan(pending[fd], b"\n", signs)
                if fd == stdout_fd:
                    for sink, data in sorter.close():
                        _write(err if sink == ERR else out, data)
                continue
            if fd == stdout_fd:
                for sink, data in sorter.feed(chunk, time.monotonic()):
                    _write(err if sink == ERR else out, data)
            else:
                _write(key.data, chunk)
            buf = pending[fd]
            buf += chunk
            _scan(buf, None, signs)
    sel.close()
    for sink, data in sorter.close():
        _write(err if sink == ERR else out, data)
    for pipe in (proc.stdout, proc.stderr):
        pipe.close()
    if ended is None:  # the pipes closed first
        deadline = time.monotonic() + (STOP_GRACE if asked_at is not None else 3600.0 * 24 * 365)
        while proc.poll() is None:
            if stop.signum is not None and asked_at is None:
                ended_by, asked_at = "interrupt", time.monotonic()
                deadline = asked_at + STOP_GRACE
                held.update(leftovers.collect(proc.pid, flavour))
                _interrupt(proc, srun, stop.signum)
            if time.monotonic() > deadline:
                _kill_group(proc)
                proc.wait()
                break
            time.sleep(0.1)
        ended = time.monotonic()
    code = proc.returncode
    removed = tuple(leftovers.remove(held)) if held else ()
    return Ended(128 - code if code < 0 else code, signs, started, ended, ended_by, removed)


def _scan(buf: bytearray, tail: bytes | None, signs: Signs) -> None:
    """Feed the complete lines of ``buf`` to ``signs`` and keep the rest; with ``tail``, the rest
    too (the stream ended)."""
    if tail is not None and buf:
        buf += tail
    while True:
        cut = buf.find(b"\n")
        if cut < 0:
            return
        signs.feed(bytes(buf[:cut]).decode("utf-8", "replace"))
        del buf[:cut + 1]


def _write(sink: BinaryIO, data: bytes) -> None:
    try:
        sink.write(data)
        sink.flush()
    except (OSError, ValueError):  # a closed stdout must not stop the supervision
        pass


def _interrupt(proc: subprocess.Popen[bytes], srun: bool, received: int | None) -> None:
    """Ask the launcher to end the job with the signal the supervisor ``received`` (None: it ended
    the job itself, SIGINT): SIGTERM as it is (hydra and srun pass it on to the ranks), SIGINT
    (twice for srun, which ends its step on the second within a second)."""
    try:
        if received == signal.SIGTERM:
            proc.send_signal(signal.SIGTERM)
            return
        proc.send_signal(signal.SIGINT)
        if srun:
            time.sleep(0.3)
            proc.send_signal(signal.SIGINT)
    except OSError:
        pass


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """``signum`` to the launcher's process group (its session: it and every process it started
    here, ssh clients included)."""
    try:
        os.killpg(proc.pid, signum)
    except OSError:
        pass
