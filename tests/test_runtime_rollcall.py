"""The roll call that names the ranks that never came to a control step whose deadline passed
(``hpcbsp/runtime/superstep/rollcall.py``), on its own: the step is an ``Ibarrier`` that the last
rank joins late.  Oracles: which rank was made late (by hand); MPI's sums of the messages each
rank counted, and ``Iprobe`` finding nothing left once ``close(settle=True)`` returns."""
from __future__ import annotations

import time

import pytest
from mpi4py import MPI

from hpcbsp.runtime.superstep.rollcall import ROLL_CALL_S, RollCall


def _run(late_by: float) -> tuple[list[int] | None, bool, int]:
    """Every rank but the last enters the step at once and calls ``missing`` at its deadline (at
    once); the last joins ``late_by`` seconds later; every rank closes its side with ``settle``.
    This rank's answer, whether it was the late one, and how many roll-call messages all sent."""
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
        if late:
            roll.answer()  # the stale roll calls that came: answered, so answers are in flight
        roll.close(settle=True)  # as the control step does at the context's normal end
        # Oracle: every roll-call message sent was received (MPI's own sums of the counts), and
        # nothing at all is left addressed to this rank on the communicator.
        sent = comm.allreduce(int(roll.sent_to.sum()))
        assert sent == comm.allreduce(roll.received)
        comm.Barrier()
        time.sleep(0.2)
        assert not comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
        return got, late, sent
    finally:
        comm.Free()


@pytest.mark.mpi(min_size=2)
def test_the_ranks_that_came_name_the_late_rank_and_only_it():
    got, late, sent = _run(late_by=ROLL_CALL_S + 2.5)  # beyond every caller's and waiter's window
    assert sent >= MPI.COMM_WORLD.Get_size() - 1  # at least rank 0's roll call to every other
    if not late:
        assert got == [MPI.COMM_WORLD.Get_size() - 1]


@pytest.mark.mpi(min_size=2)
def test_a_step_that_completes_during_the_roll_call_is_no_timeout():
    got, late, sent = _run(late_by=0.3)  # within rank 0's roll call (it waits for answers ROLL_CALL_S)
    assert sent >= MPI.COMM_WORLD.Get_size() - 1
    if not late:
        assert got is None


@pytest.mark.mpi(min_size=2)
def test_a_context_closed_after_a_roll_call_leaves_nothing_for_the_next_communicator():
    """A context whose step ran past its deadline (the last rank late, within the roll call:
    no error) ends normally; the next communicators are made and used at once (Open MPI 5 hung
    in ``Split_type`` after a message was left on a freed one)."""
    import hpcbsp

    with hpcbsp.BSP(timeout=0.2) as bsp:
        if bsp.pid == bsp.nprocs - 1:
            time.sleep(0.5)
        bsp.sync("late")
        assert bsp.ledger[-1].label == "late"
    for _ in range(3):
        node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
        assert node.allreduce(1) == node.Get_size()
        node.Free()
