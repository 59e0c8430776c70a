"""Name a rank that dies without a word: SIGKILL, a segfault, the out-of-memory killer.

Such a rank cannot report itself, and ``mpiexec`` (MPICH's hydra) names only a PID, often not the
right one: it kills the other ranks at once and reports whichever process it reaped first.  So
each node of a job runs one watcher, :mod:`.nodewatch` (a small Python process with the standard
library only, in its own session), and every process that joins a multi-rank BSP context
registers with it: it hands the watcher the read end of a pipe whose write end only it holds
(:func:`start`).  The first rank of the node to register spawns the watcher; the others find it
by the job's key (the user, the host and the launcher's process on it, the parent of every rank
of the job there, with its start time).

The rank writes one word into its pipe before it goes: ``bye`` when it exits normally
(``atexit``), ``claimed`` when it reports its own failure and aborts the job (:func:`claim`: the
peers the launcher kills next are no news), ``owner`` or ``claimed`` when it is interrupted
(:func:`claim_report`).  A pipe that closes without a word is a silent death.  The watcher sees
the pipes close in the order the ranks ended (``epoll`` keeps the kernel's order, however late
the watcher gets to run) and names the first, with the signal that ended it: plainly when every
rank of the job is on the node, with a doubt said when a rank of another node may have died first
(see :mod:`.nodewatch` for the rules).  One line per node: the watcher and an interrupted rank
take the same failure marker (an atomic ``mkdir``) before they speak.

A forked child (multiprocessing) lets go of the pipe.  ``HPCBSP_DEATHWATCH=0`` turns the watch
off.  Without Linux's ``/proc``, abstract UNIX sockets and ``epoll`` there is no watch, and the
launcher's own message is all there is.
"""
from __future__ import annotations

import atexit
import hashlib
import os
import socket
import subprocess
import sys
import tempfile
import time

__all__ = ["start", "watched", "claim", "claim_report"]

#: Seconds a rank tries to reach (or start) its node's watcher before it goes on without one.
REGISTER_TIMEOUT = 10.0

_pipe: int | None = None
_marker: str | None = None


def start(rank: int, size: int) -> None:
    """Register this process with its node's watcher, spawning the watcher when none runs yet
    (once per process; nothing for a single rank or when turned off).  Not collective."""
    global _pipe, _marker
    if _pipe is not None or size < 2 or os.environ.get("HPCBSP_DEATHWATCH", "1") == "0":
        return
    host = socket.gethostname()
    key = f"{os.getuid()}-{host}-{os.getppid()}-{_start_time(os.getppid())}"
    marker = os.path.join(tempfile.gettempdir(), f"hpcbsp-failed-{key}")
    name = "\0hpcbsp-watch-" + hashlib.sha1(marker.encode()).hexdigest()[:24]
    r, w = os.pipe()
    try:
        ok = _register(name, marker, f"{rank} {size} {os.getpid()}\n".encode(), r)
    finally:
        os.close(r)
    if not ok:
        os.close(w)
        return  # no watcher: the launcher's own message is all there will be
    _marker, _pipe = marker, w
    atexit.register(_say, b"bye\n")
    os.register_at_fork(after_in_child=_forget)  # a forked child is not the rank


def watched() -> bool:
    """Whether this process is registered with its node's watcher."""
    return _pipe is not None


def _register(name: str, marker: str, hello: bytes, fd: int) -> bool:
    """Hand ``fd`` to the watcher listening on ``name`` (spawning it when nobody listens)."""
    deadline = time.monotonic() + REGISTER_TIMEOUT
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                conn.connect(name)
                socket.send_fds(conn, [hello], [fd])
                return conn.recv(len(b"ok\n")) == b"ok\n"
        except (ConnectionRefusedError, FileNotFoundError):
            spawned = _spawn(name, marker)
            if spawned is None:
                return False  # no watcher can be started here
            if not spawned:
                time.sleep(0.002)  # another rank of the node is starting it
        except (OSError, AttributeError):  # no abstract sockets or fd passing here
            return False
    return False


def _spawn(name: str, marker: str) -> bool | None:
    """Bind ``name`` (atomic: one rank of the node wins) and start the watcher on it: True when
    this rank started it, False when another rank holds the name, None when it cannot start."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(name)
        listener.listen(1024)
    except OSError:
        listener.close()
        return False
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nodewatch.py")
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", script, marker, str(listener.fileno())],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                pass_fds=[listener.fileno()], start_new_session=True)
        proc.returncode = 0  # never waited for: it outlives this process by design
    except OSError:
        return None
    finally:
        listener.close()
    return True


def _forget() -> None:
    """In a forked child: let go of the parent's pipe, saying nothing."""
    global _pipe
    if _pipe is not None:
        try:
            os.close(_pipe)
        except OSError:
            pass
        _pipe = None


def _start_time(pid: int) -> str:
    fields = _stat(pid)
    return fields[19] if len(fields) > 19 else "0"


def _stat(pid: int | str) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...); [] if gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def claim() -> None:
    """This rank reports its own failure and is about to abort the job: keep the peers quiet."""
    _say(b"claimed\n")


def claim_report() -> bool:
    """This rank is about to end the job with a line of its own (Ctrl-C): whether to print it.

    True for the first rank of this node to claim (it takes the node's failure marker, which
    keeps every watcher of the node quiet, and its watcher removes the marker later), False for
    the others, which stay quiet: one line per node, not one per rank.  True without a watcher.
    """
    if _pipe is None or _marker is None:
        return True
    try:
        os.mkdir(_marker)
    except FileExistsError:
        _say(b"claimed\n")
        return False
    except OSError:
        _say(b"claimed\n")
        return True
    _say(b"owner\n")
    return True


def _say(word: bytes) -> None:
    global _pipe
    if _pipe is None:
        return
    try:
        os.write(_pipe, word)
        os.close(_pipe)
    except OSError:
        pass
    _pipe = None
