"""PyTorch models on the MPI parameter server and the allreduce baseline (mpiexec -n 2 and -n 3).

    mpiexec -n 3 python -m pytest -q --with-mpi --only-mpi tests/test_elastic_torch_mpi.py

Oracle: a plain torch loop on rank 0 (a copy of the module never wrapped by the adapter) that
averages the workers' gradients on the same mini-batches and takes one SGD step.  The server's
BSP and the serverless allreduce must both equal it to float32 rounding; with bfloat16
gradients on the wire the oracle rounds each gradient with torch's own bfloat16 conversion.
The policies' invariants (SSP/DSSP bounds, ElasticBSP supersteps, backup counts) are checked on
the decisions taken during real torch runs.  Every wait is bounded (``TIMEOUT``).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (extra 'torch'; `make install` "
                                             "installs the pinned CPU build)")
from torch import nn  # noqa: E402

from hpcbsp.elastic.data import make_teacher  # noqa: E402
from hpcbsp.elastic.policies import make_policy  # noqa: E402
from hpcbsp.elastic.policies.base import PolicyOptions  # noqa: E402
from hpcbsp.elastic.torch import TorchModel, build_net  # noqa: E402

TIMEOUT = 60.0
LR, BATCH, STEPS = 0.3, 8, 6


@pytest.fixture
def comm():
    from mpi4py import MPI

    c = MPI.COMM_WORLD.Dup()
    yield c
    c.Free()


def _setup(name: str = "cnn", hidden: int = 12):
    torch.manual_seed(0)
    net, shape = build_net(name, 16, 4, hidden=hidden, depth=2)
    reference = copy.deepcopy(net)
    model = TorchModel(net, input_shape=shape, n_classes=4)
    data = make_teacher(n_samples=160, n_features=16, n_classes=4, teacher_hidden=8, seed=3)
    return model, reference, shape, data


def _batch(data, worker: int, step: int):
    idx = np.random.default_rng([worker, step]).choice(len(data.y_train), BATCH, replace=False)
    return data.X_train[idx], data.y_train[idx]


def _grad_fn(model, data, worker: int):
    step = [0]

    def grad(weights: np.ndarray) -> np.ndarray:
        X, y = _batch(data, worker, step[0])
        step[0] += 1
        return model.grad(weights, X, y)[0]
    return grad


def _oracle(reference: nn.Module, shape, data, n_workers: int, steps: int, round_grad=None,
            decay: float = 0.0) -> np.ndarray:
    params = list(reference.parameters())
    for t in range(steps):
        grads = []
        for k in range(n_workers):
            X, y = _batch(data, k, t)
            reference.zero_grad()
            xt = torch.from_numpy(X.astype(np.float32)).reshape((-1,) + shape)
            nn.functional.cross_entropy(reference(xt), torch.from_numpy(y)).backward()
            g = [p.grad.clone() for p in params]
            grads.append(g if round_grad is None else [round_grad(x) for x in g])
        with torch.no_grad():
            for i, p in enumerate(params):
                p -= LR / (1 + decay * t) * torch.stack([g[i] for g in grads]).mean(dim=0)
    return torch.cat([p.detach().flatten() for p in params]).numpy()


def _pace(comm):
    # Worker k computes for real and then waits k ms more: unequal, quick.
    return lambda start, compute: compute + 0.001 * (comm.Get_rank() - 1)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("grad_format, decay", [(None, 0.0), (None, 0.5), ("bfloat16", 0.0)])
def test_bsp_server_with_a_torch_model_equals_sgd_on_averaged_gradients(comm, grad_format, decay) -> None:
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    model, reference, shape, data = _setup()
    n = comm.Get_size() - 1
    if comm.Get_rank() == 0:
        res = serve(comm, make_policy("bsp"), model.get_weights(), LR, max_updates=STEPS,
                    timeout=TIMEOUT, grad_format=grad_format, lr_decay=decay)
        assert res.weights.dtype == np.float32 and res.log.updates == STEPS
        rounding = None if grad_format is None else (lambda g: g.to(torch.bfloat16).to(torch.float32))
        expected = _oracle(reference, shape, data, n, STEPS, rounding, decay)
        np.testing.assert_allclose(res.weights, expected, rtol=2e-5, atol=2e-6)
        if grad_format == "bfloat16":  # the rounding acted: far from the full-precision result
            assert not np.allclose(res.weights, _oracle(*_setup()[1:3], data, n, STEPS), rtol=1e-6, atol=0)
    else:
        res_w = work(comm, _grad_fn(model, data, comm.Get_rank() - 1), model.n_params,
                     dtype=np.float32, grad_format=grad_format, pace=_pace(comm), timeout=TIMEOUT)
        assert res_w.iterations == STEPS


# The ways to sum: the sharded step (bucket_bytes None), the buckets summed after the gradient
# (no hooks), and started from the backward pass's hooks, in buckets of 64 bytes (smaller than
# every weight matrix) and of the default 25 MiB (larger than the model).
MODES = {"sharded": (None, False), "bucketed": (1 << 25, False), "hooks-tiny": (64, True),
         "hooks": (25 << 20, True)}


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("decay", [0.0, 0.5])
def test_allreduce_baseline_with_a_torch_model_equals_sgd_on_averaged_gradients(comm, decay, mode) -> None:
    from hpcbsp.elastic.allreduce import run_allreduce

    bucket_bytes, hooks = MODES[mode]
    model, reference, shape, data = _setup("student")
    n = comm.Get_size() - 1
    w0 = model.get_weights()
    if comm.Get_rank() == 0:
        res = run_allreduce(comm, None, w0, LR, max_updates=STEPS,
                            eval_fn=lambda w: model.evaluate(w, data.X_test, data.y_test),
                            eval_every=0.0001, timeout=TIMEOUT, lr_decay=decay, bucket_bytes=bucket_bytes)
        expected = _oracle(reference, shape, data, n, STEPS, decay=decay)
        np.testing.assert_allclose(res.weights, expected, rtol=2e-5, atol=2e-6)
        log = res.log
        assert log.updates == STEPS and log.applied.tolist() == [STEPS] * n
        assert log.staleness.values().tolist() == [0] * (STEPS * n)
        assert log.curve and log.curve[-1][3] == STEPS  # the final evaluation, on the final weights
        assert log.curve[-1][1:3] == pytest.approx(model.evaluate(expected, data.X_test, data.y_test))
    else:
        res_w = run_allreduce(comm, _grad_fn(model, data, comm.Get_rank() - 1), w0, LR,
                              max_updates=STEPS, eval_every=0.0001, pace=_pace(comm), timeout=TIMEOUT,
                              lr_decay=decay, bucket_bytes=bucket_bytes, gradients=model if hooks else None)
        assert res_w.iterations == STEPS and model.packs == 0


@pytest.mark.mpi(min_size=2)
def test_allreduce_baseline_with_sufficient_factors_equals_sgd_on_averaged_gradients(comm) -> None:
    """The 32 x 32 layer's weight (1,024 values) is summed from 8 x (32 + 32) factors; the
    other parameters by the buckets."""
    from hpcbsp.elastic.allreduce import run_allreduce

    model, reference, shape, data = _setup("student", hidden=32)
    n = comm.Get_size() - 1
    w0 = model.get_weights()
    if comm.Get_rank() == 0:
        res = run_allreduce(comm, None, w0, LR, max_updates=STEPS, timeout=TIMEOUT)
        expected = _oracle(reference, shape, data, n, STEPS)
        np.testing.assert_allclose(res.weights, expected, rtol=2e-5, atol=2e-6)
        assert res.log.updates == STEPS
    else:
        res_w = run_allreduce(comm, _grad_fn(model, data, comm.Get_rank() - 1), w0, LR, max_updates=STEPS,
                              timeout=TIMEOUT, gradients=model, factor_rows=BATCH)
        assert res_w.iterations == STEPS and model.packs == 0
        assert all(p.requires_grad for p in model.module.parameters())  # (restored at the end)


@pytest.mark.mpi(min_size=2)
def test_allreduce_baseline_stops_on_worker_zeros_clock(comm) -> None:
    from hpcbsp.elastic.allreduce import run_allreduce

    model, _, _, data = _setup("student")
    w0 = model.get_weights()
    if comm.Get_rank() == 0:
        res = run_allreduce(comm, None, w0, LR, duration=0.5,
                            eval_fn=lambda w: model.evaluate(w, data.X_test, data.y_test),
                            eval_every=0.1, timeout=TIMEOUT)
        log = res.log
        assert 0.5 <= log.duration_s < 3.0
        # Every worker computed one gradient more than was applied: the step that voted stop.
        assert np.all(log.pushes == log.applied + 1) and np.all(log.applied == log.updates)
        times = [t for t, *_ in log.curve]
        # The start's evaluation and the end's at least (a rank starved of its core, as beside
        # other jobs, may take the whole half second for one step), in the clock's order.
        assert len(times) >= 2 and times == sorted(times) and times[-1] == log.duration_s
    else:
        run_allreduce(comm, _grad_fn(model, data, comm.Get_rank() - 1), w0, LR, duration=0.5,
                      eval_every=0.1, pace=_pace(comm), timeout=TIMEOUT)


class _Recorder:
    """Records every decision the policy takes (worker, decision), in order."""

    def __init__(self, policy):
        self.events = []
        inner = policy.on_push

        def on_push(worker, now):
            d = inner(worker, now)
            self.events.append((worker, d))
            return d
        policy.on_push = on_push


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", ["ssp", "dssp", "elastic", "backup"])
def test_policy_invariants_hold_while_training_a_torch_model(comm, name) -> None:
    from hpcbsp.elastic.server import serve
    from hpcbsp.elastic.worker import work

    n = comm.Get_size() - 1
    if name == "backup" and n < 2:
        pytest.skip("backup workers need at least 2 workers: run under mpiexec -n 3")
    model, _, _, data = _setup("student")
    options = PolicyOptions(s=1, s_lower=1, s_upper=4, R=4, backup=1)
    if comm.Get_rank() == 0:
        policy = make_policy(name, options)
        rec = _Recorder(policy)
        res = serve(comm, policy, model.get_weights(), 0.05, max_updates=40, timeout=TIMEOUT)
        counts = np.zeros(n, dtype=np.int64)
        since_barrier = np.zeros(n, dtype=np.int64)
        for worker, d in rec.events:
            counts[worker] += 1
            since_barrier[worker] += 1
            for w in d.release:
                gap = counts[w] - counts.min()
                if name == "ssp":
                    assert gap <= options.s
                if name == "dssp":
                    assert gap <= options.s_upper
            if name == "elastic" and len(d.release) == n and n > 1:
                assert np.all(since_barrier <= options.R)
                since_barrier[:] = 0
            if name == "backup" and d.apply:
                assert len(d.apply) == n - options.backup
        log = res.log
        assert log.updates == 40 and np.all(np.isfinite(res.weights))
        if name == "backup":
            assert log.applied.sum() == 40 * (n - 1)
            assert np.all(log.pushes - log.applied - log.dropped <= 1)
        assert len(log.staleness) == log.applied.sum() and log.staleness.values().min() >= 0
    else:
        slow = 0.004 * (comm.Get_rank() - 1)
        work(comm, _grad_fn(model, data, comm.Get_rank() - 1), model.n_params, dtype=np.float32,
             pace=lambda start, compute: compute + slow, timeout=TIMEOUT)
