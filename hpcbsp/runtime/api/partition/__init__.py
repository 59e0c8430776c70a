"""Partitionings (Bulk's ``partitioning``): where each global index of a distributed array lives.

A partitioning of ``n`` global indices over ``p`` ranks is a bijection between the global index
``g`` in ``0..n-1`` and the pair ``(rank, local index)``; rank ``r`` holds ``local_size(r)``
elements at local indices ``0..local_size(r)-1``, in increasing global order.  Every method is
vectorised: it takes an int or an integer array and returns the same shape.  Nothing here
communicates: a partitioning is the same pure object on every rank, and a program uses it to size
its coarrays (``bsp.coarray(part.local_size(bsp.pid))``) and to address puts and gets
(``owner, offset = part.locate(g); x.put(owner, values, offset)``).

1-D partitionings
    :class:`Block`
        contiguous blocks, the first ``n mod p`` ranks one element longer (its sizes from
        :mod:`hpcbsp.runtime.api.distribution`, the home of the block split, whose
        :func:`~hpcbsp.runtime.api.distribution.block_range` the runtime uses directly);
    :class:`Cyclic`
        ``g`` on rank ``g mod p`` at local index ``g // p``;
    :class:`BlockCyclic`
        blocks of ``block`` consecutive indices dealt out cyclically (ScaLAPACK's layout);
        ``BlockCyclic(n, p, 1)`` is cyclic;
    :class:`Explicit`
        any owner per index (local order: increasing global index).

Grids
    :class:`Grid` combines one 1-D partitioning per dimension of a d-dimensional array over a
    ``p_0 x p_1 x ...`` processor grid; the rank of grid coordinates ``(s_0, s_1, ...)`` is their
    row-major number (MPI's Cartesian order), and the local part is the row-major array of shape
    ``local_shape(rank)``.  :func:`dims_create` chooses a balanced grid as ``MPI_Dims_create``
    does, and :func:`grid` builds a grid partitioning from names (``"block"``, ``"cyclic"``,
    ``"block-cyclic"``).

Misuse (an index outside the array, a rank outside the grid, a bad size) raises
:class:`~hpcbsp.runtime.errors.BSPError` naming the partitioning and the call.  A partitioning is
described by :meth:`describe` as a small JSON-able dict and rebuilt by :func:`from_description`.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import BSPError
from .grid import Grid, dims_create, grid
from .onedim import Block, BlockCyclic, Cyclic, Explicit, Partitioning, partitioning

__all__ = ["Block", "BlockCyclic", "Cyclic", "Explicit", "Grid", "Partitioning", "dims_create",
           "from_description", "grid", "partitioning"]


def from_description(desc: dict[str, Any]) -> "Partitioning | Grid":
    """Rebuild a partitioning from :meth:`Partitioning.describe` / :meth:`Grid.describe`."""
    try:
        kind = desc["kind"]
        if kind == "grid":
            return Grid([from_description(d) for d in desc["parts"]])  # type: ignore[misc]
        if kind == "explicit":
            return Explicit(np.asarray(desc["owners"], dtype=np.int64), desc["p"])
        return partitioning(kind, desc["n"], desc["p"], desc.get("block", 1))
    except (KeyError, TypeError) as exc:
        raise BSPError(f"from_description({desc!r}): not a partitioning description ({exc})") from None
