"""Multi-hop routing of FA-BSP mailboxes, without MPI: the grid, the routes, the buffer sizes,
the envelopes.

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

from hpcbsp import UsageError
from hpcbsp.fabsp.relay import Relay, envelope_dtype
from hpcbsp.fabsp.routing import (
    DIRECT_UP_TO,
    ROUTINGS,
    TWO_D_UP_TO,
    Grid,
    buffers_per_rank,
    default_routing,
    grid_dims,
    resolve_routing,
)

SMALL = list(range(1, 31)) + [36, 37, 49, 64, 65]
ROUTINGS_NAME = {k: name for name, k in ROUTINGS.items()}


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
    assert resolve_routing(None, 4, "here") == "direct"
    assert resolve_routing("3d", 4, "here") == "3d"
    monkeypatch.setenv("HPCBSP_ROUTING", "2d")
    assert resolve_routing(None, 4, "here") == "2d"
    assert resolve_routing("direct", 4, "here") == "direct", "the mailbox's choice wins"
    with pytest.raises(UsageError, match=r"here: routing must be one of auto, direct, 2d, 3d; got '4d'"):
        resolve_routing("4d", 4, "here")
    monkeypatch.setenv("HPCBSP_ROUTING", "grid")
    with pytest.raises(UsageError, match=r"\$HPCBSP_ROUTING must be one of"):
        resolve_routing(None, 4, "here")


def test_envelopes_keep_order_and_origin():
    """Rank 1 of a 2 x 2 grid: records for 2 go through 0 (row first), for 3 straight down."""
    grid = Grid(4, 2)
    relay = Relay(grid, 1, np.dtype(np.int16), with_source=True)
    assert relay.peers.tolist() == [0, 3]
    assert relay.wire == envelope_dtype(np.dtype(np.int16), True) and relay.wire.itemsize == 10
    dests = np.array([2, 3, 1, 2, 3, 2])
    env, hops = relay.outgoing(dests, np.arange(6, dtype=np.int16))
    assert env["rec"].tolist() == [0, 1, 2, 3, 4, 5] and env["to"].tolist() == dests.tolist()
    assert hops.tolist() == [0, 3, 1, 0, 3, 0], "2 via 0 (along the row), 3 straight down, 1 is here"
    assert (env["from"] == 1).all()
    env, hop = relay.outgoing(2, np.arange(2, dtype=np.int16))
    assert hop == 0 and env["to"].tolist() == [2, 2]
    # On rank 0 (the relay for 1 -> 2), a batch mixing records for 0 and for 2 and 1:
    at0 = Relay(grid, 0, np.dtype(np.int16), with_source=True)
    batch = np.zeros(5, dtype=at0.wire)
    batch["to"], batch["from"], batch["rec"] = [2, 0, 2, 0, 1], [1, 3, 1, 2, 2], [7, 8, 9, 10, 11]
    mine, transit, thops = at0.arrived(batch)
    assert mine["rec"].tolist() == [8, 10]
    assert transit["rec"].tolist() == [7, 9, 11] and thops.tolist() == [2, 2, 1], "arrival order kept"
    assert [(r.tolist(), s) for r, s in at0.deliveries(mine)] == [([10], 2), ([8], 3)]
    # Without the source: one batch, the envelope has no origin field.
    plain = Relay(grid, 0, np.dtype(np.int16), with_source=False)
    assert plain.wire.names == ("to", "rec") and plain.wire.itemsize == 6
    b = np.zeros(2, dtype=plain.wire)
    b["to"], b["rec"] = 0, [4, 5]
    ((recs, origin),) = plain.deliveries(b)
    assert recs.tolist() == [4, 5] and origin == -1 and recs.flags.c_contiguous
