"""Comparing float64 results bit for bit (the exact-sum tests' oracle comparisons)."""
from __future__ import annotations

import math
import struct


def bits(v: float) -> int:
    """The float64's bit pattern as a signed 64-bit integer."""
    return struct.unpack("<q", struct.pack("<d", v))[0]


def same(a: float, b: float) -> bool:
    """Same float64, sign of zero included; any NaN equals any NaN."""
    return (math.isnan(a) and math.isnan(b)) or bits(a) == bits(b)
