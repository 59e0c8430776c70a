"""Index checks shared by the partitionings (package-internal)."""
from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np

from ...errors import BSPError

IndexLike = Union[int, np.integer, np.ndarray, Sequence[int]]


def as_index(values: IndexLike, what: str) -> tuple[np.ndarray, bool]:
    """``values`` as an int64 array, and whether it was a scalar."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)
        else:
            raise BSPError(f"{what}: indices must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False), arr.ndim == 0


def result(arr: np.ndarray, scalar: bool) -> Any:
    return int(arr) if scalar else arr


def check_int(value: Any, name: str, minimum: int, where: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise BSPError(f"{where}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)
