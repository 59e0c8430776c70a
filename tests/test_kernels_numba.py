"""Numba kernels (CSR mat-vec, Jacobi sweeps, softmax regression) against numpy oracles.

The whole file also runs once more with ``NUMBA_DISABLE_JIT=1`` in a subprocess
(``test_file_passes_with_jit_disabled``), so the kernels' plain-Python form is tested as well.
"""
from __future__ import annotations

import re

import numba
import numpy as np
import pytest
from numba.core.dispatcher import Dispatcher
from test_kernels_build import run  # a subprocess outside any enclosing mpiexec job

from hpcbsp import kernels
from hpcbsp.kernels import linear, reference

JIT_DISABLED = bool(numba.config.DISABLE_JIT)


def compiled_functions(*modules) -> dict[str, Dispatcher]:
    """The Numba-compiled functions the modules hold, by module and name."""
    return {f"{mod.__name__}.{name}": v for mod in modules for name, v in vars(mod).items()
            if isinstance(v, Dispatcher)}


def random_csr(rng, nrows, ncols, density=0.3, duplicates=True):
    """A CSR triple with empty rows, unsorted columns and (optionally) duplicate entries."""
    mask = rng.random((nrows, ncols)) < density
    rows, cols = np.nonzero(mask)
    if duplicates and rows.size:
        extra = rng.integers(0, rows.size, rows.size // 4)
        rows, cols = np.concatenate([rows, rows[extra]]), np.concatenate([cols, cols[extra]])
    order = np.lexsort((rng.random(rows.size), rows))   # grouped by row, columns shuffled
    rows, cols = rows[order], cols[order]
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=nrows))])
    return indptr, cols, rng.standard_normal(rows.size)


def test_kernels_are_compiled_unless_jit_is_disabled():
    # the CSR mat-vec, its index check and the two Jacobi sweeps; none with the JIT disabled
    assert len(compiled_functions(linear)) == (0 if JIT_DISABLED else 4)
    assert kernels.compiled_status()["numba"] != JIT_DISABLED


@pytest.mark.parametrize("shape", [(0, 3), (1, 1), (7, 5), (40, 60)])
def test_csr_matvec_matches_dense(shape):
    rng = np.random.default_rng(sum(shape))
    indptr, indices, data = random_csr(rng, *shape)
    x = rng.standard_normal(shape[1])
    got = kernels.csr_matvec(indptr, indices, data, x)
    np.testing.assert_allclose(got, reference.csr_matvec(indptr, indices, data, x),
                               rtol=1e-12, atol=1e-12)


def test_csr_matvec_dtypes_views_and_out():
    rng = np.random.default_rng(1)
    indptr, indices, data = random_csr(rng, 20, 30)
    xbase = rng.standard_normal(60)
    x = xbase[::2]                                     # non-contiguous
    expect = reference.csr_matvec(indptr, indices, data, x)
    out = np.empty(20)
    got = kernels.csr_matvec(indptr.astype(np.int32), indices.astype(np.uint16),
                             data.astype(np.float32), x, out=out)
    assert got is out
    np.testing.assert_allclose(got, reference.csr_matvec(indptr, indices, data.astype(np.float32), x),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)


def test_csr_matvec_rejects_bad_input():
    indptr, indices, data = np.array([0, 1, 2]), np.array([0, 3]), np.array([1.0, 2.0])
    with pytest.raises(IndexError, match="column index 3 at position 1 is out of bounds for 3 columns"):
        kernels.csr_matvec(indptr, indices, data, np.ones(3))
    with pytest.raises(IndexError, match="column index -1"):
        kernels.csr_matvec(indptr, np.array([0, -1]), data, np.ones(3))
    with pytest.raises(ValueError, match="inconsistent"):
        kernels.csr_matvec(np.array([0, 1, 3]), indices, data, np.ones(4))
    with pytest.raises(ValueError, match="non-decreasing"):
        kernels.csr_matvec(np.array([0, 2, 1, 2]), indices, data, np.ones(4))
    with pytest.raises(ValueError, match="out must be"):
        kernels.csr_matvec(indptr, indices, data, np.ones(4), out=np.empty(3))


def dominant_system(rng, n):
    a = rng.standard_normal((n, n))
    a[np.arange(n), np.arange(n)] = np.abs(a).sum(axis=1) + 1.0   # strictly diagonally dominant
    return a, rng.standard_normal(n)


@pytest.mark.parametrize("row0, nb", [(0, 12), (0, 5), (4, 3), (9, 3), (11, 1), (5, 0)])
def test_jacobi_dense_and_csr_blocks(row0, nb):
    rng = np.random.default_rng(row0 * 100 + nb)
    a, b = dominant_system(rng, 12)
    a[rng.random(a.shape) < 0.4] = 0.0                             # some zeros off the diagonal
    a[np.arange(12), np.arange(12)] = np.abs(a).sum(axis=1) + 1.0
    x = rng.standard_normal(12)
    rows = slice(row0, row0 + nb)
    expect = reference.jacobi_sweep_dense(a[rows], b[rows], x, row0)
    got = kernels.jacobi_sweep_dense(a[rows], b[rows], x, row0)
    np.testing.assert_allclose(got, expect, rtol=1e-12, atol=1e-12)
    block = a[rows]
    r, c = np.nonzero(block)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=nb))]).astype(np.int64)
    got_csr = kernels.jacobi_sweep_csr(indptr, c, block[r, c], b[rows], x, row0)
    np.testing.assert_allclose(got_csr, expect, rtol=1e-12, atol=1e-12)


def test_jacobi_converges_to_the_solution():
    # independent oracle: repeated sweeps over two row blocks reach np.linalg.solve
    rng = np.random.default_rng(7)
    a, b = dominant_system(rng, 30)
    x = np.zeros(30)
    for _ in range(200):
        top = kernels.jacobi_sweep_dense(a[:13], b[:13], x, 0)
        bottom = kernels.jacobi_sweep_dense(a[13:], b[13:], x, 13)
        x = np.concatenate([top, bottom])
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-10, atol=1e-10)


def test_jacobi_csr_duplicate_diagonal_entries_add_up():
    # row 0 of [[4, 1], [1, 3]] with its diagonal given as 1 + 3
    got = kernels.jacobi_sweep_csr([0, 3], [0, 1, 0], [1.0, 1.0, 3.0], [5.0], [0.0, 2.0], 0)
    assert got.tolist() == [(5.0 - 1.0 * 2.0) / 4.0]


def test_jacobi_rejects_zero_diagonal_and_bad_blocks():
    a = np.array([[2.0, 1.0], [1.0, 0.0]])
    with pytest.raises(ValueError, match="zero diagonal in row 1"):
        kernels.jacobi_sweep_dense(a, [1.0, 1.0], [0.0, 0.0], 0)
    with pytest.raises(ValueError, match="missing diagonal in row 3"):
        kernels.jacobi_sweep_csr([0, 1], [0], [1.0], [1.0], np.zeros(5), 3)
    with pytest.raises(ValueError, match="block"):
        kernels.jacobi_sweep_dense(a, [1.0, 1.0], [0.0, 0.0], 1)
    with pytest.raises(ValueError, match="outside"):
        kernels.jacobi_sweep_csr([0, 1], [0], [1.0], [1.0], np.zeros(5), 5)


@pytest.mark.parametrize("m, d, c", [(0, 3, 2), (1, 1, 1), (25, 6, 4), (60, 10, 7)])
def test_softmax_matches_numpy(m, d, c):
    rng = np.random.default_rng(m + d + c)
    w, x, y = rng.standard_normal((d, c)), rng.standard_normal((m, d)), rng.integers(0, c, m)
    for average in (True, False):
        loss, grad = kernels.softmax_loss_grad(w, x, y, average=average)
        ref_loss, ref_grad = reference.softmax_loss_grad(w, x, y, average=average)
        assert grad.shape == (d, c)
        assert np.isclose(loss, ref_loss, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("m, d, c", [(0, 3, 2), (1, 0, 1), (1, 1, 1), (25, 6, 4)])
def test_softmax_with_an_intercept_row_matches_numpy(m, d, c):
    rng = np.random.default_rng(10 * m + d + c)
    w, x, y = rng.standard_normal((d + 1, c)), rng.standard_normal((m, d)), rng.integers(0, c, m)
    for average in (True, False):
        loss, grad = kernels.softmax_loss_grad(w, x, y, average=average, intercept=True)
        ref_loss, ref_grad = reference.softmax_loss_grad(w, x, y, average=average, intercept=True)
        assert grad.shape == (d + 1, c)
        assert np.isclose(loss, ref_loss, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-12)
    # the same as the plain form on x with a column of ones
    aug = np.hstack([x, np.ones((m, 1))])
    plain = kernels.softmax_loss_grad(w, aug, y)
    with_row = kernels.softmax_loss_grad(w, x, y, intercept=True)
    assert np.isclose(plain[0], with_row[0], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(plain[1], with_row[1], rtol=1e-12, atol=1e-14)


def test_softmax_gradient_matches_finite_differences():
    rng = np.random.default_rng(3)
    w, x, y = rng.standard_normal((4, 3)), rng.standard_normal((15, 4)), rng.integers(0, 3, 15)
    _, grad = kernels.softmax_loss_grad(w, x, y)
    h = 1e-6
    for j in range(4):
        for k in range(3):
            wp, wm = w.copy(), w.copy()
            wp[j, k] += h
            wm[j, k] -= h
            fd = (kernels.softmax_loss_grad(wp, x, y)[0] - kernels.softmax_loss_grad(wm, x, y)[0]) / (2 * h)
            assert abs(fd - grad[j, k]) < 1e-6


def test_softmax_extreme_logits_stay_finite_and_views_work():
    rng = np.random.default_rng(4)
    w = rng.standard_normal((3, 5)) * 500.0             # logits in the thousands
    xbase = rng.standard_normal((40, 6))
    x = xbase[::2, ::2]                                  # non-contiguous (20, 3)
    y = rng.integers(0, 5, 20).astype(np.int32)
    loss, grad = kernels.softmax_loss_grad(w.astype(np.float32), x, y)
    ref_loss, ref_grad = reference.softmax_loss_grad(w.astype(np.float32), x, y)
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    assert np.isclose(loss, ref_loss, rtol=1e-10)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-8, atol=1e-10)


def test_softmax_rejects_bad_labels_and_shapes():
    w, x = np.zeros((2, 3)), np.zeros((4, 2))
    with pytest.raises(ValueError, match="label 3 at position 2 is outside"):
        kernels.softmax_loss_grad(w, x, [0, 1, 3, 0])
    with pytest.raises(ValueError, match="label -1"):
        kernels.softmax_loss_grad(w, x, [0, -1, 0, 0])
    with pytest.raises(ValueError, match="need w"):
        kernels.softmax_loss_grad(w, np.zeros((4, 3)), [0, 0, 0, 0])
    with pytest.raises(ValueError, match=r"need w \(d \+ 1, C\) with intercept"):
        kernels.softmax_loss_grad(w, x, [0, 0, 0, 0], intercept=True)


@pytest.mark.skipif(JIT_DISABLED, reason="this is the run with the JIT disabled")
def test_file_passes_with_jit_disabled():
    proc = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", __file__], timeout=280,
               NUMBA_DISABLE_JIT="1")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    # skipped there: this test and the cache test, which need the JIT (every other test ran)
    assert " passed" in proc.stdout and re.search(r"\b2 skipped", proc.stdout)


@pytest.mark.skipif(JIT_DISABLED, reason="with the JIT disabled there is nothing to compile or cache")
def test_every_numba_kernel_caches_its_compilation():
    # cache=True: compiled once per machine and kept on disk, not at every start of every rank
    from hpcbsp.elastic import models
    from hpcbsp.kernels import learning

    dispatchers = compiled_functions(linear, learning, models)
    assert len(dispatchers) >= 10, sorted(dispatchers)
    # private on purpose: Numba says whether cache=True is on only through the dispatcher's _cache
    assert {name: type(d._cache).__name__ for name, d in dispatchers.items()} == \
        {name: "FunctionCache" for name in dispatchers}
