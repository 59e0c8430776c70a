"""The SGD update of a flat parameter vector, in one compiled pass (``kernels/_update.pyx``), and
a copy with the same choice of stores.

A gradient may also come in one of the wire's 16-bit formats (hpcbsp/elastic/wire.py), as the
array that holds its bits: ``float16`` (IEEE half) or ``uint16`` (bfloat16 bit patterns, the top
half of a float32): :func:`sgd_step` then decodes each value as it reads it (exact), and
:func:`convert` writes a gradient into such an array (bfloat16: round to nearest even, as
``wire.bfloat16_bits``; half: numpy's conversion) or decodes one out of it, in one pass.

Used where a whole model is updated per step: the parameter server's immediate updates and the
allreduce baseline.  Oracle: numpy's ``w -= lr * g`` (the same bits; tests/test_kernels_update.py).
:func:`copy` is ``np.copyto`` with ordinary stores, and the kernel's non-temporal copy with
``streaming=True`` (the same bytes; tests/test_elastic_window_stores.py): a parameter-server
worker writing its gradient into the shared window (hpcbsp/elastic/transport.py).
"""
from __future__ import annotations

import numpy as np

from ._extensions import MODULES

#: The dtypes of a 16-bit gradient's bits: IEEE half, and bfloat16 as uint16 (see above).
WIRE16 = (np.dtype(np.float16), np.dtype(np.uint16))


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
    float64 (``g`` may be a 16-bit gradient instead, see the module docstring: the update is
    then that with ``g`` decoded to ``w``'s dtype first, the same bits); ``out`` may be ``w`` or
    ``g`` exactly, but must not partly overlap either.  ``lr`` is
    taken as a Python float (a numpy scalar too) and rounded to that dtype first, as numpy does
    with a Python float (NEP 50).  The result has numpy's bits (a multiply, then a subtract, each
    rounded)."""
    if out is None:
        out = w
    if (w.dtype != g.dtype and g.dtype not in WIRE16) or w.dtype not in (np.float32, np.float64) \
            or w.ndim != 1 or g.shape != w.shape:
        raise ValueError(f"sgd_step: w ({w.dtype}, {w.shape}) and g ({g.dtype}, {g.shape}) must be 1-D "
                         "float32 or float64 arrays of one dtype and length (g may be float16, or "
                         "uint16 for bfloat16)")
    if out.dtype != w.dtype or out.shape != w.shape:
        raise ValueError(f"sgd_step: out ({out.dtype}, {out.shape}) must have w's dtype and shape "
                         f"({w.dtype}, {w.shape})")
    if not (w.flags.c_contiguous and g.flags.c_contiguous and out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("sgd_step: w, g and out must be C-contiguous and out writeable")
    if not (_apart_or_same(w, g) and _apart_or_same(out, w) and _apart_or_same(out, g)):
        raise ValueError("sgd_step: w, g and out overlap in part (each pair must be apart, or the same array)")
    if g.dtype in WIRE16:
        kernel = MODULES["_update"].sgd_step_wire_streaming if streaming else MODULES["_update"].sgd_step_wire
        kernel(out, w, g.view(np.uint16), float(lr), g.dtype == np.uint16)
        return out
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


def convert(out: np.ndarray, src: np.ndarray, *, streaming: bool = False) -> np.ndarray:
    """``out[:] = src`` converted to ``out``'s dtype in one pass; returns ``out``.

    Between float64, float32 and the 16-bit gradients (:data:`WIRE16`), by the compiled
    kernels: into bfloat16 (``out`` uint16) from float32 or float64 (a float64 rounded to
    float32 first, then to nearest even: ``wire.bfloat16_bits``'s bits); into float16 (numpy's
    bits: to nearest even, straight from the float64 or float32); out of a 16-bit gradient into
    float32 or float64 (exact).  float64 to float32 by numpy (its rounding).  Where the dtypes
    are the same, :func:`copy`.  ``streaming``: non-temporal stores where a kernel writes (the
    same bits).  ``out`` and ``src`` as for :func:`copy`."""
    if out.dtype == src.dtype:
        return copy(out, src, streaming=streaming)
    floats = (np.float32, np.float64)
    if out.ndim != 1 or out.shape != src.shape or not (out.dtype in floats or out.dtype in WIRE16) \
            or not (src.dtype in floats or src.dtype in WIRE16) or (out.dtype in WIRE16 and src.dtype in WIRE16):
        raise ValueError(f"convert: out ({out.dtype}, {out.shape}) and src ({src.dtype}, {src.shape}) must be "
                         "1-D arrays of one length, float64, float32 or a 16-bit gradient (float16, uint16 "
                         "for bfloat16), not both 16-bit")
    if not (out.flags.c_contiguous and src.flags.c_contiguous and out.flags.writeable):
        raise ValueError("convert: out and src must be C-contiguous and out writeable")
    if np.may_share_memory(out, src):
        raise ValueError("convert: out and src overlap")
    if out.dtype in WIRE16:
        MODULES["_update"].narrow(out.view(np.uint16), src, out.dtype == np.uint16, streaming)
    elif src.dtype in WIRE16:
        MODULES["_update"].widen(out, src.view(np.uint16), src.dtype == np.uint16)
    else:
        np.copyto(out, src, casting="unsafe")
    return out
