"""The SGD update of a flat parameter vector, in one compiled pass (``kernels/_update.pyx``).

Used where a whole model is updated per step: the parameter server's immediate updates and the
allreduce baseline.  Oracle: numpy's ``w -= lr * g`` (the same bits; tests/test_kernels_update.py).
"""
from __future__ import annotations

import numpy as np

from ._extensions import MODULES


def sgd_step(w: np.ndarray, g: np.ndarray, lr: float) -> None:
    """``w -= lr * g`` in place: ``w`` and ``g`` 1-D, C-contiguous, of one length and one dtype,
    float32 or float64; ``lr`` is rounded to that dtype first, as numpy does with a Python float.
    The result has numpy's bits (a multiply, then a subtract, each rounded)."""
    if w.dtype != g.dtype or w.dtype not in (np.float32, np.float64) or w.ndim != 1 or g.shape != w.shape:
        raise ValueError(f"sgd_step: w ({w.dtype}, {w.shape}) and g ({g.dtype}, {g.shape}) must be 1-D "
                         "float32 or float64 arrays of one dtype and length")
    MODULES["_update"].sgd_step(w, g, float(lr))
