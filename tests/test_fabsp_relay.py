"""The compiled relay end to end (run under mpiexec -n 2 and -n 3): histograms through mailboxes
with every routing, records of 8 and 12 bytes, with and without the source, fixed and ragged.

Oracles: every rank regenerates every rank's keys from the seed, so ``np.bincount`` of them is
the table each rank must hold, and the counts per (source, key) say what each handler call
with the source must have seen; a ragged record is a run of keys, counted the same way.  At 2
ranks no record is relayed (every rank is a neighbour in a 1 x 2 grid), at 3 ranks rank 0
relays the 1 <-> 2 traffic of the 2 x 2 grid: both run here.
"""
from __future__ import annotations

import numpy as np
import pytest

mpi = pytest.mark.mpi(min_size=2)

ROUTINGS = ["direct", "2d", "3d"]
N, TABLE = 20_000, 101
PAIR = np.dtype([("key", np.int32), ("weight", np.float64)])  # 12 bytes: envelopes of 16 and 20


def _keys(rank: int, p: int) -> np.ndarray:
    return np.random.default_rng([17, rank]).integers(0, TABLE * p, N)


def _oracle(p: int, me: int) -> tuple[np.ndarray, np.ndarray]:
    """``(table, per_source)``: this rank's counters, and per source rank its counters."""
    per_source = np.zeros((p, TABLE), dtype=np.int64)
    for r in range(p):
        g = _keys(r, p)
        per_source[r] = np.bincount(g[g % p == me] // p, minlength=TABLE)
    return per_source.sum(axis=0), per_source


@mpi
@pytest.mark.parametrize("routing", ROUTINGS)
@pytest.mark.parametrize("record", ["int64", "pair"])
@pytest.mark.parametrize("with_source", [False, True])
def test_a_routed_histogram_counts_what_bincount_counts(bsp, routing, record, with_source):
    p, me = bsp.nprocs, bsp.pid
    table = np.zeros(TABLE, dtype=np.int64)
    per_source = np.zeros((p, TABLE), dtype=np.int64)
    weights = []

    def count(recs, source=None):
        keys = recs if record == "int64" else recs["key"].astype(np.int64)
        if record == "pair":
            weights.append(recs["weight"] - keys)  # each weight is its key + 0.5
        np.add.at(table, keys // p, 1)
        if with_source:
            assert 0 <= source < p
            np.add.at(per_source[source], keys // p, 1)

    dtype = np.int64 if record == "int64" else PAIR
    box = bsp.mailbox(count, dtype, routing=routing, with_source=with_source, buffer=97, max_pending=3)
    g = _keys(me, p)
    if record == "pair":
        recs = np.zeros(N, dtype=PAIR)
        recs["key"], recs["weight"] = g, g + 0.5
    else:
        recs = g
    for start in range(0, N, 3000):
        box.send(g[start:start + 3000] % p, recs[start:start + 3000])
    box.send(me, recs[:5])  # all to one rank (this one)
    bsp.sync()
    want, want_per_source = _oracle(p, me)
    g0 = g[:5]
    want = want + np.bincount(g0 // p, minlength=TABLE)
    want_per_source[me] += np.bincount(g0 // p, minlength=TABLE)
    np.testing.assert_array_equal(table, want)
    if with_source:
        np.testing.assert_array_equal(per_source, want_per_source)
    if weights:
        assert np.all(np.concatenate(weights) == 0.5), "the record's other field arrived intact"


@mpi
@pytest.mark.parametrize("routing", ROUTINGS)
def test_a_ragged_routed_histogram_counts_what_bincount_counts(bsp, routing):
    """Record i is the run of keys ``g[i], g[i] + p, ...`` (``i % 4`` of them, zero included),
    sent to the owner of ``g[i]`` (all keys of a run have that owner)."""
    p, me = bsp.nprocs, bsp.pid
    table = np.zeros(TABLE + 4, dtype=np.int64)

    def count(values, lengths, source):
        assert values.size == lengths.sum()
        np.add.at(table, values // p, 1)

    box = bsp.mailbox(count, np.int64, ragged=True, routing=routing, with_source=True, buffer=64)

    def runs(rank):
        g = _keys(rank, p)[:3000]
        lens = np.arange(g.size) % 4
        values = np.concatenate([g[i] + p * np.arange(lens[i]) for i in range(g.size)])
        return g % p, values, lens

    dests, values, lens = runs(me)
    box.send(dests, values, lens)
    bsp.sync()
    want = np.zeros(TABLE + 4, dtype=np.int64)
    for r in range(p):
        _, v, _ = runs(r)
        want += np.bincount(v[v % p == me] // p, minlength=TABLE + 4)
    np.testing.assert_array_equal(table, want)
