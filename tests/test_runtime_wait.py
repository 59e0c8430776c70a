"""Wait modes (hpcbsp.runtime.superstep.waiting): spinning or giving the core away while waiting in a sync.

Serial tests check the mode parsing and the nap schedule, and that the waits outside the control
step pause by the same rule (a spinning wait never sleeps, a yielding one does: spies on
sleep and sched_yield and a fake clock); the MPI tests (mpiexec -n 2 and -n 3) check that every
wait of a context takes its pause from the rule with the context's mode (a spy on Naps), that a
yielding context computes the same as a spinning one, that ranks given different modes agree on
one, that a bad mode fails on every rank (no hang), and that a rank waiting for a late one uses
little CPU (oracle: the kernel's count of the process's CPU time).
"""
from __future__ import annotations

import sys
import time
from typing import Callable

import numpy as np
import pytest
from mpi4py import MPI

import hpcbsp
from hpcbsp import BadInput, BSPError
from hpcbsp.elastic.protocol import poll_until
from hpcbsp.runtime.superstep import waiting
from hpcbsp.runtime.superstep.exchange import completion

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


@pytest.fixture
def naps_clock(monkeypatch) -> tuple[list[float], list[float]]:
    """A fake ``perf_counter`` (``clock[0]``) and what the naps did: each sleep's seconds, 0.0
    for a yield to the scheduler."""
    slept: list[float] = []
    clock = [0.0]
    monkeypatch.setattr(waiting.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(waiting.time, "sleep", slept.append)
    monkeypatch.setattr(waiting.os, "sched_yield", lambda: slept.append(0.0))
    return clock, slept


def test_yielding_naps_grow_with_the_wait_and_are_capped(naps_clock):
    clock, slept = naps_clock
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


def test_naps_are_made_for_spin_or_yield_only():
    with pytest.raises(ValueError, match="a wait pauses as 'spin' or 'yield', not 'auto'"):
        waiting.Naps("auto")  # auto is resolved when the context starts, never waited in


def test_a_wait_that_did_work_naps_short_again(naps_clock):
    clock, slept = naps_clock
    nap = waiting.Naps("yield")
    clock[0] = 4e-3
    nap()
    nap.restart()  # work at 4 ms: the idle time counts from there
    for t in (4.05e-3, 5e-3):
        clock[0] = t
        nap()
    # By hand: 4 ms waited, 1/8 = 500 us; then 50 us idle (inside SPIN_S: a yield), then 1 ms
    # idle: 125 us.
    assert slept == pytest.approx([500e-6, 0.0, 125e-6])


#: Pauses an idle wait makes before what it waits for is done (the tests below).
PAUSES = 20


def _bounded_exchange_wait(mode: str, on_pause: list[Callable[[int], None]]) -> None:
    """The exchange's bounded wait (hpcbsp.runtime.superstep.exchange.completion.complete) for a
    real request, which the ``PAUSES``-th pause completes."""
    req = MPI.Grequest.Start()
    on_pause.append(lambda n: req.Complete() if n == PAUSES else None)
    completion.complete([req], [0], time.monotonic() + 60, mode)


def _parameter_server_wait(mode: str, on_pause: list[Callable[[int], None]]) -> None:
    """The parameter server's wait (hpcbsp.elastic.protocol.poll_until) for a test that
    succeeds after ``PAUSES`` pauses."""
    pauses = [0]
    on_pause.append(lambda n: pauses.__setitem__(0, n))
    assert poll_until(lambda: True if pauses[0] >= PAUSES else None, np.inf, time.monotonic() + 60, "test", mode)


@pytest.mark.parametrize("waiter", [_bounded_exchange_wait, _parameter_server_wait])
@pytest.mark.parametrize("mode", ["spin", "yield"])
def test_an_idle_wait_pauses_as_its_mode_says(monkeypatch, waiter, mode):
    """A spinning wait only yields to the scheduler, however long it waits; a yielding one
    sleeps once it has waited SPIN_S.  Oracle: spies on sched_yield and sleep, and a fake clock
    that moves 1 ms per pause (no timing)."""
    yields: list[int] = []
    slept: list[float] = []
    clock = [0.0]
    on_pause: list[Callable[[int], None]] = []

    def pause(record: Callable[[], None]) -> None:
        record()
        clock[0] += 1e-3
        for hook in on_pause:
            hook(len(yields) + len(slept))

    monkeypatch.setattr(waiting.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(waiting.os, "sched_yield", lambda: pause(lambda: yields.append(1)))
    monkeypatch.setattr(waiting.time, "sleep", lambda s: pause(lambda: slept.append(s)))
    waiter(mode, on_pause)
    if mode == "spin":
        assert slept == [] and len(yields) == PAUSES
    else:  # by hand: the first pause at 0 ms waited (a yield), then naps of 1/8 of the wait, <= 1 ms
        assert yields == [1] and slept == pytest.approx([min(k * 1e-3 / 8, 1e-3) for k in range(1, PAUSES)])


@mpi
@pytest.mark.parametrize("mode", ["spin", "yield"])
def test_every_wait_of_a_context_pauses_as_its_mode_says(monkeypatch, mode):
    """The control step (non-blocking: a timeout), a bounded exchange, the FA-BSP quiescence and
    the shared arena's closing barrier each make their pause from the rule (waiting.Naps) with
    the context's mode.  Oracle: a spy on Naps that records which module made each and for
    which mode."""
    made: list[tuple[str, str]] = []
    init = waiting.Naps.__init__

    def spy(self, m, polling_others=False):
        made.append((sys._getframe(1).f_globals["__name__"], m))  # the waiter that made it
        init(self, m, polling_others)

    monkeypatch.setattr(waiting.Naps, "__init__", spy)
    got: list[int] = []
    with hpcbsp.BSP(wait=mode, timeout=60) as bsp:
        p, me = bsp.nprocs, bsp.pid
        x = bsp.coarray(p, dtype=np.int64)
        x.put((me + 1) % p, np.array([me + 10]), offset=me)
        bsp.sync()
        assert x.local[(me - 1) % p] == (me - 1) % p + 10
        box = bsp.mailbox(lambda recs: got.extend(recs.tolist()), np.int64)
        box.send((me + 1) % p, np.array([me]))
        bsp.sync()
    assert got == [(me - 1) % p]
    with hpcbsp.BSP(wait=mode) as bsp:  # unbounded: the arena, where it grows, closes bounded
        c = bsp.coarray(50_000)
        n = 60_000  # ~720 KB of element puts: the arena grows where every rank is on one node
        c.put_elements(np.arange(n) % p, np.arange(n) % 50_000, np.ones(n))
        bsp.sync()
        grown = bsp.extension.arena.half_bytes > 0
    waiters = {who for who, _ in made}
    assert {m for _, m in made} == {mode}, made
    assert {"hpcbsp.runtime.superstep.control", "hpcbsp.runtime.superstep.exchange.completion",
            "hpcbsp.fabsp.engine"} <= waiters, waiters
    assert ("hpcbsp.runtime.superstep.arena" in waiters) == grown, waiters


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
