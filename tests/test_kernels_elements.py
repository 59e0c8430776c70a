"""Element puts in bulk (``hpcbsp.kernels.elements``): packed by destination, applied in order.

Oracle: :func:`hpcbsp.kernels.reference.element_puts`, one put at a time in program order.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.kernels import elements, reference


@pytest.mark.parametrize("dtype", [np.int64, np.float64, np.float32, np.uint8, np.complex128,
                                   np.dtype([("k", "i2"), ("w", "f8"), ("c", "S3")])])
@pytest.mark.parametrize("p", [1, 3, 7])
@pytest.mark.parametrize("width", [4, 8])
def test_packing_then_applying_is_the_puts_one_by_one(dtype, p, width):
    rng = np.random.default_rng(p)
    sizes = rng.integers(0, 40, p).astype(np.int64)
    sizes[0] = max(sizes[0], 1)
    n = 2_000
    dest = rng.choice(np.flatnonzero(sizes), n).astype(np.int64)
    offset = (rng.integers(0, 1 << 30, n) % sizes[dest]).astype(np.int64)
    values = np.frombuffer(rng.bytes(n * np.dtype(dtype).itemsize), dtype=dtype).copy()
    packed, counts, starts = elements.pack_elements(dest, offset, values, sizes, width=width)
    np.testing.assert_array_equal(counts, np.bincount(dest, minlength=p))
    assert all(s % 8 == 0 for s in starts)  # every record starts 8-byte aligned
    itemsize = np.dtype(dtype).itemsize
    assert [int(b - a) for a, b in zip(starts[:-1], starts[1:])] == \
        [elements.record_bytes(int(c), itemsize, width) for c in counts]
    got = [np.zeros(s, dtype=dtype) for s in sizes]
    for d in range(p):
        assert elements.apply_elements(got[d], packed[starts[d]:starts[d + 1]], int(counts[d]), width=width) == -1
    want = [np.zeros(s, dtype=dtype) for s in sizes]
    reference.element_puts(want, dest, offset, values)
    for g, w in zip(got, want):
        assert g.tobytes() == w.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.dtype([("k", "i2"), ("c", "S3")])])
@pytest.mark.parametrize("width", [4, 8])
def test_puts_all_to_one_rank_are_packed_byte_for_byte(dtype, width):
    """Every put to one rank takes a path of its own (the offsets narrowed in order, the values
    copied as one block).  Oracle: the record's bytes built by hand with numpy (offsets, zero
    padding to 8 bytes, values, zero padding), empty records for the other ranks."""
    rng = np.random.default_rng(width)
    sizes = np.array([5, 1000, 3], dtype=np.int64)
    for n in (1, 3, 1001):
        offset = rng.integers(0, 1000, n)
        values = np.frombuffer(rng.bytes(n * np.dtype(dtype).itemsize), dtype=dtype).copy()
        packed, counts, starts = elements.pack_elements(np.ones(n, dtype=np.int64), offset, values, sizes,
                                                        width=width)
        offs = offset.astype(np.uint32 if width == 4 else np.int64).tobytes()
        vals = values.tobytes()
        want = offs + bytes(-len(offs) % 8) + vals + bytes(-len(vals) % 8)
        assert counts.tolist() == [0, n, 0] and starts.tolist() == [0, 0, len(want), len(want)]
        assert packed.tobytes() == want


@pytest.mark.parametrize("width", [4, 8])
@pytest.mark.parametrize("n", [1, 2, 9, 40])
def test_a_bad_offset_among_puts_all_to_one_rank_is_found(n, width):
    """The one-rank path checks the offsets after narrowing them all: the first bad one (too
    large, or negative, at any position) is still the one named.  Oracle: a scan."""
    sizes = np.array([2, 50], dtype=np.int64)
    rng = np.random.default_rng(n)
    for pos in range(n):
        for bad in (50, -1, 2**40):
            offset = rng.integers(0, 50, n)
            offset[pos] = bad
            if pos + 1 < n:
                offset[-1] = -5  # a later bad offset does not hide the first
            packed, first, _ = elements.pack_elements(np.ones(n, dtype=np.int64), offset, np.zeros(n), sizes,
                                                      width=width)
            assert packed is None and first == pos, (pos, bad)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128])
@pytest.mark.parametrize("width", [4, 8])
def test_applying_into_a_table_of_more_than_a_mebibyte(dtype, width):
    """Tables above 1 MiB take the loop that fetches lines into L2 far ahead; the last puts of a
    record (no line left to fetch) and duplicates are included.  Oracle: the reference replay."""
    size = (3 << 20) // np.dtype(dtype).itemsize  # 3 MiB
    rng = np.random.default_rng(width)
    n = 100_000
    offset = rng.integers(0, size, n)
    offset[-50:] = offset[:50]  # the later puts to these elements win
    values = rng.standard_normal(n).astype(dtype)
    sizes = np.array([size], dtype=np.int64)
    packed, counts, _ = elements.pack_elements(np.zeros(n, dtype=np.int64), offset, values, sizes, width=width)
    got = np.zeros(size, dtype=dtype)
    assert elements.apply_elements(got, packed, n, width=width) == -1
    want = [np.zeros(size, dtype=dtype)]
    reference.element_puts(want, np.zeros(n, dtype=np.int64), offset, values)
    np.testing.assert_array_equal(got, want[0])
    smaller = np.zeros(size // 2, dtype=dtype)  # the first put outside it stops the applying
    first_out = int(np.flatnonzero(offset >= size // 2)[0])
    assert elements.apply_elements(smaller, packed, n, width=width) == first_out


def test_the_first_bad_put_is_named_and_nothing_is_packed():
    sizes = np.array([4, 2], dtype=np.int64)
    for dest, offset, bad in (([0, 1, 1], [3, 1, 2], 2), ([0, 2], [0, 0], 1), ([0, -1], [0, 0], 1),
                              ([0, 0], [-1, 0], 0)):
        packed, first, _ = elements.pack_elements(np.array(dest, dtype=np.int64), np.array(offset, dtype=np.int64),
                                                  np.zeros(len(dest)), sizes)
        assert packed is None and first == bad


@pytest.mark.parametrize("n", [4, 5, 11, 64])
def test_the_first_bad_put_is_found_wherever_it_is(n):
    """The count runs four puts at a time: a bad rank (too large, or negative) at any position
    of a group or of the tail, alone or after a bad offset, is found.  Oracle: a scan for the
    first put whose rank or offset is out of range."""
    sizes = np.array([4, 2, 3], dtype=np.int64)
    rng = np.random.default_rng(n)
    for pos in range(n):
        for bad_rank in (3, -1, 2**62):
            dest = rng.integers(0, 3, n)
            offset = np.array([rng.integers(0, sizes[d]) for d in dest], dtype=np.int64)
            dest[pos] = bad_rank
            if pos > 1 and pos % 2:
                offset[pos - 2] = sizes[dest[pos - 2]]  # an earlier bad offset wins
            want = next(i for i in range(n) if not 0 <= dest[i] < 3 or not 0 <= offset[i] < sizes[dest[i]])
            packed, first, _ = elements.pack_elements(dest, offset, np.zeros(n), sizes)
            assert packed is None and first == want, (pos, bad_rank)


def test_a_record_with_an_offset_outside_the_table_stops_there():
    packed, counts, starts = elements.pack_elements(np.zeros(3, dtype=np.int64), np.array([0, 5, 1]),
                                                    np.array([1.0, 2.0, 3.0]), np.array([9], dtype=np.int64))
    table = np.zeros(4)  # smaller than the part the puts were checked against
    assert elements.apply_elements(table, packed, 3, width=elements.offset_width([9])) == 1
    np.testing.assert_array_equal(table, [1.0, 0, 0, 0])


def test_offsets_are_four_bytes_where_every_part_fits_them():
    """The width rule, by hand: a uint32 holds offsets 0 .. 2**32 - 1."""
    assert elements.offset_width([0]) == 4 and elements.offset_width([]) == 4
    assert elements.offset_width(np.array([5, 2**32])) == 4
    assert elements.offset_width(np.array([5, 2**32 + 1])) == 8
    # count 3: offsets 12 (4-byte) or 24 bytes, values 24 bytes; count 1 of 2-byte values: 8 + 8
    assert elements.record_bytes(3, 8, 4) == 16 + 24 and elements.record_bytes(3, 8, 8) == 24 + 24
    assert elements.record_bytes(1, 2, 4) == 16


def test_a_record_too_short_for_its_count_is_refused():
    packed, _, _ = elements.pack_elements(np.zeros(3, dtype=np.int64), np.array([0, 1, 2]),
                                          np.array([1.0, 2.0, 3.0]), np.array([9], dtype=np.int64), width=4)
    with pytest.raises(ValueError, match="too short"):
        elements.apply_elements(np.zeros(9), packed[:-8], 3, width=4)
    with pytest.raises(ValueError, match="offset_bytes must be 4 or 8"):
        elements.apply_elements(np.zeros(9), packed, 3, width=2)


def test_offsets_too_narrow_for_the_parts_are_refused():
    """4-byte offsets would wrap an offset past 2**32: packing refuses them before anything."""
    with pytest.raises(ValueError, match="4-byte offsets cannot hold"):
        elements.pack_elements(np.zeros(1, dtype=np.int64), np.array([2**32 + 5]), np.ones(1),
                               np.array([2**32 + 6], dtype=np.int64), width=4)
