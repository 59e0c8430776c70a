"""bale's cyclic layout of the irregular apps' tables: global index ``g`` lives on rank ``g % P``
at offset ``g // P``.  (A general partitioning with the same map is
:class:`hpcbsp.runtime.api.partition.Cyclic`; this is the apps' vectorised hot path.)"""
from __future__ import annotations

import numpy as np


def cyclic_owner(g: np.ndarray, nprocs: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rank, offset)`` of global indices ``g`` in the cyclic layout."""
    if nprocs & (nprocs - 1) == 0:  # a power of two: shifts, not int64 division (much faster)
        shift = nprocs.bit_length() - 1
        return g & (nprocs - 1), g >> shift
    off, rank = np.divmod(g, nprocs)
    return rank, off


if __name__ == "__main__":
    import sys

    from ...util.args.parser import not_a_program

    sys.exit(not_a_program("hpcbsp.apps.irregular.layout", "run python -m hpcbsp.apps.irregular.histogram, "
                           "index_gather, bfs, triangles or toposort (--help for options)"))
