"""Grid partitionings: d-dimensional arrays over a processor grid (see the package notes)."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...errors import BSPError
from ._checks import IndexLike, as_index, check_int, result
from .onedim import Partitioning, partitioning


def dims_create(nprocs: int, ndims: int = 2) -> tuple[int, ...]:
    """A balanced processor grid of ``nprocs`` ranks in ``ndims`` dimensions, as ``MPI_Dims_create``.

    The dimensions are as close to each other as the factors of ``nprocs`` allow (the largest
    dimension as small as possible, then the next, ...) and in non-increasing order:
    ``dims_create(6) == (3, 2)``, ``dims_create(12) == (4, 3)``, ``dims_create(7) == (7, 1)``.
    """
    check_int(nprocs, "nprocs", 1, f"dims_create(nprocs={nprocs!r}, ndims={ndims!r})")
    check_int(ndims, "ndims", 1, f"dims_create(nprocs={nprocs!r}, ndims={ndims!r})")
    best: tuple[int, ...] | None = None

    def search(rest: int, slots: int, most: int, prefix: tuple[int, ...]) -> None:
        nonlocal best
        if slots == 1:
            if rest <= most:
                cand = prefix + (rest,)
                if best is None or cand < best:  # lexicographically smallest non-increasing
                    best = cand
            return
        for d in range(min(most, rest), 0, -1):
            if rest % d == 0 and d ** slots >= rest:  # d must be the largest of the rest
                search(rest // d, slots - 1, d, prefix + (d,))

    search(int(nprocs), int(ndims), int(nprocs), ())
    assert best is not None
    return best


class Grid:
    """A d-dimensional array partitioned over a ``p_0 x ... x p_{d-1}`` processor grid.

    Dimension ``a`` is split by the 1-D partitioning ``parts[a]`` over ``parts[a].p`` grid
    coordinates; element ``(i_0, ..., i_{d-1})`` lives on the rank whose grid coordinates are
    ``(parts[0].owner(i_0), ...)``, numbered row-major (MPI's Cartesian order), at local
    coordinates ``(parts[0].local_index(i_0), ...)`` of a local array of shape
    :meth:`local_shape`.  Flat local indices are row-major in that local array.

    Parameters
    ----------
    parts : sequence of Partitioning
        One 1-D partitioning per dimension; ``parts[a].n`` is the array's extent and
        ``parts[a].p`` the grid's extent in dimension ``a``.
    """

    def __init__(self, parts: Sequence[Partitioning]):
        parts = tuple(parts)
        if not parts or not all(isinstance(q, Partitioning) for q in parts):
            raise BSPError(f"Grid(parts={parts!r}): give one 1-D partitioning per dimension")
        self.parts = parts
        self.shape = tuple(q.n for q in parts)
        self.dims = tuple(q.p for q in parts)
        self.p = int(np.prod(self.dims))
        self.ndim = len(parts)

    def __repr__(self) -> str:
        return f"Grid({', '.join(map(repr, self.parts))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Grid) and self.describe() == other.describe()

    def __hash__(self) -> int:
        return hash(repr(self))

    def describe(self) -> dict[str, Any]:
        """A JSON-able description; :func:`from_description` rebuilds the grid."""
        return {"kind": "grid", "parts": [q.describe() for q in self.parts]}

    # ------------------------------------------------------------------ ranks and coordinates
    def rank_of(self, coords: Sequence[IndexLike]) -> Any:
        """Rank of grid coordinates ``(s_0, ..., s_{d-1})`` (row-major)."""
        arrs = [as_index(c, f"{self!r}.rank_of") for c in self._per_dim(coords, "rank_of")]
        scalar = all(s for _, s in arrs)
        rank = np.zeros(np.broadcast_shapes(*(a.shape for a, _ in arrs)), dtype=np.int64)
        for (a, _), d in zip(arrs, self.dims):
            if a.size and (a.min() < 0 or a.max() >= d):
                raise BSPError(f"{self!r}.rank_of: grid coordinate {a[(a < 0) | (a >= d)].flat[0]} "
                               f"is outside 0..{d - 1}")
            rank = rank * d + a
        return result(rank, scalar)

    def coords_of(self, rank: IndexLike) -> tuple[Any, ...]:
        """Grid coordinates ``(s_0, ..., s_{d-1})`` of ``rank``."""
        r, scalar = as_index(rank, f"{self!r}.coords_of")
        if r.size and (r.min() < 0 or r.max() >= self.p):
            raise BSPError(f"{self!r}.coords_of: rank {r[(r < 0) | (r >= self.p)].flat[0]} is "
                           f"outside 0..{self.p - 1}")
        out = []
        for d in reversed(self.dims):
            r, c = np.divmod(r, d)
            out.append(result(c, scalar))
        return tuple(reversed(out))

    # ------------------------------------------------------------------ elements
    def owner(self, index: Sequence[IndexLike]) -> Any:
        """Rank holding element ``index = (i_0, ..., i_{d-1})`` (ints or broadcastable arrays)."""
        idx = self._per_dim(index, "owner")
        return self.rank_of([q.owner(i) for q, i in zip(self.parts, idx)])

    def local_index(self, index: Sequence[IndexLike]) -> tuple[Any, ...]:
        """Local coordinates of element ``index`` on its owner."""
        idx = self._per_dim(index, "local_index")
        return tuple(q.local_index(i) for q, i in zip(self.parts, idx))

    def locate(self, index: Sequence[IndexLike]) -> tuple[Any, Any]:
        """``(owner, flat local index)`` of element ``index``: the arguments of a put or get to a
        coarray holding the row-major local array."""
        idx = self._per_dim(index, "locate")
        located = [q.locate(i) for q, i in zip(self.parts, idx)]
        rank = self.rank_of([r for r, _ in located])
        coords = [c for _, c in located]
        # Flat local index: row-major in the owner's local shape.
        flat = np.zeros(np.broadcast_shapes(*(np.shape(c) for c in coords)), dtype=np.int64)
        owners = [np.asarray(r) for r, _ in located]
        for q, own, c in zip(self.parts, owners, coords):
            flat = flat * q.local_sizes()[own] + c
        scalar = all(np.ndim(i) == 0 for i in idx)
        return result(np.asarray(rank), scalar), result(flat, scalar)

    def global_index(self, rank: IndexLike, local: Sequence[IndexLike]) -> tuple[Any, ...]:
        """Global coordinates of local coordinates ``local`` on ``rank``."""
        coords = self.coords_of(rank)
        loc = self._per_dim(local, "global_index")
        return tuple(q.global_index(c, l) for q, c, l in zip(self.parts, coords, loc))

    def local_shape(self, rank: int) -> tuple[int, ...]:
        """Shape of ``rank``'s local array."""
        check_int(rank, "rank", 0, f"{self!r}.local_shape")
        coords = self.coords_of(rank)
        return tuple(q.local_size(c) for q, c in zip(self.parts, coords))

    def local_size(self, rank: int) -> int:
        """Number of elements on ``rank``."""
        return int(np.prod(self.local_shape(rank)))

    def local_sizes(self) -> np.ndarray:
        """Number of elements on every rank, an int64 array of length ``p``."""
        return np.array([self.local_size(r) for r in range(self.p)], dtype=np.int64)

    def global_indices(self, rank: int) -> tuple[np.ndarray, ...]:
        """The global coordinates held by ``rank`` along each dimension (an open mesh: element
        ``(a, b)`` of the local array is global ``(rows[a], cols[b])`` in 2-D)."""
        coords = self.coords_of(rank)
        return tuple(q.global_indices(c) for q, c in zip(self.parts, coords))

    def _per_dim(self, values: Sequence[IndexLike], call: str) -> tuple[IndexLike, ...]:
        if not isinstance(values, (list, tuple)) or len(values) != self.ndim:
            raise BSPError(f"{self!r}.{call}: give one index (or index array) per dimension, "
                           f"{self.ndim} in all")
        return tuple(values)


def grid(shape: Sequence[int], nprocs: int, kinds: str | Sequence[str] = "cyclic",
         blocks: int | Sequence[int] = 1, dims: Sequence[int] | None = None) -> Grid:
    """A grid partitioning of an array of ``shape`` over ``nprocs`` ranks.

    Parameters
    ----------
    shape : sequence of int
        The global array's shape.
    nprocs : int
        Number of ranks; the grid is ``dims`` or else :func:`dims_create(nprocs, len(shape))`.
    kinds : str or sequence of str
        ``"block"``, ``"cyclic"`` or ``"block-cyclic"``, for all dimensions or one per dimension.
    blocks : int or sequence of int
        Block sizes for ``"block-cyclic"`` dimensions.
    dims : sequence of int, optional
        The processor grid; its product must be ``nprocs``.
    """
    shape = tuple(shape)
    nd = len(shape)
    where = f"grid(shape={shape}, nprocs={nprocs!r})"
    check_int(nprocs, "nprocs", 1, where)
    if dims is None:
        dims = dims_create(nprocs, nd)
    dims = tuple(int(d) for d in dims)
    if len(dims) != nd or int(np.prod(dims)) != nprocs:
        raise BSPError(f"{where}: grid {'x'.join(map(str, dims))} does not have {nd} dimension(s) of "
                       f"{nprocs} ranks in all")
    kinds = (kinds,) * nd if isinstance(kinds, str) else tuple(kinds)
    blocks = (blocks,) * nd if isinstance(blocks, (int, np.integer)) else tuple(blocks)
    if len(kinds) != nd or len(blocks) != nd:
        raise BSPError(f"{where}: give one kind and one block size per dimension ({nd})")
    return Grid([partitioning(k, n, d, b) for k, n, d, b in zip(kinds, shape, dims, blocks)])
