"""The parameter server's shared window, pipelined (:mod:`hpcbsp.elastic.transport`).

    mpiexec -n 2 python -m pytest -q --only-mpi tests/test_elastic_transport.py   (and -n 3)

Oracles:

* a numpy replay of the run's pushes.  Every worker's gradient is a function of the worker and
  of its iteration alone (random float32 or float64 values, seeded by both), so the order in
  which the server applied the pushes (its log, ASP: one update per push, in arrival order)
  fixes every version of the weights: ``w_{k+1} = w_k - lr * g``, numpy's bits.  The server's
  final weights must be the replay's bit for bit, on both transports (so the window's equal the
  messages'), and every weights a worker was given must be, bit for bit, the replay's version
  that the reply named: a chunk of another version, copied too early or changed during the copy,
  would show.  On the window the gradients travel through the workers' slots in it (the
  ``auto`` cases); a worker that naps after writing each chunk of its gradient makes the server
  read chunks as they come, and a chunk read before it was written would hold the previous
  push's values and show in the final weights.  With bfloat16 and float16 gradients (in slots of
  2 bytes a value, encoded as the worker writes them and decoded as the server's update reads
  them) the replay rounds each gradient as the wire does (``Wire.roundtrip``: wire.py's and
  numpy's conversions).
* for the window's layout and the worker's chunk-by-chunk copy (serially, on a fake window): a
  hand-made schedule of a server that writes each chunk only when the worker waits for it, so a
  chunk copied before it is ready holds the old values; the same for the gradient's chunks (a
  worker that writes each only when the server waits for it), and for the policies that hold a
  gradient (BSP's mean of the workers' gradients, numpy's, after all of them arrived).
"""
from __future__ import annotations

import hashlib
import time

import numpy as np
import pytest

from hpcbsp.elastic.transport import CHUNK_BYTES, LINE, SharedWeights, TornWeights, WindowStores
from hpcbsp.elastic.wire import Wire, pieces

TIMEOUT = 30.0


def _digest(values: np.ndarray) -> bytes:
    return hashlib.blake2b(values.tobytes(), digest_size=16).digest()


def _gradient(worker: int, iteration: int, size: int, dtype: type) -> np.ndarray:
    return np.random.default_rng([worker, iteration]).standard_normal(size).astype(dtype)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("transport", ["messages", "auto", "auto, slow chunks", "auto, slow gradient chunks",
                                       "auto, bfloat16 gradients", "auto, float16 gradients",
                                       "auto, slots over the memory share",
                                       "auto, float64 gradients"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_version_a_worker_copies_is_the_numpy_replay_of_the_pushes_bit_for_bit(dtype, transport,
                                                                                     monkeypatch, capfd) -> None:
    """``auto, slow chunks``: the server naps 3 ms after publishing each chunk, so that the
    worker surely copies chunks while later ones are still being updated (the pipelined path,
    which the replies' count of streamed copies must then show).  ``auto, slow gradient
    chunks``: each worker naps 3 ms after writing each chunk of its gradient into its slot, so
    that the server surely updates chunks while later ones are still being written.  ``auto,
    slots over the memory share``: ``$HPCBSP_SLOT_MEMORY_SHARE`` so small that the slots do not
    fit: rank 0 says so in one line, and the gradients travel as messages (no write into a slot).
    ``auto, float64 gradients``: the gradient function returns float64 whatever the weights'
    dtype; the push converts it as it writes the slot (the replay: numpy's conversion)."""
    from mpi4py import MPI

    from hpcbsp.elastic.policies import make_policy
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    slow = transport == "auto, slow chunks"
    grad_format = next((f for f in ("bfloat16", "float16") if f in transport), None)
    if slow and MPI.COMM_WORLD.Get_rank() == 0:
        publish = SharedWeights.publish

        def napping(self, *args) -> None:
            publish(self, *args)
            time.sleep(0.003)
        monkeypatch.setattr(SharedWeights, "publish", napping)
    if transport == "auto, slow gradient chunks" and MPI.COMM_WORLD.Get_rank() > 0:
        write = WindowStores.__call__  # (a worker's only writes into the window: its gradient's chunks)

        def napping_write(self, *args):
            out = write(self, *args)
            time.sleep(0.003)
            return out
        monkeypatch.setattr(WindowStores, "__call__", napping_write)
    over_share = "memory share" in transport
    grad_dtype = np.float64 if "float64 gradients" in transport else dtype
    slot_writes = [0]
    if over_share:
        monkeypatch.setenv("HPCBSP_SLOT_MEMORY_SHARE", "1e-12")
    push = SharedWeights.push

    def counted(self, *args) -> None:
        slot_writes[0] += 1
        push(self, *args)
    monkeypatch.setattr(SharedWeights, "push", counted)
    transport = transport.split(",")[0]
    comm = MPI.COMM_WORLD.Dup()
    try:
        P, lr, updates = 700_001, 0.01, 30  # several chunks and a short last one
        assert len(pieces(P, np.dtype(dtype).itemsize, CHUNK_BYTES)) >= 3
        w0 = np.random.default_rng(7).standard_normal(P).astype(dtype)
        me = comm.Get_rank()
        if me == 0:
            res = serve(comm, make_policy("asp"), w0, lr, max_updates=updates, timeout=TIMEOUT,
                        transport=transport, grad_format=grad_format)
            order = [w for w, _ in res.log.push_times]
            final = res.weights
        else:
            got: list[bytes] = []
            it = [0]

            def grad_fn(weights: np.ndarray) -> np.ndarray:
                got.append(_digest(weights))
                g = _gradient(me - 1, it[0], P, grad_dtype)
                it[0] += 1
                return g

            res_w = work(comm, grad_fn, P, dtype=dtype, timeout=TIMEOUT, record_versions=True,
                         transport=transport, grad_format=grad_format)
            order, final = None, None
        order = comm.bcast(order, root=0)
        # The replay: ASP applies every push in the order it came, up to max_updates.
        w = w0.copy()
        replay = [_digest(w)]
        count = [0] * (comm.Get_size() - 1)
        wire = Wire(grad_format or np.dtype(dtype).name)
        for pusher in order[:updates]:
            w -= dtype(lr) * wire.roundtrip(_gradient(pusher, count[pusher], P, grad_dtype)).astype(dtype)
            count[pusher] += 1
            replay.append(_digest(w))
        if me == 0:
            assert final.tobytes() == w.tobytes()
        else:
            # Each gradient was computed on the weights of the version the reply before it named.
            assert len(got) == res_w.iterations == len(res_w.versions) - 1
            wrong = [v for v, seen in zip(res_w.versions, got) if seen != replay[v]]
            assert wrong == [], f"worker {me - 1} was given weights other than versions {wrong}"
        # Streamed replies: one per push applied and released at once (all but the first reply
        # and the stop), where the worker saw the first chunk announced before the header came
        # (with the naps, at least half of them: a worker descheduled for the whole update of
        # 3 chunks or more, 9 ms and up, sees the header first and copies the whole).
        applied = comm.bcast(res.log.applied.tolist() if me == 0 else None, root=0)
        if over_share:
            assert slot_writes[0] == 0  # the gradients came as messages
            lines = [x for x in capfd.readouterr().err.splitlines() if "HPCBSP_SLOT_MEMORY_SHARE" in x]
            if me == 0:
                assert len(lines) == 1 and "gradients as messages" in lines[0], lines
                size = np.dtype(dtype).itemsize
                assert (f"({P:,} weights of {size} bytes + {comm.Get_size() - 1} workers x {P:,} gradient "
                        f"values of {size} bytes)") in lines[0]
            else:
                assert lines == []
        elif me > 0 and transport == "auto":
            assert slot_writes[0] == res_w.iterations  # (the contrast: every push through the slot)
        if me > 0:
            assert transport == "auto" or res_w.streamed == 0
            if slow:
                assert 2 * res_w.streamed >= applied[me - 1] >= 1, (res_w.streamed, applied)
    finally:
        comm.Free()


class _FakeWindow:
    """What :class:`SharedWeights` needs of an MPI window (its ``Sync`` only), counting calls."""

    def __init__(self) -> None:
        self.syncs = 0

    def Sync(self) -> None:  # noqa: N802 (mpi4py's name)
        self.syncs += 1


def _shared(size: int, chunks_ready: list[int], workers: int = 2) -> SharedWeights:
    """A window of ``size`` float32 weights and ``workers`` gradient slots, on a fake window."""
    n = len(chunks_ready)
    words = np.array(chunks_ready + [-1] * (workers + workers * n + workers), dtype=np.int64)
    return SharedWeights(_FakeWindow(), np.zeros(size, dtype=np.float32),  # type: ignore[arg-type]
                         words[:n], words[n:n + workers], np.zeros((workers, size), dtype=np.float32),
                         words[n + workers:n + workers + workers * n].reshape(workers, n),
                         words[n + workers + workers * n:])


def test_the_server_reads_each_gradient_chunk_only_once_the_worker_has_written_it() -> None:
    """Hand-made schedule: the worker (worker 1, push 0 then push 1) writes a chunk of its
    gradient only when the server waits for it; a chunk the server read before it was written
    would hold the slot's old values."""
    size = 3 * (CHUNK_BYTES // 4) + 5  # 4 chunks
    shared = _shared(size, [-1] * 4)
    for push in (0, 1):
        grad = np.arange(size, dtype=np.float32) * (push + 2)
        shared.grads[1][:] = np.nan  # (the old values)
        written: list[int] = []
        writes = iter(range(len(shared.chunks)))

        def worker_writes_next() -> None:
            # The worker's side, one chunk at a time: SharedWeights.push's stores, then its word.
            c = next(writes)
            piece = shared.chunks[c]
            shared.pushes(shared.grads[1][piece], grad[piece])
            shared.arrived[1, c] = push
            written.append(c)

        def wait(test) -> None:
            assert test() is None  # not written yet: the server must not read it
            worker_writes_next()
            assert test() is True

        seen = np.empty(size, dtype=np.float32)
        for piece in shared.chunks:
            shared.arrive(1, piece, push, wait)
            seen[piece] = shared.grads[1][piece]
        assert written == [0, 1, 2, 3] and seen.tobytes() == grad.tobytes()
        shared.take(1, push)
        assert int(shared.taken[1]) == push and int(shared.taken[0]) == -1


def test_a_worker_writes_its_whole_gradient_chunk_by_chunk_and_only_after_the_server_took_the_last() -> None:
    size = 2 * (CHUNK_BYTES // 4) + 3  # 3 chunks
    shared = _shared(size, [-1] * 3)
    grad = np.random.default_rng(5).standard_normal(size).astype(np.float32)
    shared.push(0, grad, 0)
    assert shared.grads[0].tobytes() == grad.tobytes() and (shared.grads[1] == 0).all()
    assert shared.arrived[0].tolist() == [0, 0, 0] and shared.arrived[1].tolist() == [-1, -1, -1]
    with pytest.raises(TornWeights, match="worker 0: the server has taken push -1 out of the shared window, "
                                          "not 0, before push 1"):
        shared.push(0, grad, 1)  # push 0 not taken yet: its slot must not be written
    shared.take(0, 0)
    shared.push(0, -grad, 1)
    assert shared.grads[0].tobytes() == (-grad).tobytes() and shared.arrived[0].tolist() == [1, 1, 1]


def test_a_gradient_chunk_that_moved_past_the_push_read_is_refused() -> None:
    size = 2 * (CHUNK_BYTES // 4)
    shared = _shared(size, [-1, -1])
    shared.arrived[1] = [3, 4]  # chunk 1 already holds the next push: the protocol was broken
    with pytest.raises(TornWeights, match="chunk 1 of worker 1's gradient in the shared window holds push 4, not 3"):
        shared.take(1, 3)
    assert int(shared.taken[1]) == -1


def test_a_held_gradient_is_used_only_once_all_its_chunks_arrived() -> None:
    """BSP holds each gradient until every worker pushed, then applies their mean: with a
    gradient that arrives a chunk at a time (each chunk written when the coordinator asks for it,
    NaN before), the update must be numpy's ``w - lr * mean(g_0, g_1)`` of the whole gradients."""
    from hpcbsp.elastic.coordinator import Coordinator, Stream
    from hpcbsp.elastic.policies import make_policy

    size, lr = 10, 0.5
    parts = [slice(0, 4), slice(4, 8), slice(8, 10)]
    rng = np.random.default_rng(9)
    w0 = rng.standard_normal(size).astype(np.float32)
    grads = [rng.standard_normal(size).astype(np.float32) for _ in range(2)]
    coord = Coordinator(make_policy("bsp"), 2, w0, lr)
    for w in range(2):
        slot = np.full(size, np.nan, dtype=np.float32)
        asked: list[slice] = []

        def arrive(piece: slice, slot=slot, g=grads[w], asked=asked) -> None:
            slot[piece] = g[piece]
            asked.append(piece)

        coord.push(w, slot, 0.0, Stream(parts, lambda piece: pytest.fail("BSP streams no update"), arrive))
        assert asked == parts
    want = w0 - np.float32(lr) * np.mean(np.stack(grads), axis=0)
    assert coord.version == 1 and coord.weights.tobytes() == want.tobytes()


def test_a_streamed_copy_takes_each_chunk_only_once_it_holds_the_announced_version() -> None:
    size = 3 * (CHUNK_BYTES // 4) + 5  # 4 chunks, the last one of 5 values
    shared = _shared(size, [-1] * 4)
    assert [(s.start, s.stop) for s in shared.chunks] == [
        (0, CHUNK_BYTES // 4), (CHUNK_BYTES // 4, CHUNK_BYTES // 2), (CHUNK_BYTES // 2, 3 * CHUNK_BYTES // 4),
        (3 * CHUNK_BYTES // 4, size)]
    new = np.arange(size, dtype=np.float32)
    shared.array[:] = -1.0  # the old version's values
    written: list[int] = []

    def wait(test) -> None:
        # The server: a chunk is written and published only when the worker waits for it.
        assert test() is None  # not ready yet: the worker must not copy it
        c = len(written)
        piece = shared.chunks[c]
        shared.array[piece] = new[piece]
        shared.publish(0, piece, 5)
        written.append(c)
        assert test() is True

    out = np.zeros(size, dtype=np.float32)
    shared.copy_streamed(out, 5, wait)
    assert written == [0, 1, 2, 3] and out.tobytes() == new.tobytes()
    assert int(shared.expect[0]) == 5 and int(shared.expect[1]) == -1  # announced with chunk 0, to worker 0
    assert shared.announced(0) == 5 and shared.announced(1) == -1


def test_a_chunk_that_moved_past_the_announced_version_is_refused() -> None:
    size = 2 * (CHUNK_BYTES // 4)
    shared = _shared(size, [5, 6])  # chunk 1 already holds version 6: the protocol was broken
    with pytest.raises(TornWeights, match="chunk 1 of the shared weights holds version 6, not 5"):
        shared.copy_streamed(np.zeros(size, dtype=np.float32), 5, lambda test: pytest.fail("no wait"))


@pytest.mark.mpi(min_size=1)
def test_the_control_words_sit_after_the_weights_each_on_its_own_cache_line() -> None:
    """Oracle: addresses, and a write of every weight that leaves every word as it was."""
    from mpi4py import MPI

    from hpcbsp.elastic.transport import open_transport

    comm = MPI.COMM_WORLD.Dup()
    try:
        P = 3 * (CHUNK_BYTES // 8) + 1  # float64: 4 chunks
        shared = open_transport(comm, "auto", None, P, np.dtype(np.float64))
        assert shared is not None  # (one node)
        with shared:
            assert len(shared.chunks) == 4 and shared.ready.size == 4
            assert shared.expect.size == comm.Get_size() - 1
            start = shared.array.__array_interface__["data"][0]
            words = [w.__array_interface__["data"][0] for w in (shared.ready, shared.expect)]
            assert words[0] >= start + 8 * P and words[0] % LINE == 0
            assert shared.ready.strides == shared.expect.strides == (LINE,)
            assert words[1] == words[0] + 4 * LINE
            assert (shared.ready == -1).all() and (shared.expect == -1).all()
            comm.Barrier()
            if comm.Get_rank() == 0:
                shared.array[:] = np.inf
            shared.sync()
            comm.Barrier()
            shared.sync()
            assert (shared.ready == -1).all() and (shared.expect == -1).all()
            assert np.isinf(shared.array).all()
            assert shared.grads is None and shared.arrived is None and shared.taken is None
            comm.Barrier()
    finally:
        comm.Free()


@pytest.mark.mpi(min_size=2)
def test_the_gradient_slots_sit_between_the_weights_and_the_words_each_from_a_cache_line() -> None:
    """Oracle: addresses, and writes of every weight and every slot value that leave every word
    as it was and each other's values alone."""
    from mpi4py import MPI

    from hpcbsp.elastic.transport import open_transport

    comm = MPI.COMM_WORLD.Dup()
    try:
        P = 3 * (CHUNK_BYTES // 4) + 3  # float32: 4 chunks; 4 P is not a multiple of a line
        workers = comm.Get_size() - 1
        shared = open_transport(comm, "auto", None, P, np.dtype(np.float32), gradients=True)
        assert shared is not None and shared.grads is not None
        with shared:
            line = -(-4 * P // LINE) * LINE
            start = shared.array.__array_interface__["data"][0]
            assert shared.grads.shape == (workers, P) and shared.grads.dtype == np.float32
            for w in range(workers):
                assert shared.grads[w].__array_interface__["data"][0] == start + (1 + w) * line
                assert shared.grads[w].flags.c_contiguous
            words = [a.__array_interface__["data"][0] for a in (shared.ready, shared.expect, shared.arrived, shared.taken)]
            assert words[0] == start + (1 + workers) * line
            assert words[1] == words[0] + 4 * LINE and words[2] == words[1] + workers * LINE
            assert words[3] == words[2] + 4 * workers * LINE
            assert shared.arrived.shape == (workers, 4) and shared.arrived.strides == (4 * LINE, LINE)
            assert shared.taken.shape == (workers,) and shared.taken.strides == (LINE,)
            everything = (shared.ready, shared.expect, shared.arrived, shared.taken)
            assert all((a == -1).all() for a in everything)
            comm.Barrier()
            me = comm.Get_rank()
            if me == 0:
                shared.array[:] = np.inf
            else:
                shared.grads[me - 1][:] = me
            shared.sync()
            comm.Barrier()
            shared.sync()
            assert all((a == -1).all() for a in everything)
            assert np.isinf(shared.array).all()
            assert all((shared.grads[w] == w + 1).all() for w in range(workers))
            comm.Barrier()
    finally:
        comm.Free()
