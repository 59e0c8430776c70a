"""The one-pass SGD update (``hpcbsp.kernels.update.sgd_step``), with ordinary stores and with
non-temporal ones (``streaming=True``).

Oracle: :func:`hpcbsp.kernels.reference.sgd_step`, numpy's two passes (``t = g * lr`` then
``w -= t``), bit for bit (the kernel is built
without fused multiply-add), on random values and on the special ones (signed zeros,
infinities, NaN, subnormals, values whose product overflows or underflows).
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.kernels import reference
from hpcbsp.kernels.update import sgd_step

SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-40, 3e38, -3e38, 1e-300, 1e300, 1.0, -2.5]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("lr", [0.05, 1e-3, 3.0, -0.7, 0.1 / 7])
def test_one_pass_gives_numpys_bits(dtype, lr, streaming):
    rng = np.random.default_rng(7)
    n = 10_007  # not a multiple of a vector width: the loop's tail is covered
    w = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(dtype)
    g = (rng.standard_normal(n) * 10.0 ** rng.integers(-8, 8, n)).astype(dtype)
    with np.errstate(all="ignore"):
        sp = np.array(SPECIAL, dtype=dtype)
    w[:sp.size * sp.size] = np.repeat(sp, sp.size)  # every special against every special
    g[:sp.size * sp.size] = np.tile(sp, sp.size)
    want = w.copy()
    with np.errstate(all="ignore"):
        reference.sgd_step(want, g, lr)
        sgd_step(w, g, lr, streaming=streaming)
    assert want.dtype == dtype
    assert w.tobytes() == want.tobytes()


def test_mismatched_arrays_are_refused():
    w = np.zeros(4, dtype=np.float32)
    for g in (np.zeros(4), np.zeros(3, dtype=np.float32), np.zeros((2, 2), dtype=np.float32)):
        with pytest.raises(ValueError, match="sgd_step"):
            sgd_step(w, g, 0.1)
    with pytest.raises(ValueError, match="sgd_step"):
        sgd_step(np.zeros(4, dtype=np.int64), np.zeros(4, dtype=np.int64), 0.1)
    big = np.zeros(8, dtype=np.float32)
    with pytest.raises(ValueError, match="C-contiguous"):
        sgd_step(big[::2], np.zeros(4, dtype=np.float32), 0.1)
    with pytest.raises(ValueError, match="overlap"):
        sgd_step(big[:4], big[2:6], 0.1)
    frozen = np.zeros(4, dtype=np.float32)
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        sgd_step(frozen, np.zeros(4, dtype=np.float32), 0.1)


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("into", ["new", "g", "w"])
def test_out_of_place_gives_the_same_bits(dtype, into, streaming):
    """``out=`` (a third array, or ``g`` or ``w`` itself: a view of the same memory counts) gets
    the in-place result's bits, and the inputs not named as ``out`` are left alone."""
    rng = np.random.default_rng(11)
    n = 4099
    w = rng.standard_normal(n).astype(dtype)
    g = rng.standard_normal(n).astype(dtype)
    want = w.copy()
    reference.sgd_step(want, g, 0.03)
    w0, g0 = w.copy(), g.copy()
    out = {"new": np.empty_like(w), "g": g[:], "w": w[:]}[into]
    got = sgd_step(w, g, 0.03, out=out, streaming=streaming)
    assert got is out and got.tobytes() == want.tobytes()
    if into != "w":
        assert w.tobytes() == w0.tobytes()
    if into != "g":
        assert g.tobytes() == g0.tobytes()


def test_out_that_overlaps_in_part_is_refused():
    buf = np.zeros(12, dtype=np.float32)
    w, g = buf[:4], buf[8:12]
    with pytest.raises(ValueError, match="overlap"):
        sgd_step(w, g, 0.1, out=buf[2:6])
    with pytest.raises(ValueError, match="out"):
        sgd_step(w, g, 0.1, out=np.zeros(4))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [0, 1, 3, 5, 33])
def test_streaming_stores_at_every_alignment_and_length(dtype, n):
    """The non-temporal loop writes 16-byte-aligned vectors: an ``out`` that starts off that
    alignment, and lengths shorter than a vector, go through its scalar head and tail.  Oracle:
    numpy's two passes; the elements around ``out`` in its buffer are left alone."""
    rng = np.random.default_rng(n)
    for shift in range(16 // np.dtype(dtype).itemsize):
        buf = rng.standard_normal(n + 8).astype(dtype)
        g = rng.standard_normal(n).astype(dtype)
        w = buf[shift:shift + n]
        want = buf.copy()
        reference.sgd_step(want[shift:shift + n], g, 0.25)
        sgd_step(w, g, 0.25, streaming=True)
        assert buf.tobytes() == want.tobytes(), shift
