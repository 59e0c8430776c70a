"""Partitionings (hpcbsp.runtime.api.partition) against a brute-force enumeration oracle.

The oracle deals the global indices out one by one from the definition of each layout (a loop,
not the closed forms under test): block = consecutive runs of the sizes n//p (+1 on the first
n mod p ranks); block-cyclic = blocks of b dealt to ranks 0, 1, ..., p-1, 0, ...; local indices
count up in global order on each rank.  ``dims_create`` is checked against MPI's own
``MPI_Dims_create`` (mpi4py ``MPI.Compute_dims``).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from hpcbsp.runtime.api.distribution import block_range
from hpcbsp.runtime.api.partition import Block, BlockCyclic, Cyclic, Explicit, Grid, dims_create, from_description, grid, partitioning
from hpcbsp.runtime.errors import BSPError


def enumerate_block(n: int, p: int) -> list[tuple[int, int]]:
    owners = []
    for r in range(p):
        size = n // p + (1 if r < n % p else 0)
        owners += [r] * size
    return _with_local(owners, p)


def enumerate_block_cyclic(n: int, p: int, b: int) -> list[tuple[int, int]]:
    owners, rank, filled = [], 0, 0
    for _ in range(n):
        owners.append(rank)
        filled += 1
        if filled == b:
            rank, filled = (rank + 1) % p, 0
    return _with_local(owners, p)


def _with_local(owners: list[int], p: int) -> list[tuple[int, int]]:
    seen = [0] * p
    out = []
    for r in owners:
        out.append((r, seen[r]))
        seen[r] += 1
    return out


def check_against(part, table: list[tuple[int, int]]) -> None:
    n, p = part.n, part.p
    g = np.arange(n)
    want_rank = np.array([r for r, _ in table], dtype=np.int64)
    want_local = np.array([l for _, l in table], dtype=np.int64)
    # vectorised, both directions
    np.testing.assert_array_equal(part.owner(g), want_rank)
    np.testing.assert_array_equal(part.local_index(g), want_local)
    rank, local = part.locate(g)
    np.testing.assert_array_equal(rank, want_rank)
    np.testing.assert_array_equal(local, want_local)
    np.testing.assert_array_equal(part.global_index(want_rank, want_local), g)
    sizes = np.bincount(want_rank, minlength=p)
    np.testing.assert_array_equal(part.local_sizes(), sizes)
    for r in range(p):
        assert part.local_size(r) == sizes[r]
        np.testing.assert_array_equal(part.global_indices(r), g[want_rank == r])
    # scalars give ints
    if n:
        assert part.locate(n - 1) == table[n - 1] and isinstance(part.owner(0), int)
    assert from_description(part.describe()) == part


CASES = [(n, p) for n in (0, 1, 2, 3, 5, 7, 10, 16, 17, 31, 64, 100) for p in (1, 2, 3, 4, 5, 8, 13)]


@pytest.mark.parametrize("n,p", CASES)
def test_block_matches_enumeration_and_block_range(n, p):
    part = Block(n, p)
    check_against(part, enumerate_block(n, p))
    for r in range(p):  # the runtime's own block split, used by checkpoints and apps
        lo, hi = block_range(n, p, r)
        assert (part.start(r), part.start(r) + part.local_size(r)) == (lo, hi)


@pytest.mark.parametrize("n,p", CASES)
def test_cyclic_matches_enumeration(n, p):
    check_against(Cyclic(n, p), enumerate_block_cyclic(n, p, 1))


@pytest.mark.parametrize("n,p", CASES)
@pytest.mark.parametrize("b", [1, 2, 3, 4, 7, 40])
def test_block_cyclic_matches_enumeration(n, p, b):
    check_against(BlockCyclic(n, p, b), enumerate_block_cyclic(n, p, b))


def test_more_ranks_than_indices_leave_ranks_empty():
    part = Cyclic(3, 8)
    assert part.local_sizes().tolist() == [1, 1, 1, 0, 0, 0, 0, 0]
    assert part.global_indices(5).size == 0
    assert Block(2, 5).local_sizes().tolist() == [1, 1, 0, 0, 0]
    assert BlockCyclic(5, 4, 2).local_sizes().tolist() == [2, 2, 1, 0]


@pytest.mark.parametrize("seed", range(5))
def test_explicit_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    p = int(rng.integers(1, 7))
    owners = rng.integers(0, p, int(rng.integers(0, 50)))
    check_against(Explicit(owners, p), _with_local(owners.tolist(), p))


@pytest.mark.parametrize("p", list(range(1, 65)) + [96, 120, 210, 1024])
def test_dims_create_is_mpis(p):
    from mpi4py import MPI

    for nd in (1, 2, 3):
        assert dims_create(p, nd) == tuple(MPI.Compute_dims(p, nd)), (p, nd)


def enumerate_grid(shape, dims, tables):
    """owner and local coordinates of every element from the per-dimension tables, row-major ranks."""
    out = {}
    for idx in itertools.product(*(range(s) for s in shape)):
        coords = [tables[a][idx[a]][0] for a in range(len(shape))]
        rank = 0
        for c, d in zip(coords, dims):
            rank = rank * d + c
        out[idx] = (rank, tuple(tables[a][idx[a]][1] for a in range(len(shape))))
    return out


GRID_CASES = [((m, n), p, kinds, blocks)
              for (m, n) in [(1, 1), (5, 7), (9, 4), (12, 12), (2, 11)]
              for p in (1, 2, 3, 5, 6, 8, 12)
              for kinds, blocks in [(("cyclic", "cyclic"), (1, 1)), (("block", "block"), (1, 1)),
                                    (("block", "cyclic"), (1, 1)), (("block-cyclic", "block-cyclic"), (2, 3))]]


@pytest.mark.parametrize("shape,p,kinds,blocks", GRID_CASES)
def test_grid_matches_enumeration(shape, p, kinds, blocks):
    layout = grid(shape, p, kinds, blocks)
    dims = tuple(__import__("mpi4py.MPI", fromlist=["MPI"]).Compute_dims(p, 2))
    assert layout.dims == dims and layout.p == p
    oracle = {"cyclic": lambda n, q, b: enumerate_block_cyclic(n, q, 1),
              "block": lambda n, q, b: enumerate_block(n, q),
              "block-cyclic": enumerate_block_cyclic}
    tables = [oracle[k](n, d, b) for k, n, d, b in zip(kinds, shape, dims, blocks)]
    want = enumerate_grid(shape, dims, tables)
    i, j = np.meshgrid(np.arange(shape[0]), np.arange(shape[1]), indexing="ij")
    owner = layout.owner((i, j))
    li, lj = layout.local_index((i, j))
    rank, flat = layout.locate((i, j))
    counts = np.zeros(p, dtype=int)
    for (a, b), (r, (x, y)) in want.items():
        assert owner[a, b] == r and rank[a, b] == r and (li[a, b], lj[a, b]) == (x, y)
        assert flat[a, b] == x * layout.local_shape(r)[1] + y
        assert layout.global_index(r, (x, y)) == (a, b)
        counts[r] += 1
    np.testing.assert_array_equal(layout.local_sizes(), counts)
    for r in range(p):
        rows, cols = layout.global_indices(r)
        assert (rows.size, cols.size) == layout.local_shape(r)
        assert layout.rank_of(layout.coords_of(r)) == r
        for x, a in enumerate(rows):
            for y, b in enumerate(cols):
                assert want[(a, b)] == (r, (x, y))
    assert from_description(layout.describe()) == layout


def test_grid_with_explicit_dims_and_three_dimensions():
    layout = grid((4, 6, 5), 12, ("block", "cyclic", "block-cyclic"), (1, 1, 2), dims=(2, 3, 2))
    assert layout.dims == (2, 3, 2)
    assert layout.owner((3, 4, 2)) == layout.rank_of((1, 1, 1))
    assert layout.local_index((3, 4, 2)) == (1, 1, 0)
    assert sum(layout.local_size(r) for r in range(12)) == 4 * 6 * 5


@pytest.mark.parametrize("call,match", [
    (lambda: Cyclic(10, 3).owner(10), r"Cyclic\(n=10, p=3\).owner: global index 10 is outside 0..9"),
    (lambda: Block(10, 3).local_index([-1, 2]), r"global index -1"),
    (lambda: BlockCyclic(10, 3, 2).global_index(3, 0), r"rank 3 is outside 0..2"),
    (lambda: Cyclic(10, 3).global_index(1, 3), r"local index 3 is outside rank 1's part \(size 3\)"),
    (lambda: Cyclic(10, 3).owner(1.5), r"indices must be integers"),
    (lambda: Cyclic(10, 0), r"Cyclic\(n=10, p=0\): p must be an integer >= 1"),
    (lambda: BlockCyclic(10, 2, 0), r"block must be an integer >= 1"),
    (lambda: Block(-1, 2), r"n must be an integer >= 0"),
    (lambda: partitioning("diagonal", 4, 2), r"choose one of block, cyclic, block-cyclic"),
    (lambda: grid((4, 4), 6, dims=(2, 2)), r"grid 2x2 does not have 2 dimension\(s\) of 6 ranks"),
    (lambda: grid((4, 4), 4).owner((1,)), r"one index \(or index array\) per dimension, 2 in all"),
    (lambda: grid((4, 4), 4).coords_of(4), r"rank 4 is outside 0..3"),
    (lambda: Explicit([0, 3], 2), r"owner 3 is outside 0..1"),
    (lambda: Grid([]), r"one 1-D partitioning per dimension"),
    (lambda: from_description({"n": 3}), r"not a partitioning description"),
])
def test_misuse_is_named(call, match):
    with pytest.raises(BSPError, match=match):
        call()
