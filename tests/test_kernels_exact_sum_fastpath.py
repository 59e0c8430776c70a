"""The exact sum's fast path (error-free extraction of blocks, kernels/exactsum_blocks.h).

Oracles: Python's exact rationals (``fractions.Fraction``) for a block's sum, an independent
statement of which blocks the path may take, and ``math.fsum`` (computed in the default
floating-point environment) for whole sums, including sums computed under other rounding modes
and with flush-to-zero, where the fast path must stand aside.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import platform
import shutil
import subprocess
from contextlib import contextmanager
from fractions import Fraction

import numpy as np
import pytest
from float_bits import bits, same
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbsp import kernels
from hpcbsp.kernels import exact_sum_fastpath as XS  # the fast path's testing hooks
from hpcbsp.kernels import reference

BLOCK = XS.BLOCK_VALUES
SHIFT = XS.LEVEL_SHIFT

# Not on XS.ready(): that includes the known-answer test, whose failure must fail the test
# below rather than skip the whole module.
pytestmark = pytest.mark.skipif(
    not XS.COMPILED_IN or not XS.fp_env_ready(),
    reason="the fast path is compiled out (not a GCC-compatible compiler, or fast-math flags) or "
           "the floating-point environment at start-up is not round-to-nearest without FTZ/DAZ")


def field(v: float) -> int:
    return (bits(abs(v)) >> 52) & 0x7FF


def may_extract(values: np.ndarray) -> bool:
    """When the fast path can be exact, stated without its arithmetic: every value finite, the
    largest magnitude's exponent field in [64, 2040], and every value a multiple of
    2**(field - 1123), the unit of the second extraction level (an all-zero block always)."""
    vals = [float(v) for v in values]
    if not all(math.isfinite(v) for v in vals):
        return False
    nonzero = [v for v in vals if v != 0.0]
    if not nonzero:
        return True
    f = max(field(v) for v in nonzero)
    if not 64 <= f <= 2040:
        return False
    unit = Fraction(2) ** (f - 1123)
    return all((Fraction(v) / unit).denominator == 1 for v in nonzero)


def block_value(out: tuple[int, int, int]) -> Fraction:
    hi, lo, pos = out
    return hi * Fraction(2) ** (pos - 1074) + lo * Fraction(2) ** (pos - SHIFT - 1074)


def block_values(top: int, spread: int, n: int) -> st.SearchStrategy[list[float]]:
    """n-ish values below 2**top, spread over about ``spread`` binades, random signs and
    mantissas, some zeros."""
    value = st.builds(
        lambda m, e, s: s * math.ldexp(m, e - 52),
        st.integers(2**52, 2**53 - 1), st.integers(top - spread, top - 1), st.sampled_from([1, -1]))
    return st.lists(st.one_of(value, st.just(0.0), st.just(-0.0)), min_size=1, max_size=n)


@settings(max_examples=300, deadline=None)
@given(st.integers(-960, 1019).flatmap(
    lambda top: st.integers(1, 70).flatmap(lambda spread: block_values(top, spread, 200))))
def test_a_block_is_exact_or_refused_exactly_when_it_should_be(values):
    x = np.array(values)
    out = XS.extract_block(x)
    assert (out is not None) == may_extract(x)
    if out is not None:
        assert block_value(out) == sum(Fraction(v) for v in values)


@pytest.mark.parametrize("case", [
    "full block of maxima", "alternating extremes", "cancelling pairs", "one tiny straggler",
    "straggler on the unit", "subnormal", "subnormal on the unit", "near overflow",
    "past the top field", "lowest field", "below the lowest field", "infinity", "nan", "zeros",
])
def test_edge_blocks(case):
    big = np.nextafter(2.0, 0.0)  # all mantissa bits set: the largest value of its binade
    rng = np.random.default_rng(7)
    x = {
        "full block of maxima": np.full(BLOCK, big),
        "alternating extremes": np.where(np.arange(BLOCK) % 2 == 0, big, -big),
        "cancelling pairs": np.concatenate([v := rng.standard_normal(BLOCK // 2), -v]),
        "one tiny straggler": np.array([1.0] * 10 + [math.ldexp(1 + 2**-52, -60)]),
        "straggler on the unit": np.array([1.5, math.ldexp(3.0, -100)]),  # field 1023: unit 2**-100
        "subnormal": np.array([1.0, 5e-324]),
        "subnormal on the unit": np.array([math.ldexp(1.0, -959), math.ldexp(1.0, -1059)]),
        "near overflow": np.array([np.finfo(float).max / 64, -np.finfo(float).max / 64, 1e300]),
        "past the top field": np.array([np.finfo(float).max / 4, 1.0]),
        "lowest field": np.array([math.ldexp(1.0, -959), -math.ldexp(1.5, -980)]),
        "below the lowest field": np.array([math.ldexp(1.0, -960), 1e-300]),
        "infinity": np.array([1.0, math.inf]),
        "nan": np.array([1.0, math.nan]),
        "zeros": np.array([0.0, -0.0, 0.0]),
    }[case]
    out = XS.extract_block(x)
    assert (out is not None) == may_extract(x)
    if out is not None:
        assert block_value(out) == sum(Fraction(float(v)) for v in x)
    assert same(kernels.exact_sum(x), math.fsum(x) if np.isfinite(x).all() else float(np.sum(x)))


@pytest.mark.parametrize("n", [64, 67, BLOCK])
def test_a_straggler_is_caught_in_every_lane_and_in_the_tail(n):
    # The loop runs 8 values per step on two vectors, then a scalar tail: each position counts.
    rng = np.random.default_rng(12)
    x = rng.standard_normal(n)
    for pos in list(range(min(n, 80))) + [n - 1]:
        y = x.copy()
        y[pos] = math.ldexp(1 + 2**-52, -70)  # its last bit lies below the second level's unit
        assert XS.extract_block(y) is None, pos
        assert same(kernels.exact_sum(y), math.fsum(y))


def test_typical_data_takes_the_fast_path_and_stays_exact():
    rng = np.random.default_rng(8)
    for x in (rng.standard_normal(5 * BLOCK + 17), rng.random(3 * BLOCK),
              rng.standard_normal(2 * BLOCK) * 1e250, rng.standard_normal(2 * BLOCK) * 1e-250):
        blocks = [x[i:i + BLOCK] for i in range(0, x.size, BLOCK)]
        assert all(XS.extract_block(b) is not None for b in blocks)  # the path these sums take
        assert same(kernels.exact_sum(x), math.fsum(x))
        for cut in (1, BLOCK - 1, BLOCK, x.size // 3):
            total = kernels.exact_sum_state(x[:cut]) + kernels.exact_sum_state(x[cut:])
            assert same(kernels.exact_sum_round(total), math.fsum(x))


def test_refused_blocks_mixed_with_fast_ones():
    rng = np.random.default_rng(9)
    x = rng.standard_normal(20 * BLOCK)
    x[3 * BLOCK + 5] = 1e-30                 # block 3: below the reach of two levels
    x[7 * BLOCK:9 * BLOCK] *= np.exp2(rng.integers(-300, 300, 2 * BLOCK))  # blocks 7, 8: wide
    x[12 * BLOCK + 1] = 5e-324              # block 12: a subnormal
    refused = [i for i in range(20) if XS.extract_block(x[i * BLOCK:(i + 1) * BLOCK]) is None]
    assert refused == [3, 7, 8, 12]
    assert same(kernels.exact_sum(x), math.fsum(x))
    assert same(kernels.exact_sum(x[::3]), math.fsum(x[::3]))     # strided: gathered blocks
    assert same(kernels.exact_sum(x[::-1]), math.fsum(x))


# -- The floating-point environment ----------------------------------------------------------------

X86_ROUNDING = {"upward": 0x800, "downward": 0x400, "toward zero": 0xC00}


@contextmanager
def rounding(mode: str):
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    assert libm.fesetround(X86_ROUNDING[mode]) == 0
    try:
        yield
    finally:
        libm.fesetround(0)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"),
                    reason="the rounding-mode constants used here are x86's")
@pytest.mark.parametrize("mode", sorted(X86_ROUNDING))
def test_other_rounding_modes_give_the_same_bits(mode):
    rng = np.random.default_rng(10)
    cases = [rng.standard_normal(3 * BLOCK + 1), rng.random(BLOCK) * 1e-310,
             np.array([1.0, 2.0**-53]), np.array([1.0, 2.0**-53, 2.0**-1074]),
             np.array([np.finfo(float).max, np.finfo(float).max / 2**53]),  # rounds up to inf
             np.array([np.finfo(float).max, np.finfo(float).max / 2**54]),  # rounds down
             np.array([-1.0, -(2.0**-53) * 3]), np.array([5e-324, 5e-324, -1e-323, 5e-324])]
    expect = [reference.exact_sum(x) for x in cases]  # in the default mode, to nearest
    with rounding(mode):
        assert not XS.ready()
        got = [kernels.exact_sum(x) for x in cases]
    assert XS.ready()
    assert all(same(g, e) for g, e in zip(got, expect)), (got, expect)


SSE_ROUNDING = {"downward": 0x2000, "upward": 0x4000, "toward zero": 0x6000}


@pytest.mark.parametrize("mode", sorted(SSE_ROUNDING))
def test_rounding_set_in_the_sse_register_alone_is_seen(mode):
    # Code that sets only MXCSR (_MM_SET_ROUNDING_MODE, a JIT) leaves the x87 control word, which
    # fegetround() reads on x86-64, at round-to-nearest: the probe must look at the SSE unit.
    # Under round-up, this block was once accepted and summed to 2**-100 (one ulp off).
    x = np.array([1.0, -1.0, np.nextafter(2.0**-100, 0.0)])
    rng = np.random.default_rng(13)
    cases = [x, rng.standard_normal(3 * BLOCK + 5), np.array([1.0, 2.0**-53, 2.0**-1074])]
    expect = [math.fsum(c) for c in cases]
    token = XS.set_ftz_daz(False, False)
    if token is None:
        pytest.skip("no SSE control register on this CPU")
    try:
        XS.restore_fp_flags((token & ~0x6000) | SSE_ROUNDING[mode])
        ready = XS.ready()
        got = [kernels.exact_sum(c) for c in cases]
    finally:
        XS.restore_fp_flags(token)
    assert not ready
    assert all(same(g, e) for g, e in zip(got, expect)), (got, expect)


def test_the_known_answer_test_passes_in_this_build():
    # It compares the fast path with the integer bins on a block that needs every bit of both
    # extraction levels; a build whose arithmetic was reassociated would fail it and stay slow.
    assert XS.self_test_passed()


@pytest.mark.parametrize("ftz, daz", [(True, False), (False, True), (True, True)])
def test_flush_to_zero_and_denormals_are_zero_do_not_lose_subnormals(ftz, daz):
    tiny = math.ldexp(1.0, -959)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(2 * BLOCK)
    x[100] = 5e-324
    cases = [np.array([tiny, -tiny, 5e-324]), x, np.array([5e-324] * 3)]
    expect = [math.fsum(c) for c in cases]
    token = XS.set_ftz_daz(ftz, daz)
    if token is None:
        pytest.skip("no SSE control register on this CPU")
    try:
        ready = XS.ready() or kernels.exact_sum_fast_path_enabled()
        got = [kernels.exact_sum(c) for c in cases]
    finally:
        XS.restore_fp_flags(token)
    assert not ready
    assert all(same(g, e) for g, e in zip(got, expect)), (got, expect)


# -- Every compiled version ----------------------------------------------------------------------

HARNESS = r"""
#define HPCBSP_SIMD_BLOCKS_H   /* no target_clones: this build's own flags decide the code */
#define HPCBSP_MULTIVERSION
#include <stdio.h>
#include "exactsum_blocks.h"
int main(int argc, char **argv) {
    static double x[HPCBSP_XS_BLOCK];
    FILE *in = fopen(argv[1], "rb");
    long n;
    while (fread(&n, sizeof n, 1, in) == 1 && fread(x, sizeof(double), (size_t)n, in) == (size_t)n) {
        int64_t hi = 0, lo = 0;
        int pos = 0;
        int ok = hpcbsp_exact_block_f64(x, n, &hi, &lo, &pos);
        printf("%d %lld %lld %d\n", ok, (long long)hi, (long long)lo, ok ? pos : 0);
    }
    return 0;
}
"""


def _cpu_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as fh:
            return any(flag in line.split() for line in fh if line.startswith("flags"))
    except OSError:
        return False


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler (cc) on PATH")
def test_baseline_and_vector_builds_give_the_same_integers(tmp_path):
    # The extension runs one clone (AVX2 here); this builds the header as the baseline x86-64
    # code, with AVX2 and for this CPU, and checks each against the Fraction sums.
    rng = np.random.default_rng(14)
    blocks = []
    for i in range(120):
        n = int(rng.integers(1, BLOCK + 1)) if i % 3 else int(rng.integers(1, 40))
        spread = int(rng.integers(1, 60))
        vals = rng.uniform(1, 2, n) * np.exp2(-rng.integers(0, spread, n)) * rng.choice([-1, 1], n)
        if i % 7 == 0:
            vals[rng.integers(0, n)] = math.ldexp(1 + 2**-52, -80)   # refused: below level two
        blocks.append(vals)
    data = tmp_path / "blocks.bin"
    with open(data, "wb") as fh:
        for b in blocks:
            np.array([b.size], dtype=np.int64).tofile(fh)
            b.tofile(fh)
    src = tmp_path / "harness.c"
    src.write_text(HARNESS)
    include = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kernels")
    flag_sets = [["-O3"], ["-O0"]]
    if _cpu_has("avx2"):
        flag_sets.append(["-O3", "-mavx2"])
    flag_sets.append(["-O3", "-march=native"])
    outputs = []
    for flags in flag_sets:
        exe = tmp_path / f"harness{len(outputs)}"
        subprocess.run(["cc", *flags, "-I", include, str(src), "-o", str(exe)], check=True,
                       capture_output=True, timeout=120)
        run = subprocess.run([str(exe), str(data)], check=True, capture_output=True, text=True,
                             timeout=60)
        outputs.append(run.stdout)
    assert all(out == outputs[0] for out in outputs), "the builds disagree"
    lines = outputs[0].splitlines()
    assert len(lines) == len(blocks)
    accepted = 0
    for b, line in zip(blocks, lines):
        ok, hi, lo, pos = map(int, line.split())
        assert bool(ok) == may_extract(b)
        assert (XS.extract_block(b) is not None) == bool(ok)
        if ok:
            accepted += 1
            assert block_value((hi, lo, pos)) == sum(Fraction(float(v)) for v in b)
    assert 0 < accepted < len(blocks)
