"""Message layouts of the parameter server: a 16-byte header, then the values in one dtype.

Every push and every reply is one contiguous numpy buffer: two int64 header words (the command
or version, and a counter) followed by the ``P`` values.  The header is 16 bytes whatever the
values' type, so float64, float32 and 16-bit payloads all have exact integer headers.

Value formats (:data:`FORMATS`):

* ``float64`` - the numpy models' parameters and gradients;
* ``float32`` - torch models' parameters and gradients (4 bytes per value);
* ``float16`` - IEEE half precision, round to nearest even (numpy's conversion); values beyond
  +-65504 become inf, below 6e-8 flush to 0: for gradient compression only;
* ``bfloat16`` - the top 16 bits of a float32, round to nearest even (numpy has no bfloat16,
  so the bits travel as uint16): float32's range, 8 significant bits; gradient compression only.

Encoding a float32 vector into a 16-bit payload is the only conversion on the hot path (one pass
over the vector); decoding on the server is one more pass into its float32 gradient store.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Wire", "FORMATS", "HEADER_BYTES", "wire_for", "bfloat16_bits", "bfloat16_values"]

HEADER_BYTES = 16
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


@dataclass(frozen=True)
class Wire:
    """One message layout: a 16-byte header of two int64, then ``format`` values."""

    format: str = "float64"

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ValueError(f"unknown wire format {self.format!r}; choose from: {', '.join(FORMATS)}")

    @property
    def storage(self) -> np.dtype:
        """The dtype of the buffer (uint16 for bfloat16)."""
        return np.dtype(_STORAGE[self.format])

    @property
    def values(self) -> np.dtype:
        """The dtype the values are decoded to (float32 for the 16-bit formats)."""
        return np.dtype(_VALUES[self.format])

    @property
    def header_slots(self) -> int:
        return HEADER_BYTES // self.storage.itemsize

    def nbytes(self, n_values: int) -> int:
        """Bytes of one message carrying ``n_values`` values."""
        return HEADER_BYTES + n_values * self.storage.itemsize

    def alloc(self, rows: int, n_values: int) -> np.ndarray:
        """``rows`` zeroed message buffers, one per row (C-contiguous, 16-byte header first)."""
        return np.zeros((rows, self.header_slots + n_values), dtype=self.storage)

    def header(self, message: np.ndarray) -> np.ndarray:
        """The two int64 header words of ``message`` (a view: writing it writes the message)."""
        return message[:self.header_slots].view(np.int64)

    def payload(self, message: np.ndarray) -> np.ndarray:
        """The values part of ``message`` (a view, in storage dtype)."""
        return message[self.header_slots:]

    def encode(self, values: np.ndarray, message: np.ndarray) -> None:
        """Write ``values`` into ``message``'s payload (rounding to the format, one pass)."""
        dst = self.payload(message)
        if self.format == "bfloat16":
            bfloat16_bits(values, out=dst)
        else:
            np.copyto(dst, values, casting="same_kind" if self.format != "float16" else "unsafe")

    def decode(self, message: np.ndarray) -> np.ndarray:
        """The payload as values: a view for float64/float32, a new float32 array otherwise."""
        src = self.payload(message)
        if self.format == "bfloat16":
            return bfloat16_values(src)
        if self.format == "float16":
            return src.astype(np.float32)
        return src

    def roundtrip(self, values: np.ndarray) -> np.ndarray:
        """``values`` as they arrive after :meth:`encode` and :meth:`decode` (for simulated runs)."""
        if self.format == "bfloat16":
            return bfloat16_values(bfloat16_bits(values))
        if self.format == "float16":
            return np.asarray(values, dtype=np.float32).astype(np.float16).astype(np.float32)
        return np.asarray(values, dtype=self.values)


def wire_for(dtype: np.dtype | type) -> Wire:
    """The plain wire of a parameter dtype (float64 or float32)."""
    name = np.dtype(dtype).name
    if name not in ("float64", "float32"):
        raise ValueError(f"parameters travel as float64 or float32, not {name}")
    return Wire(name)
