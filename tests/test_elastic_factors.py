"""The weight gradients' sum from sufficient factors (hpcbsp/elastic/torch/factors.py).

    python -m pytest -q tests/test_elastic_factors.py
    mpiexec -n 2 python -m pytest -q --only-mpi tests/test_elastic_factors.py   (and -n 3)

Oracles: torch's own autograd gradient of an unwrapped copy of the network on each rank's
mini-batch, summed with numpy over the ranks (allgathered); which layers are factored, by hand
(``rows (in + out) < in out``).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is not installed (extra 'torch')")
from hpcbsp.elastic.torch import TorchModel, build_net  # noqa: E402
from hpcbsp.elastic.torch.factors import LinearFactors  # noqa: E402

ROWS = 8


def _model():
    torch.manual_seed(0)
    net, _ = build_net("student", 16, 4, hidden=48, depth=2)  # Linear 16x48, 48x48, 48x4
    return TorchModel(net, n_features=16, n_classes=4), copy.deepcopy(net)


def _batch(rank: int, rows: int = ROWS):
    rng = np.random.default_rng(rank)
    return rng.standard_normal((rows, 16)).astype(np.float32), rng.integers(0, 4, rows)


def _autograd(net, rank: int) -> np.ndarray:
    X, y = _batch(rank)
    net.zero_grad()
    torch.nn.functional.cross_entropy(net(torch.from_numpy(X)), torch.from_numpy(y)).backward()
    return torch.cat([p.grad.flatten() for p in net.parameters()]).numpy()


def _sum_by_factors(comm, model) -> tuple[np.ndarray, LinearFactors]:
    factors = LinearFactors(comm, model, ROWS)
    X, y = _batch(comm.Get_rank())
    g, _ = model.grad(model.get_weights(), X, y)
    factors.finish(timeout=60.0)
    return g, factors


def test_only_layers_whose_factors_are_smaller_than_their_weight_are_factored() -> None:
    from mpi4py import MPI

    model, _ = _model()
    factors = LinearFactors(MPI.COMM_SELF, model, ROWS)
    try:
        # 16x48: 8 x (16 + 48) = 512 < 768 values: factored.  48x48: 768 < 2304: factored.
        # 48x4: 8 x 52 = 416 >= 192: not.
        assert factors.params == {0, 2}
        assert [p.requires_grad for p in model.module.parameters()] == [False, True, False, True, True, True]
    finally:
        factors.close()
    assert all(p.requires_grad for p in model.module.parameters())
    assert LinearFactors(MPI.COMM_SELF, _model()[0], 1000).params == set()


def test_one_rank_gets_autograds_gradient() -> None:
    from mpi4py import MPI

    model, net = _model()
    g, factors = _sum_by_factors(MPI.COMM_SELF, model)
    factors.close()
    np.testing.assert_allclose(g, _autograd(net, 0), rtol=1e-5, atol=1e-6)


def test_a_batch_larger_than_the_rows_is_refused_with_the_rank() -> None:
    from mpi4py import MPI

    model, _ = _model()
    factors = LinearFactors(MPI.COMM_SELF, model, ROWS)
    X, y = _batch(0, rows=ROWS + 1)
    with pytest.raises(ValueError, match="rank 0: sufficient factors take inputs of at most 8 rows"):
        model.grad(model.get_weights(), X, y)
    factors.close()


@pytest.mark.mpi(min_size=2)
def test_the_factored_sum_is_numpys_sum_of_every_ranks_gradient() -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        model, net = _model()
        g, factors = _sum_by_factors(comm, model)
        factored = factors.params
        factors.close()
        offsets = np.cumsum([0] + model.sizes)
        want = np.sum(comm.allgather(_autograd(net, comm.Get_rank())), axis=0, dtype=np.float64)
        for i in sorted(factored):
            lo, hi = offsets[i], offsets[i + 1]
            np.testing.assert_allclose(g[lo:hi], want[lo:hi], rtol=1e-5, atol=1e-6)
        # every rank multiplied the same stacked factors: the same bits
        parts = np.concatenate([g[offsets[i]:offsets[i + 1]] for i in sorted(factored)])
        assert all(b == parts.tobytes() for b in comm.allgather(parts.tobytes()))
    finally:
        comm.Free()
