"""A failing FA-BSP handler's notices reach every rank down a binomial tree: O(log P) sends per rank.

Oracle: a brute-force walk of the tree (:func:`hpcbsp.fabsp.notices.children` from the failed
rank, then from every rank reached) must reach each other rank exactly once, within
ceil(log2 P) hops, no rank sending more than ceil(log2 P); and a real job of 5 ranks, where
some ranks hear of the failure only through a forwarded notice, ends with the failed rank's
traceback, well within the abort grace.
"""
from __future__ import annotations

import math
import os
import time

import pytest
from mpi_helpers import run_mpi

from hpcbsp.fabsp.notices import children

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")


@pytest.mark.parametrize("nprocs", [1, 2, 3, 5, 8, 13, 64, 100, 4096])
def test_the_tree_reaches_every_rank_once_in_log_hops(nprocs):
    bound = math.ceil(math.log2(nprocs)) if nprocs > 1 else 0
    for root in sorted({0, 1 % nprocs, nprocs // 2, nprocs - 1}):
        reached = {root: 0}
        frontier = [root]
        sends = 0
        while frontier:
            nxt = []
            for rank in frontier:
                kids = list(children(rank, root, nprocs))
                assert len(kids) <= bound, (rank, kids)
                sends += len(kids)
                for kid in kids:
                    assert kid not in reached, f"rank {kid} told twice"
                    reached[kid] = reached[rank] + 1
                    nxt.append(kid)
            frontier = nxt
        assert sorted(reached) == list(range(nprocs)) and sends == nprocs - 1
        assert max(reached.values()) <= bound


@pytest.mark.timeout(120)
def test_a_handler_failure_reaches_five_ranks_through_forwarded_notices():
    # rank 1 fails: it tells ranks 2, 3 and 0; rank 4 hears it from rank 2 only
    t0 = time.monotonic()
    res = run_mpi(5, [os.path.join(PROGRAMS, "fabsp_handler_fails.py"), "quiesce"], timeout=90,
                  env={"HPCBSP_ABORT_GRACE": "30"})
    assert not res.timed_out and res.returncode != 0 and res.crash is None, res.output
    assert time.monotonic() - t0 < 30, res.output  # the ranks learnt of it, nobody waited for the grace
    assert res.stderr.count("Traceback (most recent call last)") == 1, res.stderr
    assert "[rank 1] ValueError: handler on rank one got hop 7 (quiesce)" in res.stderr
    # One line for the four ranks that stop: rank 0's (the lowest that did not fail).
    assert res.stderr.count("stopping because rank 1") == 1, res.stderr
    assert "rank 0/5: stopping because rank 1" in res.stderr, res.stderr
    assert "aborting the job" not in res.stderr and "UNREACHABLE" not in res.stdout
