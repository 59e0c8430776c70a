"""The sparse consensus (:mod:`hpcbsp.runtime.superstep.exchange.consensus`) against the dense
count exchange as oracle, and both against numpy (tests/programs/sparse_vs_dense.py): random
sparse patterns of puts, gets and queue records at 2 and 3 ranks (``--only-mpi``) and at 5
ranks oversubscribed; and the outbox's choice between the two (:meth:`Outbox.levels`)."""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from mpi_helpers import run_mpi

import hpcbsp
from hpcbsp.runtime.superstep import outbox as outbox_module
from hpcbsp.runtime.superstep.outbox import Data, Extra, Outbox, sparse_limit

PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "sparse_vs_dense.py")
mpi = pytest.mark.mpi(min_size=2)


def _program():
    spec = importlib.util.spec_from_file_location("sparse_vs_dense", PROGRAM)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@mpi
def test_sparse_and_dense_exchanges_deliver_what_the_oracle_says(bsp, monkeypatch):
    monkeypatch.setenv("HPCBSP_LARGE_PUT_BYTES", "100")  # puts of 16 and 30 doubles are large
    ctx = hpcbsp.BSP(bsp.comm, wait="spin")
    try:
        taken = _program().check(ctx, range(8))
    finally:
        ctx.close()
    assert taken["sparse"] >= 4 and taken["dense"] >= 4, taken  # both paths ran, on every rank


def test_sparse_and_dense_agree_at_five_ranks_oversubscribed():
    res = run_mpi(5, [PROGRAM], timeout=240, env={"HPCBSP_LARGE_PUT_BYTES": "100"})
    assert res.returncode == 0 and "OK" in res.stdout, res.output


def test_the_dense_exchange_is_asked_for_beyond_the_sparse_limit(monkeypatch):
    """Hand cases of :meth:`Outbox.levels` at 8 ranks (this one is rank 1), with a limit of 2
    (set: below 16 ranks the dense exchange is the rule)."""
    monkeypatch.setenv("HPCBSP_LARGE_PUT_BYTES", "1000000")
    assert [sparse_limit(p) for p in (2, 4, 8, 15, 16, 32, 16384)] == [-1, -1, -1, -1, 4, 8, 4096]
    box = Outbox(8, 1)
    assert box.sparse_max == -1 and Outbox(32, 1).sparse_max == 8
    box.sparse_max = 2                                        # (the tests' lever)
    small = np.zeros(2)
    box.add(0, outbox_module.PUT, 0, 0, 2, small)
    box.add(2, outbox_module.PUT, 0, 0, 2, small)
    box.add(1, outbox_module.PUT, 0, 0, 2, small)            # to itself: not a destination
    assert box.levels() == (Data.GENERAL, Extra.OWN)
    box.add(5, outbox_module.PUT, 0, 0, 2, small)            # a third other rank
    assert box.levels() == (Data.GENERAL, Extra.DENSE)
    box.reset()
    assert box.bufs == {} and box.large == {}
    box.add_get(3, 0, 0, 2, None)
    assert box.levels() == (Data.GENERAL, Extra.GETS)
    box.sparse_max = 0                                        # (the tests' lever)
    assert box.levels() == (Data.GENERAL, Extra.DENSE)       # which hides the gets: the dense exchange answers them
    box.reset()
    box.add(1, outbox_module.PUT, 0, 0, 2, small)
    assert box.levels() == (Data.NONE, Extra.OWN)             # only its own records: never DENSE


@mpi
def test_a_buffer_longer_than_the_consensus_message_is_announced_and_follows(bsp):
    """Small puts to the next rank that fill more than :data:`consensus.INLINE` bytes of its
    outbox buffer (announced by their length, then sent on their own), and a short buffer to
    the rank before: every element lands where numpy says, in program order."""
    from hpcbsp.runtime.superstep.exchange import consensus

    p, me, n = bsp.nprocs, bsp.pid, 1000
    bsp._outbox.sparse_max = p  # (the tests' lever: the consensus, which below 16 ranks is not the rule)
    x = bsp.coarray(2 * n, np.int64)
    right, left = (me + 1) % p, (me - 1) % p
    assert n * (outbox_module.HEADER.size + 8) > consensus.INLINE
    for i in range(n):
        x.put(right, np.array([me * 10_000 + i]), offset=(i * 7) % n)  # every element once
    x.put(left, np.array([-1, -2]), offset=n)
    bsp.sync()
    want = np.zeros(2 * n, np.int64)
    src = (me - 1) % p
    for i in range(n):
        want[(i * 7) % n] = src * 10_000 + i
    want[n:n + 2] = [-1, -2]  # from the rank after (at 2 ranks, the same rank: one buffer)
    np.testing.assert_array_equal(x.local, want)
