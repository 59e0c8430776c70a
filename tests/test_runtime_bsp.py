"""BSP runtime semantics at several rank counts (run under mpiexec -n 2 and -n 3).

Oracles: values computed independently on every rank from the rank numbers (each rank knows what
every other rank sent), and numpy for the classic programs.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import hpcbsp
from hpcbsp import BSPError, Divergence, PeerFailed, UsageError
from hpcbsp.apps.classic import distributed_matvec, inner_product, prefix_sum
from hpcbsp.runtime.distribution import block_range

mpi = pytest.mark.mpi(min_size=2)


@pytest.fixture
def bsp():
    with hpcbsp.BSP() as ctx:
        yield ctx


@mpi
def test_put_lands_at_next_sync_not_before(bsp):
    x = bsp.coarray(3, dtype=np.int64)
    right = (bsp.pid + 1) % bsp.nprocs
    x.put(right, [bsp.pid, bsp.pid + 10, bsp.pid + 20])
    assert np.all(x.local == 0), "a put must not land before the sync"
    bsp.sync()
    left = (bsp.pid - 1) % bsp.nprocs
    np.testing.assert_array_equal(x.local, [left, left + 10, left + 20])
    assert bsp.superstep == 1


@mpi
def test_put_copies_source_at_call(bsp):
    x = bsp.coarray(2)
    src = np.array([1.0, 2.0])
    x.put((bsp.pid + 1) % bsp.nprocs, src)
    src[:] = -1  # BSPlib buffered put: changing the source after the call changes nothing
    bsp.sync()
    np.testing.assert_array_equal(x.local, [1.0, 2.0])


@mpi
def test_get_reads_value_before_puts_of_same_superstep(bsp):
    x = bsp.coarray(4, dtype=np.float64)
    x.local[:] = bsp.pid
    target = (bsp.pid + 1) % bsp.nprocs
    fut = x.get(target, offset=1, count=2)
    x.put(target, [99.0, 99.0], offset=1)  # lands in the same superstep as the get reads
    with pytest.raises(UsageError, match="after the next sync"):
        fut.value
    bsp.sync()
    np.testing.assert_array_equal(fut.value, [target, target])
    np.testing.assert_array_equal(x.local, [bsp.pid, 99.0, 99.0, bsp.pid])


@mpi
def test_puts_applied_in_ascending_source_order_and_program_order(bsp):
    x = bsp.coarray(1, dtype=np.int64)
    # Every rank writes twice to rank 0's only element: the last writer is the highest pid's
    # second put.
    x.put(0, [1000 + bsp.pid])
    x.put(0, [2000 + bsp.pid])
    bsp.sync()
    if bsp.pid == 0:
        assert x.local[0] == 2000 + bsp.nprocs - 1


@mpi
def test_uneven_parts_and_self_put(bsp):
    n = bsp.pid + 1  # parts of different lengths
    x = bsp.coarray(n, dtype=np.int32)
    assert x.sizes == tuple(range(1, bsp.nprocs + 1))
    x.put(bsp.pid, np.full(n, 7))
    for q in range(bsp.nprocs):
        if q != bsp.pid:
            x.put(q, [bsp.pid + 1], offset=q)  # offset q is the last element of q's part
    bsp.sync()
    expected = np.full(n, 7)
    # The highest source rank wins: rank nprocs-1 (which puts nprocs), except on rank nprocs-1
    # itself, whose own self-put of 7s is the highest source there.
    if bsp.pid != bsp.nprocs - 1:
        expected[-1] = bsp.nprocs
    np.testing.assert_array_equal(x.local, expected)
    rec = bsp.ledger[-1]
    assert rec.bytes_out == 4 * (bsp.nprocs - 1)   # self-put not counted
    assert rec.msgs_out == bsp.nprocs - 1


@mpi
def test_queue_order_by_source_then_send_order(bsp):
    q = bsp.queue(np.int64)
    dests = np.arange(6) % bsp.nprocs
    q.send(dests, 100 * bsp.pid + np.arange(6))
    q.send(0, [100 * bsp.pid + 50])
    bsp.sync()
    got = q.received()
    expected = []
    for src in range(bsp.nprocs):
        expected += [100 * src + i for i in range(6) if i % bsp.nprocs == bsp.pid]
        if bsp.pid == 0:
            expected.append(100 * src + 50)
    np.testing.assert_array_equal(got, expected)
    bsp.sync()
    assert q.received().size == 0, "a queue holds only the previous superstep's records"


@mpi
def test_structured_dtype_queue(bsp):
    dt = np.dtype([("key", np.int64), ("val", np.float32), ("tag", "S3")])
    q = bsp.queue(dt)
    recs = np.zeros(bsp.nprocs, dtype=dt)
    recs["key"] = np.arange(bsp.nprocs) + 10 * bsp.pid
    recs["val"] = bsp.pid / 2
    recs["tag"] = b"abc"
    q.send(np.arange(bsp.nprocs), recs)
    bsp.sync()
    got = q.received()
    assert got.dtype == dt
    np.testing.assert_array_equal(got["key"], [10 * s + bsp.pid for s in range(bsp.nprocs)])
    np.testing.assert_array_equal(got["val"], np.arange(bsp.nprocs, dtype=np.float32) / 2)
    assert set(got["tag"].tolist()) == {b"abc"}


@mpi
def test_empty_sync_moves_nothing(bsp):
    for _ in range(3):
        bsp.sync("empty")
    assert [r.bytes_out + r.bytes_in + r.msgs_out + r.msgs_in for r in bsp.ledger] == [0, 0, 0]
    assert bsp.superstep == 3


@mpi
def test_same_inputs_same_bytes(bsp):
    def once():
        x = bsp.coarray(8, dtype=np.float64)
        rng = np.random.default_rng(bsp.pid)
        for _ in range(5):
            x.put(int(rng.integers(bsp.nprocs)), rng.standard_normal(3), offset=int(rng.integers(6)))
        bsp.sync()
        return x.local.tobytes()
    assert once() == once()


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
def test_allreduce_flushes_pending_puts(bsp):
    x = bsp.coarray(1, dtype=np.int64)
    x.put((bsp.pid + 1) % bsp.nprocs, [bsp.pid + 1])
    total = bsp.allreduce(1)
    assert total == bsp.nprocs
    assert x.local[0] == (bsp.pid - 1) % bsp.nprocs + 1


@mpi
def test_bad_calls_raise_at_the_call(bsp):
    x = bsp.coarray(4, dtype=np.int64, name="table")
    # Each message names the rank, the array, the offset and the size of what was asked.
    with pytest.raises(UsageError, match=rf"rank {bsp.pid}: table.put of 3 element\(s\) at offset 2 "
                                       r"is outside rank 0's part of table \(size 4\)"):
        x.put(0, [1, 2, 3], offset=2)
    with pytest.raises(UsageError, match=rf"rank {bsp.pid}: table.put\(pid=7, offset=1, count=1\): "
                                       rf"pid 7 is not a rank of this BSP program \(0..{bsp.nprocs - 1}\)"):
        x.put(7, [1], offset=1)
    with pytest.raises(UsageError, match=r"table.get\(pid=-1, offset=0\): pid -1 is not a rank"):
        x.get(-1)
    with pytest.raises(UsageError, match=rf"rank {bsp.pid}: table.put\(pid=0, offset=0, count=1\): "
                                       "values of dtype float64 cannot be cast to int64"):
        x.put(0, [1.5])
    with pytest.raises(UsageError, match="outside"):
        x.get(0, offset=3, count=2)
    q = bsp.queue(np.int32)
    with pytest.raises(UsageError, match=r"destination 99 at position 1"):
        q.send(np.array([0, 99]), [1, 2])
    with pytest.raises(UsageError, match="one destination per record"):
        q.send(np.array([0, 1, 0]), [1, 2])
    bsp.sync()  # nothing was queued by the failed calls
    assert bsp.ledger[-1].msgs_out == 0


@mpi
def test_registration_that_differs_raises_on_every_rank():
    with hpcbsp.BSP() as bsp:
        dtype = np.float64 if bsp.pid == 0 else np.int32
        with pytest.raises(Divergence, match="diverged"):
            bsp.coarray(4, dtype=dtype)
    # MPI is still usable and a new context works.
    with hpcbsp.BSP() as bsp:
        assert bsp.allreduce(1) == bsp.nprocs


@mpi
def test_contexts_that_fail_together_free_their_communicator():
    # MPICH has about 2048 communicators per process: a program that catches divergences and
    # carries on used to run out of them ("Too many communicators") after ~2000 failed contexts.
    for i in range(2100):
        # every third context in non-blocking mode (a timeout makes the control step wait with
        # Iallreduce): its communicator must be freed as well
        with hpcbsp.BSP(timeout=30 if i % 3 == 0 else None) as bsp:
            with pytest.raises(Divergence, match="diverged"):
                if bsp.pid == 0:
                    bsp.sync()
                else:
                    bsp.coarray(1)
        assert bsp.comm == MPI.COMM_NULL and "failed" in repr(bsp)
    with hpcbsp.BSP() as bsp:
        assert bsp.allreduce(1) == bsp.nprocs
        bsp.sync()
    # After the block: this rank's records are still readable; combining them is not possible.
    assert len(bsp.ledger) == 2 and "2 supersteps" in bsp.ledger.summary()
    with pytest.raises(UsageError, match="inside the BSP block"):
        bsp.ledger.gather()


@mpi
def test_a_context_is_released_once_when_leaving_diverges():
    # Rank 0 leaves while the others sync: every rank raises, and each releases its context
    # (close hooks, communicator) exactly once, however the program goes on to leave the block:
    # rank 0 at once (its close), the others when they leave the block.
    calls = []
    with hpcbsp.BSP() as bsp:
        bsp.extension.add_close_hook(lambda: calls.append(bsp.pid))
        with pytest.raises(Divergence, match="diverged"):
            if bsp.pid == 0:
                bsp.close()
            else:
                bsp.sync()
        assert len(calls) == (1 if bsp.pid == 0 else 0)
    assert len(calls) == 1 and bsp.comm == MPI.COMM_NULL
    bsp.close()
    assert len(calls) == 1


@mpi
def test_coarray_on_some_ranks_only_raises_on_every_rank():
    with hpcbsp.BSP() as bsp:
        with pytest.raises(Divergence, match=r"rank 0: coarray\(n=2.*sync\(label=None\)|"
                                           r"sync\(label=None\).*rank 0: coarray"):
            if bsp.pid == 0:
                bsp.coarray(2)
            else:
                bsp.sync()


@mpi
def test_rank_leaving_while_others_sync():
    world = MPI.COMM_WORLD

    def prog(bsp):
        if bsp.pid == 1:
            return "left early"
        bsp.sync()
        return "synced"

    with pytest.raises(Divergence) as err:
        hpcbsp.run(prog)
    msg = str(err.value)
    assert "rank 1: left the BSP block" in msg and "superstep 0" in msg
    world.Barrier()  # MPI stays usable: no abort
    assert world.allreduce(1) == world.Get_size()


@mpi
def test_failure_on_one_rank_reaches_the_others():
    def prog(bsp):
        if bsp.pid == bsp.nprocs - 1:
            raise ValueError("boom on the last rank")
        bsp.sync()

    with pytest.raises((ValueError, BSPError)) as err:
        hpcbsp.run(prog)
    if MPI.COMM_WORLD.Get_rank() == MPI.COMM_WORLD.Get_size() - 1:
        assert isinstance(err.value, ValueError)
    else:
        assert isinstance(err.value, PeerFailed)
        assert "boom on the last rank" in str(err.value)


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


@mpi
@pytest.mark.parametrize("overlap", [False, True])
def test_large_puts_keep_order_and_overlap_semantics(bsp, overlap):
    """Large puts go straight into the target unless another put touches the same elements;
    either way the result equals applying puts in ascending source order (numpy oracle)."""
    p, n = bsp.nprocs, 40_000  # 320 KB of float64 per put: above the large-put threshold
    x = bsp.coarray(n * p, dtype=np.float64)
    f = x.get((bsp.pid + 1) % p, offset=0, count=5)  # must see the values before the puts
    x.local[:] = -1.0
    for q in range(p):
        offset = 0 if overlap else bsp.pid * n
        x.put(q, np.full(n, bsp.pid, dtype=np.float64) + np.arange(n), offset=offset)
        if overlap:
            x.put(q, [1000.0 + bsp.pid], offset=7)  # small put inside a large one
    bsp.sync()
    expected = np.full(n * p, -1.0)
    for src in range(p):
        offset = 0 if overlap else src * n
        expected[offset:offset + n] = src + np.arange(n)
        if overlap:
            expected[7] = 1000.0 + src
    np.testing.assert_array_equal(x.local, expected)
    np.testing.assert_array_equal(f.value, np.full(5, -1.0))
    # h-relation: the puts to the other ranks, plus the 5 values this rank serves to a get
    assert bsp.ledger[-1].bytes_out == 8 * (n + (1 if overlap else 0)) * (p - 1) + 8 * 5


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


@mpi
def test_queue_batch_counts_one_message_per_destination(bsp):
    q = bsp.queue(np.int64)
    right = (bsp.pid + 1) % bsp.nprocs
    q.send(right, np.arange(10))
    bsp.sync()
    rec = bsp.ledger[-1]
    assert (rec.bytes_out, rec.msgs_out, rec.bytes_in, rec.msgs_in) == (80, 1, 80, 1)


@mpi
@pytest.mark.parametrize("n", [3, 40_000])
def test_hpput_delivers_like_put(bsp, n):
    """hpput sends large contiguous arrays from the caller's memory, small ones like put; either
    way the data lands at the sync (numpy oracle: the values the sender had)."""
    x = bsp.coarray(n * bsp.nprocs, dtype=np.float64)
    right = (bsp.pid + 1) % bsp.nprocs
    src = np.arange(n, dtype=np.float64) + 1000.0 * bsp.pid
    x.hpput(right, src, offset=bsp.pid * n)
    x.hpput(right, np.arange(2, dtype=np.int32), offset=0)  # another dtype: copied, cast
    bsp.sync()
    left = (bsp.pid - 1) % bsp.nprocs
    expected = np.arange(n, dtype=np.float64) + 1000.0 * left
    got = x.local[left * n:(left + 1) * n].copy()
    if left == 0:
        expected[:2] = [0.0, 1.0]
    np.testing.assert_array_equal(got, expected)
    with pytest.raises(UsageError, match="outside"):
        x.hpput(right, src, offset=x.sizes[right])


@mpi
def test_control_step_falls_back_to_allreduce_without_persistent_collectives(bsp):
    """The control step is a persistent Allreduce (MPI-4) where the library has one; MPI-3
    libraries have none, and the plain Allreduce must give the same agreement and divergence."""
    assert bsp._control._persistent is not None  # MPICH 5 has MPI_Allreduce_init
    bsp._control.free()                           # now as on an MPI-3 library
    x = bsp.coarray(1, dtype=np.int64)
    x.put((bsp.pid + 1) % bsp.nprocs, [bsp.pid + 10])
    bsp.sync()
    assert x.local[0] == (bsp.pid - 1) % bsp.nprocs + 10
    if bsp.nprocs > 1:
        with pytest.raises(Divergence, match="diverged"):
            if bsp.pid == 0:
                bsp.sync()
            else:
                bsp.coarray(1)
