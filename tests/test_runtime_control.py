"""The control step and the superstep path: empty syncs, the MPI-3 fallback, the compiled step
(serially, and under mpiexec -n 2 and -n 3).
"""
from __future__ import annotations

import ctypes
import inspect
import time

import numpy as np
import pytest

import hpcbsp
from hpcbsp import Divergence
from hpcbsp.kernels.controlstep import allreduce_step, plain_sync
from hpcbsp.kernels.syncstate import MAX_LABELS, METRICS, OTHER, Counter, Rows
from hpcbsp.runtime.superstep import native
from hpcbsp.runtime.superstep.native import DIVERGED, RecordStep, start_wait_loop

mpi = pytest.mark.mpi(min_size=2)



@mpi
def test_empty_sync_moves_nothing(bsp):
    for _ in range(3):
        bsp.sync("empty")
    assert [r.bytes_out + r.bytes_in + r.msgs_out + r.msgs_in for r in bsp.ledger] == [0, 0, 0]
    assert bsp.superstep == 3


@mpi
def test_control_step_falls_back_to_allreduce_without_persistent_collectives(bsp, monkeypatch):
    """The control step is a persistent Allreduce (MPI-4) where the library has one and it is
    asked for; MPI-3 libraries have none, and the plain Allreduce must give the same agreement
    and divergence.  (White box on purpose: freeing the control step's persistent request is
    how an MPI-3 library is imitated on this one.)"""
    monkeypatch.setenv("HPCBSP_CONTROL_COLLECTIVE", "persistent")
    with hpcbsp.BSP(bsp.comm) as ctx:
        assert ctx.extension.control_collective == "persistent"  # MPICH 5, Open MPI 5, Intel MPI 2021: MPI_Allreduce_init
        # private on purpose: freeing the control step's persistent request imitates an MPI-3 library
        ctx._control.free()
        x = ctx.coarray(1, dtype=np.int64)
        x.put((ctx.pid + 1) % ctx.nprocs, [ctx.pid + 10])
        ctx.sync()
        assert x.local[0] == (ctx.pid - 1) % ctx.nprocs + 10
        if ctx.nprocs > 1:
            with pytest.raises(Divergence, match="diverged"):
                if ctx.pid == 0:
                    ctx.sync()
                else:
                    ctx.coarray(1)


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


# ---- the compiled control step (hpcbsp.runtime.superstep.native) ---------------------------------------

_START = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_WAIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class _FakeMPI:
    """ctypes callbacks standing in for MPI_Start and MPI_Wait.  ``start`` keeps a copy of the
    record it was started with; ``wait`` reduces the record with ``other`` (another rank's record)
    by element-wise maximum, as the MAX Allreduce does.  Oracle: numpy's maximum, hand-built records."""

    def __init__(self, start_code: int = 0, wait_code: int = 0):
        self.record = bytearray(80)
        self.words = np.frombuffer(self.record, dtype=np.int64)
        self.other: np.ndarray | None = None
        self.started: list[np.ndarray] = []
        self.requests: list[int] = []
        self.waits = 0

        def start(request):
            self.requests.append(request)
            self.started.append(self.words.copy())
            return start_code

        def wait(request, status):
            self.waits += 1
            assert status  # a real status object, not a null pointer
            if self.other is not None:
                np.maximum(self.words, self.other, out=self.words)
            return wait_code

        self.start, self.wait = _START(start), _WAIT(wait)

    def step(self, request: int = 0x5EED) -> RecordStep:
        address = ctypes.addressof((ctypes.c_char * 80).from_buffer(self.record))
        return RecordStep(ctypes.cast(self.start, ctypes.c_void_p).value,
                          ctypes.cast(self.wait, ctypes.c_void_p).value, request, address, self,
                          lambda code: RuntimeError(f"MPI error {code}"))


def _record(kind, step, sig, data, gets):
    return np.array([kind, step, sig, data, gets, -kind, -step, -sig, -data, -gets], dtype=np.int64)


def test_the_compiled_step_writes_the_record_and_reads_the_max_reduction():
    """The data and gets fields are levels from 0 to 3 and come back as the maxima over the ranks,
    data in the low two bits, gets in the next two, and 16 where every rank gave the same data
    level.  Oracle: hand-built records, numpy's maximum."""
    fake = _FakeMPI()
    step = fake.step()
    assert step.agree(1, 7, 42, 1, 0) == 1 | 16                  # alone: its own levels, uniform
    np.testing.assert_array_equal(fake.started[-1], _record(1, 7, 42, 1, 0))
    assert fake.requests == [0x5EED] and fake.waits == 1         # the request handed over, as given
    fake.other = _record(1, 7, 42, 0, 2)                        # another rank has gets
    assert step.agree(1, 7, 42, 0, 0) == 2 << 2 | 16
    assert step.agree(1, 7, 42, 2, 1) == 2 | 2 << 2             # data 2 here, 0 there: not uniform
    np.testing.assert_array_equal(fake.started[-1], _record(1, 7, 42, 2, 1))
    fake.other = _record(1, 7, 42, 3, 0)                        # another rank's data level is higher
    assert step.agree(1, 7, 42, 2, 1) == 3 | 1 << 2
    assert step.agree(1, 7, 42, 3, 1) == 3 | 1 << 2 | 16         # the same data level on both
    fake.other = _record(1, 7, 42, 1, 3)                        # a lower one there: not uniform
    assert step.agree(1, 7, 42, 3, 0) == 3 | 3 << 2
    for data, gets in ((4, 0), (0, 4), (-1, 0)):
        with pytest.raises(ValueError, match="levels from 0 to 3"):
            step.agree(1, 7, 42, data, gets)
    for other in (_record(1, 8, 42, 0, 0), _record(2, 7, 42, 0, 0), _record(1, 7, 41, 0, 0)):
        fake.other = other                                       # another superstep, kind, signature
        assert step.agree(1, 7, 42, 0, 0) == DIVERGED


def test_the_timed_step_appends_the_row_only_when_no_rank_has_data_or_gets():
    """``agree_row`` is ``agree(kind, step, 0, 0, 0)`` with the superstep's ledger row: appended,
    with times on ``time.perf_counter``'s clock (the oracle: reads of it around the call), and 0
    returned, when the reduced record has no data for another rank (whatever other ranks have
    for themselves, gets from themselves included); otherwise nothing is appended, the start
    time is kept and the code returned."""
    fake = _FakeMPI()
    step = fake.step()
    rows = Rows()
    before = time.perf_counter()
    assert step.agree_row(1, 7, "label", rows) == 0
    after = time.perf_counter()
    np.testing.assert_array_equal(fake.started[-1], _record(1, 7, 0, 0, 0))  # no data, no gets, sig 0
    assert len(rows) == 1 and rows[0][:2] == (7, "label") and rows[0][5:] == (0, 0, 0, 0, 0)
    assert rows[0][2] == rows.origin and before <= rows[0][3] <= rows[0][4] <= after
    for step_no, own in ((8, 1), (9, 2)):  # another rank has records for itself, or gets from itself
        fake.other = _record(1, step_no, 0, 0, own)
        assert step.agree_row(1, step_no, "own", rows) == 0 and rows[-1][:2] == (step_no, "own")
    assert len(rows) == 3
    for other, code in ((_record(1, 10, 0, 1, 0), 1), (_record(1, 10, 0, 2, 1), 6), (_record(1, 10, 0, 2, 2), 10),
                        (_record(2, 10, 0, 0, 0), DIVERGED), (_record(1, 11, 0, 0, 0), DIVERGED)):
        fake.other = other  # another rank has data for another, or is elsewhere
        before = time.perf_counter()
        assert step.agree_row(1, 10, None, rows) == code
        assert before <= step.started <= time.perf_counter()
        assert len(rows) == 3  # nothing appended: the caller delivers, then records the row
    with pytest.raises(TypeError):
        step.agree_row(1, 0, None, [])  # the rows must be the ledger's store


class _Counts:
    """A superstep's traffic as the ledger's store reads it (five counts)."""

    def __init__(self, i: int):
        self.bytes_out, self.bytes_in, self.msgs_out, self.msgs_in, self.records = 8 * i, 3 * i + 1, i % 4, 1, i % 7


def _expected(appended: list[tuple], origin: float) -> list[tuple]:
    """The oracle: the stored form of appended rows, built by hand from the definition (the work
    began when the previous row ended, or at the origin; counts zero where traffic is None)."""
    out, began = [], origin
    for index, label, t_sync, t_end, traffic in appended:
        counts = (0,) * 5 if traffic is None else (traffic.bytes_out, traffic.bytes_in, traffic.msgs_out,
                                                  traffic.msgs_in, traffic.records)
        out.append((index, label, began, t_sync, t_end, *counts))
        began = t_end
    return out


def test_the_ledgers_row_store_gives_back_what_was_appended():
    """``Rows`` against the stored form of the same tuples (the oracle, built by hand): lengths,
    every index (negative too), iteration, labels, and the traffic's counts, across growth (1024
    rows first, doubled as needed), and the errors for a bad row or index."""
    rows, appended = Rows(origin=-1.0), []
    for i in range(3000):
        row = (i * 7 - 5, f"s{i}" if i % 3 == 0 else None, i * 0.5, i * 0.5 + 0.25, _Counts(i) if i % 5 == 0 else None)
        rows.append(row)
        appended.append(row)
    oracle = _expected(appended, -1.0)
    assert len(rows) == len(oracle) == 3000 and rows.first == 0
    assert list(rows) == oracle and all(rows[-k] == oracle[-k] for k in (1, 2, 1024, 3000))
    assert rows[5][5:] == (40, 16, 1, 1, 5) and rows[6][5:] == (0,) * 5 and rows[1][1] is None
    with pytest.raises(IndexError):
        rows[3000]
    with pytest.raises(IndexError):
        rows[-3001]
    with pytest.raises(ValueError):
        rows.append((1, None, 0.0, 1.0))  # four fields
    with pytest.raises(ValueError):
        Rows(0)


@pytest.mark.parametrize("window", [1, 5, 1024, 1500, 5000])
def test_the_row_store_keeps_a_window_and_aggregates_every_row(window):
    """A window of ``window`` rows: the last ones come back as appended (the oracle's tail), older
    ones raise IndexError naming the setting; the totals, maxima and per-label aggregates equal a
    brute-force computation over every row appended (Python sums and max in the same order), and
    a row with an unhashable label, or a label beyond ``MAX_LABELS``, is counted under ``OTHER``."""
    rng = np.random.default_rng(window)
    rows, appended, t = Rows(window, 10.0), [], 10.0
    labels = ["a", "b", None, 7, ["odd"]]
    for i in range(3000):
        t_sync = t + float(rng.exponential(1.0))
        t = t_sync + float(rng.exponential(0.5))
        row = (i, labels[int(rng.integers(len(labels)))], t_sync, t, _Counts(int(rng.integers(100))) if i % 3 else None)
        rows.append(row)
        appended.append(row)
    oracle = _expected(appended, 10.0)
    kept = min(window, 3000)
    assert len(rows) == 3000 and rows.first == 3000 - kept and rows.window == window
    assert list(rows) == oracle[-kept:] and rows[-1] == oracle[-1] and rows[3000 - kept] == oracle[-kept]
    if kept < 3000:
        with pytest.raises(IndexError, match="HPCBSP_LEDGER_WINDOW"):
            rows[2999 - kept]
    metrics = [(r[3] - r[2], r[4] - r[3], *r[5:]) for r in oracle]  # METRICS, in order
    assert METRICS == ("work_s", "sync_s", "bytes_out", "bytes_in", "msgs_out", "msgs_in", "records")

    def total(ms):
        sums = [0.0] * len(METRICS)
        for m in ms:
            sums = [s + v for s, v in zip(sums, m)]
        return tuple(sums)

    assert rows.totals() == total(metrics)
    assert rows.maxima() == tuple(max(m[k] for m in metrics) for k in range(len(METRICS)))
    by_label = rows.by_label()
    keys = {None: None, "a": "a", "b": "b", 7: 7}
    assert sorted(map(str, by_label)) == sorted(map(str, [*keys, OTHER]))
    for key in by_label:
        mine = [m for m, r in zip(metrics, oracle) if (OTHER if isinstance(r[1], list) else r[1]) == key]
        assert by_label[key] == (len(mine), total(mine), tuple(max(m[k] for m in mine) for k in range(len(METRICS))))


def test_the_streams_row_type_is_the_stores_row():
    """The stream's numpy row (``FIELDS`` with ``FIELD_TYPES``) reads ``raw`` bytes back as the
    rows that were appended (the oracle: ``rows[i]``), so a field added to the store and not to
    the stream's type, or the reverse, fails here."""
    from hpcbsp.runtime.superstep.ledgerfiles import ROW_DTYPE

    rows = Rows(4, 2.0)
    for i in range(6):
        rows.append((i, "a" if i % 2 else None, 3.0 + i, 3.5 + i, _Counts(i) if i % 3 else None))
    got = np.frombuffer(rows.raw(2, 6), dtype=ROW_DTYPE)
    assert ROW_DTYPE.itemsize * 4 == len(rows.raw(2, 6))
    for j, i in enumerate(range(2, 6)):
        want = rows[i]
        assert tuple(got[j].tolist())[2:] == want[2:] and got[j]["index"] == want[0]
        assert (got[j]["label"] == -1) == (want[1] is None)


def test_labels_beyond_the_limit_share_one_aggregate_and_keep_their_rows():
    """Past ``MAX_LABELS`` distinct labels, a new label's rows still give it back (while in the
    window) and are aggregated under ``OTHER``; the store keeps no more than the limit."""
    rows = Rows(10)
    for i in range(MAX_LABELS + 20):
        rows.append((i, f"label {i}", float(i), i + 0.5, None))
    assert len(rows.labels()) == MAX_LABELS
    assert [r[1] for r in rows] == [f"label {i}" for i in range(MAX_LABELS + 10, MAX_LABELS + 20)]
    stats = rows.by_label()
    assert stats[OTHER][0] == 20 and stats["label 0"][0] == 1 and len(stats) == MAX_LABELS + 1


def test_the_start_wait_loop_starts_and_waits_n_times_and_stops_at_an_error():
    fake = _FakeMPI()
    start = ctypes.cast(fake.start, ctypes.c_void_p).value
    wait = ctypes.cast(fake.wait, ctypes.c_void_p).value
    assert start_wait_loop(start, wait, 0x5EED, 5) == 0
    assert fake.requests == [0x5EED] * 5 and fake.waits == 5
    assert start_wait_loop(start, wait, 0x5EED, 0) == 0 and fake.waits == 5
    failing = _FakeMPI(wait_code=4)
    assert start_wait_loop(ctypes.cast(failing.start, ctypes.c_void_p).value,
                           ctypes.cast(failing.wait, ctypes.c_void_p).value, 1, 9) == 4
    assert failing.waits == 1 and len(failing.started) == 1  # stopped at the first error
    with pytest.raises(ValueError, match="null"):
        start_wait_loop(start, wait, 0, 1)


@mpi
def test_a_rank_with_nothing_pending_still_receives_and_records_the_superstep(bsp):
    """Rank 0 puts to every other rank, which have nothing pending (their sync takes the timed
    compiled step, learns that data moves, and delivers): the values land, and every rank's
    ledger has the superstep with its label, the bytes it received, and sync times inside the
    bracket of perf_counter reads around the call.  Oracles: the values and byte counts by hand,
    the clock reads."""
    with hpcbsp.BSP(bsp.comm, wait="spin") as ctx:  # (the compiled step: never with yielding waits)
        x = ctx.coarray(2, dtype=np.int64)
        for step in range(3):
            if ctx.pid == 0:
                for q in range(1, ctx.nprocs):
                    x.put(q, [step, q])
            before = time.perf_counter()
            ctx.sync(f"step {step}")
            after = time.perf_counter()
            rec = ctx.ledger[-1]
            assert rec.label == f"step {step}" and rec.index == ctx.superstep - 1
            assert rec.bytes_in == (16 if ctx.pid else 0) and rec.bytes_out == (16 * (ctx.nprocs - 1) if ctx.pid == 0 else 0)
            t_sync = ctx.ledger.origin + rec.start_s + rec.work_s
            assert before <= t_sync <= t_sync + rec.sync_s <= after
            if ctx.pid:
                assert x.local.tolist() == [step, ctx.pid]
        ctx.sync("empty")
        assert ctx.ledger[-1].label == "empty" and ctx.ledger[-1].bytes_in == 0


def test_the_compiled_step_raises_the_mpi_error_and_refuses_null_addresses():
    fake = _FakeMPI(start_code=5)
    with pytest.raises(RuntimeError, match="MPI error 5"):
        fake.step().agree(1, 0, 0, False, False)
    assert fake.waits == 0                                       # no wait after a failed start
    with pytest.raises(RuntimeError, match="MPI error 3"):
        _FakeMPI(wait_code=3).step().agree(1, 0, 0, False, False)
    with pytest.raises(ValueError, match="null"):
        _FakeMPI().step(request=0)


def test_an_empty_sync_takes_the_compiled_step_unless_told_not_to(bsp, monkeypatch):
    """The MPI wheel's libmpi is found (MPICH, Open MPI or Intel MPI: one library, MPI initialised); HPCBSP_COMPILED_SYNC=0
    gives the Python path, and both count supersteps and refuse a diverged rank alike."""
    assert native.mpi_functions() is not None
    assert bsp.extension.compiled_sync
    monkeypatch.setenv("HPCBSP_COMPILED_SYNC", "0")
    with hpcbsp.BSP(bsp.comm) as plain:
        assert not plain.extension.compiled_sync
        for _ in range(3):
            plain.sync()
            bsp.sync()
        assert plain.superstep == bsp.superstep == 3


@mpi
@pytest.mark.parametrize("collective", ["persistent", "blocking"])
def test_ranks_may_mix_the_compiled_and_the_python_step(bsp, monkeypatch, collective):
    """Odd ranks take the Python path, even ranks the compiled one, on the same collective (one
    persistent request, or blocking MPI_Allreduce calls from C against mpi4py's): puts land
    where the rank numbers say, data flags are agreed, and a divergence is seen by every rank.
    Oracle: the rank arithmetic."""
    monkeypatch.setenv("HPCBSP_CONTROL_COLLECTIVE", collective)
    if bsp.pid % 2:
        monkeypatch.setenv("HPCBSP_COMPILED_SYNC", "0")
    with hpcbsp.BSP(bsp.comm, wait="spin") as ctx:  # (yielding waits are never compiled)
        assert ctx.extension.compiled_sync == (bsp.pid % 2 == 0)
        assert ctx.extension.control_collective == collective
        x = ctx.coarray(1, dtype=np.int64)
        left = (ctx.pid - 1) % ctx.nprocs
        for step in range(20):
            if step % ctx.nprocs == ctx.pid:  # one rank puts: every rank must join the exchange
                x.put((ctx.pid + 1) % ctx.nprocs, [100 * step + ctx.pid])
            ctx.sync()
            if step % ctx.nprocs == left:
                assert x.local[0] == 100 * step + left
        with pytest.raises(Divergence, match="diverged"):
            ctx.sync(f"sync of rank {ctx.pid}") if ctx.pid == ctx.nprocs - 1 else ctx.coarray(1)


def test_a_closed_compiled_step_refuses_to_start_its_freed_request():
    fake = _FakeMPI()
    step = fake.step()
    step.close()
    with pytest.raises(ValueError, match="closed"):
        step.agree(1, 0, 0, False, False)
    assert fake.started == []


@mpi
def test_a_superstep_with_only_own_records_sends_no_message(bsp, monkeypatch):
    """Records for a rank's own part (puts, gets, queue sends to itself) are applied without the
    exchange's messages when no rank has any for another (the control step tells); with one
    remote record anywhere every rank takes part in the exchange.  Oracles: the values (by
    hand) and which way the exchange was called (a spy on it)."""
    import hpcbsp.runtime.superstep.supersteps as superstep

    calls: list[bool] = []
    real = superstep.exchange

    def spy(*args, local=False, **kw):
        calls.append(local)
        return real(*args, local=local, **kw)

    monkeypatch.setattr(superstep, "exchange", spy)
    me, p = bsp.pid, bsp.nprocs
    x = bsp.coarray(4, dtype=np.int64)
    q = bsp.queue(np.int64)
    x.put(me, [me, me + 1], offset=1)
    got = x.get(me, 1, 2)
    q.send(me, 10 * me)
    bsp.sync("own records only")
    assert calls == [True]
    np.testing.assert_array_equal(x.local, [0, me, me + 1, 0])
    np.testing.assert_array_equal(got.value, [0, 0])  # a get reads before the puts land
    assert list(q.received()) == [10 * me]
    assert bsp.ledger[-1].msgs_out == bsp.ledger[-1].msgs_in == 0
    bsp.sync("nothing")
    assert calls == [True]                             # an empty sync: no exchange at all
    if me == 0:
        x.put(p - 1, [7])                              # one remote put: everyone exchanges
    x.put(me, [me], offset=3)
    bsp.sync("one remote put")
    assert calls == [True, False]
    assert x.local[3] == me and (me != p - 1 or x.local[0] == 7)


# ---- the compiled sync (plain_sync's function standing for bsp.sync) ----------------------------------------

def _counter(value: int = 5) -> Counter:
    """A context's superstep counter, at ``value`` (the oracle for the counting)."""
    counter = Counter()
    counter.value = value
    return counter


class _Outbox:
    nrecords = 0


def _plain_sync(fake: _FakeMPI):
    """A compiled sync over the fake MPI with spies for the method and the finisher."""
    owner, outbox, queues, rows = _counter(), _Outbox(), [], Rows()
    calls: list[tuple] = []

    def method(label=None, **kwargs):
        calls.append(("method", label, kwargs))

    def finish(code, label):
        calls.append(("finish", code, label))

    sync = plain_sync(fake.step(), rows, 1, owner, outbox, queues, method, finish)
    return sync, owner, outbox, queues, rows, calls


def test_the_compiled_sync_is_the_empty_step_and_the_counter_when_nothing_is_pending():
    """``sync()`` and ``sync(label)`` with nothing pending: one step with the record of kind 1 at
    the counter's superstep, one ledger row, the counter up by one, neither spy called.  Oracles:
    the hand-built record, the row's fields, the counter by hand."""
    fake = _FakeMPI()
    sync, owner, _, _, rows, calls = _plain_sync(fake)
    sync()
    sync("labelled")
    assert owner.value == 7 and calls == []
    np.testing.assert_array_equal(fake.started[0], _record(1, 5, 0, 0, 0))
    np.testing.assert_array_equal(fake.started[1], _record(1, 6, 0, 0, 0))
    fake.other = _record(1, 7, 0, 0, 1)  # another rank has records for itself only: nothing to do here
    sync("own")
    assert owner.value == 8 and calls == []
    assert [row[:2] for row in rows] == [(5, None), (6, "labelled"), (7, "own")]


def test_the_compiled_sync_hands_every_other_call_to_the_method():
    """Records pending, a queue registered, a timeout or the runtime's own step, a closed step:
    the method runs (with the call's arguments) and the compiled step does not start; a second
    positional argument is refused as the method refuses it."""
    fake = _FakeMPI()
    sync, owner, outbox, queues, rows, calls = _plain_sync(fake)
    outbox.nrecords = 2
    sync("a")
    outbox.nrecords = 0
    queues.append(object())
    sync()
    queues.clear()
    sync("b", timeout=3.0)
    step = object()
    sync("c", _step=step)
    none = {"timeout": None, "_step": None}
    assert calls == [("method", "a", none), ("method", None, none), ("method", "b", {"timeout": 3.0, "_step": None}),
                     ("method", "c", {"timeout": None, "_step": step})]
    with pytest.raises(TypeError):
        sync("d", 5.0)
    assert fake.started == [] and owner.value == 5 and len(rows) == 0
    closed = _FakeMPI()
    step = closed.step()
    step.close()  # (its request freed)
    calls.clear()
    sync = plain_sync(step, rows, 1, owner, _Outbox(), [], lambda label=None, **kw: calls.append(("method", label)),
                      lambda code, label: None)
    sync("e")
    assert calls == [("method", "e")] and closed.started == []


def test_the_compiled_sync_leaves_a_superstep_with_data_or_a_divergence_to_the_finisher():
    """Another rank has data for another (the code is the level, 1 or 2, with the others'
    extras), or is elsewhere (DIVERGED): the step ran, no row was appended and the counter is
    the finisher's to move; the finisher gets the code.  (Another rank's records for itself
    alone leave this rank nothing to do: the first test's case.)"""
    fake = _FakeMPI()
    sync, owner, _, _, rows, calls = _plain_sync(fake)
    cases = ((_record(1, 5, 0, 1, 0), 1), (_record(1, 5, 0, 2, 1), 6), (_record(1, 5, 0, 2, 2), 10),
             (_record(2, 5, 0, 0, 0), DIVERGED))
    for other, code in cases:
        fake.other = other
        sync("x")
        assert calls[-1] == ("finish", code, "x")
    assert owner.value == 5 and len(rows) == 0 and len(fake.started) == len(cases)


@mpi
def test_bsp_sync_is_compiled_exactly_while_the_context_is_plain(bsp):
    """A blocking plain context's ``sync`` is the compiled function, not the method; with a timeout, a mailbox
    (a sync hook), a subclass's own ``sync``, or after leaving, it is the method.  Either way
    the same supersteps are counted and recorded.  Oracle: the counts and labels by hand."""
    with hpcbsp.BSP(bsp.comm, wait="spin") as ctx:
        assert not inspect.ismethod(ctx.sync)
        assert ctx.sync.__doc__ == hpcbsp.BSP.sync.__doc__  # help(ctx.sync) documents the call
        def params(f):
            return [(p.name, p.kind, p.default) for p in inspect.signature(f).parameters.values()]

        assert params(ctx.sync) == params(hpcbsp.BSP.sync.__get__(ctx))  # the same call, the same defaults
        for i in range(4):
            ctx.sync(f"s{i}")
        assert ctx.superstep == 4 and [r.label for r in ctx.ledger] == ["s0", "s1", "s2", "s3"]
        ctx.mailbox(lambda batch: None, np.int64)
        assert inspect.ismethod(ctx.sync)
        ctx.sync("after the mailbox")
        assert ctx.superstep == 5 and ctx.ledger[-1].label == "after the mailbox"
    assert inspect.ismethod(ctx.sync)
    with hpcbsp.BSP(bsp.comm, wait="spin", timeout=60) as ctx:
        assert inspect.ismethod(ctx.sync)
        ctx.sync()

    class Counting(hpcbsp.BSP):
        calls = 0

        def sync(self, label=None, **kw):
            Counting.calls += 1
            super().sync(label, **kw)

    with Counting(bsp.comm, wait="spin") as ctx:
        ctx.sync()
        ctx.sync()
    assert Counting.calls == 2



def test_why_the_step_is_not_compiled_is_said_in_one_place(monkeypatch):
    """``native.why_not_compiled``: '' here (the MPI wheel's library is found), the variable's
    name when it turns the compiled path off, and ``compiled_step`` agrees with it."""
    from mpi4py import MPI

    record = bytearray(80)
    request = MPI.COMM_SELF.Allreduce_init(MPI.IN_PLACE, [record, MPI.BYTE], MPI.BOR)
    try:
        assert native.why_not_compiled() == "" and native.compiled_step(request, record) is not None
        call = native.compiled_call(request)
        assert call is not None and call() == 0  # one Start + Wait from C, MPI's success code
        assert native.why_not_compiled("blocking") == ""
        step = native.compiled_allreduce_step(MPI.COMM_SELF, record)
        assert step is not None
        step.close()
        monkeypatch.setenv("HPCBSP_COMPILED_SYNC", "0")
        assert native.why_not_compiled() == native.why_not_compiled("blocking") == "HPCBSP_COMPILED_SYNC=0"
        assert native.compiled_step(request, record) is None
        assert native.compiled_allreduce_step(MPI.COMM_SELF, record) is None
    finally:
        request.Free()


def test_the_row_store_keeps_each_distinct_label_once():
    """Labels come back equal to what was appended and of the same type (a list of the tuples is
    the oracle), whatever they are: repeated, equal but of another type (1, 1.0, True; a str
    subclass), unhashable.  A label repeated on every row adds no Python object per row: 100,000
    rows with one label allocate under 1 MB through Python's allocator (tracemalloc; a dict entry
    per row, as before, took about 10 MB)."""
    import tracemalloc

    class Name(str):
        pass

    labels = ["sync", "sync", None, 1, 1.0, True, Name("sync"), ["odd"], "sync", 1, Name("sync")]
    rows, oracle = Rows(), []
    for i, label in enumerate(labels):
        row = (i, label, 0.5 * i, 0.5 * i + 0.25, None)
        rows.append(row)
        oracle.append(row)
    assert list(rows) == _expected(oracle, 0.0)
    assert [type(r[1]) for r in rows] == [type(label) for label in labels]
    many = Rows()
    label = "every superstep"
    many.append((0, label, 0.0, 1.0, None))  # the label's first row, before the measurement
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1, 100_001):
            many.append((i, label, 0.0, 1.0, None))
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(many) == 100_001 and many[-1][:2] == (100_000, label)
    assert grown < 1_000_000, grown


# ---- the control step as one blocking MPI_Allreduce (HPCBSP_CONTROL_COLLECTIVE) --------------

_ALLREDUCE = {4: ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_int, ctypes.c_int),
              8: ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                  ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)}


class _FakeAllreduce:
    """A ctypes callback standing in for MPI_Allreduce with handles of ``width`` bytes (4: C ints,
    as in MPICH's ABI; 8: pointers, as in Open MPI's).  It keeps every call's arguments and the
    record it was called with, and reduces the record with ``other`` by element-wise maximum, as
    the MAX Allreduce does.  Oracle: numpy's maximum and hand-built records."""

    def __init__(self, width: int, code: int = 0):
        self.record = bytearray(80)
        self.words = np.frombuffer(self.record, dtype=np.int64)
        self.other: np.ndarray | None = None
        self.calls: list[tuple] = []
        self.sent: list[np.ndarray] = []

        def allreduce(sendbuf, recvbuf, count, datatype, op, comm):
            self.calls.append((sendbuf, recvbuf, count, datatype, op, comm))
            self.sent.append(self.words.copy())
            if self.other is not None:
                np.maximum(self.words, self.other, out=self.words)
            return code

        self.function = _ALLREDUCE[width](allreduce)
        self.width = width

    def address(self) -> int:
        return ctypes.addressof((ctypes.c_char * 80).from_buffer(self.record))

    def step(self, in_place: int, datatype: int, op: int, comm: int):
        return allreduce_step(ctypes.cast(self.function, ctypes.c_void_p).value, self.width, in_place,
                              datatype, op, comm, self.address(), self, lambda code: RuntimeError(f"MPI error {code}"))


@pytest.mark.parametrize("width, handles", [
    (4, (-1, 0x4C00083A, 0x58000001, -2080374782)),          # MPICH's: ints, a negative communicator
    (8, (1, 0x7F0012345678, 0x7F00DEADBEE0, 0x55AA00112230)),  # Open MPI's: pointers, IN_PLACE is 1
])
def test_the_blocking_step_calls_allreduce_with_the_handles_and_reads_the_max(width, handles):
    """One call of the library's MPI_Allreduce per step, with MPI_IN_PLACE, the record itself,
    10 words and the datatype, op and communicator handles exactly as given, at their width;
    the same record, agreement and flags as the persistent step."""
    fake = _FakeAllreduce(width)
    in_place, datatype, op, comm = handles
    step = fake.step(in_place, datatype, op, comm)
    assert step.collective == "blocking"
    assert step.agree(1, 7, 42, 1, 0) == 1 | 16                  # alone: uniform
    np.testing.assert_array_equal(fake.sent[-1], _record(1, 7, 42, 1, 0))
    sendbuf, recvbuf, count, *rest = fake.calls[-1]
    as_c = ctypes.c_int if width == 4 else ctypes.c_void_p     # the oracle: ctypes' own conversion
    assert sendbuf == ctypes.c_void_p(in_place & (2**64 - 1)).value
    assert recvbuf == fake.address() and count == 10
    assert rest == [as_c(h).value for h in (datatype, op, comm)]
    fake.other = _record(1, 7, 42, 0, 1)
    assert step.agree(1, 7, 42, 0, 0) == 1 << 2 | 16
    assert step.agree(1, 7, 42, 1, 0) == 1 | 1 << 2             # data 1 here, 0 there
    fake.other = _record(1, 8, 42, 0, 0)
    assert step.agree(1, 7, 42, False, False) == DIVERGED
    rows = Rows()
    fake.other = None
    assert step.agree_row(1, 9, "empty", rows) == 0 and rows[-1][:2] == (9, "empty")
    assert len(fake.calls) == 5
    step.close()
    assert step.collective == "closed"
    with pytest.raises(ValueError, match="closed"):
        step.agree(1, 0, 0, False, False)
    assert len(fake.calls) == 5


def test_the_blocking_step_raises_the_mpi_error_and_refuses_bad_arguments():
    with pytest.raises(RuntimeError, match="MPI error 7"):
        _FakeAllreduce(8, code=7).step(1, 2, 3, 4).agree(1, 0, 0, False, False)
    fake = _FakeAllreduce(4)
    function = ctypes.cast(fake.function, ctypes.c_void_p).value
    with pytest.raises(ValueError, match="null"):
        allreduce_step(0, 4, -1, 1, 2, 3, fake.address(), None, RuntimeError)
    with pytest.raises(ValueError, match="2 bytes"):
        allreduce_step(function, 2, -1, 1, 2, 3, fake.address(), None, RuntimeError)
    with pytest.raises(ValueError, match="C int"):
        allreduce_step(function, 4, -1, 1, 2, 2**31, fake.address(), None, RuntimeError)


def test_the_real_blocking_step_agrees_with_mpi4pys_allreduce():
    """``native.compiled_allreduce_step`` on a communicator of this process: the library's own
    MPI_Allreduce through the handles mpi4py holds, against mpi4py's Allreduce of the same
    record (a communicator of one rank: the reduction is the record itself)."""
    from mpi4py import MPI

    comm = MPI.COMM_SELF.Dup()
    record = bytearray(80)
    step = native.compiled_allreduce_step(comm, record)
    try:
        assert step is not None and step.collective == "blocking"
        assert step.agree(3, 11, 5, 2, 2) == 2 | 2 << 2 | 16        # one rank: uniform
        oracle = _record(3, 11, 5, 2, 2)
        comm.Allreduce(MPI.IN_PLACE, oracle, MPI.MAX)
        np.testing.assert_array_equal(np.frombuffer(record, np.int64), oracle)
    finally:
        step.close()
        comm.Free()


def test_auto_chooses_the_librarys_faster_collective(monkeypatch):
    """``auto`` is the running library's flavour's choice (Open MPI: blocking; MPICH, Intel MPI:
    persistent); an explicit value wins.  Oracle: the library's version text."""
    from mpi4py import MPI

    version = MPI.Get_library_version()
    expect = "blocking" if "Open MPI" in version else "persistent"
    with hpcbsp.BSP(MPI.COMM_SELF) as ctx:
        assert ctx.extension.control_collective == expect
        assert ctx.extension.compiled_sync
        for _ in range(3):
            ctx.sync()
        assert ctx.superstep == 3
    for collective in ("persistent", "blocking"):
        monkeypatch.setenv("HPCBSP_CONTROL_COLLECTIVE", collective)
        with hpcbsp.BSP(MPI.COMM_SELF) as ctx:
            assert ctx.extension.control_collective == collective and ctx.extension.compiled_sync


@mpi
def test_ranks_that_disagree_on_the_collective_are_told_on_every_rank(bsp, monkeypatch):
    """Rank 0 asks for the blocking collective, the others for the persistent one (which never
    match): every rank raises the same BadInput when the context is made, instead of hanging."""
    from hpcbsp.runtime.errors import BadInput

    monkeypatch.setenv("HPCBSP_CONTROL_COLLECTIVE", "blocking" if bsp.pid == 0 else "persistent")
    with pytest.raises(BadInput, match="HPCBSP_CONTROL_COLLECTIVE .* give every rank the same value"):
        hpcbsp.BSP(bsp.comm)
    bsp.sync()  # the outer context still works on every rank
