"""The memory a sharded parameter server's rank holds (issue 46, item 1: "memory per server is the
model / S, plus what the policy must hold"): :func:`hpcbsp.elastic.keyranges.shard_memory`, the
arithmetic the trainer's start line and ``bench elastic --servers`` print, and
:meth:`hpcbsp.elastic.round.ServerRound.memory`, the round's own arrays.

Oracle: bytes computed by hand from the key ranges (10 weights over 2 shards: 5 and 5; over 3: 4,
3 and 3), the weights' and the gradients' bytes per value and the number of workers.  The update
of k held gradients (BSP's) is numpy's ``w -= lr * g.mean(axis=0)``, bit for bit, while its
temporaries, traced by tracemalloc, stay within one row (numpy's expression makes k + 1).
"""
from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from hpcbsp.elastic.coordinator import Coordinator
from hpcbsp.elastic.keyranges import ShardMemory, shard_memory
from hpcbsp.elastic.policies import make_policy
from hpcbsp.util.text import byte_size

#: 10 float64 weights, 3 workers pushing float16 gradients: per key of a shard, 8 bytes of
#: weights, 3 x 8 of held gradients, 3 x 2 of receive buffers.  Per number of shards, each shard's.
BY_HAND = {2: [ShardMemory(40, 120, 30), ShardMemory(40, 120, 30)],
           3: [ShardMemory(32, 96, 24), ShardMemory(24, 72, 18), ShardMemory(24, 72, 18)]}


def test_the_busiest_shard_holds_its_key_range_times_the_bytes_per_key() -> None:
    assert shard_memory(10, 2, 3, 8, 2) == BY_HAND[2][0]
    assert shard_memory(10, 3, 3, 8, 2) == BY_HAND[3][0]  # (the first range is the longest)
    assert shard_memory(10, 1, 3, 8, 2) == ShardMemory(80, 240, 60)
    assert shard_memory(10, 1, 3, 8, 8, window=True) == ShardMemory(80, 240, 0)  # (gradients in the window)
    # the student MLP of --hidden 1024 --depth 2 is about 1.1 M float32 values; 4 shards, 4 workers
    four = shard_memory(1_100_000, 4, 4, 4, 4)
    assert four == ShardMemory(1_100_000, 4_400_000, 4_400_000) and four.total == 9_900_000
    assert four.text() == "1.0 MiB weights + 4.2 MiB held gradients + 4.2 MiB receive buffers = 9.4 MiB"
    assert BY_HAND[3][1].text() == "24 B weights + 72 B held gradients + 18 B receive buffers = 114 B"
    one = shard_memory(1_100_000, 1, 4, 4, 4)
    assert one.total == 4 * four.total  # the model / S, and the policy's rows / S


def test_sizes_are_said_in_the_largest_binary_unit_below_them() -> None:
    assert [byte_size(n) for n in (0, 1023, 1024, 1536, 10 * 2**20 - 1, 3 * 2**30)] == [
        "0 B", "1,023 B", "1.0 KiB", "1.5 KiB", "10.0 MiB", "3.0 GiB"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("workers", [2, 3, 5, 64])
def test_a_mean_update_is_numpys_and_makes_one_rows_temporaries(dtype: type, workers: int) -> None:
    rng = np.random.default_rng(workers)
    size = 50_000
    w0 = rng.standard_normal(size).astype(dtype)
    grads = (rng.standard_normal((workers, size)) * rng.uniform(0.1, 1e3, (workers, 1))).astype(dtype)
    coord = Coordinator(make_policy("bsp"), workers, w0, 0.037)
    for w in range(1, workers):  # (held, in an order other than the workers')
        coord.push(w, grads[w], 0.0)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        coord.push(0, grads[0], 0.0)  # the last push: the mean of all is applied
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert coord.version == 1 and coord.weights is not None
    expect = w0.copy()
    expect -= 0.037 * grads.mean(axis=0)  # (BSP applies the workers' gradients in worker order)
    assert np.array_equal(coord.weights.view(np.uint8), expect.view(np.uint8))
    row = size * np.dtype(dtype).itemsize
    assert row <= peak < 1.5 * row, f"the update's temporaries: {peak} bytes, {peak / row:.2f} rows"


@pytest.mark.mpi(min_size=2)
def test_each_shards_round_holds_what_the_arithmetic_says(bsp) -> None:
    """Every rank a shard (S = the job's size), for 3 workers that never push: the buffers each
    round allocates, against the hand-computed bytes of its key range."""
    from hpcbsp.elastic.round import ServerRound
    from hpcbsp.elastic.wire import wires

    size = bsp.nprocs
    if size not in BY_HAND:
        pytest.skip(f"hand-computed for 2 and 3 ranks; this job has {size}")
    whole = Coordinator(make_policy("bsp"), 3, np.arange(10.0), 0.1) if bsp.pid == 0 else None
    comm = bsp.comm.Dup()
    try:
        with ServerRound.open(comm, whole, None, "yield", wires(np.float64, "float16"), 30.0, servers=size) as rnd:
            got = rnd.memory()
    finally:
        comm.Free()
    assert got == BY_HAND[size][bsp.pid], f"rank {bsp.pid}: {got}"
    assert bsp.gather_all(got) == BY_HAND[size]
