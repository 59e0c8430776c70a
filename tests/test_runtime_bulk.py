"""The bulk exchange: a superstep whose records for other ranks are all large puts, at most one
per destination, travels in one ``Alltoall`` of heads and one ``Alltoallv`` (``exchange.
bulk_exchange``), and in the ``Alltoallv`` alone where every rank's puts go where they went in
the last bulk exchange; every other superstep in the general exchange.  Oracles: the rank
arithmetic, a numpy model of BSPlib's order (puts applied in ascending source rank, gets read
before any put lands), a model of the levels each rank offers, and a spy on which exchange ran.
Serially for the outbox's levels; under ``mpiexec -n 2`` and ``-n 3`` for the rest.
"""
from __future__ import annotations

import numpy as np
import pytest

import hpcbsp
from hpcbsp.runtime.superstep import outbox as outbox_module
from hpcbsp.runtime.superstep.outbox import Data, Extra, Outbox

mpi = pytest.mark.mpi(min_size=2)


def _spy(monkeypatch) -> list[str]:
    """Which exchange each superstep with data took: "bulk", "repeat" (a bulk exchange without
    its ``Alltoall``), "general" or "local"."""
    import hpcbsp.runtime.superstep.supersteps as superstep

    paths: list[str] = []
    bulk, general = superstep.bulk_exchange, superstep.exchange

    def spy_bulk(*args, **kw):
        paths.append("repeat" if kw.get("repeat") else "bulk")
        return bulk(*args, **kw)

    def spy_general(*args, local=False, **kw):
        paths.append("local" if local else "general")
        return general(*args, local=local, **kw)

    monkeypatch.setattr(superstep, "bulk_exchange", spy_bulk)
    monkeypatch.setattr(superstep, "exchange", spy_general)
    return paths


def _context(bsp, monkeypatch, large_bytes: int = 64, **kw) -> hpcbsp.BSP:
    monkeypatch.setenv("HPCBSP_LARGE_PUT_BYTES", str(large_bytes))  # small puts count as large
    return hpcbsp.BSP(bsp.comm, wait="spin", **kw)


def test_the_outbox_says_when_a_bulk_exchange_can_carry_its_records(monkeypatch):
    """Hand cases of :meth:`Outbox.levels` on an outbox of 3 ranks (this one is rank 1)."""
    monkeypatch.setenv("HPCBSP_LARGE_PUT_BYTES", "64")
    box = Outbox(3, 1)
    box.sparse_max = 3  # the levels here, not the dense exchange's choice (tests/test_exchange_sparse.py)
    big, small = np.zeros(10), np.zeros(2)
    assert box.levels() == (Data.NONE, Extra.NONE)
    box.add(1, outbox_module.PUT, 0, 0, 10, big)                 # a put to itself
    assert box.levels() == (Data.NONE, Extra.OWN)
    box.reset()
    box.add(0, outbox_module.PUT, 0, 4, 10, big)
    box.add(2, outbox_module.PUT, 1, 0, 10, big, borrow=True)   # hpput
    assert box.levels() == (Data.BULK, Extra.NONE)
    np.testing.assert_array_equal(box.heads, [[1, 4, 10], [0, 0, 0], [2, 0, 10]])
    box.add(1, outbox_module.PUT, 0, 0, 10, big)                 # and one to itself
    assert box.levels() == (Data.GENERAL, Extra.OWN)
    box.reset()
    np.testing.assert_array_equal(box.heads, np.zeros((3, 3)))
    box.add(0, outbox_module.PUT, 0, 0, 10, big)
    box.add(0, outbox_module.PUT, 0, 20, 10, big)                # a second one to rank 0
    assert box.levels() == (Data.GENERAL, Extra.NONE)
    box.reset()
    box.add(0, outbox_module.PUT, 0, 0, 10, big)
    box.add(2, outbox_module.PUT, 0, 0, 2, small)                # a small put travels inline
    assert box.levels() == (Data.GENERAL, Extra.NONE)
    box.reset()
    box.add(0, outbox_module.PUT, 0, 0, 10, big)
    box.add_get(1, 0, 0, 2, None)                                # a get, here from itself
    assert box.levels() == (Data.GENERAL, Extra.GETS)
    box.reset()
    monkeypatch.setattr(outbox_module, "BULK_MAX", 79)           # a payload too large for one region
    box.add(0, outbox_module.PUT, 0, 0, 10, big)
    assert box.levels() == (Data.GENERAL, Extra.NONE)


def test_the_outbox_offers_to_repeat_the_last_bulk_exchange_only_with_the_same_heads(monkeypatch):
    """:attr:`Data.REPEAT` where this superstep's heads are the last bulk exchange's (as
    :meth:`Outbox.remember` kept them), :attr:`Data.BULK` where any differs, is missing or is
    new; :func:`outbox.agreed` grants the repeat only where every rank offered it.  Hand cases."""
    monkeypatch.setenv("HPCBSP_LARGE_PUT_BYTES", "64")
    box = Outbox(3, 1)
    big = np.zeros(10)

    def puts(*heads):  # (dest, object, offset) with 10 elements each
        box.reset()
        for dest, obj, offset in heads:
            box.add(dest, outbox_module.PUT, obj, offset, 10, big)
        return box.levels()

    assert puts((0, 0, 4), (2, 1, 0)) == (Data.BULK, Extra.NONE)  # nothing learnt yet
    box.remember({0: (1, 0, 10)}, sparse=True)
    assert box.sent == [(1, 4, 10), None, (2, 0, 10)] and box.sent_count == 2
    assert box.received == {0: (1, 0, 10)} and box.repeat_sparse
    assert puts((0, 0, 4), (2, 1, 0)) == (Data.REPEAT, Extra.NONE)
    assert puts((2, 1, 0), (0, 0, 4)) == (Data.REPEAT, Extra.NONE)  # in another order
    assert puts((0, 0, 5), (2, 1, 0)) == (Data.BULK, Extra.NONE)    # another offset
    assert puts((0, 1, 4), (2, 1, 0)) == (Data.BULK, Extra.NONE)    # another object
    assert puts((0, 0, 4),) == (Data.BULK, Extra.NONE)              # one destination fewer
    assert puts() == (Data.NONE, Extra.NONE)                        # nothing: cannot vouch
    box.reset()
    box.add(0, outbox_module.PUT, 0, 4, 12, np.zeros(12))            # another count
    box.add(2, outbox_module.PUT, 1, 0, 10, big)
    assert box.levels() == (Data.BULK, Extra.NONE)
    uniform = outbox_module.UNIFORM
    assert outbox_module.agreed(Data.REPEAT | uniform) == (Data.REPEAT, Extra.NONE)
    assert outbox_module.agreed(Data.REPEAT) == (Data.BULK, Extra.NONE)  # some rank offered less
    assert outbox_module.agreed(Data.BULK | Extra.GETS << 2) == (Data.BULK, Extra.GETS)
    assert outbox_module.agreed(Data.GENERAL | Extra.OWN << 2 | uniform) == (Data.GENERAL, Extra.OWN)
    assert outbox_module.agreed(uniform) == (Data.NONE, Extra.NONE)


@mpi
@pytest.mark.parametrize("how", ["put", "hpput"])
def test_one_large_put_per_destination_travels_in_a_bulk_exchange(bsp, monkeypatch, how):
    """Every rank puts a block into its own slot of every other rank, three supersteps running:
    one bulk exchange each, and every slot holds what its source put there."""
    paths = _spy(monkeypatch)
    with _context(bsp, monkeypatch) as ctx:
        p, me, n = ctx.nprocs, ctx.pid, 50
        x = ctx.coarray(p * n, dtype=np.float64)
        for step in range(3):
            blocks = [np.full(n, 1000.0 * step + 10 * me + q) for q in range(p)]
            for q in range(p):
                if q != me:
                    getattr(x, how)(q, blocks[q], offset=me * n)
            ctx.sync(f"step {step}")
            for s in range(p):
                if s != me:
                    np.testing.assert_array_equal(x.local[s * n:(s + 1) * n], 1000.0 * step + 10 * s + me)
            row = ctx.ledger[-1]
            assert (row.msgs_out, row.bytes_out) == (p - 1, 8 * n * (p - 1))
            assert (row.msgs_in, row.bytes_in) == (p - 1, 8 * n * (p - 1))
    assert paths == ["bulk", "repeat", "repeat"]  # the same places each time: learnt once


def _overlap_scene(ctx):
    """The scene of the overlapping puts: rank ``s`` puts ``n`` = 20 values at ``3 s`` of the
    target (rank 1, rank 0 alone), whose coarray ``x`` holds -7 everywhere, synchronised.
    Returns ``(p, me, n, target, x)``."""
    p, n = ctx.nprocs, 20
    x = ctx.coarray(3 * p + n + 5, dtype=np.int64)
    x.local[:] = -7
    ctx.sync()
    return p, ctx.pid, n, min(1, p - 1), x


@mpi
@pytest.mark.parametrize("own", [False, True], ids=["others only", "with the target's own records"])
def test_overlapping_bulk_puts_land_in_ascending_source_order(bsp, monkeypatch, own):
    """Every other rank puts a block into overlapping places of one target rank (at 3 ranks, the
    middle one): a bulk exchange.  With ``own`` the target also puts into the same places itself
    and gets from itself: the general exchange.  Either way the result is BSPlib's: puts applied
    in ascending source rank (the target's own in its place among them), the get reading before
    any put.  Oracle: the numpy model."""
    paths = _spy(monkeypatch)
    with _context(bsp, monkeypatch) as ctx:
        p, me, n, target, x = _overlap_scene(ctx)
        sources = [s for s in range(p) if s != target or own]
        got = None
        if me in sources:
            x.put(target, np.full(n, 100 + me), offset=3 * me)
        if own and me == target:
            got = x.get(target, 0, 6)
        ctx.sync()
        if me == target:
            model = np.full(x.local.size, -7)
            for s in sorted(sources):
                model[3 * s:3 * s + n] = 100 + s
            np.testing.assert_array_equal(x.local, model)
            if own:
                np.testing.assert_array_equal(got.value, [-7] * 6)
    assert paths[-1] == ("general" if own else "bulk")


@mpi
def test_repeated_bulk_exchanges_land_each_superstep_where_the_first_one_worked_out(bsp, monkeypatch):
    """Every other rank puts a block into overlapping places of one target rank (at 3 ranks, the
    middle one: its two sources overlap), and the target a block into rank 0, with new values each
    superstep (so that every rank offers to repeat), and a general superstep
    (a get) between the second and the third: the repetitions reuse where the first bulk
    exchange's payloads landed (temporaries applied in ascending source rank, at 2 ranks the
    target itself), also after the general exchange, and each superstep ends as BSPlib's order
    says.  Oracle: the numpy model, every superstep."""
    paths = _spy(monkeypatch)
    with _context(bsp, monkeypatch) as ctx:
        p, me, n, target, x = _overlap_scene(ctx)
        sources = [s for s in range(p) if s != target]
        model = np.full(x.local.size, -7)
        back = np.full(x.local.size, -7)  # rank 0's part: the target puts there (so it repeats too)
        for k in range(4):
            if me in sources:
                x.put(target, np.full(n, 1000 * k + me), offset=3 * me)
            else:
                x.put(0, np.full(n, -1000 * k - 1), offset=2)
            ctx.sync()
            for s in sources:
                model[3 * s:3 * s + n] = 1000 * k + s
            back[2:2 + n] = -1000 * k - 1
            if me == target:
                np.testing.assert_array_equal(x.local, model)
            if me == 0:
                np.testing.assert_array_equal(x.local, back)
            if k == 1:
                got = x.get(target, 0, 4)
                ctx.sync()
                np.testing.assert_array_equal(got.value, model[:4])
    assert paths == ["bulk", "repeat", "general", "repeat", "repeat"], paths


@mpi
def test_other_supersteps_take_the_general_exchange(bsp, monkeypatch):
    """Two large puts to one destination, or a small put beside a large one, anywhere: every rank
    takes the general exchange, with the same values as the bulk one would give."""
    paths = _spy(monkeypatch)
    with _context(bsp, monkeypatch) as ctx:
        p, me, n = ctx.nprocs, ctx.pid, 16
        x = ctx.coarray(4 * n, dtype=np.int64)
        right = (me + 1) % p
        x.put(right, np.full(n, me), offset=0)
        if me == 0:
            x.put(right, np.full(n, 50), offset=2 * n)   # a second large put to the same rank
        ctx.sync()
        left = (me - 1) % p
        np.testing.assert_array_equal(x.local[:n], left)
        if left == 0:
            np.testing.assert_array_equal(x.local[2 * n:3 * n], 50)
        x.put(right, np.full(n, me + 10), offset=n)
        if me == p - 1:
            x.put(right, [99], offset=3 * n)                # a small put
        ctx.sync()
        np.testing.assert_array_equal(x.local[n:2 * n], left + 10)
        if left == p - 1:
            assert x.local[3 * n] == 99
    assert paths == ["general", "general"]


@mpi
def test_a_context_with_a_timeout_never_takes_the_bulk_exchange(bsp, monkeypatch):
    """Its exchange must bound every wait, which the bulk exchange's collectives cannot."""
    paths = _spy(monkeypatch)
    with _context(bsp, monkeypatch, timeout=60) as ctx:
        p, me, n = ctx.nprocs, ctx.pid, 16
        x = ctx.coarray(n, dtype=np.int64)
        x.put((me + 1) % p, np.arange(n) + me)
        ctx.sync()
        np.testing.assert_array_equal(x.local, np.arange(n) + (me - 1) % p)
    assert paths == ["general"]


@mpi
def test_ranks_may_mix_the_compiled_and_the_python_step_in_a_bulk_exchange(bsp, monkeypatch):
    """Odd ranks make the control step through mpi4py, even ranks the compiled one: both read the
    same levels, so every rank takes the bulk exchange together (then its repeats, the places
    unchanged), and the values are right."""
    if bsp.pid % 2:
        monkeypatch.setenv("HPCBSP_COMPILED_SYNC", "0")
    paths = _spy(monkeypatch)
    with _context(bsp, monkeypatch) as ctx:
        assert ctx.extension.compiled_sync == (ctx.pid % 2 == 0)
        p, me, n = ctx.nprocs, ctx.pid, 24
        x = ctx.coarray(n, dtype=np.int64)
        for step in range(4):
            x.put((me + 1) % p, np.arange(n) * step + me)
            ctx.sync()
            np.testing.assert_array_equal(x.local, np.arange(n) * step + (me - 1) % p)
    assert paths == ["bulk"] + ["repeat"] * 3


@mpi
def test_a_bulk_exchange_stages_regions_that_lie_too_far_apart(bsp, monkeypatch):
    """As if each side's regions lay more than 2 GiB apart (at 3 ranks each side has two): they
    travel through one staging buffer each way, and every slot holds what its source put."""
    from hpcbsp.runtime.superstep.exchange import regions

    monkeypatch.setattr(regions, "SPAN", 0)
    paths = _spy(monkeypatch)
    with _context(bsp, monkeypatch) as ctx:
        p, me, n = ctx.nprocs, ctx.pid, 40
        x = ctx.coarray(p * n, dtype=np.int32)
        y = ctx.coarray(p * n, dtype=np.int32)  # the destinations' regions in two arrays
        for q in range(p):
            if q != me:
                (x if q % 2 else y).put(q, np.arange(n, dtype=np.int32) + 100 * me + q, offset=me * n)
        ctx.sync()
        for s in range(p):
            if s != me:
                got = (x if me % 2 else y).local[s * n:(s + 1) * n]
                np.testing.assert_array_equal(got, np.arange(n) + 100 * s + me)
    assert paths == ["bulk"]


@mpi
@pytest.mark.parametrize("sparse", [True, False], ids=["messages", "alltoallv"])
def test_a_repeated_bulk_exchange_skips_its_alltoall_only_where_every_rank_repeats(bsp, monkeypatch, sparse):
    """Supersteps of large puts whose places change now and then: one rank moves its puts, the
    last rank falls silent (it cannot vouch that nothing comes from it), a general superstep
    comes between.  Every superstep lands what a numpy model of the puts says, and takes the
    exchange a model of the levels says: the ``Alltoall`` is skipped exactly where every rank
    puts where it put in the last bulk exchange; a repetition moves its payloads as messages
    where every rank had few destinations (``sparse``: at most ``repeat_messages_max``), else in an
    ``Alltoallv``."""
    from hpcbsp.runtime.superstep.exchange import bulk as bulk_module

    paths = _spy(monkeypatch)
    collective = []
    real = bulk_module.alltoallv
    monkeypatch.setattr(bulk_module, "alltoallv", lambda *a: (collective.append(1), real(*a)))
    with _context(bsp, monkeypatch) as ctx:
        ctx._outbox.repeat_messages_max = ctx.nprocs if sparse else -1  # (the test's lever: either way)
        p, me, n = ctx.nprocs, ctx.pid, 16
        x = ctx.coarray(2 * p * n, dtype=np.float64)
        # Per superstep, (rank, shift) -> where that rank puts: None for no puts, else its slot
        # shifted by `shift` blocks; "small" for a general superstep (one small put each).
        plan = [0, 0, {0: p}, {0: p}, {p - 1: None}, {p - 1: None}, "small", {p - 1: None}, 0, 0]
        sent: dict[int, dict[int, int]] | None = None  # the last bulk exchange's places, per rank
        expected = []
        for step, shape in enumerate(plan):
            model = x.local.copy()
            places: dict[int, dict[int, int]] = {}
            for r in range(p):
                shift = shape.get(r, 0) if isinstance(shape, dict) else 0
                places[r] = {} if shift is None else {q: (r + shift) * n for q in range(p) if q != r}
            if shape == "small":
                x.put((me + 1) % p, np.array([float(step)]), offset=2 * p * n - 1)
                model[-1] = step
                expected.append("general")
            else:
                for q, at in places[me].items():
                    x.put(q, np.full(n, 1000.0 * step + 10 * me + q), offset=at)
                for s in range(p):
                    if me in places[s]:
                        model[places[s][me]:places[s][me] + n] = 1000.0 * step + 10 * s + me
                repeat = sent is not None and all(places[r] and places[r] == sent[r] for r in range(p))
                expected.append("repeat" if repeat else "bulk")
                sent = places
            ctx.sync()
            np.testing.assert_array_equal(x.local, model, err_msg=f"superstep {step}")
    assert paths == expected
    assert "repeat" in expected and expected.count("bulk") >= 4  # (the plan's own check)
    assert len(collective) == expected.count("bulk") + (0 if sparse else expected.count("repeat"))
