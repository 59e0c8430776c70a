"""The SGD update of a flat parameter vector, in one compiled pass (``kernels/_update.pyx``), and
a copy with the same choice of stores.

Used where a whole model is updated per step: the parameter server's immediate updates and the
allreduce baseline.  Oracle: numpy's ``w -= lr * g`` (the same bits; tests/test_kernels_update.py).
:func:`copy` is ``np.copyto`` with ordinary stores, and the kernel's non-temporal copy with
``streaming=True`` (the same bytes; tests/test_elastic_window_stores.py): a parameter-server
worker writing its gradient into the shared window (hpcbsp/elastic/transport.py).
"""
from __future__ import annotations

import numpy as np

from ._extensions import MODULES


def _apart_or_same(a: np.ndarray, b: np.ndarray) -> bool:
    # (cheapest first: the parameter server calls this a chunk at a time)
    return a is b or not np.may_share_memory(a, b) or (
        a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape)


def sgd_step(w: np.ndarray, g: np.ndarray, lr: float, out: np.ndarray | None = None, *,
             streaming: bool = False) -> np.ndarray:
    """``w - lr * g``, into ``out`` (default: ``w`` itself, in place); returns ``out``.

    ``streaming``: write ``out`` with non-temporal stores (the same bits; the result goes to
    memory, not into this core's caches, and no line another core holds is fetched first), for
    memory another process reads next; whether that is faster depends on where the two cores
    sit (hpcbsp/elastic/transport.py measures it).

    ``w``, ``g`` and ``out`` are 1-D, C-contiguous, of one length and one dtype, float32 or
    float64; ``out`` may be ``w`` or ``g`` exactly, but must not partly overlap either.  ``lr`` is
    taken as a Python float (a numpy scalar too) and rounded to that dtype first, as numpy does
    with a Python float (NEP 50).  The result has numpy's bits (a multiply, then a subtract, each
    rounded)."""
    if out is None:
        out = w
    if w.dtype != g.dtype or w.dtype not in (np.float32, np.float64) or w.ndim != 1 or g.shape != w.shape:
        raise ValueError(f"sgd_step: w ({w.dtype}, {w.shape}) and g ({g.dtype}, {g.shape}) must be 1-D "
                         "float32 or float64 arrays of one dtype and length")
    if out.dtype != w.dtype or out.shape != w.shape:
        raise ValueError(f"sgd_step: out ({out.dtype}, {out.shape}) must have w's dtype and shape "
                         f"({w.dtype}, {w.shape})")
    if not (w.flags.c_contiguous and g.flags.c_contiguous and out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("sgd_step: w, g and out must be C-contiguous and out writeable")
    if not (_apart_or_same(w, g) and _apart_or_same(out, w) and _apart_or_same(out, g)):
        raise ValueError("sgd_step: w, g and out overlap in part (each pair must be apart, or the same array)")
    kernel = MODULES["_update"].sgd_step_streaming if streaming else MODULES["_update"].sgd_step
    kernel(out, w, g, float(lr))
    return out


def copy(out: np.ndarray, src: np.ndarray, *, streaming: bool = False) -> np.ndarray:
    """``out[:] = src`` (the same bytes); returns ``out``.  ``streaming``: with non-temporal
    stores, as :func:`sgd_step`'s.  ``out`` and ``src`` are 1-D, C-contiguous, of one dtype and
    length, apart (no shared memory); ``out`` writeable."""
    if out.dtype != src.dtype or out.ndim != 1 or out.shape != src.shape:
        raise ValueError(f"copy: out ({out.dtype}, {out.shape}) and src ({src.dtype}, {src.shape}) must be "
                         "1-D arrays of one dtype and length")
    if not (out.flags.c_contiguous and src.flags.c_contiguous and out.flags.writeable):
        raise ValueError("copy: out and src must be C-contiguous and out writeable")
    if np.may_share_memory(out, src):
        raise ValueError("copy: out and src overlap")
    if streaming:
        MODULES["_update"].copy_streaming(out.view(np.uint8), src.view(np.uint8))
    else:
        np.copyto(out, src)
    return out
