"""Packed element puts through the node's shared arena (``hpcbsp.runtime.superstep.arena``).

On one node the records of ``put_elements`` are packed into a shared-memory window and applied
by their destinations from the sender's memory; the window grows inside exchanges by the ranks'
votes.  Oracle for every result: the puts replayed one at a time in BSPlib's order (ascending
source rank, then program order) on numpy copies, each rank regenerating every rank's puts; and
the same program with ``HPCBSP_ELEMENTS_TRANSPORT=messages``.  Runs under ``mpiexec -n 2`` and
``-n 3`` (MPI tests) and serially (the environment checks and the failure program).
"""
from __future__ import annotations

import os
import time

import numpy as np
import pytest
from mpi_helpers import run_mpi

import hpcbsp
from hpcbsp.runtime.errors import BadInput
from hpcbsp.runtime.superstep import arena as arena_mod

mpi = pytest.mark.mpi(min_size=2)
PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")


def _program(p: int, size: int, step: int, r: int, n: int):
    """Rank ``r``'s element puts of superstep ``step``: many duplicates, to every rank."""
    rng = np.random.default_rng(100 * step + r)
    return rng.integers(0, p, n), rng.integers(0, size, n), rng.standard_normal(n)


def _run(bsp, sizes_of_steps: list[int], size: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
    """Run supersteps of element puts of the given batch sizes; return this rank's part and
    the oracle's."""
    p, me = bsp.nprocs, bsp.pid
    c = bsp.coarray(size, name=f"arena-{len(sizes_of_steps)}")
    expected = np.zeros(size)
    for step, n in enumerate(sizes_of_steps):
        c.put_elements(*_program(p, size, step, me, n))
        bsp.sync()
        for r in range(p):  # in source order; within a source the last put to an element wins
            pids, offs, vals = _program(p, size, step, r, n)
            mine_offs, mine_vals = offs[pids == me][::-1], vals[pids == me][::-1]
            where, last = np.unique(mine_offs, return_index=True)  # first in reverse = last put
            expected[where] = mine_vals[last]
        np.testing.assert_array_equal(c.local, expected)
    return c.local.copy(), expected


def _arena_expected(bsp) -> bool:
    """Whether the arena must carry these tests' records here: every rank on one node (as the
    context learnt when it started), and ``/dev/shm`` with room for their windows (under 64 MiB
    in all) twice over, which the arena checks before it grows (a container may give it less)."""
    one_node = bsp.nodes.one_node
    st = os.statvfs("/dev/shm")
    return one_node and st.f_bavail * st.f_frsize >= 128 << 20


@mpi
def test_records_go_through_the_arena_once_it_has_grown(bsp):
    """On one node; across nodes (the emulated cluster's runs) the arena stays off and the same
    supersteps give the oracle's parts through messages (so does a /dev/shm without room)."""
    arena = bsp.extension.arena  # which path the records took
    assert arena is not None and arena.half_bytes == 0
    expected = _arena_expected(bsp)
    _run(bsp, [60_000])  # 60 000 puts of 12 bytes: ~720 KB, sent as messages; the arena grows
    grown = arena.half_bytes
    assert arena.announced == 0 and (grown >= 60_000 * 12 if expected else grown == 0)
    # Larger (grows again after travelling as messages once), smaller, then alternating: the
    # halves flip every superstep and the later puts still win.
    _run(bsp, [200_000, 200_000, 5_000, 150_000, 190_000])
    if expected:
        assert arena.half_bytes > grown
        assert arena.announced >= 4 * (bsp.nprocs - 1)  # every destination, in the supersteps that fit
    else:
        assert arena.half_bytes == 0 and arena.announced == 0


@mpi
def test_the_messages_transport_gives_the_same_parts(bsp, monkeypatch):
    got, _ = _run(bsp, [80_000, 80_000])
    monkeypatch.setenv(arena_mod.ARENA_ENV, "messages")
    with hpcbsp.BSP(bsp.comm) as other:
        again, _ = _run(other, [80_000, 80_000])
        assert other.extension.arena.announced == 0 and other.extension.arena.half_bytes == 0
    np.testing.assert_array_equal(got, again)


@mpi
def test_without_room_in_dev_shm_records_stay_messages(bsp, monkeypatch):
    class Full:
        f_bavail, f_frsize = 10, 4096

    monkeypatch.setattr(arena_mod.os, "statvfs", lambda path: Full())
    with hpcbsp.BSP(bsp.comm) as other:
        _run(other, [70_000, 70_000, 70_000])
        assert other.extension.arena.half_bytes == 0 and other.extension.arena.announced == 0


@mpi
def test_a_context_with_a_timeout_keeps_messages(bsp):
    with hpcbsp.BSP(bsp.comm, timeout=60) as bounded:
        _run(bounded, [70_000, 70_000])
        assert bounded.extension.arena.half_bytes == 0 and bounded.extension.arena.announced == 0


@mpi
def test_a_bounded_sync_switches_the_arena_off_on_every_rank(bsp):
    """A sync given a timeout votes "never": every rank stops using the arena (settling it
    makes no collective call then: a bounded exchange must end without every rank); the
    results stay right."""
    p, me = bsp.nprocs, bsp.pid
    with hpcbsp.BSP(bsp.comm) as ctx:
        _run(ctx, [70_000, 70_000])
        assert (ctx.extension.arena.announced > 0) == _arena_expected(ctx)
        c = ctx.coarray(p, name="bounded")
        c.put_elements(np.arange(p), np.full(p, me), np.full(p, float(me)))
        ctx.sync(timeout=60)
        np.testing.assert_array_equal(c.local[:p], np.arange(p, dtype=float))
        assert not ctx.extension.arena.active
        before = ctx.extension.arena.announced
        _run(ctx, [70_000])
        assert ctx.extension.arena.announced == before


@mpi
def test_a_half_is_not_rewritten_while_a_slow_rank_still_reads_it(bsp, monkeypatch):
    """Rank 1 waits 0.3 s before applying each superstep's records (the exchange's apply phase,
    ``exchange.apply.deliver``); meanwhile rank 0 leaves the sync and packs the next superstep's
    puts to it at once.  Were the same half of rank 0's segment reused, rank 1 would apply those
    new values; the oracle says which values must land."""
    from hpcbsp.runtime.superstep.exchange import apply

    me = bsp.pid
    with hpcbsp.BSP(bsp.comm) as ctx:
        c = ctx.coarray(100_000, name="slow-reader")
        if me == 1:
            deliver = apply.deliver

            def slow(data, registry):
                time.sleep(0.3)
                deliver(data, registry)

            monkeypatch.setattr(apply, "deliver", slow)
        n = 100_000
        offs = np.arange(n)
        for step in range(5):  # the first grows the arena; then every superstep goes through it
            if me == 0:
                c.put_elements(np.full(n, 1), offs, np.full(n, float(step)))
            ctx.sync()
            if me == 1:
                np.testing.assert_array_equal(c.local, np.full(n, float(step)))
        expected = _arena_expected(ctx)
        if me == 0 and expected:
            assert ctx.extension.arena.announced == 4
        monkeypatch.undo()


@pytest.mark.serial_only
def test_a_bad_transport_choice_is_one_clear_line(monkeypatch):
    monkeypatch.setenv(arena_mod.ARENA_ENV, "carrier-pigeon")
    with pytest.raises(BadInput, match=r"HPCBSP_ELEMENTS_TRANSPORT='carrier-pigeon' is not one of auto, "
                                       r"messages: correct it or unset it"):
        hpcbsp.BSP()
    monkeypatch.setenv(arena_mod.ARENA_ENV, " Messages ")
    assert arena_mod.wanted() is False
    monkeypatch.setenv(arena_mod.ARENA_ENV, "")
    assert arena_mod.wanted() is True


@pytest.mark.serial_only
def test_a_failure_after_using_the_arena_stops_every_rank():
    res = run_mpi(3, [os.path.join(PROGRAMS, "fail_after_shared_elements.py")], timeout=90)
    assert not res.timed_out, res.output
    assert res.returncode != 0 and res.crash is None, res.output
    assert all(f"rank {r}: announced 2" in res.stdout for r in range(3)), res.stdout  # 2 destinations
    assert "[rank 1] ZeroDivisionError: rank one divides by zero" in res.stderr
    assert res.stderr.count("stopping because rank 1 failed at superstep 2") == 1, res.stderr  # (rank 0's)
    assert "UNREACHABLE" not in res.stdout
