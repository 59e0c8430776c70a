"""The roll call that names the ranks that never came to a control step whose deadline passed
(``hpcbsp/runtime/superstep/rollcall.py``), on its own: the step is an ``Ibarrier`` that the last
rank joins late.  Oracle: which rank was made late (by hand)."""
from __future__ import annotations

import time

import pytest
from mpi4py import MPI

from hpcbsp.runtime.superstep.rollcall import ROLL_CALL_S, RollCall


def _run(late_by: float) -> tuple[list[int] | None, bool]:
    """Every rank but the last enters the step at once and calls ``missing`` at its deadline (at
    once); the last joins ``late_by`` seconds later.  This rank's answer, and whether it was the
    late one."""
    comm = MPI.COMM_WORLD.Dup()
    try:
        roll = RollCall(comm)
        late = comm.Get_rank() == comm.Get_size() - 1
        comm.Barrier()
        roll.begin_step()
        if late:
            t0 = time.monotonic()
            while time.monotonic() - t0 < late_by:  # local work: no MPI call at all
                time.sleep(0.01)
        req = comm.Ibarrier()
        got = None if late else roll.missing(req, roll.answer)
        while not req.Test():  # the step completes for everyone (the late rank answers stale calls)
            roll.answer()
        # the stale roll calls answered, then every answer received (each barrier orders what
        # came before it), before the communicator is freed
        comm.Barrier()
        roll.answer()
        comm.Barrier()
        roll.close()  # as the control step does before its communicator is freed
        return got, late
    finally:
        comm.Free()


@pytest.mark.mpi(min_size=2)
def test_the_ranks_that_came_name_the_late_rank_and_only_it():
    got, late = _run(late_by=ROLL_CALL_S + 2.5)  # beyond every caller's and waiter's window
    if not late:
        assert got == [MPI.COMM_WORLD.Get_size() - 1]


@pytest.mark.mpi(min_size=2)
def test_a_step_that_completes_during_the_roll_call_is_no_timeout():
    got, late = _run(late_by=0.3)  # within rank 0's roll call (it waits for answers ROLL_CALL_S)
    if not late:
        assert got is None
