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
