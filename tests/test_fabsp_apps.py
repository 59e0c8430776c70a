"""The irregular apps in every mode against serial oracles, at small sizes, on several ranks
(run under mpiexec -n 2 and -n 3).

Oracles are written here: the histogram by ``np.bincount`` of every rank's regenerated updates,
index-gather by indexing the whole table, triangles by trace(A^3)/6 on a dense matrix (checked
against brute force in test_fabsp_serial.py), BFS by a queue-based serial search.
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import hpcbsp
from hpcbsp.apps.irregular import bfs, histogram, index_gather, toposort, triangles
from hpcbsp.apps.irregular.graphs import bfs_levels, erdos_renyi, rmat, triangles_dense
from hpcbsp.apps.irregular.rma import FLUSH_EVERY, gather_rma, histogram_rma, issuer

mpi = pytest.mark.mpi(min_size=2)
MODES = ["fabsp", "bsp", "naive"]




@mpi
@pytest.mark.parametrize("mode", MODES + ["rma", "rma-python"])
def test_histogram(bsp, mode):
    p, me, n, table = bsp.nprocs, bsp.pid, 3000, 37
    owner, off = histogram.updates_of(me, p, n, table, seed=5)
    if mode == "fabsp":
        counts, _ = histogram.histogram_fabsp(bsp, owner, off, table, chunk=500, buffer=50)
    elif mode == "bsp":
        counts, _ = histogram.histogram_bsp(bsp, owner, off, table)
    elif mode.startswith("rma"):  # one MPI_Accumulate per update, from C or from Python
        counts, _ = histogram_rma(bsp, owner, off, table, compiled=mode == "rma")
    else:
        counts, _ = histogram.histogram_naive(bsp, owner, off, table)
    whole = np.zeros(table * p, dtype=np.int64)
    for r in range(p):
        g = np.random.default_rng([5, r]).integers(0, table * p, n)  # what rank r drew
        whole += np.bincount(g, minlength=table * p)
    np.testing.assert_array_equal(counts, whole[me::p])


@mpi
@pytest.mark.parametrize("routing", ["direct", "2d", "3d", "node"])
def test_the_reported_mailbox_memory_is_the_routings_and_within_its_bound(routing):
    """The apps' memory line (``report.mailbox_memory``), on a context of its own with one
    mailbox.  Oracles: the ranks a rank sends to, counted here from every rank's next hops (the
    distinct next hops other than itself; a rank that only receives counts 0), the most over
    ranks; the buffers held at most that many plus the messages in flight and the spares (the
    mailbox's documented bound), in bytes of 50 records: 8 bytes bare, 12 in an envelope (4
    bytes of destination) where a route can pass through another rank (2d and 3d from 3 ranks
    on; routing by node where there are several nodes and one has several ranks: on one node,
    or one rank a node, it sends bare)."""
    from hpcbsp.apps.irregular.report import mailbox_memory
    from hpcbsp.fabsp.aggregation import SPARES
    from hpcbsp.fabsp.routing import resolve_routing

    with hpcbsp.BSP() as b:
        owner, off = histogram.updates_of(b.pid, b.nprocs, 3000, 37, seed=5)
        histogram.histogram_fabsp(b, owner, off, 37, chunk=500, buffer=50, max_pending=2, routing=routing)
        memory = mailbox_memory(b)
        route = resolve_routing(routing, b.nprocs, "test", b.hosts)
    senders = [len(set(route.next_hops(m).tolist()) - {m}) for m in range(b.nprocs)]
    per_node = [b.hosts.count(h) for h in set(b.hosts)]
    routed = (routing in ("2d", "3d") and b.nprocs > 2) or \
        (routing == "node" and len(per_node) > 1 and max(per_node) > 1)
    unit = 12 if routed else 8
    assert memory is not None and memory["routing"] == routing
    assert memory["peers"] == memory["model_peers"] == max(senders)
    assert memory["buffers"] <= max(senders) + 2 + SPARES
    assert memory["buffer_bytes"] == memory["buffers"] * 50 * unit
    assert memory["bound_bytes"] == (max(senders) + 2 + SPARES) * 50 * unit


@mpi
@pytest.mark.parametrize("mode", MODES + ["rma", "rma-python"])
def test_index_gather(bsp, mode):
    p, me, n, table = bsp.nprocs, bsp.pid, 2000, 23
    whole = index_gather.global_table(p, table, seed=3)
    g = index_gather.reads_of(me, p, n, table, seed=3)
    owner, off = g % p, g // p
    local = np.ascontiguousarray(whole[me::p])
    if mode == "fabsp":
        tgt, _ = index_gather.gather_fabsp(bsp, owner, off, local, chunk=300, buffer=40, max_pending=2)
    elif mode == "bsp":
        tgt, _ = index_gather.gather_bsp(bsp, owner, off, local)
    elif mode.startswith("rma"):  # one MPI_Get per read, from C or from Python
        tgt, _ = gather_rma(bsp, owner, off, local, compiled=mode == "rma")
    else:
        tgt, _ = index_gather.gather_naive(bsp, owner, off, local)
    np.testing.assert_array_equal(tgt, whole[g])


@mpi
def test_the_one_sided_baseline_runs_compiled_across_flushes(bsp):
    """The rma mode's operations come from the C loop here (else the tests above checked only
    the Python one), over several flush intervals; oracle: np.bincount of every rank's keys and
    the whole table indexed."""
    assert issuer() == "C"
    p, me, table = bsp.nprocs, bsp.pid, 11
    n = 2 * FLUSH_EVERY + 3
    g = np.random.default_rng([8, me]).integers(0, table * p, n)
    counts, _ = histogram_rma(bsp, g % p, g // p, table)
    whole = sum(np.bincount(np.random.default_rng([8, r]).integers(0, table * p, n), minlength=table * p)
                for r in range(p))
    np.testing.assert_array_equal(counts, whole[me::p])
    values = np.random.default_rng(4).integers(-10**12, 10**12, table * p)
    tgt, _ = gather_rma(bsp, g % p, g // p, np.ascontiguousarray(values[me::p]))
    np.testing.assert_array_equal(tgt, values[g])


@mpi
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("graph", ["er", "rmat"])
def test_triangles(bsp, mode, graph):
    edges, n = (erdos_renyi(300, 16, seed=2), 300) if graph == "er" else (rmat(8, 8, seed=2), 256)
    graph_part = triangles.Graph(edges, n, bsp.pid, bsp.nprocs)
    if mode == "fabsp":
        found, sent, _ = triangles.count_fabsp(bsp, graph_part, chunk_rows=9, buffer=32)
    elif mode == "bsp":
        found, sent, _ = triangles.count_bsp(bsp, graph_part)
    else:
        found, sent, _ = triangles.count_naive(bsp, graph_part)
    assert bsp.allreduce(found) == triangles_dense(edges, n)
    # Every wedge i > j > w with both (i, j) and (i, w) edges is asked once, by the owner of i.
    lower = [[v for u, v in edges.tolist() if u == i] for i in range(n)]
    wedges = sum(len(r) * (len(r) - 1) // 2 for i, r in enumerate(lower) if i % bsp.nprocs == bsp.pid)
    assert sent == wedges


@mpi
@pytest.mark.parametrize("mode", MODES)
def test_bfs(bsp, mode):
    edges, n = erdos_renyi(400, 2.5, seed=9), 400  # sparse: several components, long paths
    part = bfs.Part(edges, n, bsp.pid, bsp.nprocs)
    if mode == "fabsp":
        bfs.bfs_fabsp(bsp, part, source=7, buffer=8)
    else:
        bfs.bfs_levelwise(bsp, part, source=7, exchange=mode)
    want = bfs_levels(edges, n, 7)
    np.testing.assert_array_equal(part.global_levels(), want[bsp.pid::bsp.nprocs])
    assert want.max() > 5 and (want < 0).any(), "the graph exercises depth and unreachable vertices"


@mpi
@pytest.mark.parametrize("mode, routing", [("fabsp", "direct"), ("fabsp", "2d"), ("bsp", None)])
def test_toposort(bsp, mode, routing):
    """Oracle: ``toposort.is_triangular`` on the whole matrix (both permutations of 0..n-1, every
    nonzero on or above the diagonal; itself checked by brute force in test_fabsp_serial.py)."""
    kw = {} if routing is None else {"buffer": 16, "routing": routing}
    out = toposort.run_toposort(bsp, mode, 500, 6.0, seed=4, **kw)
    assert out.ok is True
    assert out.updates == len(range(bsp.pid, 500, bsp.nprocs))
    # The levels: FA-BSP propagates them along its messages, BSP counts its supersteps; the
    # BSP version on one rank (no MPI traffic at all) is the reference for both.
    with hpcbsp.BSP(comm=MPI.COMM_SELF) as alone:
        ref = toposort.run_toposort(alone, "bsp", 500, 6.0, seed=4, check=False)
    assert out.detail.split("; ")[1].split()[0] == ref.detail.split("; ")[1].split()[0]
