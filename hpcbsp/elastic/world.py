"""A training world: the ranks of one BSP context that train together, and the one way to start it.

:func:`launch_world` calls ``fn(world, *args, **kw)`` on every rank inside :func:`hpcbsp.run`,
so a training program lives and ends as every other hpcbsp program does (the runtime's
lifecycle, :mod:`hpcbsp.runtime.superstep.lifecycle` and :mod:`hpcbsp.runtime.api.runner`; nothing here adds
a second one):

* Ctrl-C ends every rank at once, with one line naming the interrupted rank (status 130);
* an exception on one rank is reported with that rank's name; the others learn of it at their
  next collective call on ``world.bsp`` (between policy runs, say) or, while they are inside the
  parameter server's or the allreduce baseline's loops, the job is aborted after
  ``$HPCBSP_ABORT_GRACE`` seconds;
* a wait of the server, a worker or the baseline that exceeds ``world.timeout`` raises
  :class:`~.protocol.ServerTimeout`, a :class:`hpcbsp.SyncTimeout`: uncaught, it is reported as
  one line naming the rank and ends the job, as a collective's timeout does.  ``world.timeout``
  is ``launch_world``'s ``timeout=``, else ``$HPCBSP_SYNC_TIMEOUT``, else :data:`DEFAULT_TIMEOUT`.

The world's roles are those of :mod:`.server` and :mod:`.allreduce`: rank 0 serves (or
evaluates), ranks ``1..n`` are the workers.  The protocols run on ``world.comm``, a duplicate of
the context's communicator made once per world (their tags never meet the context's traffic) and
freed with the context; meeting points between runs are the context's own collective calls
(``world.bsp.sync()``, ``world.bsp.broadcast``), which detect a rank that failed or diverged.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from mpi4py import MPI

import hpcbsp

from ..runtime import BSP
from ..runtime.errors import BadInput

__all__ = ["World", "WorldTooSmall", "launch_world", "DEFAULT_TIMEOUT"]

T = TypeVar("T")

#: Longest single wait of a training world, seconds, where neither ``timeout=`` nor
#: ``$HPCBSP_SYNC_TIMEOUT`` says otherwise (a broken run fails instead of hanging).
DEFAULT_TIMEOUT = 60.0


class WorldTooSmall(BadInput):
    """The job has fewer ranks than the training world needs (every rank raises it, before any
    context is made): ``size`` ranks, ``needed`` at least."""

    def __init__(self, size: int, needed: int):
        super().__init__(f"a training world needs at least {needed} ranks (rank 0 serves, ranks "
                         f"1.. work); this job has {size}")
        self.size, self.needed = size, needed


@dataclass(frozen=True)
class World:
    """One rank's view of a training world (see the module docstring)."""

    bsp: BSP
    #: The protocols' communicator: a duplicate of ``bsp.comm`` (same ranks), freed with ``bsp``.
    comm: MPI.Comm
    #: Longest single wait of the server, a worker or the allreduce baseline, seconds.
    timeout: float

    @property
    def rank(self) -> int:
        return self.bsp.pid

    @property
    def size(self) -> int:
        return self.bsp.nprocs

    @property
    def n_workers(self) -> int:
        """Ranks ``1..size-1``: the workers."""
        return self.bsp.nprocs - 1

    @property
    def is_server(self) -> bool:
        """Rank 0: the parameter server (or, for the allreduce baseline, the evaluator)."""
        return self.bsp.pid == 0


def launch_world(fn: Callable[..., T], *args: Any, comm: MPI.Comm | None = None,
                 timeout: float | None = None, min_ranks: int = 2, **kw: Any) -> T:
    """Call ``fn(world, *args, **kw)`` on every rank of ``comm`` (default ``MPI.COMM_WORLD``)
    as a :class:`World` and return this rank's result (collective).

    ``timeout`` sets ``world.timeout`` (see the module docstring).  Raises
    :class:`WorldTooSmall` on every rank when ``comm`` has fewer than ``min_ranks`` ranks (2: a
    server and a worker; 1 where the program also runs alone).  Everything else is
    :func:`hpcbsp.run`'s: failures, timeouts and Ctrl-C behave as in every hpcbsp program.
    """
    size = (MPI.COMM_WORLD if comm is None else comm).Get_size()
    if size < min_ranks:
        raise WorldTooSmall(size, min_ranks)
    return hpcbsp.run(_enter, fn, args, kw, timeout, comm=comm)


def _enter(bsp: BSP, fn: Callable[..., T], args: tuple[Any, ...], kw: dict[str, Any],
           timeout: float | None) -> T:
    protocol = bsp.comm.Dup()
    bsp.extension.add_close_hook(protocol.Free)
    if timeout is None:
        timeout = bsp.timeout if bsp.timeout is not None else DEFAULT_TIMEOUT
    return fn(World(bsp, protocol, float(timeout)), *args, **kw)
