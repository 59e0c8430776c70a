"""One-pass reductions: sum, dot, squared norm, min/max (compiled, any stride, no copy).

Floating-point sums accumulate in float64 (also for float32 input) with several lanes and a
compensated sum of blocks, so they are at least as accurate as numpy's pairwise sums; they are
*not* bit-reproducible across different splittings of the data, :mod:`exact_sum` is.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import flat_view
from ._extensions import MODULES

_F64, _F32, _I64, _I32 = (np.dtype(t) for t in (np.float64, np.float32, np.int64, np.int32))


def _numeric(x: Any, op: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{op}: unsupported dtype {arr.dtype} (real numbers only)")
    return flat_view(arr)


def _as_float(arr: np.ndarray) -> np.ndarray:
    """float32 and float64 stay as they are (no copy); everything else becomes float64."""
    return arr if arr.dtype in (_F64, _F32) else arr.astype(np.float64)


def sum(x: Any) -> float | int:  # noqa: A001 - the kernel's name on purpose
    """Sum of all elements, in one pass.

    Parameters
    ----------
    x : array_like
        Real numbers of any shape and stride.  float64 and float32 are read in place, as are
        int64, int32 and uint64; other integer and bool dtypes are converted to int64.

    Returns
    -------
    float or int
        A float for float input (accumulated in float64); for integer input an int, wrapping
        modulo 2**64 on overflow like numpy (uint64 results lie in ``[0, 2**64)``).

    Notes
    -----
    Numpy oracle: ``np.sum`` (:func:`hpcbsp.kernels.reference.sum`).
    """
    arr = _numeric(x, "sum")
    ext = MODULES["_reductions"]
    if arr.dtype in (_F64, _F32, _I64, _I32):
        return ext.reduce_sum(arr)
    if arr.dtype.kind == "f":
        return ext.reduce_sum(arr.astype(np.float64))
    if arr.dtype == np.uint64:
        # Same bits, same sum modulo 2**64: read in place as int64 and reinterpret the result.
        return ext.reduce_sum(arr.view(np.int64)) % (1 << 64)
    return ext.reduce_sum(arr.astype(np.int64))


def dot(x: Any, y: Any) -> float:
    """Inner product ``sum(x * y)`` of two arrays of the same shape, in one pass.

    Parameters
    ----------
    x, y : array_like
        Real numbers, any stride.  When both are float32 they are read as float32, otherwise
        both as float64 (converting what is not float64); the accumulation is float64.

    Returns
    -------
    float

    Notes
    -----
    Single-threaded.  Numpy oracle: ``np.dot`` of the flattened arrays
    (:func:`hpcbsp.kernels.reference.dot`).
    """
    a, b = np.asarray(x), np.asarray(y)
    if a.shape != b.shape:
        raise ValueError(f"dot: shapes differ ({a.shape} and {b.shape})")
    a, b = _numeric(a, "dot"), _numeric(b, "dot")
    if not (a.dtype == _F32 and b.dtype == _F32):
        a = a if a.dtype == _F64 else a.astype(np.float64)
        b = b if b.dtype == _F64 else b.astype(np.float64)
    return MODULES["_reductions"].reduce_dot(a, b)


def sqnorm(x: Any) -> float:
    """Squared Euclidean norm ``sum(x * x)``, in one pass (float32 read in place, other dtypes
    as float64; accumulated in float64).

    Notes
    -----
    Numpy oracle: ``np.dot(x, x)`` (:func:`hpcbsp.kernels.reference.sqnorm`).
    """
    return MODULES["_reductions"].reduce_sqnorm(_as_float(_numeric(x, "sqnorm")))


def minmax(x: Any) -> tuple[Any, Any]:
    """``(min, max)`` of all elements in one pass.

    Parameters
    ----------
    x : array_like
        Non-empty, real numbers of any shape and stride.  float64, float32, int64 and int32
        are read in place; other integers and bool are converted to int64, float16 to
        float32 (uint64 beyond the int64 range is left to numpy, in two passes).

    Returns
    -------
    (min, max)
        Python floats or ints.  ``(nan, nan)`` when a NaN is present, as numpy propagates it.

    Raises
    ------
    ValueError
        For an empty array (min and max have no identity).

    Notes
    -----
    Numpy oracle: ``(np.min(x), np.max(x))`` (:func:`hpcbsp.kernels.reference.minmax`).
    """
    arr = _numeric(x, "minmax")
    if arr.dtype not in (_F64, _F32, _I64, _I32):
        if arr.dtype.kind == "f":
            arr = arr.astype(np.float32 if arr.itemsize < 4 else np.float64)
        else:
            if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
                return int(arr.min()), int(arr.max())
            arr = arr.astype(np.int64)
    return MODULES["_reductions"].reduce_minmax(arr)

