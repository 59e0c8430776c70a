"""Message layouts of the parameter server: a 16-byte header message, then the values.

A push or a reply is a header message of two int64 (the command or version, and a counter) and
the ``P`` values in one dtype.  The values travel straight from the sender's own array (the
worker's gradient as its model produced it, the server's weights) with no header to make room
for, so neither side copies them into a message buffer.  A reply's values go in pieces of about
:data:`PIECE_BYTES` (:func:`pieces`, the same on both sides): the server sends each piece of the
new weights as soon as it is updated, so the transfer overlaps the update.

Value formats (:data:`FORMATS`):

* ``float64`` - the numpy models' parameters and gradients;
* ``float32`` - torch models' parameters and gradients (4 bytes per value);
* ``float16`` - IEEE half precision, round to nearest even (numpy's conversion); values beyond
  +-65504 become inf, below 6e-8 flush to 0: for gradient compression only;
* ``bfloat16`` - the top 16 bits of a float32, round to nearest even (numpy has no bfloat16,
  so the bits travel as uint16): float32's range, 8 significant bits; gradient compression only.

Encoding a float32 vector into a 16-bit payload is the only conversion on the hot path (one pass
over the vector); decoding on the server is one more pass into its float32 gradient store.  On
one node a 16-bit gradient skips both copies: the worker encodes it straight into its slot of
the shared window and the server's update decodes it as it reads it (:mod:`.transport`,
:func:`hpcbsp.kernels.update.sgd_step`), with the bits of this module's functions.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Wire", "FORMATS", "HEADER_BYTES", "PIECE_BYTES", "pieces", "wire_for", "wires", "bfloat16_bits",
           "bfloat16_values"]

HEADER_BYTES = 16
#: About this many bytes per piece of a reply: small enough that the first piece travels while
#: the rest is updated, large enough that a message's fixed cost is negligible (1 MiB: within a
#: core's L2 cache, where the update leaves it).
PIECE_BYTES = 1 << 20
FORMATS = ("float64", "float32", "float16", "bfloat16")

_STORAGE = {"float64": np.float64, "float32": np.float32, "float16": np.float16,
            "bfloat16": np.uint16}
_VALUES = {"float64": np.float64, "float32": np.float32, "float16": np.float32,
           "bfloat16": np.float32}


def bfloat16_bits(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The bfloat16 nearest to each float32 in ``x`` (ties to even), as uint16 bit patterns.

    NaNs stay NaNs (quiet); infinities stay infinities.
    """
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    nan = np.isnan(x)
    if nan.any():
        rounded = np.where(nan, (bits >> np.uint32(16)) | np.uint32(0x0040), rounded)
    if out is None:
        return rounded.astype(np.uint16)
    np.copyto(out, rounded, casting="unsafe")
    return out


def bfloat16_values(bits: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The float32 values of bfloat16 bit patterns (exact: bfloat16 is a truncated float32)."""
    wide = np.left_shift(bits.astype(np.uint32), np.uint32(16))
    if out is None:
        return wide.view(np.float32)
    out.view(np.uint32)[...] = wide
    return out


def pieces(n_values: int, itemsize: int, piece_bytes: int = PIECE_BYTES) -> list[slice]:
    """The pieces a reply of ``n_values`` values of ``itemsize`` bytes is sent in, in order (at
    least one, empty for an empty model)."""
    step = max(1, piece_bytes // itemsize)
    return [slice(lo, min(lo + step, n_values)) for lo in range(0, max(n_values, 1), step)]


@dataclass(frozen=True)
class Wire:
    """One value format of the messages' payloads (the header is a message of its own)."""

    format: str = "float64"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"unknown wire format {self.format!r}; choose from: {', '.join(FORMATS)}")

    @property
    def storage(self) -> np.dtype:
        """The dtype of the payload buffer (uint16 for bfloat16)."""
        return np.dtype(_STORAGE[self.format])

    @property
    def values(self) -> np.dtype:
        """The dtype the values are decoded to (float32 for the 16-bit formats)."""
        return np.dtype(_VALUES[self.format])

    def slot(self, weights: "Wire") -> np.dtype | None:
        """The dtype of a gradient slot in the shared window (:mod:`.transport`) for gradients
        of this format beside ``weights``: this format's storage where it is the weights' own
        or 16-bit (the server's update reads those straight out of the slot), else None (the
        gradients travel as messages)."""
        if self.format == weights.format or self.format in ("float16", "bfloat16"):
            return self.storage
        return None

    def nbytes(self, n_values: int) -> int:
        """Bytes of one push or reply carrying ``n_values`` values (header included)."""
        return HEADER_BYTES + n_values * self.storage.itemsize

    def alloc(self, rows: int, n_values: int) -> np.ndarray:
        """``rows`` zeroed payload buffers, one per row (C-contiguous)."""
        return np.zeros((rows, n_values), dtype=self.storage)

    def as_payload(self, values: np.ndarray) -> np.ndarray | None:
        """``values`` itself when it can be sent as this format's payload as it is (1-D,
        C-contiguous, of the storage dtype), else None (it must be encoded)."""
        if isinstance(values, np.ndarray) and values.ndim == 1 and values.flags.c_contiguous \
                and values.dtype == self.storage and self.format in ("float64", "float32"):
            return values
        return None

    def encode(self, values: np.ndarray, payload: np.ndarray) -> np.ndarray:
        """Write ``values`` into ``payload`` (rounding to the format, one pass); returns it."""
        if self.format == "bfloat16":
            bfloat16_bits(values, out=payload)
        else:
            np.copyto(payload, values, casting="same_kind" if self.format != "float16" else "unsafe")
        return payload

    def decode(self, payload: np.ndarray) -> np.ndarray:
        """The payload as values: a view for float64/float32, a new float32 array otherwise."""
        if self.format == "bfloat16":
            return bfloat16_values(payload)
        if self.format == "float16":
            return payload.astype(np.float32)
        return payload

    def roundtrip(self, values: np.ndarray) -> np.ndarray:
        """``values`` as they arrive after :meth:`encode` and :meth:`decode` (for simulated runs)."""
        if self.format == "bfloat16":
            return bfloat16_values(bfloat16_bits(values))
        if self.format == "float16":  # (a float64 rounded once, straight to half, as encode does)
            return np.asarray(values).astype(np.float16).astype(np.float32)
        return np.asarray(values, dtype=self.values)


def wire_for(dtype: np.dtype | type) -> Wire:
    """The plain wire of a parameter dtype (float64 or float32)."""
    name = np.dtype(dtype).name
    if name not in ("float64", "float32"):
        raise ValueError(f"parameters travel as float64 or float32, not {name}")
    return Wire(name)


def wires(dtype: np.dtype | type, grad_format: str | None) -> tuple[Wire, Wire]:
    """The wire of the weights (of ``dtype``) and that of the gradients (``grad_format``, or the
    weights' own); ValueError for a dtype or format that cannot travel."""
    weights = wire_for(dtype)
    return weights, Wire(grad_format or weights.format)
