"""Collectives (allreduce, exact allreduce, broadcast, split) and the classic programs built on
them, at several rank counts.  Oracles: numpy and math.fsum on the whole data, closed forms in the
rank numbers.
"""
from __future__ import annotations

import functools

import numpy as np
import pytest

import hpcbsp
from hpcbsp import UsageError
from hpcbsp.apps.classic import distributed_matvec, inner_product, prefix_sum
from hpcbsp.runtime.api.distribution import block_range

mpi = pytest.mark.mpi(min_size=2)



@mpi
def test_allreduce_broadcast_split(bsp):
    p = bsp.nprocs
    s = bsp.allreduce(np.arange(3) + bsp.pid)
    np.testing.assert_array_equal(s, np.arange(3) * p + p * (p - 1) // 2)
    assert bsp.allreduce(bsp.pid, op="max") == p - 1
    assert bsp.allreduce(float(bsp.pid + 1), op="prod") == float(np.prod(np.arange(1, p + 1)))
    arr = bsp.broadcast(np.arange(5.0) * 3 if bsp.pid == p - 1 else None, root=p - 1)
    np.testing.assert_array_equal(arr, np.arange(5.0) * 3)
    obj = bsp.broadcast({"a": [1, 2]} if bsp.pid == 0 else None)
    assert obj == {"a": [1, 2]}
    assert bsp.superstep == 5  # each collective is a superstep of its own
    sub = bsp.split(bsp.pid % 2)
    with sub:
        evens_or_odds = [r for r in range(p) if r % 2 == bsp.pid % 2]
        assert sub.nprocs == len(evens_or_odds)
        assert sub.pid == evens_or_odds.index(bsp.pid)
        assert sub.allreduce(bsp.pid) == sum(evens_or_odds)
        assert sub.superstep == 1


@mpi
def test_allreduce_into_out_fills_and_returns_it_and_leaves_x_alone(bsp):
    p = bsp.nprocs
    x = (np.arange(6, dtype=np.float32) + bsp.pid).reshape(2, 3)
    before = x.copy()
    out = np.full((2, 3), np.nan, dtype=np.float32)
    got = bsp.allreduce(x, out=out)
    assert got is out
    np.testing.assert_array_equal(out, (np.arange(6) * p + p * (p - 1) // 2).reshape(2, 3))
    np.testing.assert_array_equal(x, before)  # sent without a copy, and only read
    strided = np.arange(10, dtype=np.int64)[::2] + bsp.pid  # not contiguous: copied, same sum
    np.testing.assert_array_equal(bsp.allreduce(strided), np.arange(10)[::2] * p + p * (p - 1) // 2)


@mpi
def test_allreduce_flushes_pending_puts(bsp):
    x = bsp.coarray(1, dtype=np.int64)
    x.put((bsp.pid + 1) % bsp.nprocs, [bsp.pid + 1])
    total = bsp.allreduce(1)
    assert total == bsp.nprocs
    assert x.local[0] == (bsp.pid - 1) % bsp.nprocs + 1


@mpi
@pytest.mark.parametrize("n", [1, 7, 30])
def test_classic_programs_against_numpy(bsp, n):
    rng = np.random.default_rng(42)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    lo, hi = block_range(n, bsp.nprocs, bsp.pid)
    dot = inner_product(bsp, x[lo:hi], y[lo:hi])
    assert dot == pytest.approx(float(x @ y), rel=1e-12, abs=1e-12)
    assert bsp.allreduce(dot, op="max") == bsp.allreduce(dot, op="min"), "same bits on every rank"
    np.testing.assert_allclose(prefix_sum(bsp, x[lo:hi]), np.cumsum(x)[lo:hi], rtol=1e-12, atol=1e-12)
    _, err = distributed_matvec(bsp, n, seed=3)
    assert err < 1e-12 * max(n, 1)


def _hard_sum_data(n: int = 3000) -> np.ndarray:
    """Values whose float64 sum depends on the order: huge cancelling terms and tiny ones."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-20, 20, n)
    x[::7] = 1e16
    x[1::7] = -1e16
    return x


@pytest.mark.mpi(min_size=1)
def test_exact_allreduce_same_bits_for_any_distribution(bsp):
    import math
    data = _hard_sum_data()
    expected = math.fsum(data)
    lo, hi = block_range(data.size, bsp.nprocs, bsp.pid)
    block = bsp.allreduce(data[lo:hi], exact=True)
    cyclic = bsp.allreduce(data[bsp.pid::bsp.nprocs], exact=True)
    assert block == expected and cyclic == expected
    assert np.float64(block).tobytes() == np.float64(expected).tobytes()
    # the plain sum of the same blocks is order-dependent: show the data would catch a sloppy sum
    assert float(np.sum(data)) != expected


@pytest.mark.mpi(min_size=1)
def test_exact_allreduce_uneven_shares_empty_ranks_and_wide_integers(bsp):
    import math
    data = _hard_sum_data(1001)
    expected = math.fsum(data)
    # Random cut points, the same on every rank; rank 0's share is empty, others uneven.
    if bsp.nprocs > 1:
        cuts = sorted(int(c) for c in np.random.default_rng(5).integers(0, data.size, bsp.nprocs - 2))
        bounds = [0, 0, *cuts, data.size]
    else:
        bounds = [0, data.size]
    share = data[bounds[bsp.pid]:bounds[bsp.pid + 1]]
    assert bsp.pid != 0 or bsp.nprocs == 1 or share.size == 0
    got = bsp.allreduce(share.reshape(-1, 1) if share.size % 2 else share, exact=True)
    assert np.float64(got).tobytes() == np.float64(expected).tobytes()
    # int64 beyond 2**53 are summed exactly, then rounded once (float64 first would round each)
    ints = np.array([2**62 + 1, -(2**61) + 3, 2**53 + 1, 7, -(2**63), 2**63 - 1], dtype=np.int64)
    mine = ints[bsp.pid::bsp.nprocs]
    exact = float(sum(int(v) for v in ints))  # Python's int -> float rounds correctly
    assert bsp.allreduce(mine, exact=True) == exact
    assert bsp.allreduce(np.array([2**53 + 1, 1, 1], dtype=np.int64) if bsp.pid == 0
                         else np.zeros(0, dtype=np.int64), exact=True) == float(2**53 + 3)
    # each value alone rounds down to 2**53 (a tie, to even), the exact total rounds up
    odd = np.full(3, 2**53 + 1, dtype=np.int64)[bsp.pid::bsp.nprocs]
    assert bsp.allreduce(odd, exact=True) == float(3 * (2**53 + 1)) != 3.0 * 2**53


def test_exact_allreduce_on_one_rank():
    import math
    data = _hard_sum_data()
    with hpcbsp.BSP() as bsp:
        assert bsp.allreduce(data, exact=True) == math.fsum(data)
        with pytest.raises(UsageError, match="op='sum'"):
            bsp.allreduce(data, op="max", exact=True)


def _rank_data(rank: int, n: int, dtype) -> np.ndarray:
    """Rank ``rank``'s contribution, reproducible on every rank (so each can build the oracle)."""
    rng = np.random.default_rng(1000 + rank)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(n).astype(dtype)
    return rng.integers(-1000, 1000, n).astype(dtype)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("n", [0, 1, 2, 10, 1001])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_reduce_scatter_leaves_each_rank_its_block_of_the_reduction(bsp, n, op):
    """Oracle: numpy's reduction of every rank's array (regenerated here), on this rank's block
    (``block_range``); integers exactly, float64 sums to rounding (the ring's order)."""
    p = bsp.nprocs
    for dtype in (np.int64, np.float64):
        x = _rank_data(bsp.pid, n, dtype)
        before = x.copy()
        every = np.stack([_rank_data(r, n, dtype) for r in range(p)])
        want = {"sum": every.sum(0), "max": every.max(0), "min": every.min(0),
                "prod": np.prod(every, 0)}[op]
        out = np.full(n, -7, dtype=dtype)
        mine = bsp.reduce_scatter(x, op=op, out=out)
        lo, hi = block_range(n, p, bsp.pid)
        assert mine.base is out or mine is out or np.shares_memory(mine, out)
        assert mine.shape == (hi - lo,)
        if dtype == np.int64 or op in ("max", "min"):
            np.testing.assert_array_equal(mine, want[lo:hi])
        else:
            np.testing.assert_allclose(mine, want[lo:hi], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(x, before)  # only read
        np.testing.assert_array_equal(bsp.reduce_scatter(x, op=op), mine)  # out= defaults to a new array


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("op", ["land", "lor", "band", "bor"])
def test_reduce_scatter_logical_and_bitwise_ops_on_integers(bsp, op):
    """Oracle: numpy's logical (as 0/1 in the dtype, MPI's convention) and bitwise reductions."""
    p, n = bsp.nprocs, 97
    every = np.stack([np.random.default_rng(50 + r).integers(0, 4, n) for r in range(p)])
    want = {"land": np.logical_and.reduce(every != 0).astype(np.int64),
            "lor": np.logical_or.reduce(every != 0).astype(np.int64),
            "band": np.bitwise_and.reduce(every), "bor": np.bitwise_or.reduce(every)}[op]
    lo, hi = block_range(n, p, bsp.pid)
    np.testing.assert_array_equal(bsp.reduce_scatter(every[bsp.pid].copy(), op=op), want[lo:hi])
    with pytest.raises(UsageError, match=f"op '{op}' needs integers"):
        bsp.reduce_scatter(np.zeros(3), op=op)


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("dtype", [np.bool_, np.float16, np.float32, np.complex128, np.int8, np.uint64])
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max", "band", "bor", "land", "lor"])
def test_reduce_scatter_of_every_dtype_and_op_against_numpy(bsp, dtype, op):
    """Oracle: numpy's reduction of every rank's array, folded in rank order, on this rank's
    block.  Where MPI defines no such op on the dtype (sums of booleans, bitwise ops on booleans,
    min/max of complex numbers) numpy's ufunc reduces; small integers and halves of integers
    keep every sum and product exact, whatever the order of the reduction."""
    if op in ("band", "bor", "land", "lor") and np.dtype(dtype).kind not in "biu":
        return  # refused (test_reduce_scatter_logical_and_bitwise_ops_on_integers)
    p, n = bsp.nprocs, 37

    def data(r: int) -> np.ndarray:
        v = np.random.default_rng(70 + r).integers(0, 3, n)
        if np.dtype(dtype).kind == "c":
            return (v + 1j * np.random.default_rng(90 + r).integers(-2, 3, n)).astype(dtype)
        return (v / 2 if np.dtype(dtype).kind == "f" else v).astype(dtype)

    every = [data(r) for r in range(p)]
    if op in ("land", "lor"):
        ufunc = np.logical_and if op == "land" else np.logical_or
        want = functools.reduce(ufunc, [e != 0 for e in every]).astype(dtype)
    else:
        ufunc = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum,
                 "band": np.bitwise_and, "bor": np.bitwise_or}[op]
        want = functools.reduce(lambda a, b: ufunc(a, b), every)
    lo, hi = block_range(n, p, bsp.pid)
    got = bsp.reduce_scatter(every[bsp.pid].copy(), op=op)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want[lo:hi])


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("n", [0, 2, 11, 4096])
def test_allgather_blocks_gives_every_rank_every_block(bsp, n):
    """Oracle: rank r fills its block with ``r * 1000 + index`` and garbage elsewhere; after the
    call every rank holds ``owner * 1000 + index`` everywhere."""
    p = bsp.nprocs
    owner = np.concatenate([[r] * (block_range(n, p, r)[1] - block_range(n, p, r)[0]) for r in range(p)]) \
        if n else np.zeros(0, dtype=np.int64)
    want = (owner * 1000 + np.arange(n)).astype(np.float32)
    buf = np.full(n, np.nan, dtype=np.float32)
    lo, hi = block_range(n, p, bsp.pid)
    buf[lo:hi] = want[lo:hi]
    got = bsp.allgather_blocks(buf)
    assert got is buf
    np.testing.assert_array_equal(buf, want)


@pytest.mark.mpi(min_size=1)
def test_reduce_scatter_then_allgather_is_an_allreduce_with_the_same_bits_everywhere(bsp):
    """Oracle: numpy's sum of all ranks' float32 arrays (to float32 rounding); and every rank
    ends with the same bits (each block was reduced once)."""
    p, n = bsp.nprocs, 5003
    x = _rank_data(bsp.pid, n, np.float32)
    buf = np.empty_like(x)
    bsp.reduce_scatter(x, out=buf)
    bsp.allgather_blocks(buf)
    want = np.stack([_rank_data(r, n, np.float32) for r in range(p)]).astype(np.float64).sum(0)
    np.testing.assert_allclose(buf, want, rtol=1e-5, atol=1e-5)
    every = bsp.gather_all(buf)
    assert all(b.tobytes() == buf.tobytes() for b in every)
    steps = [r for r in bsp.ledger if r.label in ("reduce_scatter:sum", "allgather_blocks")]
    assert len(steps) == 2
    size = [buf[slice(*block_range(n, p, r))].nbytes for r in range(p)]
    me = bsp.pid
    # The h-relation of a direct reduce-scatter and allgather, whatever MPI's algorithm:
    # reduce_scatter sends every block but this rank's and receives p-1 contributions to its
    # own; allgather_blocks sends its block to the p-1 others and receives every other block;
    # one block to or from each other rank: p-1 messages each way.
    want_bytes = {"reduce_scatter:sum": (buf.nbytes - size[me], (p - 1) * size[me]),
                  "allgather_blocks": ((p - 1) * size[me], buf.nbytes - size[me])}
    for rec in steps:
        assert (rec.bytes_out, rec.bytes_in) == (want_bytes[rec.label] if p > 1 else (0, 0))
        assert rec.msgs_out == rec.msgs_in == p - 1


@pytest.mark.mpi(min_size=1)
def test_ring_collectives_refuse_bad_arguments_on_the_calling_rank(bsp):
    x = np.arange(6, dtype=np.float64)
    bad = [
        (lambda: bsp.reduce_scatter(x.reshape(2, 3)), "1-D C-contiguous numeric"),
        (lambda: bsp.reduce_scatter(x[::2]), "1-D C-contiguous numeric"),
        (lambda: bsp.reduce_scatter(np.array(["a", "b"])), "1-D C-contiguous numeric"),
        (lambda: bsp.reduce_scatter([1.0, 2.0]), "got list"),
        (lambda: bsp.reduce_scatter(x, op="mean"), "op 'mean'"),
        (lambda: bsp.reduce_scatter(x, out=np.zeros(5)), "out= must be"),
        (lambda: bsp.reduce_scatter(x, out=np.zeros(6, dtype=np.float32)), "out= must be"),
        (lambda: bsp.reduce_scatter(x, out=x), "not overlapping x"),
        (lambda: bsp.allgather_blocks(np.zeros((2, 2))), "allgather_blocks needs"),
    ]
    frozen = np.zeros(4)
    frozen.flags.writeable = False
    bad.append((lambda: bsp.allgather_blocks(frozen), "read-only"))
    step = bsp.superstep
    for call, words in bad:
        with pytest.raises(UsageError, match=f"rank {bsp.pid}: .*{words}"):
            call()
    assert bsp.superstep == step  # refused before any superstep began
