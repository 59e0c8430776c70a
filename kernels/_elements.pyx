# cython: language_level=3, boundscheck=False, wraparound=False
"""Single-element puts in bulk: packing them by destination, and applying them in order.

A batch of element puts (element i of ``values`` to rank ``dest[i]`` at offset ``offset[i]``)
travels to each destination as one record: the offsets (uint32 where every part has at most
2**32 elements, else int64), padded to 8 bytes, followed by the values, each ``itemsize``
bytes, padded to 8 bytes.  Both loops are byte copies (any dtype, structured
ones included) and keep program order, so of two puts to one element the later one wins.
The loops themselves are C (``elements_loops.h``); this module checks, sizes and lays out.
"""
import numpy as np
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memset

cdef extern from "elements_loops.h" nogil:
    Py_ssize_t hpcbsp_pack_u32(Py_ssize_t n, const int64_t* dest, const int64_t* offset, const uint8_t* vals,
                               Py_ssize_t itemsize, const int64_t* sizes, uint8_t* base, int64_t* off_at,
                               int64_t* val_at)
    Py_ssize_t hpcbsp_pack_i64(Py_ssize_t n, const int64_t* dest, const int64_t* offset, const uint8_t* vals,
                               Py_ssize_t itemsize, const int64_t* sizes, uint8_t* base, int64_t* off_at,
                               int64_t* val_at)
    Py_ssize_t hpcbsp_pack_one_u32(Py_ssize_t n, const int64_t* offset, const uint8_t* vals, Py_ssize_t itemsize,
                                   int64_t size, uint32_t* offs_out, uint8_t* vals_out)
    Py_ssize_t hpcbsp_pack_one_i64(Py_ssize_t n, const int64_t* offset, const uint8_t* vals, Py_ssize_t itemsize,
                                   int64_t size, int64_t* offs_out, uint8_t* vals_out)
    Py_ssize_t hpcbsp_apply_u32(const uint32_t* offs, const uint8_t* vals, Py_ssize_t count, Py_ssize_t itemsize,
                                uint8_t* base, Py_ssize_t size)
    Py_ssize_t hpcbsp_apply_i64(const int64_t* offs, const uint8_t* vals, Py_ssize_t count, Py_ssize_t itemsize,
                                uint8_t* base, Py_ssize_t size)


cdef inline int64_t _padded(int64_t nbytes) noexcept nogil:
    """``nbytes`` rounded up to a multiple of 8."""
    return (nbytes + 7) // 8 * 8


def pack_elements(const int64_t[::1] dest, const int64_t[::1] offset, const uint8_t[::1] values,
                  Py_ssize_t itemsize, const int64_t[::1] sizes, alloc=None, Py_ssize_t offset_bytes=8):
    """Group the puts by destination into one byte array (``alloc(nbytes)``'s, when given: a
    C-contiguous uint8 array of exactly that length, e.g. from a pool of reused buffers).

    Returns ``(packed, counts, starts)``: the records of destination d are
    ``packed[starts[d]:starts[d + 1]]`` (``counts[d]`` offsets of ``offset_bytes`` bytes each,
    4 (uint32, for parts of at most 2**32 elements) or 8 (int64), padded to 8 bytes, then their
    values, padded to 8 bytes), in program order.  Returns ``(None, i, 0)`` for the first put i
    whose destination is not a rank (``0 <= dest < len(sizes)``) or whose offset is outside
    ``[0, sizes[dest])``.
    """
    cdef Py_ssize_t n = dest.shape[0], p = sizes.shape[0], i, d, bad = -1
    cdef int64_t[::1] counts = np.zeros(p, dtype=np.int64)
    cdef int64_t[::1] starts = np.zeros(p + 1, dtype=np.int64)
    if offset_bytes != 4 and offset_bytes != 8:
        raise ValueError(f"pack_elements: offset_bytes must be 4 or 8, not {offset_bytes}")
    # Two passes: count by destination (reading only the destinations), then pack (checking
    # the offsets there, where they are read anyway: one read of them saved, as the loops are
    # bound by memory traffic).  The count keeps four tallies, for the puts i = 0, 1, 2, 3 mod 4:
    # with one, consecutive puts to one rank wait for each other's increment of it in memory
    # (store to load), which made the pass three times slower than reading the destinations.
    cdef int64_t[:, ::1] tally = np.zeros((4, p), dtype=np.int64)
    cdef int64_t d0, d1, d2, d3
    cdef uint64_t up = <uint64_t>p
    with nogil:
        i = 0
        while i + 4 <= n:
            d0, d1, d2, d3 = dest[i], dest[i + 1], dest[i + 2], dest[i + 3]
            if (<uint64_t>d0 >= up) | (<uint64_t>d1 >= up) | (<uint64_t>d2 >= up) | (<uint64_t>d3 >= up):
                break  # (negative ranks too) the loop below finds which
            tally[0, d0] += 1
            tally[1, d1] += 1
            tally[2, d2] += 1
            tally[3, d3] += 1
            i += 4
        while i < n:
            d = dest[i]
            if d < 0 or d >= p:
                bad = i
                break
            tally[0, d] += 1
            i += 1
        for d in range(p):
            counts[d] = tally[0, d] + tally[1, d] + tally[2, d] + tally[3, d]
        if bad >= 0:  # an earlier put may have a bad offset: the first bad put is reported
            for i in range(bad):
                if offset[i] < 0 or offset[i] >= sizes[dest[i]]:
                    bad = i
                    break
    if bad >= 0:
        return None, bad, 0
    with nogil:
        for d in range(p):
            starts[d + 1] = starts[d] + _padded(counts[d] * offset_bytes) + _padded(counts[d] * itemsize)
    # Not zeros: each byte is written once below.
    packed = np.empty(starts[p], dtype=np.uint8) if alloc is None else alloc(starts[p])
    cdef uint8_t[::1] out = packed
    cdef int64_t[::1] off_at = np.empty(p, dtype=np.int64)
    cdef int64_t[::1] val_at = np.empty(p, dtype=np.int64)
    cdef uint8_t* base = &out[0] if starts[p] else NULL
    cdef const uint8_t* vals = &values[0] if n else NULL
    cdef Py_ssize_t only = -1  # the one destination of every put, if there is one
    for d in range(p if n else 0):
        if counts[d] == n:
            only = d
    with nogil:
        for d in range(p):
            off_at[d] = starts[d]
            val_at[d] = starts[d] + _padded(counts[d] * offset_bytes)
            # the padding after the offsets (the values' padding is written at the end)
            memset(base + starts[d] + counts[d] * offset_bytes, 0, val_at[d] - starts[d] - counts[d] * offset_bytes)
        if only >= 0 and offset_bytes == 4:  # offsets in order, values in one block
            bad = hpcbsp_pack_one_u32(n, &offset[0], vals, itemsize, sizes[only],
                                      <uint32_t*>(base + off_at[only]), base + val_at[only])
        elif only >= 0:
            bad = hpcbsp_pack_one_i64(n, &offset[0], vals, itemsize, sizes[only],
                                      <int64_t*>(base + off_at[only]), base + val_at[only])
        elif n == 0:
            pass
        elif offset_bytes == 4:
            bad = hpcbsp_pack_u32(n, &dest[0], &offset[0], vals, itemsize, &sizes[0], base, &off_at[0], &val_at[0])
        else:
            bad = hpcbsp_pack_i64(n, &dest[0], &offset[0], vals, itemsize, &sizes[0], base, &off_at[0], &val_at[0])
        if only >= 0:
            val_at[only] += n * itemsize
        if bad < 0:
            for d in range(p):  # the padding after each destination's values
                memset(base + val_at[d], 0, starts[d + 1] - val_at[d])
    if bad >= 0:
        return None, bad, 0
    return packed, np.asarray(counts), np.asarray(starts)


def apply_elements(uint8_t[::1] table, Py_ssize_t itemsize, const uint8_t[::1] record, Py_ssize_t count,
                   Py_ssize_t offset_bytes=8):
    """Apply one packed record (``count`` offsets of ``offset_bytes`` bytes, padded to 8 bytes,
    then the values) to ``table`` (the target's bytes), in order.  Returns -1, or the index of
    the first offset outside the table (nothing after it is applied)."""
    cdef Py_ssize_t bad = -1, size = table.shape[0] // itemsize if itemsize else 0
    if offset_bytes != 4 and offset_bytes != 8:
        raise ValueError(f"apply_elements: offset_bytes must be 4 or 8, not {offset_bytes}")
    if count == 0:
        return -1
    if record.shape[0] < _padded(count * offset_bytes) + count * itemsize:
        raise ValueError(f"apply_elements: a record of {record.shape[0]} bytes is too short for "
                         f"{count} puts of {itemsize} bytes")
    # 8-byte aligned: a record starts so, and the offsets are padded to 8 bytes.
    cdef const uint8_t* vals = &record[0] + _padded(count * offset_bytes)
    with nogil:
        if offset_bytes == 4:
            bad = hpcbsp_apply_u32(<const uint32_t*>(&record[0]), vals, count, itemsize, &table[0], size)
        else:
            bad = hpcbsp_apply_i64(<const int64_t*>(&record[0]), vals, count, itemsize, &table[0], size)
    return bad
