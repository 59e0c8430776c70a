"""The exchange's buffer pool (hpcbsp.runtime.superstep.outbox.BufferPool): exact sizes, reuse across
supersteps of slightly different sizes, memory bounded by the working set.  Oracle: buffer
identity (``np.shares_memory``) and hand-counted bytes."""
from __future__ import annotations

import numpy as np

from hpcbsp.runtime.superstep.outbox import BufferPool

MiB = 1 << 20


def _held(pool: BufferPool) -> int:
    """Bytes of the free buffers the pool holds."""
    return pool.held


def test_a_buffer_comes_back_for_a_slightly_different_size():
    pool = BufferPool()
    a = pool.take(5 * MiB + 123)
    assert a.size == 5 * MiB + 123 and a.dtype == np.uint8 and a.flags.c_contiguous
    pool.give([a])
    b = pool.take(5 * MiB + 4000)           # the same 1 MiB-rounded capacity: reused
    assert b.size == 5 * MiB + 4000 and np.shares_memory(a, b)
    c = pool.take(5 * MiB + 4000)           # the pool had one: a new buffer
    assert not np.shares_memory(b, c)
    small = pool.take(100)                  # below a chunk: exact sizes only
    assert small.size == 100 and small.base is None


def test_the_pool_keeps_at_most_twice_the_largest_working_set():
    pool = BufferPool()
    first = [pool.take(8 * MiB) for _ in range(2)]
    pool.give(first)                          # the peak: 16 MiB
    assert _held(pool) == 16 * MiB
    pool.give([])                             # a superstep without buffers changes nothing
    assert _held(pool) == 16 * MiB
    small = pool.take(2 * MiB)                # a smaller superstep: its buffer and the older ones
    pool.give([small])
    assert _held(pool) == 18 * MiB
    again = [pool.take(8 * MiB) for _ in range(2)]  # alternating sizes: the 8 MiB ones come back
    assert all(any(np.shares_memory(a, f) for f in first) for a in again)
    pool.give(again)
    more = [pool.take(5 * MiB) for _ in range(6)]  # 30 MiB: a new peak; older kept up to it
    pool.give(more)
    assert _held(pool) == 30 * MiB + 18 * MiB
    huge = [pool.take(3 * MiB) for _ in range(2)]
    pool.give(huge)                            # 6 MiB now; older up to the 30 MiB peak
    assert 6 * MiB < _held(pool) <= 36 * MiB


def test_the_pool_never_hands_out_one_buffer_twice():
    pool = BufferPool()
    bufs = [pool.take(3 * MiB) for _ in range(3)]
    pool.give(bufs)
    again = [pool.take(3 * MiB - k) for k in range(3)]
    for i in range(3):
        for j in range(i + 1, 3):
            assert not np.shares_memory(again[i], again[j])
