"""Registration with the node's watcher (:mod:`.nodewatch`): who may register and what a rank hands over.

The watcher's ``FD`` is a listening UNIX socket (an abstract name, private to the node's
network namespace, derived from the job's key).  A rank connects, sends ``"RANK SIZE PID\\n"``
with the read end of a pipe whose write end only it holds (``SCM_RIGHTS``), and waits for
``ok PORT ADDRESS`` (the watcher's UDP port and the address it is bound to).  Connections from
another user are refused (``SO_PEERCRED``).

The first rank of each node also sends the job's table (``peers``, the job's secret, the nodes'
watchers: :func:`.deathwatch.introduce`), which the watcher's failure detector meets
(:meth:`.detector.Detector.meet`); only a connection of the watcher's own user is heard.

Standard library only (loaded by path by the watcher's script).
"""
from __future__ import annotations

import os
import socket
import struct
from typing import Callable, NamedTuple

if __package__:
    from ...util import procstat
else:  # loaded by the watcher's script (python -I -S nodewatch.py), which puts util/ on the path
    import procstat  # type: ignore[no-redef]

__all__ = ["Rank", "accept"]


class Rank(NamedTuple):
    """A registered rank of this node: its number in the job of ``size``, its pid, the read end
    of its pipe (``fd``; -1 for none) and a pidfd of the process (-1 for none), by which its wait
    status outlives its reaping (:func:`hpcbsp.util.procstat.probe`)."""

    rank: int
    size: int
    pid: int
    fd: int
    pidfd: int = -1


def accept(listener: socket.socket, meet: Callable[[bytes], None], answer: bytes) -> Rank | None:
    """Take one connection on ``listener``: a rank that registers (it is answered ``answer`` and
    returned), or the job's table (handed to ``meet``; None), or anything else (refused; None)."""
    try:
        conn, _ = listener.accept()
    except OSError:
        return None
    with conn:
        conn.settimeout(5.0)
        try:
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _, uid, _ = struct.unpack("3i", creds)
            msg, fds, _, _ = socket.recv_fds(conn, 65536, 1)
            if uid == os.getuid() and not fds and msg.startswith(b"peers\n"):
                while chunk := conn.recv(65536):
                    msg += chunk
                meet(msg)
                return None
        except OSError:
            return None
        if uid != os.getuid() or len(fds) != 1:
            for fd in fds:
                os.close(fd)
            return None
        try:
            rank, size, pid = (int(x) for x in msg.split())
        except ValueError:
            os.close(fds[0])
            return None
        held = procstat.pidfd(pid)  # now, while the rank waits for its answer: it runs
        try:
            conn.sendall(answer)
        except OSError:
            pass
        return Rank(rank, size, pid, fds[0], held)
