"""FA-BSP pieces that need no second rank: aggregation buffers, one-rank mailboxes, the app
helpers and oracles, the apps in every mode on one rank, and their command lines.

Oracles: brute force in plain Python (itertools, lists), numpy written independently of the
code under test, and hand-computed small cases.
"""
from __future__ import annotations

import itertools
import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

import hpcbsp
from hpcbsp import BSPError
from hpcbsp.apps.irregular import bfs, histogram, index_gather, toposort, triangles
from hpcbsp.apps.irregular.graphs import bfs_levels, erdos_renyi, local_rows, ragged_arange, rmat, triangles_dense, triangles_sparse
from hpcbsp.apps.irregular.layout import cyclic_owner
from hpcbsp.apps.irregular.naive import naive_exchange
from hpcbsp.fabsp.aggregation import Aggregator
from hpcbsp.fabsp.engine import Engine, default_buffer
from hpcbsp.fabsp.termination import DoubleWave
from hpcbsp.util.args.types import positive_int


# ---------------------------------------------------------------------------- aggregation
@pytest.mark.parametrize("owned", [True, False])
def test_aggregator_keeps_order_and_emits_full_buffers(owned):
    rng = np.random.default_rng(3)
    agg = Aggregator(3, np.dtype(np.int64), capacity=5)
    sent: dict[int, list[int]] = {0: [], 1: [], 2: []}
    added: dict[int, list[int]] = {0: [], 1: [], 2: []}
    value = 0
    for _ in range(40):
        dest = int(rng.integers(3))
        n = int(rng.integers(0, 13))
        recs = np.arange(value, value + n, dtype=np.int64)
        value += n
        added[dest] += recs.tolist()
        for msg in agg.add(dest, recs, owned=owned):
            assert msg.shape == (5,), "only full buffers leave before a drain"
            sent[dest] += msg.tolist()
        assert agg.nbuffered == sum(len(added[d]) - len(sent[d]) for d in range(3))
    for dest, msg in agg.drain():
        assert 0 < msg.size < 5
        sent[dest] += msg.tolist()
    assert agg.nbuffered == 0
    assert sent == added, "every record leaves exactly once, in the order added per destination"
    assert list(agg.drain()) == []


def test_aggregator_copies_unowned_records_and_recycles_buffers():
    agg = Aggregator(2, np.dtype(np.int32), capacity=4)
    src = np.arange(8, dtype=np.int32)
    out = agg.add(1, src, owned=False)
    src[:] = -1  # the caller may reuse its array after send: messages must not change
    assert [m.tolist() for m in out] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    agg.recycle(out[0])
    partial = agg.add(1, np.array([9], dtype=np.int32), owned=True)
    assert partial == [] and agg.nbuffered == 1
    (dest, msg), = agg.drain()
    assert dest == 1 and msg.tolist() == [9]


def test_aggregator_append_matches_add_and_recycles_whole_buffers():
    """The compiled porter (``append``) against ``add`` record by record (the oracle): the same
    full messages in the same order, the same partial buffers at the drain; and its full
    buffers are whole arrays that come back as spares."""
    rng = np.random.default_rng(8)
    porter = Aggregator(3, np.dtype(np.int64), capacity=6)
    oracle = Aggregator(3, np.dtype(np.int64), capacity=6)
    got, want = [], []
    for step in range(30):
        dests = rng.integers(0, 3, int(rng.integers(0, 20)))
        recs = np.arange(dests.size, dtype=np.int64) + 100 * step
        for dest, msg in porter.append(dests, recs):
            assert msg.base is None and msg.shape == (6,)
            got.append((dest, msg.tolist()))
            porter.recycle(msg)
        for d, r in zip(dests.tolist(), recs.tolist()):
            want += [(d, m.tolist()) for m in oracle.add(d, np.array([r]), owned=False)]
        assert porter.nbuffered == oracle.nbuffered
    assert got == want
    assert [(d, m.tolist()) for d, m in porter.drain()] == [(d, m.tolist()) for d, m in oracle.drain()]
    assert porter.peak_buffers <= 3 + 4, "three partial buffers and at most four spares"


def test_default_buffer_bounds():
    assert default_buffer(8, 2) == (512 << 10) // 8
    assert default_buffer(8, 4096) == (64 << 10) // 8
    assert default_buffer(1 << 20, 2) == 1  # never zero records


def _complete(wave: DoubleWave) -> bool:
    done = False
    while wave.in_flight:
        done = wave.test()
    return done


def test_double_wave_needs_two_equal_waves():
    wave = DoubleWave(MPI.COMM_SELF)
    wave.start(3, 3)
    assert not _complete(wave), "(3, 3) differs from the epoch's start (0, 0): not over yet"
    wave.start(3, 3)
    assert _complete(wave) and wave.waves == 2
    idle = DoubleWave(MPI.COMM_SELF)
    idle.start(0, 0)
    assert _complete(idle) and idle.waves == 1, "an epoch without traffic ends after one wave"
    busy = DoubleWave(MPI.COMM_SELF)
    for _ in range(3):
        busy.start(5, 4)
        assert not _complete(busy), "sent != handled is never quiescent"
    moving = DoubleWave(MPI.COMM_SELF)
    for sent in (2, 4, 4):
        moving.start(sent, sent)
        done = _complete(moving)
    assert done and moving.waves == 3, "the totals must repeat before the epoch ends"


# ---------------------------------------------------------------------------- one-rank mailboxes
def test_one_rank_mailbox_self_sends_and_handler_chains():
    with hpcbsp.BSP() as bsp:
        seen: list[int] = []

        def countdown(recs: np.ndarray) -> None:
            seen.extend(recs.tolist())
            more = recs[recs > 0] - 1
            if more.size:
                box.send(0, more)

        box = bsp.mailbox(countdown, np.int64, buffer=2)
        box.send(0, [3, 1])
        box.send(np.zeros(1, dtype=np.int32), [2])
        bsp.sync()
        assert sorted(seen) == sorted([3, 2, 1, 0, 1, 0, 2, 1, 0])
        assert bsp.ledger[-1].bytes_out == 0, "records to this rank itself are not counted"
        assert Engine.of(bsp).last_waves >= 2
        bsp.sync()
        assert Engine.of(bsp).last_waves == 1, "a superstep without records ends after one wave"


def test_one_rank_bad_input_raises_at_the_call():
    with hpcbsp.BSP() as bsp:
        got: list[np.ndarray] = []
        box = bsp.mailbox(got.append, np.dtype([("a", np.int32), ("b", np.float64)]), name="pairs")
        with pytest.raises(BSPError, match="pid 1 is not a rank"):
            box.send(1, np.zeros(1, dtype=box.dtype))
        with pytest.raises(BSPError, match="destination 3 at position 0"):
            box.send(np.array([3]), np.zeros(1, dtype=box.dtype))
        with pytest.raises(BSPError, match="cannot be cast"):
            box.send(0, np.zeros(2, dtype=np.int32))
        with pytest.raises(BSPError, match="one destination per record"):
            box.send(np.zeros(3, dtype=np.int64), np.zeros(2, dtype=box.dtype))
        with pytest.raises(BSPError, match="one destination per record"):
            box.send(np.zeros(1), np.zeros(1, dtype=box.dtype))  # float pids
        bsp.sync()
        assert got == [], "a refused send sends nothing"
        for kw, msg in (({"buffer": 0}, "buffer must be a positive integer"),
                        ({"max_pending": -1}, "max_pending must be a positive integer"),
                        ({"buffer": 2.5}, "buffer must be a positive integer")):
            with pytest.raises(BSPError, match=msg):
                bsp.mailbox(got.append, np.int64, **kw)
        with pytest.raises(BSPError, match="plain data"):
            bsp.mailbox(got.append, object)
        with pytest.raises(BSPError, match="callable"):
            bsp.mailbox("not a function", np.int64)


def test_one_rank_handler_exception_propagates_from_sync():
    with pytest.raises(ZeroDivisionError):
        with hpcbsp.BSP() as bsp:
            box = bsp.mailbox(lambda recs: 1 // 0, np.int64)
            box.send(0, [1])
            bsp.sync()


# ---------------------------------------------------------------------------- helpers
def test_cyclic_owner_matches_divmod():
    g = np.arange(1000, dtype=np.int64)
    for p in (1, 2, 3, 4, 7, 8):
        owner, off = cyclic_owner(g, p)
        np.testing.assert_array_equal(owner, [x % p for x in range(1000)])
        np.testing.assert_array_equal(off, [x // p for x in range(1000)])


def test_positive_int():
    assert positive_int("5") == 5 and positive_int("1e6") == 1_000_000 and positive_int("2_000") == 2000
    for bad in ("0", "-3", "1.5", "x", "1e-3"):
        with pytest.raises(Exception, match="positive integer"):
            positive_int(bad)


def test_ragged_arange_and_local_rows_against_brute_force():
    starts, lengths = np.array([5, 0, 9, 2]), np.array([2, 0, 3, 1])
    assert ragged_arange(starts, lengths).tolist() == [5, 6, 9, 10, 11, 2]
    edges = erdos_renyi(40, 6, seed=2)
    for p, pid in ((1, 0), (3, 1), (4, 3)):
        for symmetric in (False, True):
            indptr, indices = local_rows(edges, 40, pid, p, symmetric)
            for r, v in enumerate(range(pid, 40, p)):
                want = sorted([b for a, b in edges.tolist() if a == v]
                              + ([a for a, b in edges.tolist() if b == v] if symmetric else []))
                assert indices[indptr[r]:indptr[r + 1]].tolist() == want


def test_graph_generators():
    e = erdos_renyi(100, 8, seed=1)
    assert np.all(e[:, 0] > e[:, 1]) and len({tuple(x) for x in e.tolist()}) == e.shape[0]
    assert 300 < e.shape[0] <= 400
    r = rmat(8, 8, seed=1)
    assert np.all(r[:, 0] > r[:, 1]) and r.max() < 256
    deg = np.bincount(r.ravel(), minlength=256)
    assert deg.max() > 4 * deg.mean(), "R-MAT degrees are skewed"
    np.testing.assert_array_equal(erdos_renyi(100, 8, seed=1), e)


def test_triangle_oracles_against_brute_force():
    for edges, n in ((erdos_renyi(30, 10, seed=5), 30), (rmat(5, 6, seed=3), 32),
                     (np.array([[1, 0], [2, 0], [2, 1], [3, 2]]), 4)):
        s = {tuple(x) for x in edges.tolist()}
        brute = sum(1 for a, b, c in itertools.combinations(range(n), 3)
                    if (b, a) in s and (c, a) in s and (c, b) in s)
        assert triangles_dense(edges, n) == brute
        sparse = triangles_sparse(edges, n)
        assert sparse is None or sparse == brute
    assert brute == 1  # the last graph: one triangle, as drawn by hand


def test_bfs_oracle_on_hand_made_graphs():
    path = np.array([[1, 0], [2, 1], [3, 2], [5, 4]])
    assert bfs_levels(path, 6, 0).tolist() == [0, 1, 2, 3, -1, -1]
    assert bfs_levels(path, 6, 2).tolist() == [2, 1, 0, 1, -1, -1]
    star = np.array([[k, 0] for k in range(1, 5)])
    assert bfs_levels(star, 5, 3).tolist() == [1, 2, 2, 0, 2]


def test_naive_exchange_on_one_rank():
    recs = np.arange(5, dtype=np.int64) * 3
    got = naive_exchange(MPI.COMM_SELF, np.zeros(5, dtype=np.int64), recs)
    assert got.tolist() == recs.tolist()
    assert naive_exchange(MPI.COMM_SELF, np.zeros(0, dtype=np.int64), recs[:0]).size == 0


# ---------------------------------------------------------------------------- apps on one rank
@pytest.mark.parametrize("mode", ["fabsp", "bsp", "naive"])
def test_apps_on_one_rank(mode):
    idx = np.random.default_rng(1).integers(0, 50, 500)
    owner = np.zeros(500, dtype=np.int64)
    with hpcbsp.BSP() as bsp:
        if mode == "fabsp":
            counts, _ = histogram.histogram_fabsp(bsp, owner, idx, 50, chunk=64, buffer=16)
        elif mode == "bsp":
            counts, _ = histogram.histogram_bsp(bsp, owner, idx, 50)
        else:
            counts, _ = histogram.histogram_naive(bsp, owner, idx, 50)
        assert counts.tolist() == [int((idx == k).sum()) for k in range(50)]
        assert index_gather.run_index_gather(bsp, mode, 300, 40, seed=2, chunk=50).ok
        edges = erdos_renyi(60, 12, seed=4)
        assert triangles.run_triangles(bsp, mode, edges, 60, chunk_rows=7).ok
        assert bfs.run_bfs(bsp, mode, edges, 60, source=5).ok


# ---------------------------------------------------------------------------- command lines
@pytest.mark.parametrize("app", ["histogram", "index_gather", "triangles", "bfs"])
def test_app_help_and_bad_options(app):
    mod = f"hpcbsp.apps.irregular.{app}"
    res = subprocess.run([sys.executable, "-m", mod, "--help"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and "--mode" in res.stdout and "naive" in res.stdout
    res = subprocess.run([sys.executable, "-m", mod, "--mode", "bulk"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "invalid choice: 'bulk'" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_bench_bad_option_is_one_line():
    res = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "fabsp", "--updates", "-4"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "positive integer" in res.stderr


# ---------------------------------------------------------------------------- toposort
def test_toposort_oracle_against_brute_force():
    """On tiny scrambled triangles, ``is_triangular`` accepts exactly the permutation pairs that
    brute force finds (every pair of permutations tried, the matrix permuted densely)."""
    for seed in range(3):
        rows, cols = toposort.scrambled_triangle(4, 2.0, seed)
        dense = np.zeros((4, 4), dtype=bool)
        dense[rows, cols] = True
        assert dense.sum() >= 4 and len(rows) == dense.sum()
        found = 0
        for rp in itertools.permutations(range(4)):
            for cp in itertools.permutations(range(4)):
                moved = np.zeros((4, 4), dtype=bool)
                moved[np.array(rp)[rows], np.array(cp)[cols]] = True
                brute = not np.tril(moved, -1).any()
                assert toposort.is_triangular(rows, cols, np.array(rp), np.array(cp)) == brute
                found += brute
        assert found >= 1, "the generator makes a solvable matrix"
    assert not toposort.is_triangular(np.array([0, 1]), np.array([0, 1]), np.array([0, 0]), np.array([0, 1])), \
        "not a permutation"


@pytest.mark.parametrize("mode", ["fabsp", "bsp"])
def test_toposort_one_rank(mode):
    with hpcbsp.BSP() as bsp:
        out = toposort.run_toposort(bsp, mode, 300, 5.0, seed=3)
    assert out.ok is True and out.updates == 300


# ---------------------------------------------------------------------------- ragged records
@pytest.mark.parametrize("fields", [[], [("to", np.int32)], [("to", np.int32), ("from", np.int32)]])
def test_ragged_messages_round_trip_and_never_split_a_record(fields):
    """Oracle: the records concatenated back from the messages, in order, with their address
    fields, equal what was added (plain Python lists); every message fits the capacity."""
    from hpcbsp.fabsp import ragged

    head = ragged.head_dtype(fields)
    assert head.itemsize == (8 if not fields else 16), "8-byte aligned heads"
    rng = np.random.default_rng(5)
    cap = 260  # bytes: a record of k int32 values costs head.itemsize + 4k
    agg = ragged.RaggedAggregator(3, head, np.dtype(np.int32), cap)
    added: dict[int, list[tuple[list[int], int]]] = {0: [], 2: []}
    out: dict[int, list[tuple[list[int], int]]] = {0: [], 2: []}

    def take(dest, msg):
        assert msg.nbytes <= cap
        heads, values = ragged.unpack(msg, head, np.dtype(np.int32))
        assert ragged.count_records(msg) == heads.size > 0
        tags = heads["to"].tolist() if fields else [-1] * heads.size
        out[dest] += list(zip([v.tolist() for v in np.split(values, np.cumsum(heads["len"])[:-1])], tags))

    for step in range(60):
        dest = int(rng.choice([0, 2]))
        lens = rng.integers(0, 40, rng.integers(1, 6))
        vals = rng.integers(-1000, 1000, int(lens.sum())).astype(np.int32)
        heads = np.zeros(lens.size, dtype=head)
        heads["len"] = lens
        tags = [step * 10 + i for i in range(lens.size)]
        if fields:
            heads["to"] = tags
        added[dest] += list(zip([v.tolist() for v in np.split(vals, np.cumsum(lens)[:-1])],
                                tags if fields else [-1] * lens.size))
        for msg in agg.add(dest, heads, vals):
            take(dest, msg)
        assert agg.nbuffered == sum(len(a) for a in added.values()) - sum(len(o) for o in out.values())
    for dest, msg in agg.drain():
        take(dest, msg)
    assert out == added and agg.nbuffered == 0
    assert agg.peak_buffers == 2


def test_ragged_put_groups_by_destination_keeping_order():
    """``put`` to a vector of destinations: oracle, the records filtered per destination in
    send order (plain Python)."""
    from hpcbsp.fabsp import ragged

    head = ragged.head_dtype([])
    agg = ragged.RaggedAggregator(3, head, np.dtype(np.int64), 1 << 20)
    lens = np.array([2, 0, 3, 1, 4])
    heads = np.zeros(5, dtype=head)
    heads["len"] = lens
    values = np.arange(10)
    dests = np.array([2, 0, 2, 1, 0])
    assert list(agg.put(dests, (heads, values), owned=True)) == [], "nothing filled"
    records = np.split(values, np.cumsum(lens)[:-1])
    for d in range(3):
        got_heads, got_values = ragged.unpack(agg.take(d), head, np.dtype(np.int64))
        assert [r.tolist() for r in np.split(got_values, np.cumsum(got_heads["len"])[:-1])] == \
            [records[i].tolist() for i in range(5) if dests[i] == d]
    assert agg.take(0) is None and agg.nbuffered == 0


def test_ragged_gather_reorders_whole_records():
    from hpcbsp.fabsp import ragged

    values, lengths = np.arange(10), np.array([3, 0, 4, 3])   # [0 1 2] [] [3 4 5 6] [7 8 9]
    heads = np.zeros(4, dtype=ragged.head_dtype([("to", np.int32)]))
    heads["len"], heads["to"] = lengths, [10, 11, 12, 13]
    got, vals = ragged.gather_records(heads, values, np.array([3, 1, 0, 2]))
    assert vals.tolist() == [7, 8, 9, 0, 1, 2, 3, 4, 5, 6]
    assert got["len"].tolist() == [3, 0, 3, 4] and got["to"].tolist() == [13, 11, 10, 12]


@pytest.mark.parametrize("routing", ["direct", "2d", "3d"])
def test_ragged_mailbox_on_one_rank(routing):
    """Oracle: the records written out by hand, with their source; a handler's records (depth
    2) too.  On one rank every route is one hop (there is no other rank to pass through), so
    records travel bare with every routing: an 8-byte head, the same smallest buffer (the
    routed 16-byte head is checked in test_fabsp_routing.py and at 3 ranks)."""
    got = []

    def handler(v, k, src):
        records = [p.tolist() for p in np.split(v, np.cumsum(k)[:-1])]
        got.extend((src, r) for r in records)
        for r in records:
            if r and r[0] == 7:
                box.send(0, np.array([8, 8], dtype=np.int16))

    with hpcbsp.BSP() as bsp:
        box = bsp.mailbox(handler, np.int16, ragged=True, buffer=16, with_source=True, routing=routing)
        smallest = 9
        with pytest.raises(BSPError, match=rf"buffer={smallest - 1} is too small for a ragged mailbox.*"
                                           rf"at least {smallest} values"):
            bsp.mailbox(lambda v, k: None, np.int16, ragged=True, buffer=smallest - 1, routing=routing)
        box.send(0, np.arange(5, dtype=np.int16), lengths=[2, 0, 3])
        box.send(0, [7])
        bsp.sync()
    assert got == [(0, [0, 1]), (0, []), (0, [2, 3, 4]), (0, [7]), (0, [8, 8])]
