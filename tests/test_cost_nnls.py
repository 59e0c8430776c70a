"""NNLS (Lawson-Hanson) against the exhaustive search over supports, and its optimality conditions."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from hpcbsp.cost.nnls import nnls


def brute_force(a: np.ndarray, b: np.ndarray) -> float:
    """Least residual over all supports whose unconstrained solution is feasible: the NNLS optimum."""
    best = np.inf
    n = a.shape[1]
    for r in range(n + 1):
        for support in itertools.combinations(range(n), r):
            x = np.zeros(n)
            if support:
                x[list(support)] = np.linalg.lstsq(a[:, list(support)], b, rcond=None)[0]
            if (x >= -1e-12).all():
                best = min(best, float(np.linalg.norm(a @ x - b)))
    return best


@pytest.mark.parametrize("seed", range(40))
def test_matches_exhaustive_search(seed):
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(2, 9)), int(rng.integers(1, 6))
    a = rng.standard_normal((m, n))
    if seed % 4 == 0 and n >= 2:
        a[:, -1] = a[:, 0] + 0.5 * a[:, 1]  # collinear columns
    b = rng.standard_normal(m)
    x, rnorm = nnls(a, b)
    assert (x >= 0).all()
    assert rnorm == pytest.approx(float(np.linalg.norm(a @ x - b)))
    assert rnorm <= brute_force(a, b) + 1e-10


def test_kkt_conditions():
    rng = np.random.default_rng(7)
    a = rng.standard_normal((30, 6))
    b = rng.standard_normal(30)
    x, _ = nnls(a, b)
    grad = a.T @ (a @ x - b)  # gradient of ½||ax - b||²
    assert np.all(grad[x > 0] == pytest.approx(0.0, abs=1e-9))
    assert np.all(grad[x == 0] >= -1e-9)


def test_feasible_unconstrained_solution_is_returned():
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 2.0, size=(20, 3))
    truth = np.array([1.0, 2.0, 3.0])
    x, rnorm = nnls(a, a @ truth)
    np.testing.assert_allclose(x, truth, rtol=1e-10)
    assert rnorm < 1e-10


def test_shape_errors():
    with pytest.raises(ValueError):
        nnls(np.ones((3, 2)), np.ones(4))
