"""Exact, reproducible summation of float64: correctly rounded, the same bits for any split.

``exact_sum_state(x)`` condenses an array into a fixed-length int64 vector holding its sum
*exactly* (a fixed-point superaccumulator, see ``kernels/_exactsum.pyx``).  States of several
arrays merge by plain element-wise integer addition, in any order and grouping (for instance an
MPI ``Allreduce`` with ``SUM``), and ``exact_sum_round`` rounds the merged state once, to the
float64 nearest the exact sum of all the values.  So a global sum gives the same bits for any
number of ranks and any distribution of the data.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import flat_view
from ._extensions import MODULES

#: Length of every exact-sum state (int64 entries).
EXACT_SUM_STATE_LEN: int = MODULES["_exactsum"].STATE_LENGTH

#: How many states may be added element-wise before an int64 entry could overflow.
EXACT_SUM_MAX_MERGE: int = 1 << 30


def _as_float64_parts(x: Any) -> list[np.ndarray]:
    """``x`` as 1-D float64 arrays whose values add up to those of ``x`` exactly.

    One array, except for 64-bit integers beyond 2**53 in magnitude, which float64 would round:
    those are split as ``v = hi * 2**32 + lo`` with ``lo`` in ``[0, 2**32)``, both parts exact
    doubles, and summed as two arrays.
    """
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf" or (arr.dtype.kind == "f" and arr.itemsize > 8):
        raise TypeError(f"exact sum: unsupported dtype {arr.dtype} (float64 or a type that "
                        "converts to it exactly)")
    arr = flat_view(arr)
    if arr.dtype.kind in "iu" and arr.itemsize == 8 and arr.size \
            and (int(arr.max()) > 2**53 or int(arr.min()) < -(2**53)):
        low = (arr & 0xFFFFFFFF).astype(np.float64)
        high = (arr >> 32).astype(np.float64) * 2.0**32  # >> floors: high + low == v
        return [low, high]
    return [arr if arr.dtype == np.float64 else arr.astype(np.float64)]


def exact_sum_state(x: Any, state: np.ndarray | None = None) -> np.ndarray:
    """The exact sum of ``x`` as an int64 vector of length :data:`EXACT_SUM_STATE_LEN`.

    Parameters
    ----------
    x : array_like
        Values of any shape and stride.  float64 is read in place; float16/float32, bool and
        every integer (64-bit ones beyond 2**53 in magnitude are split in two exact halves)
        count exactly.  NaN and infinities are counted, not lost.
    state : ndarray of int64, optional
        A state (of one array or a merge of several) to add ``x`` into, in place.

    Returns
    -------
    ndarray of int64
        The state: ``state`` itself when given.  The entries are small enough (below 2**32,
        except the top chunk and the counters) that up to :data:`EXACT_SUM_MAX_MERGE` (2**30)
        states can be summed element-wise in int64 without overflow.

    Notes
    -----
    Layout (for reading only): 67 chunks of 32 bits, chunk ``i`` weighing
    ``2**(32*i - 1074)``, the top one signed; then the counts of NaNs, +inf, -inf and of all
    elements.
    """
    parts = _as_float64_parts(x)
    if state is None:
        state = np.zeros(EXACT_SUM_STATE_LEN, dtype=np.int64)
    elif not (isinstance(state, np.ndarray) and state.dtype == np.int64
              and state.shape == (EXACT_SUM_STATE_LEN,) and state.flags.c_contiguous
              and state.flags.writeable):
        raise ValueError(f"exact sum: state must be a writeable contiguous int64 array of length "
                         f"{EXACT_SUM_STATE_LEN}")
    for part in parts:
        MODULES["_exactsum"].accumulate(part, state)
    if len(parts) == 2:
        state[-1] -= parts[1].size  # the element counter: one value, two parts
    return state


def exact_sum_round(state: Any) -> float:
    """Round an exact-sum state (or the element-wise sum of several) to float64.

    Returns
    -------
    float
        The float64 nearest (ties to even) to the exact sum: ``math.fsum`` of all the values
        together.  Special values follow IEEE: any NaN, or both +inf and -inf, give NaN; one
        kind of infinity gives it; a finite sum beyond the float64 range gives +-inf (where
        ``math.fsum`` raises ``OverflowError``); an exact zero is +0.0, as ``math.fsum`` and
        ``np.sum`` give (even when every value is -0.0).
    """
    arr = np.asarray(state)
    if arr.shape != (EXACT_SUM_STATE_LEN,) or arr.dtype.kind not in "iu":
        raise ValueError(f"exact sum: a state is an integer vector of length "
                         f"{EXACT_SUM_STATE_LEN}, not {arr.dtype} of shape {arr.shape}")
    return MODULES["_exactsum"].round_state(arr.astype(np.int64, copy=False))


def exact_sum_fast_path_enabled() -> bool:
    """Whether exact sums may take the extraction fast path in this thread now.

    Blocks of 2048 values whose magnitudes lie within about 2**48 of each other are summed by
    error-free extraction at a good fraction of ``np.sum``'s speed; other blocks (and all of
    them when this is False) go through integer bins, several times slower.  Both are exact:
    only the speed differs.  False when the build compiled the path out (``-ffast-math`` and
    its parts, x87 arithmetic), when its known-answer test against the integer bins failed (a
    miscompilation), or when the calling thread's floating-point environment is not
    round-to-nearest with subnormals honoured (a library built with ``-ffast-math`` may set
    flush-to-zero process-wide).
    """
    return bool(MODULES["_exactsum"].extraction_ready())


def exact_sum(x: Any) -> float:
    """Correctly rounded sum of ``x`` (``exact_sum_round(exact_sum_state(x))``).

    Notes
    -----
    Oracle: ``math.fsum`` (:func:`hpcbsp.kernels.reference.exact_sum`).
    """
    return exact_sum_round(exact_sum_state(x))
