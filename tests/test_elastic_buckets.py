"""The bucketed allreduce of a flat gradient (hpcbsp/elastic/buckets.py).

    python -m pytest -q tests/test_elastic_buckets.py
    mpiexec -n 2 python -m pytest -q --only-mpi tests/test_elastic_buckets.py   (and -n 3)

Oracles: the bucket plan against hand-computed ranges; the sum against numpy's sum of every
rank's vector (regenerated on each rank from its seed), for buckets smaller than one parameter,
of a few parameters, and larger than the whole vector, with the parameters reported ready in
backward order, in a scrambled order, or not at all (the buckets then start in ``finish``).
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.elastic.buckets import BucketedReduce, plan_buckets


def test_buckets_fill_from_the_end_the_first_of_its_own_size() -> None:
    # 10 values of 4 bytes: a first bucket of 8 bytes (2 values), then 12 bytes (3 values).
    assert plan_buckets(10, 4, 12, 8) == [(8, 10), (5, 8), (2, 5), (0, 2)]
    assert plan_buckets(10, 4, 1000) == [(0, 10)]       # larger than the vector: one bucket
    assert plan_buckets(3, 8, 1) == [(2, 3), (1, 2), (0, 1)]  # below one value: one value each
    assert plan_buckets(0, 4, 16) == []
    with pytest.raises(ValueError, match="bucket_bytes 0"):
        plan_buckets(10, 4, 0)


def test_buckets_hold_whole_parameters_and_cut_only_a_parameter_larger_than_a_bucket() -> None:
    # Parameters [0,3) [3,8) [8,10), buckets of 4 values, the first of 2: [8,10) fills the first;
    # [3,8) is larger than a bucket: cut from its end into [4,8) and [3,4); [0,3) is what is left.
    assert plan_buckets(10, 1, 4, 2, sizes=[3, 5, 2]) == [(8, 10), (4, 8), (3, 4), (0, 3)]
    assert plan_buckets(4, 1, 2, sizes=[1, 1, 1, 1]) == [(2, 4), (0, 2)]
    # An open bucket is closed before a large parameter is cut: [9,10) alone, then the 8.
    assert plan_buckets(10, 1, 4, sizes=[1, 8, 1]) == [(9, 10), (5, 9), (1, 5), (0, 1)]
    assert plan_buckets(10, 1, 100, sizes=[3, 5, 2]) == [(0, 10)]
    with pytest.raises(ValueError, match="summing to 9, not 10"):
        plan_buckets(10, 1, 4, sizes=[3, 5, 1])


def _vector(seed: int, size: int, dtype) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(size).astype(dtype)


SIZES = [7, 300, 1, 45, 1000]  # parameters, in the vector's order (1353 values)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_bytes,first", [(16, 16), (400, 40), (1 << 20, None), (4 * 1353, 8)],
                         ids=["below-a-parameter", "a-few-parameters", "above-the-model", "first-small"])
@pytest.mark.parametrize("order", ["backward", "scrambled", "none"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_bucketed_sum_is_numpys_sum_of_every_ranks_vector(bucket_bytes, first, order, dtype) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        p, me = comm.Get_size(), comm.Get_rank()
        reduce = BucketedReduce(comm, np.zeros(sum(SIZES), dtype=dtype), SIZES, bucket_bytes, first)
        for step in range(3):  # (the reducer is reused: each step sums afresh)
            reduce.vector[:] = _vector(10 * step + me, sum(SIZES), dtype)
            params = list(range(len(SIZES)))
            if order == "backward":
                params.reverse()
            elif order == "scrambled":
                params = [2, 4, 0, 3, 1]
            else:
                params = []
            for i in params:
                reduce.ready(i)
            total = reduce.finish(vote=me + 1, timeout=60.0)
            assert total == p * (p + 1) // 2
            want = np.sum([_vector(10 * step + r, sum(SIZES), dtype) for r in range(p)], axis=0, dtype=np.float64)
            tol = 1e-5 if dtype == np.float32 else 1e-13
            np.testing.assert_allclose(reduce.vector, want, rtol=tol, atol=tol)
            # every rank holds the same bits (the update each applies is the same)
            assert all(v == reduce.vector.tobytes() for v in comm.allgather(reduce.vector.tobytes()))
    finally:
        comm.Free()


def test_a_vector_that_is_not_the_parameters_is_refused() -> None:
    from mpi4py import MPI

    with pytest.raises(ValueError, match="sum of the parameters' sizes"):
        BucketedReduce(MPI.COMM_SELF, np.zeros(10), [3, 4], 16)


def test_the_torch_models_hook_calls_each_parameter_once_its_gradient_is_final() -> None:
    """Oracle: the gradient vector after backward (each slice, as the hook saw it, must already
    be the final one), and torch's backward order (the last layer's parameters first)."""
    torch = pytest.importorskip("torch")
    from hpcbsp.elastic.data import make_teacher
    from hpcbsp.elastic.torch import TorchModel, build_net

    torch.manual_seed(0)
    net, _ = build_net("student", 16, 4, hidden=12, depth=2)
    model = TorchModel(net, n_features=16, n_classes=4)
    data = make_teacher(n_samples=80, n_features=16, n_classes=4, teacher_hidden=8, seed=3)
    offsets = np.concatenate([[0], np.cumsum(model.sizes)])
    seen: dict[int, np.ndarray] = {}
    vector = model.gradient_vector()
    model.on_gradient(lambda i: seen.setdefault(i, vector[offsets[i]:offsets[i + 1]].copy()))
    w = model.get_weights()
    g, _ = model.grad(w, data.X_train[:8], data.y_train[:8])
    assert g.__array_interface__["data"][0] == vector.__array_interface__["data"][0]
    assert sorted(seen) == list(range(len(model.sizes))) and list(seen)[0] >= len(model.sizes) - 2
    for i, part in seen.items():
        assert part.tobytes() == g[offsets[i]:offsets[i + 1]].tobytes() and np.any(part != 0)
    model.on_gradient(None)
    seen.clear()
    model.grad(w, data.X_train[:8], data.y_train[:8])
    assert seen == {}


def test_parameters_alone_get_buckets_of_their_own_and_skipped_ones_none() -> None:
    from mpi4py import MPI

    # Parameters [0,3) [3,8) [8,10), buckets of 100 values: one bucket, unless [3,8) is alone.
    assert plan_buckets(10, 1, 100, sizes=[3, 5, 2], alone={1}) == [(8, 10), (3, 8), (0, 3)]
    assert plan_buckets(4, 1, 2, sizes=[1, 1, 1, 1], alone={2}) == [(3, 4), (2, 3), (0, 2)]
    reduce = BucketedReduce(MPI.COMM_SELF, np.zeros(10), [3, 5, 2], 400, skip={1})
    assert reduce.buckets == [(8, 10), (0, 3)]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("bucket_bytes", [16, 1 << 20])
def test_skipped_parameters_are_left_as_they_are_and_the_rest_is_summed(bucket_bytes) -> None:
    """Oracle: numpy's sum of every rank's vector outside parameter 1 and 3, this rank's own
    values inside them (what a sum by other means then overwrites)."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD.Dup()
    try:
        p, me = comm.Get_size(), comm.Get_rank()
        reduce = BucketedReduce(comm, np.zeros(sum(SIZES)), SIZES, bucket_bytes, 8, skip={1, 3})
        mine = _vector(me, sum(SIZES), np.float64)
        reduce.vector[:] = mine
        for i in reversed(range(len(SIZES))):
            reduce.ready(i)
        assert reduce.finish(vote=1, timeout=60.0) == p
        want = np.sum([_vector(r, sum(SIZES), np.float64) for r in range(p)], axis=0)
        offsets = np.cumsum([0] + SIZES)
        for i in (1, 3):
            want[offsets[i]:offsets[i + 1]] = mine[offsets[i]:offsets[i + 1]]
        np.testing.assert_allclose(reduce.vector, want, rtol=1e-13, atol=1e-13)
    finally:
        comm.Free()
