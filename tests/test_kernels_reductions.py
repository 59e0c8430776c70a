"""sum, dot, sqnorm and minmax against exact or numpy oracles."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from hpcbsp import kernels
from hpcbsp.kernels import reference

EPS = np.finfo(np.float64).eps
# The kernels add LANES=8 partial sums over blocks of 1024 and compensate between blocks: the
# error stays below ~(1024/8 + 8) * eps * sum|terms|; 200 leaves room and still fails on any
# real mistake (a lost or doubled term is of order sum|terms| / n).
ERR = 200 * EPS


def assert_close_to_exact(got: float, terms: np.ndarray) -> None:
    """``got`` within ERR * sum|terms| of the exact sum of the float64 ``terms``."""
    exact = math.fsum(terms.tolist())
    assert abs(got - exact) <= ERR * math.fsum(np.abs(terms).tolist()) + 1e-300, (got, exact)


FLOATS = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e150, max_value=1e150)


@settings(max_examples=150, deadline=None)
@given(hnp.arrays(np.float64, st.integers(0, 3000), elements=FLOATS))
def test_sum_dot_sqnorm_float64(x):
    y = x[::-1].copy()
    assert_close_to_exact(kernels.sum(x), x)
    assert_close_to_exact(kernels.dot(x, y), x * y)
    assert_close_to_exact(kernels.sqnorm(x), x * x)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 1023, 1024, 1025, 5000])
def test_lengths_around_lanes_and_blocks(n):
    rng = np.random.default_rng(n)
    x, y = rng.standard_normal(n), rng.standard_normal(n)
    assert_close_to_exact(kernels.sum(x), x)
    assert_close_to_exact(kernels.dot(x, y), x * y)
    assert_close_to_exact(kernels.sqnorm(x), x * x)
    assert math.isclose(kernels.sum(x), reference.sum(x), rel_tol=1e-12, abs_tol=1e-12)


def test_float32_is_read_as_float32_and_accumulated_in_float64():
    rng = np.random.default_rng(5)
    x = rng.standard_normal(10_001).astype(np.float32)
    y = rng.standard_normal(10_001).astype(np.float32)
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    # products of float32 values are exact in float64, so the float64 error bound applies
    assert_close_to_exact(kernels.sum(x), x64)
    assert_close_to_exact(kernels.dot(x, y), x64 * y64)
    assert_close_to_exact(kernels.sqnorm(x), x64 * x64)
    # and numpy's float32 result agrees to float32 rounding
    assert math.isclose(kernels.sum(x), float(np.sum(x)), rel_tol=1e-3, abs_tol=1e-2)


def test_mixed_and_integer_inputs_become_float64_for_dot():
    a = np.arange(10, dtype=np.int32)
    b = np.linspace(0, 1, 10, dtype=np.float32)
    assert_close_to_exact(kernels.dot(a, b), a.astype(np.float64) * b.astype(np.float64))
    assert kernels.sqnorm(np.arange(4)) == 14.0


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16, np.int8, np.uint8, np.uint16,
                                   np.uint32, np.uint64, np.bool_])
def test_integer_sum_is_exact(dtype):
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    rng = np.random.default_rng(6)
    if info is None:
        x = rng.integers(0, 2, 777).astype(bool)
    else:
        x = rng.integers(info.min, info.max, 777, endpoint=True, dtype=dtype)
    got = kernels.sum(x)
    assert isinstance(got, int)
    assert got == reference.sum(x)
    assert got == int(np.sum(x, dtype=np.uint64 if dtype is np.uint64 else np.int64))


def test_int64_sum_wraps_like_numpy():
    x = np.full(10, 2**62, dtype=np.int64)
    assert kernels.sum(x) == int(np.sum(x)) == reference.sum(x)
    big = np.full(5, 2**63 + 5, dtype=np.uint64)
    assert kernels.sum(big) == int(np.sum(big)) == reference.sum(big)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int64, np.int32,
                                   np.int16, np.uint8, np.uint64])
def test_minmax_matches_numpy(dtype):
    rng = np.random.default_rng(7)
    for n in (1, 2, 8, 9, 1001):
        x = (rng.standard_normal(n) * 100).astype(dtype)
        lo, hi = kernels.minmax(x)
        assert (lo, hi) == (x.min(), x.max())


def test_minmax_extremes_and_uint64_beyond_int64():
    x = np.array([3, np.iinfo(np.int64).min, np.iinfo(np.int64).max, 0])
    assert kernels.minmax(x) == (x.min(), x.max())
    u = np.array([1, 2**64 - 1, 5], dtype=np.uint64)
    assert kernels.minmax(u) == (1, 2**64 - 1)
    f = np.array([1.0, -np.inf, np.inf, 2.0])
    assert kernels.minmax(f) == (-np.inf, np.inf)


@pytest.mark.parametrize("pos", [0, 5, 8, 16, 99])
def test_minmax_nan_anywhere_gives_nan(pos):
    x = np.arange(100, dtype=np.float64)
    x[pos] = np.nan
    lo, hi = kernels.minmax(x)
    assert math.isnan(lo) and math.isnan(hi)
    ref_lo, ref_hi = reference.minmax(x)
    assert math.isnan(ref_lo) and math.isnan(ref_hi)


def test_non_contiguous_views_are_read_in_place():
    rng = np.random.default_rng(8)
    base = rng.standard_normal((300, 4))
    for view in (base[::3, 1], base[::-1, 2], base.T, base[:, ::2]):
        flat = np.ascontiguousarray(view).ravel()
        assert_close_to_exact(kernels.sum(view), flat)
        assert_close_to_exact(kernels.sqnorm(view), flat * flat)
        assert kernels.minmax(view) == (flat.min(), flat.max())
    a, b = base[::2, 0], base[1::2, 3]
    assert_close_to_exact(kernels.dot(a, b), a * b)
    ints = np.arange(100, dtype=np.int32)[::-7]
    assert kernels.sum(ints) == int(ints.sum())


def test_empty_and_bad_input():
    assert kernels.sum(np.empty(0)) == 0.0
    assert kernels.sum(np.empty(0, dtype=np.int32)) == 0
    assert kernels.dot([], []) == 0.0
    with pytest.raises(ValueError, match="empty"):
        kernels.minmax(np.empty(0))
    with pytest.raises(ValueError, match="shapes differ"):
        kernels.dot(np.ones(3), np.ones(4))
    with pytest.raises(TypeError, match="complex"):
        kernels.sum(np.ones(3, dtype=complex))
