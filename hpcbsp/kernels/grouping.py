"""Stable grouping of items by destination rank (packing puts and sends by destination)."""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ._arrays import as_index_array
from ._extensions import MODULES


def group_by_dest(dest: Any, nprocs: int) -> tuple[np.ndarray, np.ndarray]:
    """Stable counting sort of items by destination rank.

    Parameters
    ----------
    dest : array_like of int
        Destination rank of each item (any integer dtype, any stride; a C-contiguous int64
        array is used without a copy).
    nprocs : int
        Number of ranks; every destination must lie in ``[0, nprocs)``.

    Returns
    -------
    perm : ndarray of int64
        Item indices grouped by ascending destination, in their original order within a
        destination (``dest[perm]`` is sorted, stably).
    counts : ndarray of int64
        ``counts[d]`` is the number of items for rank ``d`` (length ``nprocs``).

    Raises
    ------
    ValueError
        Naming the first destination outside ``[0, nprocs)`` and its position, or if
        ``nprocs`` is negative.
    TypeError
        If ``dest`` is not integer.

    Notes
    -----
    Two passes over ``dest`` (count, then place), O(n + nprocs).  Numpy oracle:
    :func:`hpcbsp.kernels.reference.group_by_dest`.
    """
    d = as_index_array(dest, "destination")
    return MODULES["_grouping"].group_by_dest(d, operator.index(nprocs))


def append_by_dest(dest: np.ndarray, rows: np.ndarray, start: int, bufs: np.ndarray, fill: np.ndarray,
                   capacity: int) -> tuple[int, int]:
    """Append records to per-destination buffers in order until one fills or is missing.

    ``dest``: C-contiguous int64 destinations, already checked to lie in ``[0, len(bufs))``;
    ``rows``: the records as a C-contiguous ``(n, itemsize)`` uint8 array; ``bufs[d]``: the
    address of d's buffer of ``capacity`` records (uint64; 0 for none); ``fill[d]``: records in
    it (int64, updated).  Returns ``(next, d)``: the first record not appended, and ``d >= 0``
    if d's buffer just became full, ``-d - 2`` if record ``next`` needs a buffer for d, ``-1``
    if every record was appended.  The caller keeps the buffers alive and their addresses right
    (:class:`hpcbsp.fabsp.aggregation.Aggregator` does).  Numpy oracle: appending one record at
    a time (tests/test_kernels_grouping.py).
    """
    if dest.dtype != np.int64 or not dest.flags.c_contiguous:
        raise TypeError("append_by_dest: destinations must be a C-contiguous int64 array")
    return MODULES["_grouping"].append_by_dest(dest, rows, operator.index(start), bufs, fill,
                                               operator.index(capacity))


def check_dests(dest: np.ndarray, nprocs: int) -> None:
    """Raise ``ValueError`` naming the first of ``dest`` (C-contiguous int64) outside
    ``[0, nprocs)``, in one compiled pass (numpy's min and max take two)."""
    bad = MODULES["_grouping"].first_outside(dest, operator.index(nprocs))
    if bad >= 0:
        raise ValueError(f"destination {dest[bad]} at position {bad} is outside [0, {nprocs})")
