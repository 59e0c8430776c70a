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
(:func:`claim_report`), ``stopped`` when SIGTERM ends it (:func:`stopping`; scancel, a time
limit: the job is being stopped).  A pipe that closes without a word is a silent death.  The watcher sees
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

from mpi4py import MPI

from ...util import procstat
from ..environment import setting
from ..errors import BadInput

__all__ = ["start", "introduce", "heartbeat_settings", "watched", "claim", "claim_report", "stopping"]

#: Seconds a rank tries to reach (or start) its node's watcher before it goes on without one
#: (a watcher starts in a fraction of a second; on a node overloaded many times over, seconds).
REGISTER_TIMEOUT = 60.0

_pipe: int | None = None
_marker: str | None = None
_detaching: subprocess.Popen | None = None  # the watcher's parent, until it has exited
_name: str | None = None  # the watcher's socket
_port = 0  # the watcher's heartbeat port (0: none)
_address = ""  # the address its socket is bound to


def heartbeat_settings() -> tuple[float, float]:
    """``(period, timeout)`` of the failure detector from the environment (a timeout of 0 turns
    it off); raises :class:`~.errors.BadInput` naming a bad value."""
    period = float(setting("HPCBSP_HEARTBEAT_PERIOD"))
    timeout = float(setting("HPCBSP_HEARTBEAT_TIMEOUT"))
    if timeout and timeout < 2 * period:
        raise BadInput(f"HPCBSP_HEARTBEAT_TIMEOUT={timeout:g} is shorter than two heartbeat periods "
                       f"(HPCBSP_HEARTBEAT_PERIOD={period:g}): a node would be given up after one lost "
                       "datagram; raise the timeout or shorten the period (docs/environment.md)")
    return period, timeout


def start(rank: int, size: int) -> None:
    """Register this process with its node's watcher, spawning the watcher when none runs yet
    (once per process; nothing for a single rank or when turned off).  Not collective."""
    global _pipe, _marker, _name
    if _pipe is not None or size < 2 or not setting("HPCBSP_DEATHWATCH"):
        return
    period, timeout = heartbeat_settings()
    host = socket.gethostname()
    key = f"{os.getuid()}-{host}-{os.getppid()}-{procstat.start_time(os.getppid()) or 0}"
    marker = os.path.join(tempfile.gettempdir(), f"hpcbsp-failed-{key}")
    name = "\0hpcbsp-watch-" + hashlib.sha1(marker.encode()).hexdigest()[:24]
    r, w = os.pipe()
    try:
        ok = _register(name, [marker, f"{period:g}", f"{timeout:g}"],
                       f"{rank} {size} {os.getpid()}\n".encode(), r)
    finally:
        os.close(r)
    if not ok:
        os.close(w)
        return  # no watcher: the launcher's own message is all there will be
    _marker, _pipe, _name = marker, w, name
    atexit.register(_say, b"bye\n")
    os.register_at_fork(after_in_child=_forget)  # a forked child is not the rank


def watched() -> bool:
    """Whether this process is registered with its node's watcher."""
    return _pipe is not None


def introduce(comm: MPI.Comm) -> None:
    """Collective over ``comm``: tell each node's watcher where the watchers of ``comm``'s other
    nodes listen, so that they watch each other, and the job's secret that their datagrams carry
    (one allgather; ``comm``'s first rank makes the secret, 32 bytes of ``os.urandom``, which
    travels through MPI and the watchers' UNIX sockets only; the first rank of ``comm`` on each
    node passes the table on).  Nothing when this rank is not watched or there is one node."""
    me = (socket.gethostname(), _address, _port, MPI.COMM_WORLD.Get_rank()) if _pipe is not None else None
    key = os.urandom(32) if comm.Get_rank() == 0 else None
    table = comm.allgather((me, key))
    secret = table[0][1]
    entries = [e for e, _ in table]
    hosts: dict[str, tuple[str, int, list[int]]] = {}
    for entry in entries:
        if entry is not None:
            hosts.setdefault(entry[0], (entry[1], entry[2], []))[2].append(entry[3])
    if me is None or _name is None or secret is None or len(hosts) < 2 or entries.index(me) != \
            next(i for i, e in enumerate(entries) if e is not None and e[0] == me[0]):
        return
    text = f"peers\nkey {secret.hex()}\n" + "".join(
        f"{h} {address or '-'} {port} {','.join(map(str, ranks))}\n" for h, (address, port, ranks) in hosts.items())
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(5.0)
            conn.connect(_name)
            conn.sendall(text.encode())
    except OSError:
        pass  # the watcher is gone: the job is ending


def _register(name: str, argv: list[str], hello: bytes, fd: int) -> bool:
    """Hand ``fd`` to the watcher listening on ``name`` (spawning it with ``argv`` when nobody
    listens).  A watcher too slow to answer within :data:`REGISTER_TIMEOUT` (a node overloaded
    beyond reason) leaves this rank unwatched, and it says so."""
    global _port, _address
    deadline = time.monotonic() + REGISTER_TIMEOUT
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(max(0.1, deadline - time.monotonic()))
                conn.connect(name)
                socket.send_fds(conn, [hello], [fd])
                word, port, address = (conn.recv(128).decode().split() + ["", "", ""])[:3]
                if word != "ok":
                    continue  # it closed without an answer (it was ending): a new one is started
                _port, _address = int(port or 0), address
                _reap_detaching()
                return True
        except (ConnectionRefusedError, FileNotFoundError, ConnectionResetError, BrokenPipeError):
            spawned = _spawn(name, argv)
            if spawned is None:
                return False  # no watcher can be started here
            if not spawned:
                time.sleep(0.002)  # another rank of the node is starting it
        except TimeoutError:
            break
        except (OSError, AttributeError, ValueError):  # no abstract sockets or fd passing here
            return False
    sys.stderr.write(f"[hpcbsp] warning: this node's watcher did not answer within {REGISTER_TIMEOUT:g} s "
                     f"(pid {os.getpid()} on {socket.gethostname()}): this rank is not watched, so a "
                     "silent death or a lost node will not be named\n")
    return False


def _spawn(name: str, argv: list[str]) -> bool | None:
    """Bind ``name`` (atomic: one rank of the node wins) and start the watcher on it: True when
    this rank started it, False when another rank holds the name, None when it cannot start."""
    global _detaching
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(name)
        listener.listen(1024)
    except OSError:
        listener.close()
        return False
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nodewatch.py")
    try:
        # (the process started here forks the watcher and exits: see nodewatch.main)
        _detaching = subprocess.Popen([sys.executable, "-I", "-S", script, argv[0], str(listener.fileno()),
                                       *argv[1:]],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      pass_fds=[listener.fileno()], start_new_session=True)
    except OSError:
        return None
    finally:
        listener.close()
    return True


def _reap_detaching() -> None:
    """Wait for the process that forked the watcher (it exited before the watcher answered)."""
    global _detaching
    if _detaching is not None:
        try:
            _detaching.wait(timeout=REGISTER_TIMEOUT)
        except subprocess.TimeoutExpired:
            pass
        _detaching = None


def _forget() -> None:
    """In a forked child: let go of the parent's pipe, saying nothing."""
    global _pipe
    if _pipe is not None:
        try:
            os.close(_pipe)
        except OSError:
            pass
        _pipe = None


def claim() -> None:
    """This rank reports its own failure and is about to abort the job: keep the peers quiet."""
    _say(b"claimed\n")


def stopping() -> None:
    """This rank was asked to stop (SIGTERM) and is about to end: not a silent death."""
    _say(b"stopped\n")


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
