"""Row-block BSP Jacobi (hpcbsp.apps.rowjacobi): the Numba sweep kernels inside a BSP program.

Oracles: a plain numpy Jacobi iteration on the dense matrix (same sweeps, same stop rule) and
``numpy.linalg.solve``.  Multi-rank runs use an odd order, so the row blocks are uneven.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from mpi_helpers import run_mpi

import hpcbsp
from hpcbsp.apps.rowjacobi import CSRRows, dominant_system, jacobi, solve
from hpcbsp.runtime.api.distribution import block_range

mpi = pytest.mark.mpi(min_size=2)


def numpy_jacobi(a: np.ndarray, b: np.ndarray, eps: float, max_iter: int) -> tuple[np.ndarray, int]:
    d = np.diag(a)
    off = a - np.diag(d)
    x = np.zeros_like(b)
    for k in range(1, max_iter + 1):
        new = (b - off @ x) / d
        step = math.sqrt(float(np.sum((new - x) ** 2)))
        x = new
        if step < eps:
            return x, k
    return x, max_iter


def dense_of(a: "np.ndarray | CSRRows", n: int) -> np.ndarray:
    return a if isinstance(a, np.ndarray) else a.to_dense(n)


def check_against_numpy(bsp: hpcbsp.BSP, n: int, fmt: str) -> None:
    a, b = dominant_system(n, fmt, per_row=4, seed=3)
    dense = dense_of(a, n)
    expect, sweeps = numpy_jacobi(dense, b, 1e-11, 500)
    lo, hi = block_range(n, bsp.nprocs, bsp.pid)
    rows = a[lo:hi] if fmt == "dense" else a.rows(lo, hi)
    res = jacobi(bsp, rows, b[lo:hi], n, eps=1e-11, max_iter=500)
    assert res.converged
    # One superstep per sweep, the same stop as the oracle's (the step norm is summed in
    # another order, so allow one sweep either way), and the same iterate to rounding.
    assert abs(res.sweeps - sweeps) <= 1
    assert len([r for r in bsp.ledger if r.label == "jacobi sweep"]) == res.sweeps
    np.testing.assert_allclose(res.x_block, expect[lo:hi], rtol=0, atol=1e-12)
    np.testing.assert_allclose(res.x_block, np.linalg.solve(dense, b)[lo:hi], rtol=0, atol=1e-9)
    assert res.residual == pytest.approx(np.linalg.norm(b - dense @ np.concatenate(
        bsp.comm.allgather(res.x_block))), rel=1e-6, abs=1e-14)


@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_one_rank_matches_numpy_jacobi(fmt):
    with hpcbsp.BSP() as bsp:
        check_against_numpy(bsp, 60, fmt)


@mpi
@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_several_ranks_match_numpy_jacobi(fmt):
    with hpcbsp.BSP() as bsp:
        check_against_numpy(bsp, 61, fmt)


@mpi
@pytest.mark.parametrize("fmt", ["dense", "csr"])
def test_more_ranks_than_rows(fmt):
    with hpcbsp.BSP() as bsp:
        n = bsp.nprocs - 1  # some rank holds no row
        res, err = solve(bsp, n, fmt, 1, 1e-12, 200, seed=1)
        assert res.converged and err < 1e-10
        assert res.x_block.size == len(range(*block_range(n, bsp.nprocs, bsp.pid)))
        assert bsp.allreduce(int(res.x_block.size == 0), op="max") == 1


def test_csr_system_is_the_dense_one():
    a, _ = dominant_system(30, "csr", per_row=6, seed=2)
    dense = a.to_dense(30)
    x = np.random.default_rng(0).standard_normal(30)
    np.testing.assert_allclose(a.matvec(x), dense @ x, rtol=1e-13, atol=1e-13)
    part = a.rows(7, 19)
    np.testing.assert_allclose(part.matvec(x), (dense @ x)[7:19], rtol=1e-13, atol=1e-13)
    assert np.all(np.abs(np.diag(dense)) > np.abs(dense).sum(axis=1) - np.abs(np.diag(dense)))


def test_bad_blocks_are_named():
    with hpcbsp.BSP() as bsp:
        a, b = dominant_system(10, "dense")
        with pytest.raises(ValueError, match=r"rows of shape \(9, 10\), expected \(10, 10\)"):
            jacobi(bsp, a[:9], b, 10)
        with pytest.raises(ValueError, match="b block"):
            jacobi(bsp, a, b[:3], 10)


def test_command_line():
    res = run_mpi(3, ["-m", "hpcbsp.apps.rowjacobi", "--n", "301", "--format", "csr"], timeout=120)
    assert res.returncode == 0, res.output
    assert "converged in" in res.stdout and "on 3 ranks" in res.stdout
    err = float(res.stdout.rsplit("max error vs numpy.linalg.solve = ", 1)[1].split()[0])
    assert err < 1e-8
    bad = run_mpi(1, ["-m", "hpcbsp.apps.rowjacobi", "--n", "0"], timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.output
    assert "argument --n: '0' is not a positive integer" in bad.stderr
