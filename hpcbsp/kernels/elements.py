"""Single-element puts in bulk (the runtime's ``Coarray.put_elements``): packed by destination
and applied in program order by compiled byte loops (``kernels/_elements.pyx``)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ._extensions import MODULES


def pack_elements(dest: np.ndarray, offset: np.ndarray, values: np.ndarray, sizes: np.ndarray,
                  alloc: Callable[[int], np.ndarray] | None = None
                  ) -> tuple[np.ndarray | None, np.ndarray | int, np.ndarray | int]:
    """See ``kernels/_elements.pyx``: ``dest`` and ``offset`` C-contiguous int64, ``values`` a
    C-contiguous array with one element per put, ``sizes`` the parts' lengths (int64);
    ``alloc(nbytes)``, if given, supplies the packed buffer (uint8, exactly ``nbytes`` long)."""
    raw = values.reshape(-1).view(np.uint8)
    return MODULES["_elements"].pack_elements(dest, offset, raw, values.dtype.itemsize, sizes, alloc)


def apply_elements(table: np.ndarray, record: np.ndarray, count: int) -> int:
    """Apply a packed record of ``count`` element puts to ``table`` (C-contiguous, 1-D)."""
    return int(MODULES["_elements"].apply_elements(table.view(np.uint8), table.dtype.itemsize,
                                                   record, count))
