"""Multi-hop routing of FA-BSP mailboxes: which rank a record goes to next, and what it costs.

``direct`` sends every record straight to its destination, so a rank may keep a buffer for every
other rank: P - 1 buffers.  ``2d`` and ``3d`` route through a grid of ranks, as bale's conveyors
do: a record moves along one grid dimension per hop, so each rank sends only to the ranks that
differ from it in one grid coordinate, about 2 sqrt(P) (2-D) or 3 cbrt(P) (3-D) of them.  No MPI
in here: the mailbox uses :meth:`Grid.next_hops` and :func:`buffers_per_rank` sizes the memory.

The grid.  Ranks are laid out row-major in a grid of ``k`` dimensions ``dims`` (most significant
first): the last k - 1 extents are ``ceil(P ** (1/k))`` and the first is what it takes to hold
P ranks, so a P that does not fill the grid (a prime, say) leaves the last row (plane) partly
empty.  Rank r has the mixed-radix digits of r as coordinates.

The route.  From rank m to destination d, the next hop is m with one coordinate replaced by
d's: the least significant coordinate in which they differ whose replacement is a rank (< P).
Such a coordinate always exists (by induction on k: if m's leading coordinate is below the grid's
last, every replacement of a lower coordinate lies in a full plane; if it is the last and d's is
lower, replacing the leading one lands in a full plane; if both are the last, the same argument
holds in the partial plane), so every route reaches d in at most k hops, each within one grid
line.  The next hop depends only on (m, d), so all records from one source to one destination
take the same path and per-pair FIFO order is kept hop by hop.
"""
from __future__ import annotations

import os

import numpy as np

from ..runtime.errors import UsageError

#: The routings, with the grid dimensions each uses.
ROUTINGS = {"direct": 1, "2d": 2, "3d": 3}
#: The environment variable that chooses the routing of mailboxes that do not give one.
ROUTING_ENV = "HPCBSP_ROUTING"
#: Default routing by P (mailboxes that do not choose, and ``$HPCBSP_ROUTING`` unset or ``auto``):
#: direct up to this many ranks (one buffer per peer stays below 16 MiB at 64 KiB each) ...
DIRECT_UP_TO = 256
#: ... 2-D up to this many (about 2 * 181 buffers), 3-D beyond.
TWO_D_UP_TO = 32768


def default_routing(nprocs: int) -> str:
    """The routing a mailbox gets when neither it nor ``$HPCBSP_ROUTING`` chooses one."""
    if nprocs <= DIRECT_UP_TO:
        return "direct"
    return "2d" if nprocs <= TWO_D_UP_TO else "3d"


def resolve_routing(routing: str | None, nprocs: int, where: str) -> str:
    """``routing`` (or ``$HPCBSP_ROUTING``, or the default for ``nprocs``) checked."""
    source = "routing"
    if routing is None:
        routing, source = os.environ.get(ROUTING_ENV) or "auto", f"${ROUTING_ENV}"
    if routing == "auto":
        return default_routing(nprocs)
    if routing not in ROUTINGS:
        raise UsageError(f"{where}: {source} must be one of auto, {', '.join(ROUTINGS)}; "
                         f"got {routing!r}")
    return routing


class Grid:
    """P ranks laid out row-major in a ``k``-dimensional grid (see the module notes)."""

    def __init__(self, nprocs: int, k: int):
        if nprocs < 1 or k < 1:
            raise ValueError(f"a grid needs at least one rank and one dimension ({nprocs}, {k})")
        self.nprocs = nprocs
        side = _root_ceil(nprocs, k)
        inner = side ** (k - 1)
        self.dims = (max(1, -(-nprocs // inner)),) + (side,) * (k - 1)
        #: Rank distance of a unit step in each coordinate.
        self.strides = tuple(int(np.prod(self.dims[i + 1:], dtype=np.int64)) for i in range(k))

    def __repr__(self) -> str:
        return f"Grid({self.nprocs}, dims={self.dims})"

    def coords(self, ranks: np.ndarray | int) -> np.ndarray:
        """The coordinates of ``ranks``, one column per dimension (most significant first)."""
        r = np.asarray(ranks, dtype=np.int64)
        return np.stack([(r // s) % n for s, n in zip(self.strides, self.dims)], axis=-1)

    def next_hops(self, me: int) -> np.ndarray:
        """``hops[d]``: the rank a record at ``me`` bound for ``d`` goes to next (``me`` for d = me)."""
        dest = np.arange(self.nprocs, dtype=np.int64)
        hops = dest.copy()  # hops[me] = me
        undecided = dest != me
        mine = self.coords(me)
        theirs = self.coords(dest)
        # Least significant coordinate first: the first differing one whose replacement exists.
        for i in reversed(range(len(self.dims))):
            differ = undecided & (theirs[:, i] != mine[i])
            candidate = me + (theirs[:, i] - mine[i]) * self.strides[i]
            take = differ & (candidate < self.nprocs)
            hops[take] = candidate[take]
            undecided &= ~take
        assert not undecided.any(), "every route has a next hop (module notes)"
        return hops

    def neighbour_counts(self) -> np.ndarray:
        """For every rank, how many ranks it sends to: those differing from it in one coordinate.

        (Each such rank is its own next hop, and every next hop is one of them.)  Vectorised
        over the ranks, ``sum(dims)`` passes: P = 100,000 takes a fraction of a second.
        """
        if len(self.dims) == 1:
            return np.full(self.nprocs, self.nprocs - 1, dtype=np.int64)
        ranks = np.arange(self.nprocs, dtype=np.int64)
        coords = self.coords(ranks)
        counts = np.zeros(self.nprocs, dtype=np.int64)
        for i, (extent, stride) in enumerate(zip(self.dims, self.strides)):
            for value in range(extent):
                moved = ranks + (value - coords[:, i]) * stride
                counts += (coords[:, i] != value) & (moved < self.nprocs)
        return counts


def buffers_per_rank(nprocs: int, routing: str) -> int:
    """The most destination buffers one rank of ``nprocs`` can hold for a mailbox routed so."""
    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing {routing!r}")
    if nprocs == 1:
        return 0
    return int(Grid(nprocs, ROUTINGS[routing]).neighbour_counts().max())


def _root_ceil(n: int, k: int) -> int:
    """The smallest integer s with s ** k >= n."""
    s = max(1, int(round(n ** (1.0 / k))))
    while s ** k < n:
        s += 1
    while s > 1 and (s - 1) ** k >= n:
        s -= 1
    return s


def grid_dims(nprocs: int, routing: str) -> tuple[int, ...]:
    """The grid a routing lays ``nprocs`` ranks out in (``(P,)`` for direct)."""
    return Grid(nprocs, ROUTINGS[routing]).dims


__all__ = ["ROUTINGS", "ROUTING_ENV", "Grid", "buffers_per_rank", "default_routing",
           "grid_dims", "resolve_routing"]
