"""The relay's compiled envelopes (hpcbsp.kernels.envelopes) against their numpy oracles
(hpcbsp.kernels.reference: structured-field assignment and boolean masks)."""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.kernels import reference
from hpcbsp.kernels.envelopes import Scratch, split_envelopes, wrap_append, wrap_envelopes

#: Record types of 1, 2, 4, 8, 12 (packed), 16 and 24 bytes: the copy's constant-size paths
#: (4, 8, 12, 16) and its general one.
DTYPES = [np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.float32), np.dtype(np.int64),
          np.dtype([("k", np.int32), ("v", np.float64)]), np.dtype([("a", np.int64), ("b", np.float64)]),
          np.dtype([("a", np.int64), ("b", np.int64), ("c", np.float64)])]


def _wire(dtype: np.dtype, with_from: bool) -> np.dtype:
    return np.dtype([("to", np.int32)] + ([("from", np.int32)] if with_from else []) + [("rec", dtype)])


def _records(dtype: np.dtype, n: int, seed: int) -> np.ndarray:
    recs = np.zeros(n, dtype=dtype)
    recs.view(np.uint8)[:] = np.random.default_rng(seed).integers(0, 256, recs.nbytes, dtype=np.uint8)
    return recs


@pytest.mark.parametrize("with_from", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [0, 1, 257])
def test_wrap_writes_the_envelopes_numpy_writes(dtype, with_from, n):
    wire = _wire(dtype, with_from)
    recs = _records(dtype, n, n)
    dests = np.random.default_rng(7).integers(0, 9, n)
    got = wrap_envelopes(recs, dests, 5, wire)
    assert got.dtype == wire and got.tobytes() == reference.wrap_envelopes(recs, dests, 5, wire).tobytes()
    one = wrap_envelopes(recs, 3, 5, wire)  # one destination for all
    assert one.tobytes() == reference.wrap_envelopes(recs, 3, 5, wire).tobytes()


@pytest.mark.parametrize("with_from", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mine_share", [0.0, 0.3, 1.0])
def test_split_gives_what_the_masks_give_in_arrival_order(dtype, with_from, mine_share):
    rng = np.random.default_rng(3)
    n, p, me = 500, 7, 2
    wire = _wire(dtype, with_from)
    env = np.zeros(n, dtype=wire)
    env.view(np.uint8)[:] = rng.integers(0, 256, env.nbytes, dtype=np.uint8)
    env["to"] = np.where(rng.random(n) < mine_share, me, rng.choice([0, 1, 3, 4, 5, 6], n))
    hops = rng.integers(0, p, p).astype(np.int64)
    want_mine, want_origins, want_passing, want_next = reference.split_envelopes(env, me, hops, dtype)
    consumed = env.copy()
    mine, origins, passing, nxt = split_envelopes(consumed, me, hops, dtype)
    assert mine.dtype == dtype and mine.tobytes() == want_mine.tobytes()
    assert mine.flags.c_contiguous, "the handler gets them as they are"
    assert mine.size == 0 or np.shares_memory(mine, consumed), "moved within the message, not copied out"
    if with_from:
        np.testing.assert_array_equal(origins, want_origins)
    else:
        assert origins is None
    assert passing.tobytes() == want_passing.tobytes()
    np.testing.assert_array_equal(nxt, want_next)


@pytest.mark.parametrize("with_from", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("capacity", [1, 3, 64])
def test_wrap_append_fills_next_hops_buffers_with_the_envelopes_in_order(dtype, with_from, capacity):
    """Oracle: the envelopes made by numpy, appended one at a time to per-next-hop lists, a list
    cut into a message whenever it reaches the capacity."""
    rng = np.random.default_rng(capacity)
    nprocs, n, me = 5, 400, 3
    wire = _wire(dtype, with_from)
    recs = _records(dtype, n, capacity)
    dests = rng.integers(0, nprocs, n)
    nexts = np.array([0, 0, 2, 3, 2])[dests]  # a routing's next hops: 1 via 0, 4 via 2
    env = reference.wrap_envelopes(recs, dests, me, wire)
    want, lists = [], [[] for _ in range(nprocs)]
    for i in range(n):
        lists[nexts[i]].append(env[i].tobytes())
        if len(lists[nexts[i]]) == capacity:
            want.append((int(nexts[i]), b"".join(lists[nexts[i]])))
            lists[nexts[i]] = []
    bufs: list = [None] * nprocs
    ptrs = np.zeros(nprocs, dtype=np.uint64)
    fill = np.zeros(nprocs, dtype=np.int64)
    got, i = [], 0
    while True:
        i, h = wrap_append(dests, nexts, recs, i, me, wire, ptrs, fill, capacity)
        if h == -1:
            break
        if h >= 0:
            got.append((h, bufs[h].tobytes()))
            fill[h], ptrs[h], bufs[h] = 0, 0, None
        else:
            b = np.empty(capacity, dtype=wire)
            bufs[-h - 2], ptrs[-h - 2] = b, b.ctypes.data
    assert i == n and got == want
    for h in range(nprocs):
        assert fill[h] == len(lists[h])
        if fill[h]:
            assert bufs[h][:fill[h]].tobytes() == b"".join(lists[h])


def test_split_with_scratch_reuses_its_memory_and_gives_the_same_results():
    """Oracle: split without scratch (fresh arrays) on copies of the same batches."""
    rng = np.random.default_rng(5)
    wire = _wire(np.dtype(np.int64), True)
    hops = np.array([0, 0, 2, 0], dtype=np.int64)
    scratch = Scratch()
    seen = []
    for n in (300, 100, 500):
        env = np.zeros(n, dtype=wire)
        env["to"], env["from"], env["rec"] = rng.integers(0, 4, n), rng.integers(0, 4, n), rng.integers(0, 99, n)
        want = split_envelopes(env.copy(), 1, hops, np.dtype(np.int64))
        got = split_envelopes(env, 1, hops, np.dtype(np.int64), scratch)
        for g, w in zip(got, want):
            assert g.tobytes() == w.tobytes()
        seen.append(got[2])
    assert np.shares_memory(seen[0], seen[1]), "the second batch reused the first one's memory"


def test_split_copies_a_batch_it_may_not_move_in():
    """A read-only or strided batch is split from a copy; the caller's array is left as it was."""
    wire = _wire(np.dtype(np.int64), True)
    env = np.zeros(6, dtype=wire)
    env["to"], env["from"], env["rec"] = [1, 0, 1, 2, 1, 1], [2, 2, 0, 0, 2, 0], np.arange(6) * 10
    before = env.tobytes()
    env.flags.writeable = False
    mine, origins, passing, nxt = split_envelopes(env, 1, np.array([0, 1, 0], dtype=np.int64), np.dtype(np.int64))
    assert env.tobytes() == before and mine.tolist() == [0, 20, 40, 50] and origins.tolist() == [2, 0, 2, 0]
    assert passing["rec"].tolist() == [10, 30] and nxt.tolist() == [0, 0]
    strided = np.zeros(12, dtype=wire)[::2]
    strided["to"], strided["rec"] = 1, np.arange(6)
    assert split_envelopes(strided, 1, np.arange(3, dtype=np.int64), np.dtype(np.int64))[0].tolist() == list(range(6))


def test_split_names_an_envelope_addressed_outside_the_ranks():
    """A corrupt message is refused, naming the envelope and its address."""
    wire = _wire(np.dtype(np.int64), False)
    env = np.zeros(4, dtype=wire)
    env["to"] = [0, 1, 9, 1]
    with pytest.raises(ValueError, match=r"envelope 2 is addressed to rank 9, outside \[0, 3\)"):
        split_envelopes(env, 0, np.arange(3, dtype=np.int64), np.dtype(np.int64))
    env["to"][2] = -1
    with pytest.raises(ValueError, match="addressed to rank -1"):
        split_envelopes(env, 0, np.arange(3, dtype=np.int64), np.dtype(np.int64))


def test_an_array_that_is_no_envelope_is_refused():
    with pytest.raises(ValueError, match="is not an envelope"):
        wrap_envelopes(np.arange(3), 1, 0, np.dtype([("rec", np.int64)]))
