"""BSPlib's and Bulk's primitives beyond put/get/send: ``var``, ``hpget``, tagged and ragged
queues read one message at a time (``qsize``, ``get_tag``, ``move``), ``gather_all``, ``foldl``,
``push_reg``/``pop_reg``, ``time`` and ``abort``.

Every check runs on 1 rank in the serial pass and on 2 and 3 ranks under mpiexec.  Oracles:
closed forms in the rank numbers (each rank knows what every other rank sent), Python's own
left fold (functools.reduce) over values recomputed locally, and the clock for ``time``.
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np
import pytest
from mpi_helpers import run_mpi

import hpcbsp
from hpcbsp import BSPError, UsageError

mpi = pytest.mark.mpi(min_size=2)
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


@check
def var_put_and_get(bsp):
    p, me = bsp.nprocs, bsp.pid
    x = bsp.var(float(me))
    assert x.value == me and x.shape == ()
    right, left = (me + 1) % p, (me - 1) % p
    x.put(right, 10.0 * me)
    old = x.get(right)  # read before the superstep's puts land
    bsp.sync()
    assert x.value == 10.0 * left
    assert old.value == float(right)
    v = bsp.var(np.zeros(3, dtype=np.int32), name="triple")
    v.value = [me, me + 1, me + 2]
    got = v.get(left)
    bsp.sync()
    np.testing.assert_array_equal(got.value, [left, left + 1, left + 2])
    assert got.value.dtype == np.int32


@check
def hpget_writes_into_the_callers_array(bsp):
    p, me = bsp.nprocs, bsp.pid
    c = bsp.coarray(5, dtype=np.int64, name="c")
    c.local[:] = 100 * me + np.arange(5)
    src = (me + 1) % p
    out = np.full(3, -1, dtype=np.int64)
    fut = c.hpget(src, out, offset=1)
    c.put(src, [-7, -7, -7], offset=1)  # lands after the hpget has read
    bsp.sync()
    np.testing.assert_array_equal(out, 100 * src + np.arange(1, 4))
    assert fut.value is out
    with pytest.raises(UsageError, match="out must be a writeable C-contiguous array of dtype int64"):
        c.hpget(src, np.empty(3))
    with pytest.raises(UsageError, match="outside rank"):
        c.hpget(src, np.empty(9, dtype=np.int64))
    bsp.sync()


@check
def tagged_queue_read_one_message_at_a_time(bsp):
    p, me = bsp.nprocs, bsp.pid
    q = bsp.queue(np.int64, name="q")
    for d in range(p):
        q.send(d, [1000 * me + d, 1000 * me + d + 1], tag=10 * me + d)
        q.send(d, [-(1000 * me + d)], tag=-(10 * me + d))
    assert q.qsize() == (0, 0) and q.get_tag() is None  # nothing before the sync
    bsp.sync()
    recs = [r for s in range(p) for r in (1000 * s + me, 1000 * s + me + 1, -(1000 * s + me))]
    tags = [t for s in range(p) for t in (10 * s + me, 10 * s + me, -(10 * s + me))]
    np.testing.assert_array_equal(q.received(), recs)
    np.testing.assert_array_equal(q.tags(), tags)
    for i, (rec, tag) in enumerate(zip(recs, tags)):
        assert q.qsize() == (len(recs) - i, 8 * (len(recs) - i))
        assert q.get_tag() == tag
        assert q.move() == rec
    assert q.qsize() == (0, 0) and q.get_tag() is None
    with pytest.raises(UsageError, match=r"q.move\(\): no message left"):
        q.move()
    with pytest.raises(UsageError, match="tag must be an int64"):
        q.send(0, [1], tag=1.5)
    bsp.sync()
    assert q.qsize() == (0, 0) and q.received().size == 0


@check
def ragged_queue_carries_messages_of_any_length(bsp):
    p, me = bsp.nprocs, bsp.pid
    q = bsp.queue(np.float32, ragged=True, name="r")
    dest = (me + 1) % p
    for k in range(4):  # lengths 0, 1, 2, 3
        q.send(dest, np.arange(k, dtype=np.float32) + me, tag=k)
    with pytest.raises(UsageError, match="one pid per message"):
        q.send(np.array([0]), [1.0])
    bsp.sync()
    src = (me - 1) % p
    msgs = q.received()
    assert [m.size for m in msgs] == [0, 1, 2, 3]
    for k, m in enumerate(msgs):
        np.testing.assert_array_equal(m, np.arange(k, dtype=np.float32) + src)
    np.testing.assert_array_equal(q.tags(), [0, 1, 2, 3])
    assert q.qsize() == (4, 4 * (0 + 1 + 2 + 3))
    assert q.get_tag() == 0 and q.move().size == 0 and q.get_tag() == 1


@check
def gather_all_returns_every_ranks_value_in_rank_order(bsp):
    p, me = bsp.nprocs, bsp.pid
    same = bsp.gather_all(np.arange(3) + 10 * me)  # one shape: Allgather of buffers
    assert len(same) == p
    for r in range(p):
        np.testing.assert_array_equal(same[r], np.arange(3) + 10 * r)
    ragged = bsp.gather_all(np.arange(me + 1))  # shapes differ: pickled
    assert [a.tolist() for a in ragged] == [list(range(r + 1)) for r in range(p)]
    rec = np.zeros((), dtype=[("rank", "i4"), ("w", "f8")])
    rec["rank"], rec["w"] = me, me / 2
    recs = bsp.gather_all(rec)
    assert [(int(r["rank"]), float(r["w"])) for r in recs] == [(r, r / 2) for r in range(p)]
    assert bsp.gather_all({"rank": me}) == [{"rank": r} for r in range(p)]


@check
def foldl_folds_in_rank_order_with_any_function(bsp):
    p, me = bsp.nprocs, bsp.pid
    digits = bsp.foldl(me + 1, lambda a, b: 10 * a + b)  # not commutative: order shows
    assert digits == functools.reduce(lambda a, b: 10 * a + b, range(1, p + 1))
    assert bsp.foldl(me, lambda a, b: a - b, initial=100) == 100 - sum(range(p))
    rec = np.zeros((), dtype=[("rank", "i4"), ("score", "f8")])
    rec["rank"], rec["score"] = me, (me * 7) % 5  # best score, ties to the lower rank
    best = bsp.foldl(rec, lambda a, b: b if b["score"] > a["score"] else a)
    scores = [(r * 7) % 5 for r in range(p)]
    assert int(best["rank"]) == scores.index(max(scores))
    numba = pytest.importorskip("numba", reason="numba is an optional compiler of fold functions")
    combine = numba.njit(lambda a, b: a * 31 + b)
    # int64 wraps around past 2**63 (from 13 ranks on): the oracle folds modulo 2**64 too
    want = functools.reduce(lambda a, b: (a * 31 + b) % 2**64, [r + 2 for r in range(p)])
    assert int(bsp.foldl(np.int64(me + 2), combine)) % 2**64 == want
    with pytest.raises(UsageError, match="fn must be a function of two values"):
        bsp.foldl(1, "sum")


@check
def push_reg_uses_the_callers_memory_and_pop_reg_takes_effect_at_the_sync(bsp):
    p, me = bsp.nprocs, bsp.pid
    mine = np.zeros((2, 3))
    c = bsp.push_reg(mine, name="mine")
    assert np.shares_memory(c.local, mine)
    mine[0, 0] = me  # the program's own write is what a get reads
    got = c.get((me + 1) % p, 0, 1)
    c.put((me + 1) % p, [float(me)], offset=5)
    bsp.sync()
    assert got.value[0] == (me + 1) % p
    assert mine[1, 2] == (me - 1) % p  # the put landed in the caller's array
    bsp.pop_reg(c)
    c.put((me + 1) % p, [42.0], offset=4)  # same superstep: still delivered (delayed effect)
    assert c.registered
    bsp.sync()
    assert mine[1, 1] == 42.0 and not c.registered
    with pytest.raises(UsageError, match=r"mine was deregistered \(pop_reg in superstep \d+\)"):
        c.put(0, [1.0])
    with pytest.raises(UsageError, match="deregistered already"):
        bsp.pop_reg(c)
    with pytest.raises(UsageError, match="writeable C-contiguous"):
        bsp.push_reg(np.zeros((3, 3))[:, 0])
    bsp.sync()


@check
def time_counts_seconds_since_the_context_began(bsp):
    t0 = bsp.time()
    time.sleep(0.05)
    t1 = bsp.time()
    assert 0 <= t0 and t1 - t0 >= 0.05


@check
def put_elements_is_many_single_puts_in_order(bsp):
    # Oracle: the same puts replayed one at a time in BSPlib's order (ascending source rank, then
    # program order) on a numpy copy of every part; each rank regenerates every rank's puts.
    p, me = bsp.nprocs, bsp.pid
    size = 50
    for dtype in (np.int64, np.float32, np.dtype([("k", "i2"), ("w", "f8")])):
        c = bsp.coarray(size, dtype=dtype, name=f"el-{np.dtype(dtype).str}")

        def puts_of(r):
            rng = np.random.default_rng(7 + r)
            n = 300  # many duplicates: the later put must win
            pids, offs = rng.integers(0, p, n), rng.integers(0, size, n)
            vals = np.zeros(n, dtype=dtype)
            if vals.dtype.names:
                vals["k"], vals["w"] = np.arange(n) + 1000 * r, r + np.arange(n) / 8
            else:
                vals[:] = np.arange(n) + 1000 * r
            return pids, offs, vals

        c.put_elements(*puts_of(me))
        bsp.sync()
        expected = np.zeros(size, dtype=dtype)
        for r in range(p):
            for pid, off, val in zip(*puts_of(r)):
                if pid == me:
                    expected[off] = val
        np.testing.assert_array_equal(c.local, expected)
    c = bsp.coarray(4, dtype=np.int64, name="el-scalar")
    c.put_elements(np.full(2, me), [3, 1], 9)  # one value for all
    bsp.sync()
    np.testing.assert_array_equal(c.local, [0, 9, 0, 9])
    with pytest.raises(UsageError, match=r"element 1 at offset 4 is outside rank \d's part of el-scalar \(size 4\)"):
        c.put_elements([0, 0], [0, 4], [1, 2])
    with pytest.raises(UsageError, match=r"put_elements \(element 0\): pid -1 is not a rank"):
        c.put_elements([-1], [0], [1])
    with pytest.raises(UsageError, match="1-D integer arrays of one length"):
        c.put_elements([0, 0], [0], [1, 2])
    with pytest.raises(UsageError, match="3 values for 2 pids"):
        c.put_elements([0, 0], [0, 1], [1, 2, 3])
    bsp.sync()
    np.testing.assert_array_equal(c.local, [0, 9, 0, 9])  # nothing of the refused calls moved


@check
def put_elements_after_a_large_put_to_the_same_part_wins(bsp):
    # A large put (received in place when nothing else touches its elements) and element puts
    # to the same elements, in that program order: the element puts land last.
    p, me = bsp.nprocs, bsp.pid
    n = 20_000  # 160 KB of float64: a large put
    c = bsp.coarray(n, name="big")
    right = (me + 1) % p
    c.put(right, np.full(n, float(me)))
    c.put_elements(np.full(3, right), [0, n // 2, n - 1], [-1.0, -2.0, -3.0])
    bsp.sync()
    expected = np.full(n, float((me - 1) % p))
    expected[[0, n // 2, n - 1]] = [-1.0, -2.0, -3.0]
    np.testing.assert_array_equal(c.local, expected)


@check
def large_element_batches_travel_alone_and_keep_program_order(bsp):
    # Batches of element puts of >= 64 KiB per destination travel as messages of their own, from
    # pooled buffers reused across supersteps (of varying sizes).  Mixed with small element puts,
    # plain puts before and after them, over several supersteps: every element ends as replaying
    # the puts one at a time in BSPlib's order says (the oracle, on numpy copies of every part).
    p, me = bsp.nprocs, bsp.pid
    size = 30_000
    c = bsp.coarray(size, dtype=np.float64, name="el-large")
    expected = np.zeros(size)
    for step in range(4):
        def program(r):
            rng = np.random.default_rng(1000 * step + r)
            n = 12_000 + 3_000 * step  # about 12 000 / p puts and more to each rank: > 64 KiB
            big = (rng.integers(0, p, n), rng.integers(0, size, n), rng.standard_normal(n))
            small = (rng.integers(0, p, 5), rng.integers(0, size, 5), rng.standard_normal(5))
            block = (int(rng.integers(0, p)), int(rng.integers(0, size - 100)), rng.standard_normal(100))
            return block, big, small

        block, big, small = program(me)
        c.put(block[0], block[2], offset=block[1])      # a plain put, overwritten where they meet
        c.put_elements(*big)
        c.put_elements(*small)
        bsp.sync(f"elements {step}")
        for r in range(p):                               # ascending source rank, program order
            (bp, bo, bv), big_r, small_r = program(r)
            if bp == me:
                expected[bo:bo + bv.size] = bv
            for pids, offs, vals in (big_r, small_r):
                mine = pids == me
                for off, val in zip(offs[mine], vals[mine]):
                    expected[off] = val
        np.testing.assert_array_equal(c.local, expected)


@pytest.mark.parametrize("fn", CHECKS, ids=lambda f: f.__name__)
def test_on_one_rank(fn):
    with hpcbsp.BSP() as bsp:
        fn(bsp)


@mpi
@pytest.mark.parametrize("fn", CHECKS, ids=lambda f: f.__name__)
def test_on_every_rank(bsp, fn):
    fn(bsp)


@mpi
def test_ranks_that_disagree_on_a_var_or_queue_raise_divergence(bsp):
    with pytest.raises(BSPError, match="diverged"):
        bsp.var(0.0 if bsp.pid == 0 else 0)  # float64 on rank 0, int64 elsewhere
    with pytest.raises(BSPError):
        bsp.queue(np.int64, ragged=bsp.pid == 0)


@pytest.mark.serial_only
@pytest.mark.parametrize("nprocs", [2, 3])
def test_abort_from_one_rank_ends_the_program_with_its_message(nprocs):
    """Rank 1 aborts at superstep 2 while the others wait in a sync (and would wait 60 s more):
    the job ends at once, with the message once and no rank reported as dead without a word."""
    t0 = time.monotonic()
    res = run_mpi(nprocs, [os.path.join(os.path.dirname(__file__), "programs", "abort_one_rank.py")], timeout=60)
    assert not res.timed_out and time.monotonic() - t0 < 30, res.output
    assert res.returncode != 0
    line = f"[hpcbsp] rank 1/{nprocs} aborted the program at superstep 2: the input is inconsistent"
    assert res.stderr.count(line) == 1, res.output
    assert "UNREACHABLE" not in res.stdout and "died without a report" not in res.output


@check
def nd_coarrays_put_and_get_slices(bsp):
    # Oracle: numpy's own indexing of an array holding the values every rank can recompute.
    p, me = bsp.nprocs, bsp.pid
    shape_of = lambda r: (3 + r, 4)  # noqa: E731  (parts of different shapes)
    c = bsp.coarray(shape=shape_of(me), dtype=np.int64, name="grid")
    assert c.local.shape == shape_of(me) and c.shapes == tuple(shape_of(r) for r in range(p))
    start = lambda r: 1000 * r + np.arange(np.prod(shape_of(r))).reshape(shape_of(r))  # noqa: E731
    c.local[:] = start(me)
    right, left = (me + 1) % p, (me - 1) % p
    col = c.on(left)[:, 2].get()           # a column: one get per element (3 + left runs)
    block = c.on(right)[1:3, ::2].get()    # strided
    corner = c.on(right)[-1, -1].get()     # one element
    c.on(right)[0, :] = -1                 # a row: one put, broadcast from a scalar
    c.on(right)[1:, 1] = np.arange(2 + right) * -10
    bsp.sync()
    np.testing.assert_array_equal(col.value, start(left)[:, 2])
    np.testing.assert_array_equal(block.value, start(right)[1:3, ::2])
    assert corner.value.shape == () and corner.value == start(right)[-1, -1]
    expected = start(me)
    expected[0, :] = -1
    expected[1:, 1] = np.arange(2 + me) * -10
    np.testing.assert_array_equal(c.local, expected)
    with pytest.raises(UsageError, match=r"index 9 is outside 0..3"):
        c.on(right)[0, 9] = 1
    with pytest.raises(UsageError, match="do not fit the slice"):
        c.on(right)[0, :] = [1, 2]
    with pytest.raises(UsageError, match="ints and slices only"):
        c.on(right)[[0, 1]].get()
    bsp.sync()
