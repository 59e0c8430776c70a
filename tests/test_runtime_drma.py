"""Coarrays: put, get and hpput at several rank counts (run under mpiexec -n 2 and -n 3).

Oracles: values computed independently on every rank from the rank numbers (each rank knows what
every other rank sent), and numpy replays of the puts in BSPlib's order.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from mpi_helpers import run_mpi

from hpcbsp import UsageError

mpi = pytest.mark.mpi(min_size=2)



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


@mpi
@pytest.mark.parametrize("n", [3, 40_000])
def test_hpput_delivers_like_put(bsp, n):
    """hpput delivers what put delivers: the values the sender had (numpy oracle), small arrays
    and arrays of another dtype included (those are copied and cast)."""
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
def test_hpput_makes_no_send_side_copy(bsp):
    """A large contiguous hpput is sent from the caller's array at the sync, not copied at the
    call: a change made to the array between the call and the sync is what arrives.  Oracle: the
    same change after a put, which copies at the call, does not arrive.  (Changing the array is
    what the docstring forbids for hpput; here it is the observable sign of the missing copy.)"""
    n = 40_000  # 320 kB: above LARGE_PUT_BYTES, so the payload travels as a message of its own
    x = bsp.coarray(2 * n, dtype=np.float64)
    right, left = (bsp.pid + 1) % bsp.nprocs, (bsp.pid - 1) % bsp.nprocs
    by_hpput = np.arange(n, dtype=np.float64) + 1000.0 * bsp.pid
    by_put = by_hpput.copy()
    x.hpput(right, by_hpput, offset=0)
    x.put(right, by_put, offset=n)
    by_hpput += 0.5
    by_put += 0.5
    bsp.sync()
    sent = np.arange(n, dtype=np.float64) + 1000.0 * left
    np.testing.assert_array_equal(x.local[:n], sent + 0.5)  # read from the array at the sync
    np.testing.assert_array_equal(x.local[n:], sent)        # copied at the call


SAME_BYTES = """
import hashlib, sys
import numpy as np
import hpcbsp

with hpcbsp.BSP() as bsp:
    x = bsp.coarray(8, dtype=np.float64)
    rng = np.random.default_rng(bsp.pid)
    for _ in range(5):
        x.put(int(rng.integers(bsp.nprocs)), rng.standard_normal(3), offset=int(rng.integers(6)))
    bsp.sync()
    print(f"rank {bsp.pid} {x.local.tobytes().hex()}", flush=True)
"""


def _replayed(nprocs: int) -> dict[int, str]:
    """The oracle: every rank's puts replayed with numpy in BSPlib's order (ascending source
    rank, program order within a source), last writer wins."""
    local = {d: np.zeros(8) for d in range(nprocs)}
    for src in range(nprocs):
        rng = np.random.default_rng(src)
        for _ in range(5):
            dest = int(rng.integers(nprocs))
            values = rng.standard_normal(3)
            offset = int(rng.integers(6))
            local[dest][offset:offset + 3] = values
    return {d: a.tobytes().hex() for d, a in local.items()}


@pytest.mark.serial_only
@pytest.mark.parametrize("nprocs", [2, 3])
def test_same_inputs_same_bytes_in_separate_runs(nprocs):
    """Two separate MPI jobs with the same inputs end with the same bytes on every rank, and
    those are the bytes of the numpy replay."""
    runs = []
    for _ in range(2):
        res = run_mpi(nprocs, ["-c", SAME_BYTES], timeout=120)
        assert res.returncode == 0 and not res.timed_out, res.output
        runs.append(dict((int(r), h) for r, h in re.findall(r"rank (\d+) ([0-9a-f]+)", res.stdout)))
    assert runs[0] == runs[1] == _replayed(nprocs)


@mpi
def test_a_coarray_with_a_layout_is_sized_by_it_and_puts_address_it(bsp):
    # Oracle: Cyclic's closed form (g on rank g mod p at g // p), written out here.
    from hpcbsp.runtime.api.partition import Cyclic

    n, p = 17, bsp.nprocs
    x = bsp.coarray(dtype=np.int64, name="x", layout=Cyclic(n, p))
    assert x.local.size == len(range(bsp.pid, n, p)) and x.layout == Cyclic(n, p)
    if bsp.pid == 0:  # rank 0 writes every element g = 10 g, addressed through the layout
        for g in range(n):
            owner, offset = x.layout.locate(g)
            x.put(owner, [10 * g], offset)
    bsp.sync()
    np.testing.assert_array_equal(x.local, 10 * np.arange(bsp.pid, n, p))


@mpi
def test_a_layout_that_does_not_fit_the_coarray_is_a_usage_error(bsp):
    from hpcbsp.runtime.api.partition import Block

    p = bsp.nprocs
    with pytest.raises(UsageError, match=rf"layout Block\(n=10, p={p + 1}\) is over {p + 1} ranks, this context has {p}"):
        bsp.coarray(layout=Block(10, p + 1))
    with pytest.raises(UsageError, match=r"n=99, but layout Block\(n=10, p=\d+\) gives rank \d+ \d+ elements"):
        bsp.coarray(99, layout=Block(10, p))
    with pytest.raises(UsageError, match="layout must be a partitioning"):
        bsp.coarray(4, layout="block")
    with pytest.raises(UsageError, match="coarray size must be a non-negative integer, got None"):
        bsp.coarray()
    bsp.sync()  # every rank raised locally, before any collective step: the context goes on


@mpi
@pytest.mark.parametrize("how", ["alltoallv", "staged", "messages"])
def test_many_large_puts_per_rank_land_in_source_and_program_order(bsp, monkeypatch, how):
    """Rank s sends s + 1 large puts to each other rank (so the ranks need different numbers of
    rounds, and rank 0's one put shares its round with the others' first), into two coarrays,
    some alone and some overlapping a later large put of the same source: the result equals
    applying every put in ascending source rank and program order (numpy replay).  "alltoallv":
    the large payloads travel in rounds of one Alltoallv each; "staged": the same with every
    round's regions copied through one buffer (as when they lie too far apart for MPI's int
    displacements); "messages": a sync with a timeout sends them as messages."""
    from hpcbsp.runtime.superstep.exchange import regions

    if how == "staged":
        monkeypatch.setattr(regions, "SPAN", 0)
    p, me, n = bsp.nprocs, bsp.pid, 10_000  # 80 KB of float64 per put: large
    parts = 2 * p + 2
    x = bsp.coarray(n * parts, dtype=np.float64)
    y = bsp.coarray(n, dtype=np.int64)
    expected_x = np.zeros(n * parts)
    expected_y = np.zeros(n, dtype=np.int64)

    def puts(src: int, dest: int) -> list[tuple[str, int, np.ndarray]]:
        out = []
        for k in range(src + 1):
            values = np.arange(n, dtype=np.float64) + 1e6 * src + 1e4 * k + dest
            if k == 0:
                out.append(("y", 0, np.full(n, 100 * src + dest, dtype=np.int64)))  # y: overlapping
            elif k % 2:
                out.append(("x", (2 * src + 1) * n, values))  # overwritten by k + 1 where there is one
            else:
                out.append(("x", (2 * src + 1) * n + n // 2, values[: n // 2]))
            out.append(("x", 2 * src * n, values))  # alone unless another k puts there too
        return out

    for q in range(p):
        if q != me:
            for name, offset, values in puts(me, q):
                (x if name == "x" else y).put(q, values, offset=offset)
    bsp.sync(timeout=60.0) if how == "messages" else bsp.sync()
    for src in range(p):
        if src != me:
            for name, offset, values in puts(src, me):
                (expected_x if name == "x" else expected_y)[offset:offset + values.size] = values
    np.testing.assert_array_equal(x.local, expected_x)
    np.testing.assert_array_equal(y.local, expected_y)
    assert bsp.ledger[-1].bytes_in == sum(v.nbytes for s in range(p) if s != me for _, _, v in puts(s, me))
