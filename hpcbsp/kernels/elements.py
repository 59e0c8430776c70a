"""Single-element puts in bulk (the runtime's ``Coarray.put_elements``): packed by destination
and applied in program order by compiled byte loops (``kernels/_elements.pyx``).

A destination's record is its offsets, padded to 8 bytes, then its values, padded to 8 bytes.
The offsets are 4 bytes (uint32) when every part of the target has at most 2**32 elements
(:func:`offset_width`), else 8 (int64): the sender and every receiver derive the width from the
same part sizes, so it does not travel.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ._extensions import MODULES

_MAX_NARROW = 2**32  # a part of at most this many elements has offsets that fit in a uint32


def offset_width(sizes: Sequence[int] | np.ndarray) -> int:
    """Bytes per offset in the records of a target whose parts have ``sizes`` elements: 4 or 8."""
    return 4 if int(np.max(np.asarray(sizes), initial=0)) <= _MAX_NARROW else 8


def record_bytes(count: int, itemsize: int, width: int) -> int:
    """Bytes of one destination's record of ``count`` puts (offsets and values, each padded)."""
    return -(-count * width // 8) * 8 + -(-count * itemsize // 8) * 8


def pack_elements(dest: np.ndarray, offset: np.ndarray, values: np.ndarray, sizes: np.ndarray,
                  alloc: Callable[[int], np.ndarray] | None = None, width: int | None = None
                  ) -> tuple[np.ndarray | None, np.ndarray | int, np.ndarray | int]:
    """See ``kernels/_elements.pyx``: ``dest`` and ``offset`` C-contiguous int64, ``values`` a
    C-contiguous array with one element per put, ``sizes`` the parts' lengths (int64);
    ``alloc(nbytes)``, if given, supplies the packed buffer (uint8, exactly ``nbytes`` long);
    ``width``: bytes per offset (default :func:`offset_width` of ``sizes``)."""
    need = offset_width(sizes)
    if width is not None and width < need:
        raise ValueError(f"pack_elements: {width}-byte offsets cannot hold offsets into parts of up to "
                         f"{int(np.max(sizes))} elements (need {need})")
    raw = values.reshape(-1).view(np.uint8)
    return MODULES["_elements"].pack_elements(dest, offset, raw, values.dtype.itemsize, sizes, alloc,
                                              need if width is None else width)


def apply_elements(table: np.ndarray, record: np.ndarray, count: int, *, width: int) -> int:
    """Apply a packed record of ``count`` element puts with ``width``-byte offsets (the width it
    was packed with) to ``table`` (C-contiguous, 1-D); -1, or the index of the first offset
    outside ``table``."""
    return int(MODULES["_elements"].apply_elements(table.view(np.uint8), table.dtype.itemsize,
                                                   record, count, width))
