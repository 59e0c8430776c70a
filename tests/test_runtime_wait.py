"""Wait modes (hpcbsp.runtime.superstep.waiting): spinning or giving the core away while waiting in a sync.

Serial tests check the mode parsing and the nap schedule; the MPI tests (mpiexec -n 2 and -n 3)
check that a yielding context computes the same as a spinning one, that ranks given different
modes agree on one, that a bad mode fails on every rank (no hang), and that a rank waiting for a
late one uses little CPU (oracle: the kernel's count of the process's CPU time).
"""
from __future__ import annotations

import time

import numpy as np
import pytest
from mpi4py import MPI

import hpcbsp
from hpcbsp import BadInput, BSPError
from hpcbsp.runtime.superstep import waiting

mpi = pytest.mark.mpi(min_size=2)


def test_requested_mode_defaults_to_auto_and_reads_the_environment(monkeypatch):
    monkeypatch.delenv(waiting.WAIT_ENV, raising=False)
    assert waiting.requested_mode(None) == "auto"
    monkeypatch.setenv(waiting.WAIT_ENV, " Yield ")
    assert waiting.requested_mode(None) == "yield"
    assert waiting.requested_mode("spin") == "spin"  # the argument wins over the environment


def test_resolve_on_one_rank_is_spin_and_a_bad_mode_is_named(monkeypatch):
    assert waiting.resolve("yield", MPI.COMM_SELF) == "spin"  # nobody to wait for
    with pytest.raises(BSPError, match=r"wait='busy' is not a wait mode; choose from auto, spin, yield"):
        waiting.resolve("busy", MPI.COMM_SELF)
    monkeypatch.setenv(waiting.WAIT_ENV, "nap")  # the variable's own check (hpcbsp.util.settings)
    with pytest.raises(BadInput, match=r"environment variable HPCBSP_WAIT='nap' is not one of auto, spin, yield"):
        waiting.resolve(None, MPI.COMM_SELF)


def test_yielding_naps_grow_with_the_wait_and_are_capped(monkeypatch):
    slept: list[float] = []
    clock = [0.0]
    monkeypatch.setattr(waiting.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(waiting.time, "sleep", slept.append)
    monkeypatch.setattr(waiting.os, "sched_yield", lambda: slept.append(0.0))
    nap = waiting.Naps("yield")
    for t in (50e-6, 1e-3, 4e-3, 1.0):  # waited so far
        clock[0] = t
        nap()
    # By hand: inside SPIN_S (100 us) a yield; then 1/8 of the wait, clamped to [20 us, 1 ms].
    assert slept == [0.0, 125e-6, 500e-6, 1e-3]


def test_spinning_naps_only_yield_and_never_sleep(monkeypatch):
    slept: list[float] = []
    yields: list[int] = []
    monkeypatch.setattr(waiting.time, "sleep", slept.append)
    monkeypatch.setattr(waiting.os, "sched_yield", lambda: yields.append(1))
    waiting.Naps("spin")()
    waiting.Naps("spin", polling_others=True)()
    # A yield only when nothing else is polled; never a timed sleep (sleep(0) has ~60 us of
    # timer slack on Linux).
    assert yields == [1] and slept == []


def _ring_sums(bsp: "hpcbsp.BSP", steps: int) -> np.ndarray:
    x = bsp.coarray(1, dtype=np.int64)
    x.local[0] = bsp.pid
    for _ in range(steps):
        x.put((bsp.pid + 1) % bsp.nprocs, x.local + 1)
        bsp.sync()
    return np.array([x.local[0], bsp.allreduce(np.int64(x.local[0])), bsp.broadcast(int(x.local[0]), root=1)])


@mpi
def test_yielding_context_computes_what_a_spinning_one_does():
    with hpcbsp.BSP(wait="spin") as spin:
        expect = _ring_sums(spin, 25)
        assert spin.wait == "spin"
    with hpcbsp.BSP(wait="yield") as yld:
        got = _ring_sums(yld, 25)
        assert yld.wait == "yield"
        sub = yld.split(0)  # all ranks: a sub-context of the same size
        assert sub.wait == "yield"  # a sub-context waits as its parent does
        sub.sync()
        sub.close()
    # Oracle by hand: after s steps of "add one and pass right", rank r holds (r - s) mod p + s.
    p, r, s = MPI.COMM_WORLD.Get_size(), MPI.COMM_WORLD.Get_rank(), 25
    assert got[0] == (r - s) % p + s
    np.testing.assert_array_equal(got, expect)


@mpi
def test_ranks_given_different_modes_agree_on_yield():
    mode = "yield" if MPI.COMM_WORLD.Get_rank() == 0 else "spin"
    with hpcbsp.BSP(wait=mode) as bsp:
        assert bsp.wait == "yield"
        bsp.sync()


@mpi
def test_a_bad_mode_on_one_rank_fails_on_every_rank():
    mode = "fast" if MPI.COMM_WORLD.Get_rank() == 1 else "spin"
    with pytest.raises(BSPError) as err:
        hpcbsp.BSP(wait=mode)
    if MPI.COMM_WORLD.Get_rank() == 1:
        assert "wait='fast' is not a wait mode" in str(err.value)
    else:
        assert "another rank was given a wait mode" in str(err.value)


@mpi
def test_a_yielding_rank_gives_its_core_away_while_it_waits():
    with hpcbsp.BSP(wait="yield") as bsp:
        late = bsp.nprocs - 1
        bsp.sync()
        cpu0, t0 = time.process_time(), time.perf_counter()
        if bsp.pid == late:
            time.sleep(1.0)
        bsp.sync()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - t0
    if bsp.pid != late:
        assert wall > 0.9
        # Measured about 3 % here; a spinning rank uses up to its whole core.
        assert cpu < 0.3 * wall, f"rank {bsp.pid} used {cpu:.2f} s of CPU in a {wall:.2f} s wait"
