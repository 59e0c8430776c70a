"""Rules broken and ranks that fail: errors at the call, divergence on every rank, a failure that
reaches the other ranks, contexts released once (run under mpiexec -n 2 and -n 3).
"""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import hpcbsp
from hpcbsp import BSPError, Divergence, PeerFailed, UsageError

mpi = pytest.mark.mpi(min_size=2)



@mpi
def test_bad_calls_raise_at_the_call(bsp):
    x = bsp.coarray(4, dtype=np.int64, name="table")
    # Each message names the rank, the array, the offset and the size of what was asked.
    with pytest.raises(UsageError, match=rf"rank {bsp.pid}: table.put of 3 element\(s\) at offset 2 "
                                       r"is outside rank 0's part of table \(size 4\)"):
        x.put(0, [1, 2, 3], offset=2)
    bad = bsp.nprocs  # the first pid past the last rank (a fixed 7 is a rank from 8 ranks on)
    with pytest.raises(UsageError, match=rf"rank {bsp.pid}: table.put\(pid={bad}, offset=1, count=1\): "
                                       rf"pid {bad} is not a rank of this BSP program \(0..{bsp.nprocs - 1}\)"):
        x.put(bad, [1], offset=1)
    with pytest.raises(UsageError, match=r"table.get\(pid=-1, offset=0\): pid -1 is not a rank"):
        x.get(-1)
    with pytest.raises(UsageError, match=rf"rank {bsp.pid}: table.put\(pid=0, offset=0, count=1\): "
                                       "values of dtype float64 cannot be cast to int64"):
        x.put(0, [1.5])
    with pytest.raises(UsageError, match="outside"):
        x.get(0, offset=3, count=2)
    q = bsp.queue(np.int32)
    with pytest.raises(UsageError, match=r"destination 99 at position 1"):
        q.send(np.array([0, 99]), [1, 2])
    with pytest.raises(UsageError, match="one destination per record"):
        q.send(np.array([0, 1, 0]), [1, 2])
    bsp.sync()  # nothing was queued by the failed calls
    assert bsp.ledger[-1].msgs_out == 0


@mpi
def test_registration_that_differs_raises_on_every_rank():
    with hpcbsp.BSP() as bsp:
        dtype = np.float64 if bsp.pid == 0 else np.int32
        with pytest.raises(Divergence, match="diverged"):
            bsp.coarray(4, dtype=dtype)
    # MPI is still usable and a new context works.
    with hpcbsp.BSP() as bsp:
        assert bsp.allreduce(1) == bsp.nprocs


@mpi
def test_contexts_that_fail_together_free_their_communicator():
    # MPICH has about 2048 communicators per process: a program that catches divergences and
    # carries on used to run out of them ("Too many communicators") after ~2000 failed contexts.
    for i in range(2100):
        # every third context in non-blocking mode (a timeout makes the control step wait with
        # Iallreduce): its communicator must be freed as well
        with hpcbsp.BSP(timeout=30 if i % 3 == 0 else None) as bsp:
            with pytest.raises(Divergence, match="diverged"):
                if bsp.pid == 0:
                    bsp.sync()
                else:
                    bsp.coarray(1)
        assert bsp.comm == MPI.COMM_NULL and "failed" in repr(bsp)
    with hpcbsp.BSP() as bsp:
        assert bsp.allreduce(1) == bsp.nprocs
        bsp.sync()
    # After the block: this rank's records are still readable; combining them is not possible.
    assert len(bsp.ledger) == 2 and "2 supersteps" in bsp.ledger.summary()
    with pytest.raises(UsageError, match="inside the BSP block"):
        bsp.ledger.gather()


@mpi
def test_a_context_is_released_once_when_leaving_diverges():
    # Rank 0 leaves while the others sync: every rank raises, and each releases its context
    # (close hooks, communicator) exactly once, however the program goes on to leave the block:
    # rank 0 at once (its close), the others when they leave the block.
    calls = []
    with hpcbsp.BSP() as bsp:
        bsp.extension.add_close_hook(lambda: calls.append(bsp.pid))
        with pytest.raises(Divergence, match="diverged"):
            if bsp.pid == 0:
                bsp.close()
            else:
                bsp.sync()
        assert len(calls) == (1 if bsp.pid == 0 else 0)
    assert len(calls) == 1 and bsp.comm == MPI.COMM_NULL
    bsp.close()
    assert len(calls) == 1


@mpi
def test_coarray_on_some_ranks_only_raises_on_every_rank():
    with hpcbsp.BSP() as bsp:
        with pytest.raises(Divergence, match=r"rank 0: coarray\(n=2.*sync\(label=None\)|"
                                           r"sync\(label=None\).*rank 0: coarray"):
            if bsp.pid == 0:
                bsp.coarray(2)
            else:
                bsp.sync()


@mpi
def test_rank_leaving_while_others_sync():
    world = MPI.COMM_WORLD

    def prog(bsp):
        if bsp.pid == 1:
            return "left early"
        bsp.sync()
        return "synced"

    with pytest.raises(Divergence) as err:
        hpcbsp.run(prog)
    msg = str(err.value)
    assert "rank 1: left the BSP block" in msg and "superstep 0" in msg
    world.Barrier()  # MPI stays usable: no abort
    assert world.allreduce(1) == world.Get_size()


@mpi
def test_failure_on_one_rank_reaches_the_others():
    def prog(bsp):
        if bsp.pid == bsp.nprocs - 1:
            raise ValueError("boom on the last rank")
        bsp.sync()

    with pytest.raises((ValueError, BSPError)) as err:
        hpcbsp.run(prog)
    if MPI.COMM_WORLD.Get_rank() == MPI.COMM_WORLD.Get_size() - 1:
        assert isinstance(err.value, ValueError)
    else:
        assert isinstance(err.value, PeerFailed)
        assert "boom on the last rank" in str(err.value)
