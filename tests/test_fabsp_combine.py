"""Combining of mailbox records (``bsp.mailbox(..., combine=RULE)``, hpcbsp.fabsp.combining).

Serial: the combiner against a brute-force oracle (a Python dict per (destination, key)), the
combining buffers' bookkeeping (records out + records combined away = records in), the refusals.
MPI (``mpiexec -n 2`` and ``-n 3``; across the emulated nodes by test_cluster_nodes): the
receivers' tables with combining equal the numpy oracle of every rank's regenerated records
(``np.add.at``, ``np.minimum.at``, ``np.maximum.at``, a set), for direct routing, routing by
node on the ranks' real hosts, and by node on a made-up map of two nodes; and the messages of a
small case against a hand count.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

import hpcbsp
from hpcbsp.fabsp.aggregation import SETTLE_S, CombiningAggregator
from hpcbsp.fabsp.combining import Combiner, check_combine
from hpcbsp.fabsp.routing import NodeAware
from hpcbsp.runtime.errors import UsageError

mpi = pytest.mark.mpi(min_size=2)
KV = np.dtype([("key", np.int64), ("value", np.int64)])
KVF = np.dtype([("key", np.int32), ("value", np.float64)])
ROUTED = np.dtype([("to", np.int32), ("rec", KV)])
REDUCE = {"sum": lambda a, b: a + b, "min": min, "max": max, "set": lambda a, b: a}


def _brute(batch: np.ndarray, rule: str, routed: bool) -> dict[tuple[int, int], int]:
    """(destination, key) -> combined value, record by record in batch order (first-wins for set)."""
    out: dict[tuple[int, int], int] = {}
    for rec in batch.tolist():
        to, (key, value) = (rec[0], rec[1]) if routed else (0, rec)
        out[(to, key)] = REDUCE[rule](out[(to, key)], value) if (to, key) in out else value
    return out


@pytest.mark.parametrize("rule", ["sum", "min", "max", "set"])
@pytest.mark.parametrize("routed", [False, True])
@pytest.mark.parametrize("keys", ["small", "wide"])
def test_combining_a_batch_gives_one_record_per_key_with_the_rules_value(rule, routed, keys):
    rng = np.random.default_rng(7)
    n = 5000
    recs = np.empty(n, dtype=KV)
    # small: 0..99; wide: negative and beyond 2^32 (the lexicographic path for routed batches)
    recs["key"] = rng.integers(0, 100, n) if keys == "small" else rng.integers(-1 << 40, 1 << 40, 300)[rng.integers(0, 300, n)]
    recs["value"] = rng.integers(-1000, 1000, n)
    if routed:
        batch = np.empty(n, dtype=ROUTED)
        batch["to"], batch["rec"] = rng.integers(0, 4, n), recs
    else:
        batch = recs
    out = Combiner(rule, KV, batch.dtype).combine(batch)
    got = _brute(out, rule, routed)
    assert out.shape[0] == len(got)  # one record per (destination, key)
    assert got == _brute(batch, rule, routed)


def test_a_batch_without_a_repeated_key_leaves_as_it_was_and_key_only_sets_dedupe():
    recs = np.zeros(4, dtype=KV)
    recs["key"] = [5, 3, 9, 1]
    assert Combiner("sum", KV, KV).combine(recs) is recs  # order kept: nothing to combine
    keys = np.array([4, 2, 4, 4, 7, 2], dtype=np.int64)
    assert Combiner("set", keys.dtype, keys.dtype).combine(keys).tolist() == [2, 4, 7]  # (dense)
    wide = keys << 40  # (sorted)
    assert Combiner("set", keys.dtype, keys.dtype).combine(wide).tolist() == [2 << 40, 4 << 40, 7 << 40]
    floats = np.zeros(3, dtype=KVF)
    floats["key"], floats["value"] = [1, 1, 2], [np.inf, np.inf, -np.inf]
    assert Combiner("min", KVF, KVF).combine(floats).tolist() == [(1, np.inf), (2, -np.inf)]
    assert Combiner("max", KVF, KVF).combine(floats).tolist() == [(1, np.inf), (2, -np.inf)]
    routed = np.zeros(4, dtype=[("to", np.int32), ("rec", np.int64)])
    routed["to"], routed["rec"] = [0, 1, 0, 1], [8, 8, 8, 9]
    assert sorted(Combiner("set", np.dtype(np.int64), routed.dtype).combine(routed).tolist()) == [(0, 8), (1, 8), (1, 9)]


def test_float_sums_combine_within_the_reassociation_bound():
    rng = np.random.default_rng(3)
    recs = np.empty(20000, dtype=KVF)
    recs["key"], recs["value"] = rng.integers(0, 50, recs.size), rng.standard_normal(recs.size) * 1e6
    out = Combiner("sum", KVF, KVF).combine(recs)
    exact = {k: 0.0 for k in range(50)}
    mags = dict(exact)
    for k, v in recs.tolist():
        exact[k] += v
        mags[k] += abs(v)
    for k, v in out.tolist():
        # (n - 1) eps sum|v|: any order of summation is within it (module notes)
        assert abs(v - exact[k]) <= recs.size * np.finfo(np.float64).eps * mags[k]


def test_combining_buffers_keep_filling_while_half_empty_and_account_for_every_record():
    rng = np.random.default_rng(1)
    absorbed: list[int] = []
    settle = np.array([True, True, False])  # destinations 0 and 1 settle before a flush, 2 not
    agg = CombiningAggregator(3, KV, 100, Combiner("sum", KV, KV).combine, absorbed.append, settle)
    recs = np.empty(1000, dtype=KV)
    recs["key"], recs["value"] = rng.integers(0, 30, recs.size), 1  # 30 keys: fits half a buffer
    dests = np.ascontiguousarray(rng.integers(0, 3, recs.size), dtype=np.int64)
    shipped = list(agg.put(dests, recs, False))
    assert shipped == []  # every full buffer combined to at most 30 records and kept filling
    shipped = list(agg.drain())
    assert [d for d, _ in shipped] == [2]  # 0 and 1 just grew: they settle for SETTLE_S
    time.sleep(SETTLE_S * 1.5)
    shipped += list(agg.drain())
    assert agg.nbuffered == 0 and [d for d, _ in shipped] == [2, 0, 1]
    assert agg.messages.tolist() == [1, 1, 1]  # one message per destination (hand count)
    out = sum(m.shape[0] for _, m in shipped)
    assert out + sum(absorbed) == recs.size == out + agg.combined
    for d, msg in shipped:
        expected = np.bincount(recs["key"][dests == d], minlength=30)
        np.testing.assert_array_equal(np.bincount(msg["key"], weights=msg["value"], minlength=30), expected)
    # Distinct keys: a full buffer leaves whole, uncombined.
    agg2 = CombiningAggregator(1, KV, 10, Combiner("sum", KV, KV).combine, absorbed.append)
    distinct = np.zeros(25, dtype=KV)
    distinct["key"] = np.arange(25)
    full = agg2.add(0, distinct, False)
    assert [m["key"].tolist() for m in full] == [list(range(10)), list(range(10, 20))] and agg2.nbuffered == 5


@pytest.mark.parametrize("dtype, rule, why", [
    (np.float64, "set", "integer keys"),
    (np.int64, "sum", "keys only"),
    (np.dtype([("key", np.float64), ("value", np.int64)]), "sum", "the first an integer"),
    (np.dtype([("key", np.int64), ("value", "S4")]), "max", "numeric values"),
    (np.dtype([("a", np.int64), ("b", np.int64), ("c", np.int64)]), "sum", "two scalar fields"),
    (KV, "product", "must be one of"),
])
def test_a_combine_that_does_not_fit_the_records_is_refused(dtype, rule, why):
    with pytest.raises(UsageError, match=why):
        check_combine(rule, np.dtype(dtype), "here")


# ---------------------------------------------------------------------------- on several ranks

N, KEYS = 4000, 60


def _records(rank: int, nprocs: int, dtype: np.dtype = KV) -> tuple[np.ndarray, np.ndarray]:
    """Rank ``rank``'s records (destination, (key, value)): few keys, so that they repeat."""
    rng = np.random.default_rng([11, rank])
    recs = np.empty(N, dtype=dtype)
    recs["key"] = rng.integers(0, KEYS, N)
    recs["value"] = rng.integers(-10**6, 10**6, N)
    return rng.integers(0, nprocs, N), recs


def _oracle(me: int, nprocs: int, rule: str) -> np.ndarray:
    """This rank's table from every rank's regenerated records, by numpy's unbuffered ufuncs."""
    table = np.full(KEYS, {"sum": 0, "min": np.iinfo(np.int64).max, "max": np.iinfo(np.int64).min}[rule], np.int64)
    op = {"sum": np.add, "min": np.minimum, "max": np.maximum}[rule]
    for r in range(nprocs):
        dest, recs = _records(r, nprocs)
        mine = recs[dest == me]
        op.at(table, mine["key"], mine["value"])
    return table


def _routing(name: str, bsp) -> object:
    if name == "two nodes":  # ranks 0..P-2 on one made-up node, the last on another
        return NodeAware(bsp.nprocs, ["a"] * (bsp.nprocs - 1) + ["b"])
    return name


@mpi
@pytest.mark.parametrize("rule", ["sum", "min", "max"])
@pytest.mark.parametrize("routing", ["direct", "node", "two nodes"])
def test_combined_tables_equal_the_uncombined_oracle(rule, routing):
    with hpcbsp.BSP() as bsp:
        p, me = bsp.nprocs, bsp.pid
        start = {"sum": 0, "min": np.iinfo(np.int64).max, "max": np.iinfo(np.int64).min}[rule]
        table = np.full(KEYS, start, dtype=np.int64)
        op = {"sum": np.add, "min": np.minimum, "max": np.maximum}[rule]
        seen = [0]

        def apply(recs: np.ndarray) -> None:
            seen[0] += recs.size
            op.at(table, recs["key"], recs["value"])

        box = bsp.mailbox(apply, KV, combine=rule, buffer=64, max_pending=2, routing=_routing(routing, bsp))
        dest, recs = _records(me, p)
        for s in range(0, N, 500):
            box.send(dest[s:s + 500], recs[s:s + 500])
        bsp.sync()
        received = int(bsp.allreduce(seen[0]))
    np.testing.assert_array_equal(table, _oracle(me, p, rule))
    assert received < N * p  # records were combined: the handlers saw fewer than were sent


@mpi
@pytest.mark.parametrize("routing", ["direct", "node", "two nodes"])
def test_a_set_insert_sees_every_key_sent_to_it(routing):
    with hpcbsp.BSP() as bsp:
        p, me = bsp.nprocs, bsp.pid
        seen = np.zeros(KEYS, dtype=np.int64)  # how often each key reached the handler

        def insert(keys: np.ndarray) -> None:
            np.add.at(seen, keys, 1)

        box = bsp.mailbox(insert, np.int64, combine="set", buffer=32, routing=_routing(routing, bsp))
        dest, recs = _records(me, p)
        box.send(dest, recs["key"])
        bsp.sync()
    expected = np.zeros(KEYS, dtype=bool)
    for r in range(p):
        d, rr = _records(r, p)
        expected[rr["key"][d == me]] = True
    np.testing.assert_array_equal(seen > 0, expected)
    assert seen.sum() < sum(int((_records(r, p)[0] == me).sum()) for r in range(p))


@mpi
@pytest.mark.parametrize("combine", [None, "sum"])
def test_messages_per_pair_match_a_hand_count(combine):
    """Rank 0 alone sends n = 3 B + 5 records (B: the buffer) of K = 10 keys to the last rank.
    Direct at 2 ranks; at 3 ranks and more by node on a made-up map (ranks 0..P-2 on node a, the
    last on node b), where a's rank to b is rank 1: 0 -> 1 -> P-1.  Hand count per hop:
    uncombined, 3 full buffers and one partial, 4 messages; combined, each full buffer
    combines to 10 records (<= B / 2) and keeps filling, so one message at the sync."""
    B, K = 40, 10
    with hpcbsp.BSP() as bsp:
        p, me = bsp.nprocs, bsp.pid
        table = np.zeros(K, dtype=np.int64)
        got = [0]

        def add(recs: np.ndarray) -> None:
            got[0] += recs.size
            np.add.at(table, recs["key"], recs["value"])

        routing = "direct" if p == 2 else NodeAware(p, ["a"] * (p - 1) + ["b"])
        box = bsp.mailbox(add, KV, combine=combine, buffer=B, routing=routing)
        n = 3 * B + 5
        if me == 0:
            recs = np.zeros(n, dtype=KV)
            recs["key"], recs["value"] = np.arange(n) % K, np.arange(n)
            box.send(p - 1, recs)
        bsp.sync()
        messages = box.messages()
        assert messages is not None
        counts = np.array(bsp.gather_all(messages))
    per_hop = 4 if combine is None else 1
    hops = [(0, p - 1)] if p == 2 else [(0, 1), (1, p - 1)]
    expected = np.zeros((p, p), dtype=np.int64)
    for a, b in hops:
        expected[a, b] = per_hop
    np.testing.assert_array_equal(counts, expected)
    if me == p - 1:
        np.testing.assert_array_equal(table, np.bincount(np.arange(n) % K, weights=np.arange(n), minlength=K))
        assert got[0] == (n if combine is None else K)


@mpi
@pytest.mark.parametrize("skew", [0.0, 1.3])
@pytest.mark.parametrize("routing", ["direct", "node", "two nodes"])
def test_the_combining_histogram_counts_what_the_serial_oracle_counts(bsp, skew, routing):
    """The app's --combine mode, uniform and Zipf keys; oracle: np.bincount of every rank's
    regenerated keys (histogram.oracle), and a hand-written regeneration of the Zipf keys."""
    from hpcbsp.apps.irregular import histogram

    p, me, n, table = bsp.nprocs, bsp.pid, 3000, 37
    owner, off = histogram.updates_of(me, p, n, table, seed=5, skew=skew)
    counts, _ = histogram.histogram_fabsp(bsp, owner, off, table, chunk=500, combine=True, buffer=50,
                                          routing=_routing(routing, bsp))
    whole = np.zeros(table * p, dtype=np.int64)
    for r in range(p):
        rng = np.random.default_rng([5, r])
        g = rng.integers(0, table * p, n) if not skew else (rng.zipf(skew, n) - 1) % (table * p) * 2654435761 % (table * p)
        whole += np.bincount(g, minlength=table * p)
    np.testing.assert_array_equal(counts, whole[me::p])


def test_buffers_settle_only_where_several_ranks_records_merge():
    """Hand map: ranks 0, 1 on node a, 2, 3 on node b; routing by node merges at the hops to the
    other node only (a rank sends there only as its node's representative)."""
    route = NodeAware(4, ["a", "a", "b", "b"])
    np.testing.assert_array_equal(route.merging_hops(0), [False, False, True, True])
    np.testing.assert_array_equal(route.merging_hops(3), [True, True, False, False])
    assert NodeAware(4, ["a", "b", "c", "d"]).merging_hops(0) is None  # one rank a node: bare
    assert NodeAware(3, ["a"] * 3).merging_hops(1) is None  # one node


def _nodes(*sizes: int) -> list[str]:
    return [f"n{i}" for i, size in enumerate(sizes) for _ in range(size)]


@pytest.mark.parametrize("hosts, combine, expected", [
    (_nodes(8), True, "direct"),              # one node
    (_nodes(1, 1, 1, 1), True, "direct"),     # one rank a node
    (_nodes(2, 2, 2, 2), True, "direct"),     # 2 a node: measured not to pay
    (_nodes(4, 4, 4, 4), False, "direct"),    # no combining: routing by node does not pay
    (_nodes(4, 4, 4, 4), True, "node"),
    (_nodes(3, 3, 3, 3, 3, 3, 3, 3), True, "node"),
    (_nodes(4, 4, 3), True, "node"),
    (_nodes(4, 4, 2), True, "direct"),        # a node of 2
    (_nodes(16, 16), True, "node"),
    (None, True, "direct"),                   # hosts unknown
])
def test_auto_routes_a_combining_mailbox_by_node_where_the_hand_rule_says(hosts, combine, expected):
    """The hand rule (routing.default_routing): by node only for a combining mailbox on two or
    more nodes of at least NODE_COMBINING_PER_NODE (3) ranks each; else by P."""
    from hpcbsp.fabsp.routing import default_routing, resolve_routing

    p = 8 if hosts is None else len(hosts)
    assert default_routing(p, hosts, combine) == expected
    assert resolve_routing("auto", p, "here", hosts, combine=combine).name == expected


def test_auto_keeps_the_grid_where_routing_by_node_would_hold_more_buffers():
    """At 20,000 ranks 4 a node, routing by node holds 3 + 1,250 buffers a rank, the 2-d grid
    (the default by P) about 2 sqrt(P) = 282 (buffers_per_rank): the grid stays.  At 1,024
    ranks 16 a node, 15 + 4 against direct's 1,023: by node."""
    from hpcbsp.fabsp.routing import buffers_per_rank, default_routing

    assert buffers_per_rank(20_000, "node", per_node=4) > buffers_per_rank(20_000, "2d")
    assert default_routing(20_000, [str(r // 4) for r in range(20_000)], True) == "2d"
    assert default_routing(1024, [str(r // 16) for r in range(1024)], True) == "node"


def test_the_benchmark_section_prints_the_variants_side_by_side():
    """``bench fabsp --sections combine`` on 3 ranks of one host: every variant's line, checked
    runs, and the records per update it prints against an oracle computed here (the updates
    whose owner is another rank, over all updates: the ledger counts those; with combining,
    fewer); one host: no node pair, no link."""
    import re

    from mpi_helpers import run_mpi

    from hpcbsp.apps.irregular.histogram import updates_of

    n = 30_000
    res = run_mpi(3, ["-m", "hpcbsp.bench", "fabsp", "--sections", "combine", "--n", str(n), "--repeat", "1"],
                  timeout=180, env={"HPCBSP_WAIT": "yield"})
    assert res.returncode == 0, res.output
    out = res.stdout
    assert "CHECK FAILED" not in out and "3 ranks on 1 node(s)" in out, out
    remote = {skew: sum(int(np.count_nonzero(updates_of(r, 3, n, 10_000, 0, skew)[0] != r)) for r in range(3)) / (3 * n)
              for skew in (0.0, 1.2)}  # (the bench's default --skew)
    rows = re.findall(r"^ +(histogram|index_gather) +(direct|node) +(sum|-) +[0-9,]+ +[0-9.]+x +[0-9.]+ +0\.0 +0 +0 of 0 +"
                      r"([0-9.]+) +[0-9.]+ +-$", out, re.M)
    assert len(rows) == 10, out  # 4 histogram variants x 2 key distributions, 2 index-gather
    for i, (app, routing, combine, records) in enumerate(rows):
        skew = 0.0 if i < 6 else 1.2  # uniform keys first, then Zipf
        if app == "histogram" and combine == "-":
            assert float(records) == pytest.approx(remote[skew], abs=0.002), (skew, rows[i])
        elif app == "histogram" and not skew:
            # m = n / 3 uniform draws of K = 10,000 keys per destination: K (1 - exp(-m / K))
            # distinct, each one record after combining
            m, k = n / 3, 10_000
            distinct = k * (1 - np.exp(-m / k)) / m
            assert float(records) == pytest.approx(remote[skew] * distinct, rel=0.03), (distinct, rows[i])
        elif app == "histogram":
            assert float(records) < remote[skew] / 2, (skew, rows[i])  # Zipf: hot keys repeat
        else:
            assert float(records) == pytest.approx(2 * remote[0.0], abs=0.004), rows[i]  # request + reply
