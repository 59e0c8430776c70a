"""Input conversion shared by the kernel wrappers: cheap when the input is already right."""
from __future__ import annotations

from typing import Any

import numpy as np

_INT64_MAX = np.iinfo(np.int64).max


def as_index_array(a: Any, what: str) -> np.ndarray:
    """``a`` flattened to a C-contiguous int64 array; zero-copy when it already is one.

    Any integer dtype is accepted (an empty array of any real dtype too).  Raises ``TypeError``
    for other dtypes and ``ValueError`` for uint64 values beyond the int64 range (they would
    wrap to negative numbers and be reported wrongly), naming ``what`` and the position.
    """
    if type(a) is np.ndarray and a.dtype == np.int64 and a.ndim == 1 and a.flags.c_contiguous:
        return a
    arr = np.asarray(a)
    if arr.size == 0 and arr.dtype.kind in "biuf":
        return np.empty(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers, not {arr.dtype}")
    if arr.dtype == np.uint64:
        flat = arr.ravel()
        big = np.flatnonzero(flat > _INT64_MAX)
        if big.size:
            raise ValueError(f"{what} {flat[big[0]]} at position {big[0]} is beyond the int64 range")
    return np.ascontiguousarray(arr, dtype=np.int64).reshape(-1)


def flat_view(a: np.ndarray) -> np.ndarray:
    """``a`` as a 1-D array: a view when ``a`` is 1-D (any stride) or contiguous, else a copy."""
    if a.ndim == 1:
        return a
    if a.flags.c_contiguous:
        return a.reshape(-1)
    return a.ravel()


def as_float64(a: Any, what: str, ndim: int) -> np.ndarray:
    """``a`` as a C-contiguous float64 array of ``ndim`` dimensions (zero-copy when it is one)."""
    arr = np.ascontiguousarray(a, dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{what} must be {ndim}-D, not {arr.ndim}-D")
    return arr


def output_array(out: np.ndarray | None, shape: tuple[int, ...], what: str) -> np.ndarray:
    """``out`` checked to be a writeable contiguous float64 array of ``shape`` (a new one if None)."""
    if out is None:
        return np.empty(shape)
    if (not isinstance(out, np.ndarray) or out.dtype != np.float64 or out.shape != shape
            or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"{what}: out must be a writeable contiguous float64 array of shape {shape}")
    return out
