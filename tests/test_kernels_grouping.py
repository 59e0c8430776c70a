"""group_by_dest against its numpy oracle (stable argsort + bincount)."""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbsp import kernels
from hpcbsp.kernels import reference

INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]


def check(dest, nprocs: int) -> None:
    perm, counts = kernels.group_by_dest(dest, nprocs)
    ref_perm, ref_counts = reference.group_by_dest(np.asarray(dest), nprocs)
    assert perm.dtype == np.int64 and counts.dtype == np.int64
    np.testing.assert_array_equal(perm, ref_perm)
    np.testing.assert_array_equal(counts, ref_counts)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40).flatmap(
    lambda p: st.tuples(st.just(p), st.lists(st.integers(0, p - 1), max_size=300))))
def test_matches_stable_argsort_and_bincount(case):
    nprocs, dest = case
    check(np.array(dest, dtype=np.int64), nprocs)


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_every_integer_dtype(dtype):
    dest = np.random.default_rng(1).integers(0, 7, 1000).astype(dtype)
    check(dest, 7)


def test_empty_one_element_and_single_rank():
    perm, counts = kernels.group_by_dest(np.empty(0, dtype=np.int64), 3)
    assert perm.shape == (0,) and counts.tolist() == [0, 0, 0]
    perm, counts = kernels.group_by_dest([], 0)
    assert perm.shape == (0,) and counts.shape == (0,)
    check(np.array([2]), 3)
    check(np.zeros(10, dtype=np.int64), 1)


def test_non_contiguous_views_and_lists():
    base = np.random.default_rng(2).integers(0, 5, (40, 3))
    check(base[::2, 1], 5)
    check(base[::-1, 0], 5)
    check(base[:, 2].tolist(), 5)


def test_many_ranks_most_empty():
    dest = np.random.default_rng(3).integers(0, 100_000, 500)
    check(dest, 100_000)


def _peak_bytes(dest: np.ndarray) -> int:
    """The most memory numpy held at once during one ``group_by_dest(dest, 5)`` (numpy reports
    its buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        kernels.group_by_dest(dest, 5)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_contiguous_int64_is_used_without_copy():
    """A C-contiguous int64 array is read where it lies; any other is copied to one first.  The
    oracle: the call's peak memory, the result's order (8 bytes an item) alone, or that and a
    copy of the destinations as int64 (8 bytes an item more)."""
    n = 200_000
    dest = np.random.default_rng(4).integers(0, 5, n)
    assert dest.dtype == np.int64 and dest.flags.c_contiguous
    assert _peak_bytes(dest) < 1.5 * 8 * n
    for other in (dest.astype(np.int32), np.repeat(dest, 2)[::2]):
        assert _peak_bytes(other) >= 2 * 8 * n


def test_destinations_at_the_bounds_are_accepted():
    check(np.array([0, 4, 0, 4]), 5)


@pytest.mark.parametrize("bad, pos", [(5, 2), (-1, 1), (2**40, 0)])
def test_out_of_range_destination_is_named(bad, pos):
    dest = np.array([0, 1, 4, 3])
    dest[pos] = bad
    with pytest.raises(ValueError, match=rf"destination {bad} at position {pos} is outside \[0, 5\)"):
        kernels.group_by_dest(dest, 5)


def test_uint64_beyond_int64_is_named_not_wrapped():
    dest = np.array([1, 2**64 - 1], dtype=np.uint64)
    with pytest.raises(ValueError, match=str(2**64 - 1)):
        kernels.group_by_dest(dest, 4)


def test_bad_arguments():
    with pytest.raises(TypeError, match="integers"):
        kernels.group_by_dest(np.array([0.0, 1.0]), 2)
    with pytest.raises(ValueError, match=">= 0"):
        kernels.group_by_dest(np.array([], dtype=np.int64), -1)
    with pytest.raises(TypeError):
        kernels.group_by_dest(np.array([0]), 2.5)


@pytest.mark.parametrize("n", [4095, 4096, 4097, 10_001])
@pytest.mark.parametrize("nprocs", [1, 3, 1000])
def test_long_inputs_counted_in_interleaved_parts(n, nprocs):
    # from 4096 items on, the kernel counts and places four parts in one interleaved loop
    dest = np.random.default_rng(n + nprocs).integers(0, nprocs, n)
    check(dest, nprocs)


def test_first_bad_destination_is_named_even_when_a_later_part_meets_one_first():
    dest = np.zeros(10_000, dtype=np.int64)
    dest[9_999] = 9   # last part: the interleaved loop reaches it early
    dest[2_400] = -3  # first part: but this one comes first
    with pytest.raises(ValueError, match=r"destination -3 at position 2400 "):
        kernels.group_by_dest(dest, 2)


# ---------------------------------------------------------------------------- append_by_dest
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.dtype([("k", np.int32), ("v", np.float64)]),
                                   np.dtype([("to", np.int32), ("from", np.int32), ("rec", np.int64)]),
                                   np.dtype([("to", np.int32), ("rec", np.int16)])])
@pytest.mark.parametrize("capacity", [1, 3, 64])
def test_append_by_dest_fills_buffers_in_order_and_stops_when_one_fills(dtype, capacity):
    """Oracle: a plain Python loop appending one record at a time to per-destination lists,
    cutting a list into a message whenever it reaches the capacity."""
    rng = np.random.default_rng(capacity)
    nprocs, n = 4, 500
    dest = rng.integers(0, nprocs, n)
    recs = np.zeros(n, dtype=dtype)
    recs.view(np.uint8)[:] = rng.integers(0, 256, recs.nbytes, dtype=np.uint8)
    rows = recs.view(np.uint8).reshape(n, recs.dtype.itemsize)
    want_msgs, lists = [], [[] for _ in range(nprocs)]
    for i in range(n):
        lists[dest[i]].append(recs[i].tobytes())
        if len(lists[dest[i]]) == capacity:
            want_msgs.append((int(dest[i]), b"".join(lists[dest[i]])))
            lists[dest[i]] = []
    bufs: list = [None] * nprocs
    ptrs = np.zeros(nprocs, dtype=np.uint64)
    fill = np.zeros(nprocs, dtype=np.int64)
    got_msgs, i = [], 0
    while True:
        i, d = kernels.append_by_dest(dest, rows, i, ptrs, fill, capacity)
        if d == -1:
            break
        if d >= 0:
            assert fill[d] == capacity
            got_msgs.append((d, bufs[d].tobytes()))
            fill[d], ptrs[d], bufs[d] = 0, 0, None
        else:
            b = np.empty(capacity, dtype=dtype)
            bufs[-d - 2], ptrs[-d - 2] = b, b.ctypes.data
    assert i == n and got_msgs == want_msgs
    for d in range(nprocs):
        assert fill[d] == len(lists[d])
        if fill[d]:
            assert bufs[d][:fill[d]].tobytes() == b"".join(lists[d])


def test_append_by_dest_wants_checked_int64_destinations():
    with pytest.raises(TypeError, match="C-contiguous int64"):
        kernels.append_by_dest(np.array([0], dtype=np.int32), np.zeros((1, 8), np.uint8), 0,
                               np.zeros(1, np.uint64), np.zeros(1, np.int64), 4)


@pytest.mark.parametrize("bad_at", [None, 0, 3, 999])
def test_check_dests_names_the_first_destination_out_of_range(bad_at):
    """Oracle: ``np.flatnonzero((dest < 0) | (dest >= nprocs))[0]``."""
    dest = np.random.default_rng(2).integers(0, 5, 1000)
    if bad_at is not None:
        dest[bad_at] = 5 if bad_at % 2 else -7
        dest[bad_at + 1 if bad_at < 999 else 0] = 9
        first = int(np.flatnonzero((dest < 0) | (dest >= 5))[0])
        with pytest.raises(ValueError, match=rf"destination {dest[first]} at position {first} is outside \[0, 5\)"):
            kernels.check_dests(dest, 5)
    else:
        kernels.check_dests(dest, 5)
    kernels.check_dests(np.empty(0, dtype=np.int64), 0)
