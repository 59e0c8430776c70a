"""Exact summation against math.fsum, bit for bit, for any split of the data."""
from __future__ import annotations

import math

import numpy as np
import pytest
from float_bits import same
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbsp import kernels
from hpcbsp.kernels import reference

N = kernels.EXACT_SUM_STATE_LEN
NCHUNK = N - 4  # chunks, then the counters of NaN, +inf, -inf and elements


def merged(*parts: np.ndarray) -> float:
    """Round the integer sum of the parts' states, as the runtime's Allreduce(SUM) does."""
    total = np.zeros(N, dtype=np.int64)
    for part in parts:
        total += kernels.exact_sum_state(part)
    return kernels.exact_sum_round(total)


# Any float64 value, subnormals included; values built from a mantissa and an exponent spread
# over the whole range; and tiny ones (subnormal sums).
ANY = st.floats(allow_nan=False, allow_infinity=False)
SPREAD = st.builds(math.ldexp, st.integers(-(2**53), 2**53), st.integers(-1126, 970))
TINY = st.floats(min_value=-1e-300, max_value=1e-300)
VALUES = st.lists(st.one_of(ANY, SPREAD, TINY), max_size=60)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_matches_fsum(values):
    x = np.array(values, dtype=np.float64)
    assert same(kernels.exact_sum(x), reference.exact_sum(x))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(ANY, SPREAD), min_size=1, max_size=40), st.lists(TINY, max_size=5),
       st.randoms(use_true_random=False))
def test_catastrophic_cancellation(big, small, rnd):
    # big + (-big) shuffled cancels exactly; only the small values (and their rounding) remain
    values = big + [-v for v in big] + small
    rnd.shuffle(values)
    x = np.array(values)
    assert same(kernels.exact_sum(x), reference.exact_sum(x))


@settings(max_examples=200, deadline=None)
@given(VALUES, st.data())
def test_any_split_into_1_2_3_parts_gives_the_same_bits(values, data):
    x = np.array(values, dtype=np.float64)
    whole = kernels.exact_sum(x)
    for parts in (1, 2, 3):
        cuts = sorted(data.draw(st.lists(st.integers(0, len(x)), min_size=parts - 1,
                                         max_size=parts - 1)))
        pieces = np.split(x, cuts)
        assert same(merged(*pieces), whole)
        assert same(merged(*reversed(pieces)), whole)


def test_large_arrays_cross_many_flushes():
    rng = np.random.default_rng(0)
    n = 50_000  # several blocks of 4 * 2047 elements
    x = rng.standard_normal(n) * np.exp2(rng.integers(-1000, 1000, n))
    assert same(kernels.exact_sum(x), math.fsum(x))
    y = rng.random(n)  # one sign, few exponents: every bin fills up to its limit
    assert same(kernels.exact_sum(y), math.fsum(y))
    z = np.full(3 * 8188 + 5, np.nextafter(2.0, 3.0))  # identical values, one bin, full blocks
    assert same(kernels.exact_sum(z), math.fsum(z))
    assert same(merged(x[:12345], x[12345:], y), math.fsum(np.concatenate([x, y])))


def test_zeros_and_subnormals_inside_blocks():
    rng = np.random.default_rng(1)
    x = rng.standard_normal(20_000)
    x[rng.random(x.size) < 0.3] = 0.0
    x[rng.random(x.size) < 0.1] = -0.0
    x[rng.random(x.size) < 0.05] = 5e-324 * rng.integers(-(2**52), 2**52, 1)
    assert same(kernels.exact_sum(x), math.fsum(x))


@pytest.mark.parametrize("values, expect", [
    ([1.0, math.nan, 2.0], math.nan),
    ([math.inf, 1.0], math.inf),
    ([-math.inf, 1e308, 1e308], -math.inf),
    ([math.inf, -math.inf], math.nan),
    ([math.inf, math.inf, math.nan], math.nan),
    ([1.7e308, 1.7e308], math.inf),            # the exact sum is beyond float64: overflow
    ([-1.7e308, -1.7e308, 1.0], -math.inf),
    ([1e308, 1e308, -1e308], 1e308),           # math.fsum overflows in between; exact is fine
    ([np.finfo(float).max] * 4 + [-np.finfo(float).max] * 3, np.finfo(float).max),
    ([5e-324, 5e-324], 1e-323),                # subnormal result
    ([2.0**-1074, -(2.0**-1074)], 0.0),
    ([1.0, 2.0**-53], 1.0),                    # a tie rounds to even
    ([1.0, 2.0**-53, 2.0**-1074], 1.0 + 2.0**-52),  # just above the tie rounds up
])
def test_special_values_follow_ieee(values, expect):
    x = np.array(values)
    assert same(kernels.exact_sum(x), expect)
    assert same(reference.exact_sum(x), expect)
    for cut in range(len(values) + 1):
        assert same(merged(x[:cut], x[cut:]), expect)


@pytest.mark.parametrize("values", [
    [], [-0.0], [-0.0, -0.0, -0.0], [-0.0, 0.0], [1.0, -1.0], [-1.0, 1.0, -0.0], [-5e-324, 5e-324],
])
def test_an_exact_zero_is_positive_like_fsum_and_numpy(values):
    x = np.array(values, dtype=np.float64)
    assert same(math.fsum(values), 0.0) and same(float(np.sum(x)), 0.0)
    assert same(kernels.exact_sum(x), 0.0)
    for cut in range(len(values) + 1):
        assert same(merged(x[:cut], x[cut:]), 0.0)


def test_state_has_a_fixed_length_and_headroom_for_2_pow_20_states():
    rng = np.random.default_rng(2)
    cases = [np.empty(0), np.array([1.0]), rng.standard_normal(10_000),
             np.full(1000, -np.finfo(float).max), np.full(10, 5e-324), np.array([np.nan, -np.inf])]
    for x in cases:
        state = kernels.exact_sum_state(x)
        assert state.dtype == np.int64 and state.shape == (N,)
        chunks = state[:NCHUNK - 1]
        assert chunks.min() >= 0 and chunks.max() < 2**32  # normalised: 2**31 states fit in int64
    # 2**20 ranks holding the same data: the int64 sum of their states must not overflow and
    # must still round to the exact total (2**20 times the sum: a power of two, exact).
    x = rng.standard_normal(1000) * np.exp2(rng.integers(-1074, 950, 1000))
    state = kernels.exact_sum_state(x)
    many = state * 2**20
    assert [int(v) for v in many] == [int(v) * 2**20 for v in state]  # no wrap-around
    assert same(kernels.exact_sum_round(many), math.fsum(x) * 2**20)
    huge = kernels.exact_sum_state(np.full(4, np.finfo(float).max))
    assert same(kernels.exact_sum_round(huge * 2**20), math.inf)


def test_accumulating_into_a_state_equals_adding_states():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal(3000), rng.standard_normal(500) * 1e-200
    state = kernels.exact_sum_state(a)
    out = kernels.exact_sum_state(b, state)
    assert out is state
    assert same(kernels.exact_sum_round(state), math.fsum(np.concatenate([a, b])))
    # into a merged, not normalised state as well
    merged_state = kernels.exact_sum_state(a) + kernels.exact_sum_state(b)
    kernels.exact_sum_state(a, merged_state)
    assert same(kernels.exact_sum_round(merged_state), math.fsum(np.concatenate([a, b, a])))


def test_other_dtypes_shapes_and_strides():
    rng = np.random.default_rng(4)
    base = rng.standard_normal((200, 3))
    for view in (base[::2, 1], base[::-1, 0], base.T, base):
        assert same(kernels.exact_sum(view), math.fsum(np.ravel(view)))
    f32 = rng.standard_normal(999).astype(np.float32)
    assert same(kernels.exact_sum(f32), math.fsum(f32.astype(np.float64)))
    ints = rng.integers(-(2**53), 2**53, 999)
    assert same(kernels.exact_sum(ints), float(sum(int(v) for v in ints)))
    assert same(kernels.exact_sum([0.1] * 10), 1.0)
    assert same(kernels.exact_sum(np.float64(2.5)), 2.5)


@settings(max_examples=200, deadline=None)
@given(st.one_of(
    st.lists(st.integers(-(2**63), 2**63 - 1), max_size=40).map(lambda v: np.array(v, dtype=np.int64)),
    st.lists(st.integers(0, 2**64 - 1), max_size=40).map(lambda v: np.array(v, dtype=np.uint64))))
def test_64_bit_integers_of_any_size_sum_exactly(ints):
    # float64 would round each value beyond 2**53 first; the oracle rounds the integer sum once
    assert same(kernels.exact_sum(ints), float(sum(int(v) for v in ints)))
    assert same(kernels.exact_sum(ints[::-2]), float(sum(int(v) for v in ints[::-2])))
    assert kernels.exact_sum_state(ints)[-1] == ints.size  # the element counter, once each


def test_bad_input():
    with pytest.raises(TypeError, match="complex"):
        kernels.exact_sum(np.ones(2, dtype=complex))
    with pytest.raises(ValueError, match="length"):
        kernels.exact_sum_round(np.zeros(N - 1, dtype=np.int64))
    with pytest.raises(ValueError, match="length"):
        kernels.exact_sum_round(np.zeros(N))
    with pytest.raises(ValueError, match="state"):
        kernels.exact_sum_state([1.0], np.zeros(N, dtype=np.int32))



def test_concurrent_threads_get_their_own_bins():
    # accumulate releases the GIL; a thread finding the shared bins busy must use its own
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal(30_000) * np.exp2(rng.integers(-60, 60, 30_000)) for _ in range(8)]
    expect = [math.fsum(a) for a in arrays]
    with ThreadPoolExecutor(4) as pool:
        for _ in range(3):
            got = list(pool.map(kernels.exact_sum, arrays))
            assert all(same(g, e) for g, e in zip(got, expect))
    assert same(kernels.exact_sum(np.array([1.0, 2.0**-60])), 1.0)  # bins left clean
