"""Routings of FA-BSP mailboxes: the strategy that says which rank a record goes to next.

A mailbox is given a :class:`Routing` (``bsp.mailbox(..., routing=)``: a name, or an instance)
and asks it one thing per rank: ``next_hops(me)[d]``, the rank a record at ``me`` bound for ``d``
goes to next, and :meth:`Routing.relay`, the object that moves records along those hops
(:mod:`.relay`).  The contract every routing keeps: ``next_hops(me)[me] == me``; the next hop
depends only on (here, destination), so all records of one (source, destination) pair take the
same path and per-pair FIFO order holds hop by hop; every route reaches its destination.  No MPI
in here.

* :class:`Direct` sends every record straight to its destination, so a rank may keep a buffer
  for every other rank: P - 1 buffers.  Records travel bare (no envelope).
* :class:`Grid2D` and :class:`Grid3D` route through a grid of ranks, as bale's conveyors do: a
  record moves along one grid dimension per hop, so each rank sends only to the ranks that differ
  from it in one grid coordinate, about 2 sqrt(P) (2-D) or 3 cbrt(P) (3-D) of them.  A record
  passes through other ranks, so it travels in an envelope that names its destination; except
  where the ranks fill one line of the grid (2 ranks), where every route is one hop and records
  travel bare.

* :class:`NodeAware` routes by node, as YGM's node-remote routing does: records for a rank on
  the same node go straight to it; records for another node go first to the rank of this node
  that talks to that node, across to the rank of that node that talks to this one, and on to
  their destination: at most 3 hops, and between two nodes one pair of ranks carries all their
  records, so a superstep sends at most one aggregated message per node pair and direction
  instead of one per rank pair.  It is built from the ranks' host names (``bsp.hosts``).  For
  a mailbox that combines (``combine=``, :mod:`.combining`) the rank that talks to a node
  combines the records of all its node's ranks for that node before they cross, so a key
  crosses between two nodes at most once per message.

Another routing is a subclass with its own ``next_hops`` (and ``neighbour_counts`` if the
generic count, a pass over every rank's hops, is too slow).
:func:`buffers_per_rank` sizes the memory of a named routing for any P.

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
line.
"""
from __future__ import annotations

import zlib
from typing import ClassVar, Sequence

import numpy as np

from ..runtime.environment import setting
from ..runtime.errors import UsageError
from ..util.choices import ROUTING_CHOICES
from ..util.choices import ROUTINGS as ROUTING_NAMES
from .relay import Relay, Straight

#: The environment variable that chooses the routing of mailboxes that do not give one.
ROUTING_ENV = "HPCBSP_ROUTING"
#: Default routing by P (mailboxes that do not choose, and ``$HPCBSP_ROUTING`` unset or ``auto``):
#: direct up to this many ranks (one buffer per peer stays below 16 MiB at 64 KiB each) ...
DIRECT_UP_TO = 256
#: ... 2-D up to this many (about 2 * 181 buffers), 3-D beyond.
TWO_D_UP_TO = 32768
#: ... and by node for a combining mailbox whose ranks fill two or more nodes with at least this
#: many each (:func:`default_routing`: where it was measured to pay).
NODE_COMBINING_PER_NODE = 3


class Routing:
    """How a mailbox's records travel on ``nprocs`` ranks (see the module notes for the contract).

    Subclasses set :attr:`name` and implement :meth:`next_hops`.
    """

    #: The name ranks agree on (and ``routing=`` accepts for the built-in ones).
    name: ClassVar[str] = "routing"

    def __init__(self, nprocs: int):
        if nprocs < 1:
            raise ValueError(f"a routing needs at least one rank, got {nprocs}")
        self.nprocs = nprocs
        #: The shape the ranks are laid out in (``(P,)`` when there is none).
        self.dims: tuple[int, ...] = (nprocs,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.nprocs}, dims={self.dims})"

    def signature(self) -> str:
        """What every rank's mailbox must agree on: the name and the layout."""
        return f"{self.name} {'x'.join(map(str, self.dims))}"

    def next_hops(self, me: int) -> np.ndarray:
        """``hops[d]`` (int64, one per rank): where a record at ``me`` bound for ``d`` goes next
        (``me`` for d = me)."""
        raise NotImplementedError

    def relay(self, me: int, with_source: bool) -> Straight | Relay:
        """What moves a mailbox's records on rank ``me`` (:mod:`.relay`): envelopes through the
        next hops; ``with_source``: they also name their origin, for the handler.  Next hops
        that are not one rank per rank, ``me`` for itself, raise :class:`UsageError`."""
        hops = np.asarray(self.next_hops(me))
        if hops.shape != (self.nprocs,) or hops.dtype.kind not in "iu" or int(hops[me]) != me \
                or int(hops.min()) < 0 or int(hops.max()) >= self.nprocs:
            raise UsageError(f"rank {me}: routing {self.name}: next_hops({me}) must give a rank for "
                             f"each of the {self.nprocs} ranks, and {me} for {me} itself")
        return Relay(hops.astype(np.int64), me, with_source)

    def merging_hops(self, me: int) -> np.ndarray | None:
        """Where records of several ranks merge on ``me``'s way out: a mask over the ranks, True
        for the next hops whose buffers a combining mailbox lets settle before a flush
        (:data:`.aggregation.SETTLE_S`), so that the batches several ranks flush at about the
        same time leave together; None (the default) for none."""
        return None

    def neighbour_counts(self) -> np.ndarray:
        """For every rank, how many other ranks it sends to (its most buffers per mailbox).

        Generic: a pass over every rank's next hops (P squared work; subclasses do better)."""
        return np.array([np.count_nonzero(np.bincount(self.next_hops(m), minlength=self.nprocs))
                         - 1 for m in range(self.nprocs)], dtype=np.int64)


class Direct(Routing):
    """Every record straight to its destination: a buffer per peer, no envelope."""

    name = "direct"

    def next_hops(self, me: int) -> np.ndarray:
        return np.arange(self.nprocs, dtype=np.int64)

    def relay(self, me: int, with_source: bool) -> Straight | Relay:
        return Straight(me, self.nprocs)

    def neighbour_counts(self) -> np.ndarray:
        return np.full(self.nprocs, self.nprocs - 1, dtype=np.int64)


class GridRouting(Routing):
    """Through a grid of :attr:`k` dimensions, one coordinate per hop (the module notes)."""

    #: The grid's dimensions.
    k: ClassVar[int]

    def __init__(self, nprocs: int):
        super().__init__(nprocs)
        self.grid = Grid(nprocs, self.k)
        self.dims = self.grid.dims

    def next_hops(self, me: int) -> np.ndarray:
        return self.grid.next_hops(me)

    def relay(self, me: int, with_source: bool) -> Straight | Relay:
        """As :meth:`Routing.relay`; but when the ranks fill no more than one line of the grid
        (P <= the last extent: 2 ranks), every route is one hop and no record ever passes
        through another rank, so records travel bare, as with :class:`Direct` (the same on
        every rank: it depends on P only)."""
        if self.nprocs <= self.dims[-1]:
            return Straight(me, self.nprocs)
        return super().relay(me, with_source)

    def neighbour_counts(self) -> np.ndarray:
        return self.grid.neighbour_counts()


class Grid2D(GridRouting):
    """Through a 2-D grid of ranks: about 2 sqrt(P) peers, up to 2 hops."""

    name = "2d"
    k = 2


class Grid3D(GridRouting):
    """Through a 3-D grid of ranks: about 3 cbrt(P) peers, up to 3 hops."""

    name = "3d"
    k = 3


class NodeAware(Routing):
    """By node (the module notes): ``hosts[r]`` names rank r's node.

    Nodes are numbered in the order their first rank appears; ``members[n]`` are node n's ranks
    in rank order, and a rank's local index is its position there.  Node a talks to node b
    through its rank of local index ``b mod size(a)`` (its gateway to b).  From rank m on node a
    to d on node b != a the next hop is a's gateway to b, or, at that gateway, b's gateway to a;
    from there, d is on the same node.  Default hosts (none given): ``per_node`` consecutive
    ranks a node, for sizing (:func:`buffers_per_rank`).
    """

    name = "node"

    def __init__(self, nprocs: int, hosts: Sequence[str] | None = None, per_node: int = 1):
        super().__init__(nprocs)
        if hosts is None:
            if per_node < 1:
                raise ValueError(f"per_node must be at least 1, got {per_node}")
            hosts = [str(r // per_node) for r in range(nprocs)]
        if len(hosts) != nprocs:
            raise ValueError(f"a node routing of {nprocs} ranks needs {nprocs} host names, got {len(hosts)}")
        number: dict[str, int] = {}
        self.node = np.array([number.setdefault(h, len(number)) for h in hosts], dtype=np.int64)
        self.members = [np.flatnonzero(self.node == n) for n in range(len(number))]
        self.size = np.array([m.size for m in self.members], dtype=np.int64)
        self.local = np.empty(nprocs, dtype=np.int64)
        for m in self.members:
            self.local[m] = np.arange(m.size)
        self.dims = (len(number), int(self.size.max()))

    def signature(self) -> str:
        # (the whole map: two runs with as many nodes but other placements must not mix)
        return f"{self.name} {'x'.join(map(str, self.dims))} {zlib.crc32(self.node.tobytes()):08x}"

    def relay(self, me: int, with_source: bool) -> Straight | Relay:
        """As :meth:`Routing.relay`; but on one node, or with one rank a node, every route is one
        hop, so records travel bare, as with :class:`Direct` (the same on every rank)."""
        if len(self.members) == 1 or int(self.size.max()) == 1:
            return Straight(me, self.nprocs)
        return super().relay(me, with_source)

    def merging_hops(self, me: int) -> np.ndarray | None:
        """The ranks of other nodes, where records pass through (where they do): ``me`` sends
        there only as its node's representative, with its node's ranks' records."""
        if len(self.members) == 1 or int(self.size.max()) == 1:
            return None
        return self.node != self.node[me]

    def gateway(self, a: int, b: np.ndarray | int) -> np.ndarray:
        """The rank(s) of node ``a`` that talk to node(s) ``b``."""
        return self.members[a][np.asarray(b, dtype=np.int64) % self.size[a]]

    def next_hops(self, me: int) -> np.ndarray:
        a = int(self.node[me])
        dest = np.arange(self.nprocs, dtype=np.int64)
        b = self.node
        hops = dest.copy()  # the same node: straight there
        away = b != a
        mine = self.gateway(a, b[away])  # this node's gateway to each destination's node
        to_a = np.array([self.gateway(n, a) for n in range(len(self.members))], dtype=np.int64)
        hops[away] = np.where(mine == me, to_a[b[away]], mine)  # (at the gateway: across)
        return hops

    def neighbour_counts(self) -> np.ndarray:
        """Its node's other ranks, plus the gateway of every node it is the gateway to (for a
        rank of local index i on a node of s ranks: the other nodes b with b mod s = i)."""
        nodes = len(self.members)
        s = self.size[self.node]
        i = self.local
        others = (nodes - 1 - i) // s + 1 - (self.node % s == i)  # b in [0, nodes) with b % s == i, minus its own
        return (s - 1) + np.where(i < nodes, others, 0)


#: The routings a mailbox can name (``routing=``, ``$HPCBSP_ROUTING``, ``--routing``).
ROUTINGS: dict[str, type[Routing]] = dict(zip(ROUTING_NAMES, (Direct, Grid2D, Grid3D, NodeAware), strict=True))


def default_routing(nprocs: int, hosts: Sequence[str] | None = None, combine: bool = False) -> str:
    """The routing a mailbox gets when neither it nor ``$HPCBSP_ROUTING`` chooses one.

    By P (direct up to :data:`DIRECT_UP_TO` ranks, 2-d up to :data:`TWO_D_UP_TO`, 3-d beyond),
    except by node for a mailbox that combines its records (``combine``) where ``hosts`` (the
    ranks' host names) place them on two or more nodes of at least :data:`NODE_COMBINING_PER_NODE`
    ranks each, and routing by node holds no more buffers per rank than the routing by P.

    Why (docs/performance.md, "Routing by node with combining"; 4 and 8 emulated nodes at 100
    Mbit/s, histogram, oversubscribed): a node's representative merges its ranks' records for
    a node, 1.2 to 2.2 messages per node pair and superstep instead of one per pair of their
    ranks.  With 3 and 4 ranks a node that paid on uniform keys (1.16x to 1.62x direct with
    combining, 6 runs on 4 and 8 nodes) and mostly not on Zipf keys, which the senders' own
    buffers already combine (0.71x to 0.87x, one run 1.44x); with 2 ranks a node it did not
    pay (0.83x and 1.02x uniform, 0.75x and 0.86x Zipf).  Without combining, routing by node
    does not pay (0.62x to 0.90x direct; 1.03x to 1.19x in 3 runs at 8 nodes of 3 and 4): its
    envelopes cost 1.5x the bytes on the links, so it is not chosen.  The rule cannot see the
    key distribution; a mailbox whose keys are known to be skewed may ask for
    ``routing="direct"``.
    """
    by_p = "direct" if nprocs <= DIRECT_UP_TO else "2d" if nprocs <= TWO_D_UP_TO else "3d"
    if combine and hosts is not None and nprocs > 1:
        route = NodeAware(nprocs, hosts)
        if len(route.members) > 1 and int(route.size.min()) >= NODE_COMBINING_PER_NODE \
                and route.neighbour_counts().max() <= ROUTINGS[by_p](nprocs).neighbour_counts().max():
            return "node"
    return by_p


def resolve_routing(routing: str | Routing | None, nprocs: int, where: str,
                    hosts: Sequence[str] | None = None, combine: bool = False) -> Routing:
    """The routing of a mailbox on ``nprocs`` ranks: ``routing`` (a name, ``"auto"`` or a
    :class:`Routing` of ``nprocs`` ranks), else ``$HPCBSP_ROUTING``, else the default
    (:func:`default_routing`; ``hosts``: the ranks' host names, which ``"node"`` routes by;
    ``combine``: the mailbox combines its records).
    A bad ``routing`` raises :class:`UsageError` naming ``where``; a bad ``$HPCBSP_ROUTING``
    :class:`~hpcbsp.runtime.errors.BadInput` (found already when the context started)."""
    if isinstance(routing, Routing):
        if routing.nprocs != nprocs:
            raise UsageError(f"{where}: routing {routing!r} is for {routing.nprocs} ranks, "
                             f"this program has {nprocs}")
        return routing
    if routing is None:
        routing = setting(ROUTING_ENV)
    if routing == "auto":
        routing = default_routing(nprocs, hosts, combine)
    if not isinstance(routing, str) or routing not in ROUTINGS:
        raise UsageError(f"{where}: routing must be one of {', '.join(ROUTING_CHOICES)} "
                         f"(or a Routing); got {routing!r}")
    if routing == "node":
        return NodeAware(nprocs, hosts)
    return ROUTINGS[routing](nprocs)


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


def buffers_per_rank(nprocs: int, routing: str, per_node: int = 1) -> int:
    """The most destination buffers one rank of ``nprocs`` can hold for a mailbox routed so
    (``per_node``: ranks a node, for ``"node"``)."""
    if routing not in ROUTINGS:
        raise ValueError(f"unknown routing {routing!r}")
    if nprocs == 1:
        return 0
    route = NodeAware(nprocs, per_node=per_node) if routing == "node" else ROUTINGS[routing](nprocs)
    return int(route.neighbour_counts().max())


def _root_ceil(n: int, k: int) -> int:
    """The smallest integer s with s ** k >= n."""
    s = max(1, int(round(n ** (1.0 / k))))
    while s ** k < n:
        s += 1
    while s > 1 and (s - 1) ** k >= n:
        s -= 1
    return s


def grid_dims(nprocs: int, routing: str) -> tuple[int, ...]:
    """The grid a named routing lays ``nprocs`` ranks out in (``(P,)`` for direct)."""
    return ROUTINGS[routing](nprocs).dims


__all__ = ["NODE_COMBINING_PER_NODE", "ROUTINGS", "ROUTING_ENV", "Direct", "Grid", "Grid2D", "Grid3D", "GridRouting",
           "NodeAware", "Routing", "buffers_per_rank", "default_routing", "grid_dims", "resolve_routing"]
