"""The ledger's trace file at several rank counts (run under mpiexec -n 2 and -n 3).

Oracles: the supersteps the test makes (a known sleep on one rank, a known put), and the ledger's
own definition of a superstep: work from the end of the previous sync to this one, then the sync.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from mpi4py import MPI

mpi = pytest.mark.mpi(min_size=2)

SLOW_S = 0.2  # the last rank's extra work in superstep 1


@mpi
def test_trace_has_one_aligned_track_per_rank(bsp, tmp_path):
    p, me = bsp.nprocs, bsp.pid
    # Rank 0 writes the file (outside the BSP context, so that it adds no superstep).
    path = MPI.COMM_WORLD.bcast(os.path.join(str(tmp_path), "run.trace.json"))
    x = bsp.coarray(1, dtype=np.int64)
    bsp.sync("start")
    if me == p - 1:
        time.sleep(SLOW_S)
    bsp.sync("slow")
    x.put((me + 1) % p, [me])
    bsp.sync("put")
    bsp.ledger.save(path)
    if me != 0:
        return
    events = json.loads(open(path).read())["traceEvents"]
    names = ["start", "slow", "put"]
    assert sorted({e["tid"] for e in events}) == list(range(p)), "one track per rank"
    sync_end = {}
    for rank in range(p):
        track = sorted((e for e in events if e["tid"] == rank), key=lambda e: (e["ts"], e["cat"] != "work"))
        assert [e["cat"] for e in track] == ["work", "sync"] * len(names)
        assert [e["name"] for e in track[0::2]] == names and all(e["dur"] >= 0 for e in track)
        for work, sync in zip(track[0::2], track[1::2]):
            # The sync starts where the superstep's work ends; the next superstep's work starts
            # where this sync ends (microseconds; float rounding only).
            assert sync["ts"] == pytest.approx(work["ts"] + work["dur"], abs=0.01)
            assert sync["args"]["index"] == work["args"]["index"]
        for sync, nxt in zip(track[1::2], track[2::2]):
            assert nxt["ts"] == pytest.approx(sync["ts"] + sync["dur"], abs=0.01)
        slow_work, slow_sync = track[2], track[3]
        if rank == p - 1:
            assert slow_work["dur"] >= SLOW_S * 1e6  # the sleep is in its work
        else:
            assert slow_sync["dur"] >= 0.5 * SLOW_S * 1e6  # the others wait for it in the sync
        put_args = track[5]["args"]
        assert (put_args["bytes_out"], put_args["msgs_out"], put_args["bytes_in"], put_args["msgs_in"]) == (8, 1, 8, 1)
        sync_end[rank] = [s["ts"] + s["dur"] for s in track[1::2]]
    # Aligned: the ranks leave each sync together, so the tracks end every superstep at about the
    # same time (within 50 ms, a quarter of the slow rank's extra work).
    for step in range(len(names)):
        ends = [sync_end[r][step] for r in range(p)]
        assert max(ends) - min(ends) < 0.25 * SLOW_S * 1e6, (step, ends)
