"""The MPI parameter server: rank 0 serves, the other ranks work (run under mpiexec -n 2 and -n 3).

    mpiexec -n 2 python -m pytest -q --with-mpi --only-mpi tests/test_elastic_server.py

Every wait inside the server and the workers is bounded (``timeout``), so a broken protocol
fails the test instead of hanging it.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.elastic.policies import BSP, Backup, Decision, ElasticBSP, make_policy

TIMEOUT = 30.0


@pytest.fixture
def comm():
    from mpi4py import MPI

    c = MPI.COMM_WORLD.Dup()
    yield c
    c.Free()


def _delay(comm) -> float:
    # Worker k (rank k + 1) takes (k + 1) ms: heterogeneous but quick.
    return 0.001 * comm.Get_rank()


@pytest.mark.mpi(min_size=2)
def test_bsp_server_is_gradient_descent_in_closed_form(comm) -> None:
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    target = np.array([3.0, -1.0, 0.5, 2.0])
    w0 = np.zeros(4)
    if comm.Get_rank() == 0:
        res = serve(comm, BSP(), w0, 0.2, max_updates=15, timeout=TIMEOUT)
        np.testing.assert_allclose(res.weights, target + 0.8 ** 15 * (w0 - target), rtol=1e-12)
        assert res.log.updates == 15
        assert res.log.staleness.values().tolist() == [0] * (15 * (comm.Get_size() - 1))
    else:
        res_w = work(comm, lambda w: w - target, 4, iteration_time=lambda t: _delay(comm),
                     timeout=TIMEOUT, record_versions=True)
        # BSP: each reply carries the next version; the last one (stop) carries version 15.
        assert res_w.versions == list(range(16))
        assert res_w.iterations == 15


@pytest.mark.mpi(min_size=2)
def test_asp_server_applies_every_gradient_once(comm) -> None:
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    w0 = np.full(3, 10.0)
    if comm.Get_rank() == 0:
        res = serve(comm, make_policy("asp"), w0, 0.5, max_updates=40, timeout=TIMEOUT)
        iterations = comm.gather(None, root=0)[1:]
        # Constant gradient 1: each update subtracts lr * 1.
        np.testing.assert_allclose(res.weights, w0 - 0.5 * res.log.updates)
        assert res.log.updates == 40 == res.log.applied.sum()
        # The 40th update's pusher is told to stop at once; nobody is ever held, so the other
        # workers are computing then, and push once more to hear "stop".
        extra = (res.log.pushes - res.log.applied).tolist()
        assert sorted(extra) == [0] + [1] * (comm.Get_size() - 2)
        assert iterations == res.log.pushes.tolist()
        assert res.log.wait_s.sum() == 0.0
    else:
        res_w = work(comm, lambda w: np.ones(3), 3, iteration_time=lambda t: _delay(comm),
                     timeout=TIMEOUT, record_versions=True)
        comm.gather(res_w.iterations, root=0)
        assert all(b > a for a, b in zip(res_w.versions, res_w.versions[1:]))


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("transport", ["messages", "auto"])
@pytest.mark.parametrize("grad_dtype", [np.float32, np.float64])
def test_asp_streams_a_large_model_in_pieces_and_no_worker_sees_torn_weights(comm, grad_dtype, transport) -> None:
    """A float32 model of 2.8 MB travels in 3 pieces, and ASP's updates are streamed piece by
    piece.  Oracle, exact in float32: the gradient is constant (small integers ``g``) and the
    step 0.5, so the weights after ``k`` updates are ``w0 - 0.5 k g`` in every element; every
    weights a worker receives must be one such version as a whole (a piece of another version
    would show), and the versions it sees must grow.  A float32 gradient is sent from the
    array itself, a float64 one is encoded first: both arrive the same.  Both transports: the
    weights as messages in pieces, and (``auto`` on one node) in a shared-memory window."""
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.wire import pieces
    from hpcbsp.elastic.worker import work

    P, lr, updates = 700_001, 0.5, 40
    assert len(pieces(P, 4)) == 3
    g = (1 + np.arange(P) % 7).astype(np.float32)
    w0 = np.full(P, 1000.0, dtype=np.float32)
    if comm.Get_rank() == 0:
        res = serve(comm, make_policy("asp"), w0, lr, max_updates=updates, timeout=TIMEOUT,
                    transport=transport)
        assert res.weights.dtype == np.float32 and res.log.updates == updates
        np.testing.assert_array_equal(res.weights, w0 - lr * updates * g)
        res.weights += 1.0  # the result is the caller's own array (the window is gone)
    else:
        seen: list[int] = []
        grad = g.astype(grad_dtype)

        def grad_fn(w: np.ndarray) -> np.ndarray:
            k = (w0 - w) / (lr * g)
            assert np.all(k == k[0]), "the weights mix two versions"
            seen.append(int(k[0]))
            return grad
        res_w = work(comm, grad_fn, P, dtype=np.float32, timeout=TIMEOUT, transport=transport)
        assert res_w.iterations == len(seen) and seen == sorted(seen) and len(set(seen)) == len(seen)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("transport", ["messages", "auto"])
def test_bsp_server_in_closed_form_with_a_model_in_pieces(comm, transport) -> None:
    """As the small closed-form test, with 300,000 float64 weights (2.4 MB: 3 pieces per reply,
    sent whole to every worker at each barrier)."""
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    P = 300_000
    target = np.sin(np.arange(P, dtype=np.float64))
    w0 = np.zeros(P)
    if comm.Get_rank() == 0:
        res = serve(comm, BSP(), w0, 0.2, max_updates=8, timeout=TIMEOUT, transport=transport)
        np.testing.assert_allclose(res.weights, target + 0.8 ** 8 * (w0 - target), rtol=1e-12, atol=1e-15)
    else:
        res_w = work(comm, lambda w: w - target, P, timeout=TIMEOUT, record_versions=True, transport=transport)
        assert res_w.versions == list(range(9))


@pytest.mark.mpi(min_size=2)
def test_a_bad_transport_or_weights_dtype_on_one_rank_stops_every_rank_with_its_name(comm) -> None:
    """A bad choice on one rank is found in the collective set-up: every rank raises, the
    others naming that rank, instead of the others waiting for it until their timeout."""
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.transport import TransportError
    from hpcbsp.elastic.worker import work

    last = comm.Get_size() - 1
    if comm.Get_rank() == 0:
        with pytest.raises(TransportError, match=f"rank 0: the parameter server run could not start: rank {last} failed"):
            serve(comm, make_policy("asp"), np.zeros(5), 0.1, max_updates=3, timeout=TIMEOUT)
    elif comm.Get_rank() == last:
        with pytest.raises(TransportError, match=f"rank {last}: transport 'pigeons' is not one of auto, messages"):
            work(comm, lambda w: w, 5, timeout=TIMEOUT, transport="pigeons")
    else:
        with pytest.raises(TransportError, match="could not start"):
            work(comm, lambda w: w, 5, timeout=TIMEOUT)
    if comm.Get_rank() == last:
        with pytest.raises(TransportError, match="parameters travel as float64 or float32, not int64"):
            work(comm, lambda w: w, 5, timeout=TIMEOUT, dtype=np.int64)
    elif comm.Get_rank() == 0:
        with pytest.raises(TransportError, match=f"rank {last} failed"):
            serve(comm, make_policy("asp"), np.zeros(5), 0.1, max_updates=3, timeout=TIMEOUT)
    else:
        with pytest.raises(TransportError):
            work(comm, lambda w: w, 5, timeout=TIMEOUT)


@pytest.mark.mpi(min_size=2)
def test_workers_given_another_model_than_the_server_are_refused_at_the_start(comm) -> None:
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.transport import TransportError
    from hpcbsp.elastic.worker import work

    for transport in ("messages", "auto"):
        if comm.Get_rank() == 0:
            with pytest.raises(TransportError, match="different models: 5 to 6 values of 8 to 8 bytes"):
                serve(comm, make_policy("asp"), np.zeros(5), 0.1, max_updates=3, timeout=TIMEOUT,
                      transport=transport)
        else:
            with pytest.raises(TransportError, match="give every worker the server's n_params and dtype"):
                work(comm, lambda w: w, 6, timeout=TIMEOUT, transport=transport)


@pytest.mark.mpi(min_size=2)
def test_a_gradient_of_the_wrong_length_is_named_on_the_worker(comm, capsys) -> None:
    """On the shared window, the worker's error is also said at once, on stderr, before the
    window's release waits for the server to give up."""
    from hpcbsp.elastic.protocol import ServerTimeout
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    if comm.Get_rank() == 0:
        with pytest.raises(ServerTimeout, match="no push from any worker"):
            serve(comm, make_policy("asp"), np.zeros(5), 0.1, max_updates=3, timeout=2.0)
    else:
        with pytest.raises(ValueError, match=r"worker \d+: the gradient function returned ndarray \(4,\); "
                                             r"the model has 5 parameters"):
            work(comm, lambda w: np.zeros(4), 5, timeout=2.0)
        err = capsys.readouterr().err
        assert f"[hpcbsp] rank {comm.Get_rank()}: ValueError: worker" in err and "shared window" in err


@pytest.mark.parametrize("n, itemsize", [(0, 4), (1, 8), (262144, 4), (262145, 4), (10**6 + 3, 8)])
def test_reply_pieces_cover_the_values_in_order(n: int, itemsize: int) -> None:
    from hpcbsp.elastic.wire import PIECE_BYTES, pieces

    got = pieces(n, itemsize)
    assert got[0].start == 0 and got[-1].stop == n and len(got) >= 1
    assert all(a.stop == b.start for a, b in zip(got, got[1:]))
    assert all(0 < (s.stop - s.start) * itemsize <= PIECE_BYTES for s in got) or n == 0
    assert len(got) == max(1, -(-n * itemsize // PIECE_BYTES))


class _BarrierVersions:
    """Wraps ElasticBSP: the weights version at each barrier (every push applies one update)."""

    def __init__(self, policy: ElasticBSP):
        self.versions: list[int] = []
        applied = [0]
        inner = policy.on_push

        def on_push(worker: int, now: float) -> Decision:
            d = inner(worker, now)
            applied[0] += len(d.apply) > 0
            if len(d.release) == policy.n_workers:
                self.versions.append(applied[0])
            return d

        policy.on_push = on_push  # type: ignore[method-assign]


@pytest.mark.mpi(min_size=2)
def test_elastic_server_releases_everyone_on_the_same_weights_at_barriers(comm) -> None:
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    if comm.Get_rank() == 0:
        policy = ElasticBSP(R=4)
        spy = _BarrierVersions(policy)
        res = serve(comm, policy, np.zeros(2), 0.1, max_updates=60, timeout=TIMEOUT)
        barriers = comm.bcast(spy.versions, root=0)
        assert res.policy_stats["barriers"] == len(barriers) >= 3
        assert res.log.updates == res.log.applied.sum()
        seen = comm.gather(None, root=0)[1:]
        assert all(v is True for v in seen)
    else:
        res_w = work(comm, lambda w: np.ones(2), 2, iteration_time=lambda t: 2 * _delay(comm),
                     timeout=TIMEOUT, record_versions=True)
        barriers = comm.bcast(None, root=0)
        # Every worker left every barrier with exactly the barrier's weights version.
        has_all = set(barriers) <= set(res_w.versions)
        comm.gather(has_all, root=0)
        assert has_all, (barriers, res_w.versions)


@pytest.mark.mpi(min_size=2)
def test_backup_server_counts_the_first_gradients_and_drops_the_late(comm) -> None:
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    n_workers = comm.Get_size() - 1
    if n_workers < 2:
        pytest.skip("backup workers need at least 2 workers: run under mpiexec -n 3")
    if comm.Get_rank() == 0:
        res = serve(comm, Backup(1), np.zeros(1), 1.0, max_updates=20, timeout=TIMEOUT)
        log = res.log
        assert log.updates == 20
        # Each step averages exactly n - 1 gradients; the rest are dropped or answered "stop".
        assert log.applied.sum() == 20 * (n_workers - 1)
        assert np.all(log.pushes - log.applied - log.dropped <= 1)
        assert log.dropped.sum() >= 1  # the slowest worker (10x) is late
        assert log.staleness.values().tolist() == [0] * int(log.applied.sum())
    else:
        slow = comm.Get_rank() == comm.Get_size() - 1
        work(comm, lambda w: np.ones(1), 1, iteration_time=lambda t: 0.02 if slow else 0.002,
             timeout=TIMEOUT)


@pytest.mark.mpi(min_size=2)
def test_default_communicator_is_a_private_duplicate() -> None:
    from mpi4py import MPI

    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    if MPI.COMM_WORLD.Get_rank() == 0:
        res = serve(None, BSP(), np.ones(2), 0.5, max_updates=3, timeout=TIMEOUT)
        np.testing.assert_allclose(res.weights, 0.5 ** 3)  # gradient w: w <- w / 2 per step
    else:
        res_w = work(None, lambda w: w.copy(), 2, timeout=TIMEOUT, record_versions=True)
        assert res_w.versions == [0, 1, 2, 3]


@pytest.mark.mpi(min_size=1)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_allreduce_step_updates_each_block_once_to_w_minus_scale_times_the_sum(bsp, dtype) -> None:
    """Oracle: numpy's ``w - scale * sum(gradients)`` with the sum over every rank's gradient
    (regenerated here), to the rounding of MPI's reduce-scatter; every rank gets the same bits; a stop vote leaves
    the weights alone."""
    from hpcbsp.elastic.allreduce import allreduce_step

    P, p, scale = 1001, bsp.nprocs, 0.05
    grads = [np.random.default_rng(r).standard_normal(P).astype(dtype) for r in range(p)]
    w = np.zeros(P + 1, dtype=dtype)
    w[:P] = np.linspace(-1, 1, P)
    nxt = np.full(P + 1, np.nan, dtype=dtype)
    buf = np.zeros(P + 1, dtype=dtype)
    buf[:P] = grads[bsp.pid]
    w0 = w.copy()
    assert allreduce_step(bsp, buf, w, nxt, scale) is False
    want = w0[:P].astype(np.float64) - scale * np.sum(grads, axis=0, dtype=np.float64)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(nxt[:P], want, rtol=tol, atol=tol)
    assert w.tobytes() == w0.tobytes()  # the old weights are read only
    assert all(x.tobytes() == nxt[:P].tobytes() for x in bsp.gather_all(nxt[:P].copy()))
    buf[P] = 1.0 if bsp.pid == 0 else 0.0  # worker 0 votes to stop
    assert allreduce_step(bsp, buf, w, nxt, scale) is True
    assert w.tobytes() == w0.tobytes()
