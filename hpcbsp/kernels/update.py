"""The SGD update of a flat parameter vector, in one compiled pass (``kernels/_update.pyx``).

Used where a whole model is updated per step: the parameter server's immediate updates and the
allreduce baseline.  Oracle: numpy's ``w -= lr * g`` (the same bits; tests/test_kernels_update.py).
"""
from __future__ import annotations

import numpy as np

from ._extensions import MODULES


def sgd_step(w: np.ndarray, g: np.ndarray, lr: float) -> None:
    """``w -= lr * g`` in place: ``w`` and ``g`` 1-D, C-contiguous, of one length and one dtype,
    float32 or float64; ``lr`` is taken as a Python float (a numpy scalar too) and rounded to that
    dtype first, as numpy does with a Python float (NEP 50).
    The result has numpy's bits (a multiply, then a subtract, each rounded)."""
    if w.dtype != g.dtype or w.dtype not in (np.float32, np.float64) or w.ndim != 1 or g.shape != w.shape:
        raise ValueError(f"sgd_step: w ({w.dtype}, {w.shape}) and g ({g.dtype}, {g.shape}) must be 1-D "
                         "float32 or float64 arrays of one dtype and length")
    if not (w.flags.c_contiguous and g.flags.c_contiguous and w.flags.writeable):
        raise ValueError("sgd_step: w and g must be C-contiguous and w writeable")
    if w is not g and np.may_share_memory(w, g):
        raise ValueError("sgd_step: w and g overlap (an in-place update needs them apart, or the same array)")
    MODULES["_update"].sgd_step(w, g, float(lr))
