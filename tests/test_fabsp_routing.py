"""Multi-hop routing of FA-BSP mailboxes, without MPI: the routings, the grid, the routes, the
buffer sizes, the envelopes of fixed-size and ragged records.

Oracles: routes are walked hop by hop for every (source, destination) pair of small grids and
checked against the grid coordinates computed independently (``np.unravel_index``): a route
ends at its destination, every hop changes exactly one coordinate to the destination's (so the
hop count is the number of coordinates in which source and destination differ) and stays on a
rank; the number of ranks one rank sends to is counted by brute force over those routes.  The
sizes for large P are checked against the closed form 2(sqrt P - 1) / 3(cbrt P - 1).
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp import BadInput, UsageError
from hpcbsp.fabsp.aggregation import Unwrapped
from hpcbsp.fabsp.formats import Fixed, Ragged
from hpcbsp.fabsp.relay import Relay, Straight
from hpcbsp.fabsp.routing import (
    DIRECT_UP_TO,
    ROUTINGS,
    TWO_D_UP_TO,
    Direct,
    Grid,
    Grid2D,
    Grid3D,
    Routing,
    buffers_per_rank,
    default_routing,
    grid_dims,
    resolve_routing,
)

SMALL = list(range(1, 31)) + [36, 37, 49, 64, 65]
ROUTINGS_NAME = {1: "direct", 2: "2d", 3: "3d"}


def _ceil_root(p: int, k: int) -> int:
    s = 1
    while s ** k < p:
        s += 1
    return s


def _coords(ranks, dims):
    return np.stack(np.unravel_index(np.asarray(ranks), dims), axis=-1)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("p", SMALL)
def test_every_route_reaches_its_destination_one_coordinate_per_hop(p, k):
    grid = Grid(p, k)
    assert int(np.prod(grid.dims)) >= p > int(np.prod(grid.dims)) - int(np.prod(grid.dims[1:])), \
        "the grid holds P ranks and its first row (plane) is not empty"
    hops = np.stack([grid.next_hops(m) for m in range(p)])  # hops[m, d]
    coords = _coords(np.arange(p), grid.dims)
    for s in range(p):
        for d in range(p):
            here, path = s, []
            while here != d:
                nxt = int(hops[here, d])
                assert 0 <= nxt < p and nxt != here
                changed = np.flatnonzero(coords[here] != coords[nxt])
                assert len(changed) == 1 and coords[nxt][changed[0]] == coords[d][changed[0]], \
                    (s, d, here, nxt)
                path.append(nxt)
                here = nxt
                assert len(path) <= k
            assert len(path) == int(np.count_nonzero(coords[s] != coords[d]))


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("p", SMALL)
def test_neighbour_counts_are_the_ranks_each_rank_sends_to(p, k):
    grid = Grid(p, k)
    want = [len(set(grid.next_hops(m).tolist()) - {m}) for m in range(p)]
    assert grid.neighbour_counts().tolist() == want
    assert buffers_per_rank(p, ROUTINGS_NAME[k]) == max(want)


@pytest.mark.parametrize("p", [100, 1000, 10_000, 100_000])
def test_buffers_grow_as_the_root_of_p(p):
    assert buffers_per_rank(p, "direct") == p - 1
    two, three = buffers_per_rank(p, "2d"), buffers_per_rank(p, "3d")
    assert two <= 2 * (_ceil_root(p, 2) - 1), (p, two)
    assert three <= 3 * (_ceil_root(p, 3) - 1), (p, three)
    if p == 100_000:
        # 640 MB per mailbox per rank with direct 64 KiB buffers; 2-D keeps 631 of them (41 MB),
        # 3-D 137 (9 MB).
        assert (two, three) == (631, 137)
        assert grid_dims(p, "2d") == (316, 317) and grid_dims(p, "3d") == (46, 47, 47)


def test_a_prime_number_of_ranks_pads_the_grid():
    grid = Grid(13, 2)
    assert grid.dims == (4, 4)            # 13 ranks: three full rows and one rank in the last
    assert grid.next_hops(12)[3] == 0     # (3,0) -> (0,3): (3,3) does not exist, so column first
    assert grid.next_hops(3)[12] == 0     # (0,3) -> (3,0): along the row to (0,0), then down


def test_routing_choice_and_bad_values(monkeypatch):
    monkeypatch.delenv("HPCBSP_ROUTING", raising=False)
    assert default_routing(DIRECT_UP_TO) == "direct" and default_routing(DIRECT_UP_TO + 1) == "2d"
    assert default_routing(TWO_D_UP_TO) == "2d" and default_routing(TWO_D_UP_TO + 1) == "3d"
    assert type(resolve_routing(None, 4, "here")) is Direct
    assert type(resolve_routing("auto", DIRECT_UP_TO + 1, "here")) is Grid2D
    three = resolve_routing("3d", 4, "here")
    assert type(three) is Grid3D and three.name == "3d" and three.nprocs == 4
    monkeypatch.setenv("HPCBSP_ROUTING", "2d")
    assert resolve_routing(None, 4, "here").name == "2d"
    assert resolve_routing("direct", 4, "here").name == "direct", "the mailbox's choice wins"
    given = Grid2D(4)
    assert resolve_routing(given, 4, "here") is given, "a Routing object is used as it is"
    with pytest.raises(UsageError, match=r"here: routing Grid2D\(4, dims=\(2, 2\)\) is for 4 ranks, this program has 5"):
        resolve_routing(given, 5, "here")
    with pytest.raises(UsageError, match=r"here: routing must be one of auto, direct, 2d, 3d, node \(or a Routing\); got '4d'"):
        resolve_routing("4d", 4, "here")
    monkeypatch.setenv("HPCBSP_ROUTING", "grid")  # the variable's own check (hpcbsp.util.settings)
    with pytest.raises(BadInput, match=r"environment variable HPCBSP_ROUTING='grid' is not one of auto, direct"):
        resolve_routing(None, 4, "here")


@pytest.mark.parametrize("p", [1, 2, 5, 13, 30])
@pytest.mark.parametrize("name", ["direct", "2d", "3d"])
def test_the_routings_are_the_grid_routes(name, p):
    """Each named routing is its grid's routes (direct: a grid of one line, every next hop the
    destination), and the generic neighbour count (a pass over every rank's hops) agrees with
    the vectorised one."""
    routing = ROUTINGS[name](p)
    k = {"direct": 1, "2d": 2, "3d": 3}[name]
    grid = Grid(p, k)
    assert routing.dims == grid.dims == grid_dims(p, name)
    for me in range(p):
        assert routing.next_hops(me).tolist() == grid.next_hops(me).tolist()
    assert Routing.neighbour_counts(routing).tolist() == routing.neighbour_counts().tolist()
    one_line = p <= grid.dims[-1]  # every route one hop: no record passes through another rank
    assert one_line == all((routing.next_hops(m) == np.arange(p)).all() for m in range(p))
    assert isinstance(routing.relay(0, True), Straight if name == "direct" or one_line else Relay)


def test_a_routing_whose_next_hops_are_not_ranks_is_refused():
    class Loopy(Routing):
        name = "loopy"

        def next_hops(self, me):
            return (np.arange(self.nprocs) + 1) % self.nprocs   # not itself for itself

    class Outside(Routing):
        name = "outside"

        def next_hops(self, me):
            hops = np.arange(self.nprocs)
            hops[-1] = self.nprocs
            return hops

    with pytest.raises(UsageError, match=r"rank 1: routing loopy: next_hops\(1\) must give a rank for each of the 3 ranks"):
        Loopy(3).relay(1, False)
    with pytest.raises(UsageError, match="routing outside"):
        Outside(3).relay(0, False)


def test_envelopes_keep_order_and_origin():
    """Rank 1 of a 2 x 2 grid: records for 2 go through 0 (row first), for 3 straight down."""
    relay = Grid2D(4).relay(1, with_source=True)
    fmt = Fixed(np.dtype(np.int16), relay.fields)
    assert relay.peers.tolist() == [0, 3]
    assert fmt.wire.names == ("to", "from", "rec") and fmt.unit == 10
    dests = np.array([2, 3, 1, 2, 3, 2])
    _, _, batch, owned = fmt.outgoing(dests, np.arange(6), None, 4, 1, "here", "call")
    assert isinstance(batch, Unwrapped), "wrapped as the buffers take them"
    hops = relay.outgoing(fmt, batch, dests)
    env = batch.wrapped()
    assert owned and env["rec"].tolist() == [0, 1, 2, 3, 4, 5] and env["to"].tolist() == dests.tolist(), \
        "the format fills the address when it lays the records out"
    assert hops.tolist() == [0, 3, 1, 0, 3, 0], "2 via 0 (along the row), 3 straight down, 1 is here"
    assert (env["from"] == 1).all()
    _, _, env, _ = fmt.outgoing(2, np.arange(2), None, 4, 1, "here", "call")
    assert relay.outgoing(fmt, env, 2) == 0 and env["to"].tolist() == [2, 2]
    # On rank 0 (the relay for 1 -> 2), a batch mixing records for 0 and for 2 and 1:
    at0 = Grid2D(4).relay(0, with_source=True)
    batch = np.zeros(5, dtype=fmt.wire)
    batch["to"], batch["from"], batch["rec"] = [2, 0, 2, 0, 1], [1, 3, 1, 2, 2], [7, 8, 9, 10, 11]
    deliveries, transit, thops = at0.arrived(fmt, batch, source=1)
    assert transit["rec"].tolist() == [7, 9, 11] and thops.tolist() == [2, 2, 1], "arrival order kept"
    assert [(args[0].tolist(), s) for args, s in deliveries] == [([10], 2), ([8], 3)]
    assert all(args[0].dtype == np.int16 for args, _ in deliveries), "delivered bare"
    # Without the source: one batch, the envelope has no origin field.
    plain = Grid2D(4).relay(0, with_source=False)
    pfmt = Fixed(np.dtype(np.int16), plain.fields)
    assert pfmt.wire.names == ("to", "rec") and pfmt.unit == 6
    b = np.zeros(2, dtype=pfmt.wire)
    b["to"], b["rec"] = 0, [4, 5]
    (((arr,), origin),), transit, _ = plain.arrived(pfmt, b, source=3)
    assert arr.tolist() == [4, 5] and origin == -1 and arr.flags.c_contiguous and transit is None


def test_direct_records_travel_bare():
    """Direct routing: no address fields, the wire record is the record, all that arrives is
    for this rank from the MPI source; a ragged head is its length only."""
    relay = Direct(3).relay(1, with_source=True)
    assert relay.fields == [] and relay.peers.tolist() == [0, 2]
    fmt = Fixed(np.dtype(np.int64), relay.fields)
    assert fmt.wire == np.dtype(np.int64)
    dests = np.array([0, 2, 2])
    n, _, recs, owned = fmt.outgoing(dests, np.array([5, 6, 7]), None, 3, 1, "here", "call")
    assert n == 3 and not owned, "the caller's records are copied into the buffers"
    assert relay.outgoing(fmt, recs, dests) is dests
    deliveries, transit, _ = relay.arrived(fmt, recs, source=2)
    assert transit is None and [(b.tolist(), s) for (b,), s in deliveries] == [([5, 6, 7], 2)]
    assert Ragged(np.dtype(np.int64), relay.fields).head.itemsize == 8


def test_ragged_envelopes_split_on_arrival_whole():
    """Ragged records through rank 0 of a 2 x 2 grid: those for 0 go to the handler grouped by
    origin, whole; the others pass on to their next hops, whole, in arrival order.  Oracle: the
    records written out by hand."""
    at0 = Grid2D(4).relay(0, with_source=True)
    fmt = Ragged(np.dtype(np.int32), at0.fields)
    assert fmt.head.names == ("len", "to", "from") and fmt.head.itemsize == 16
    fmt.check_buffer(100, "here")
    records = [[1, 2], [], [3, 4, 5], [6], [7, 8]]
    to, origin = [2, 0, 0, 1, 0], [1, 3, 2, 2, 3]
    values = np.concatenate([np.array(r, dtype=np.int32) for r in records])
    _, _, (heads, values), _ = fmt.outgoing(np.array(to), values, [len(r) for r in records], 4, 0, "here", "call")
    heads["to"], heads["from"] = to, origin
    deliveries, (pheads, pvalues), hops = at0.arrived(fmt, (heads, values), source=1)
    got = []
    for (vals, lens), src in deliveries:
        got.append(([r.tolist() for r in np.split(vals, np.cumsum(lens)[:-1])], src))
    assert got == [([[3, 4, 5]], 2), ([[], [7, 8]], 3)]
    assert [r.tolist() for r in np.split(pvalues, np.cumsum(pheads["len"])[:-1])] == [[1, 2], [6]]
    assert pheads["to"].tolist() == [2, 1] and hops.tolist() == [2, 1]


def test_a_ragged_record_too_large_for_a_routed_message_is_refused():
    """A routed ragged message holds its count word and a 16-byte head besides the values."""
    fmt = Ragged(np.dtype(np.int64), Grid2D(4).relay(0, with_source=False).fields)
    with pytest.raises(UsageError, match=r"buffer=3 is too small .* needs 24 bytes .*at least 4 values"):
        fmt.check_buffer(3, "here")
    fmt.check_buffer(5, "here")   # 40 bytes: 24 + two values
    with pytest.raises(UsageError, match=r"a record of 3 values is larger than the mailbox's buffer allows \(2 values\)"):
        fmt.outgoing(0, np.arange(3), None, 4, 0, "here", "call")


HOST_MAPS = [["a"], ["a", "a", "b"], ["a", "b", "a", "c", "b", "a", "a"], [f"n{r // 4}" for r in range(23)],
             [f"n{(r * 7) % 5}" for r in range(31)], [f"n{r}" for r in range(9)]]


@pytest.mark.parametrize("hosts", HOST_MAPS)
def test_node_routes_reach_their_destination_and_cross_between_two_nodes_through_one_pair(hosts):
    """Oracle: every route walked hop by hop: at most 3 hops, the destination reached, hops on
    one node or between two; and for each ordered pair of nodes, one (sender, receiver) pair of
    ranks carries every record that crosses between them (one message per node pair and
    direction per flush).  The per-rank sender counts are checked against the generic count
    (a pass over every rank's next hops)."""
    from hpcbsp.fabsp.routing import NodeAware

    p = len(hosts)
    r = NodeAware(p, hosts)
    table = [r.next_hops(m) for m in range(p)]
    crossings: dict[tuple[str, str], set[tuple[int, int]]] = {}
    for src in range(p):
        for dest in range(p):
            at, steps = src, 0
            while at != dest:
                nxt = int(table[at][dest])
                if hosts[nxt] != hosts[at]:
                    crossings.setdefault((hosts[at], hosts[nxt]), set()).add((at, nxt))
                    assert hosts[nxt] == hosts[dest], "a record crosses once, to its destination's node"
                at, steps = nxt, steps + 1
                assert steps <= 3, (src, dest)
    nodes = sorted(set(hosts))
    assert set(crossings) == {(a, b) for a in nodes for b in nodes if a != b}
    assert all(len(pairs) == 1 for pairs in crossings.values()), crossings
    generic = np.array([np.count_nonzero(np.bincount(h, minlength=p)) - 1 for h in table])
    assert r.neighbour_counts().tolist() == generic.tolist()


def test_node_routing_is_asked_for_by_name_and_sized_by_ranks_per_node():
    from hpcbsp.fabsp.routing import NodeAware, default_routing, resolve_routing

    # Not the default yet, even where ranks share nodes (docs/performance.md: slower on a link).
    assert default_routing(8, ["a"] * 4 + ["b"] * 4) == "direct"
    assert default_routing(300, ["a"] * 150 + ["b"] * 150) == "2d"
    route = resolve_routing("node", 6, "test", ["x", "y", "x", "y", "x", "y"])
    assert isinstance(route, NodeAware) and route.dims == (2, 3)
    # 1,024 ranks, 16 a node: 15 ranks of its node and ceil(63 / 16) = 4 other nodes' gateways.
    assert buffers_per_rank(1024, "node", per_node=16) == 15 + 4
    assert buffers_per_rank(64, "node", per_node=1) == 63  # a rank a node: every other rank
    a, b = NodeAware(4, ["a", "a", "b", "b"]), NodeAware(4, ["a", "b", "a", "b"])
    assert a.signature() != b.signature()  # same shape, other placement: mailboxes must not mix
