"""The control step and the superstep path: empty syncs, the MPI-3 fallback (run under mpiexec
-n 2 and -n 3).
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp import Divergence

mpi = pytest.mark.mpi(min_size=2)



@mpi
def test_empty_sync_moves_nothing(bsp):
    for _ in range(3):
        bsp.sync("empty")
    assert [r.bytes_out + r.bytes_in + r.msgs_out + r.msgs_in for r in bsp.ledger] == [0, 0, 0]
    assert bsp.superstep == 3


@mpi
def test_control_step_falls_back_to_allreduce_without_persistent_collectives(bsp):
    """The control step is a persistent Allreduce (MPI-4) where the library has one; MPI-3
    libraries have none, and the plain Allreduce must give the same agreement and divergence."""
    assert bsp._control._persistent is not None  # MPICH 5 has MPI_Allreduce_init
    bsp._control.free()                           # now as on an MPI-3 library
    x = bsp.coarray(1, dtype=np.int64)
    x.put((bsp.pid + 1) % bsp.nprocs, [bsp.pid + 10])
    bsp.sync()
    assert x.local[0] == (bsp.pid - 1) % bsp.nprocs + 10
    if bsp.nprocs > 1:
        with pytest.raises(Divergence, match="diverged"):
            if bsp.pid == 0:
                bsp.sync()
            else:
                bsp.coarray(1)


@mpi
def test_sync_with_its_own_timeout_moves_data_like_any_sync(bsp):
    """Per-call timeouts (non-blocking control steps with arrival messages) mixed with plain
    syncs (the persistent collective): every put lands where the rank numbers say."""
    x = bsp.coarray(2, dtype=np.int64)
    left = (bsp.pid - 1) % bsp.nprocs
    for step, timeout in enumerate([30, None, 30.0, 30, None]):
        x.put((bsp.pid + 1) % bsp.nprocs, [bsp.pid, step])
        bsp.sync(f"step {step}", timeout=timeout)
        np.testing.assert_array_equal(x.local, [left, step])
    assert bsp.superstep == 5
    assert [row.label for row in bsp.ledger][-1] == "step 4"
