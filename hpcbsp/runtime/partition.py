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
        contiguous blocks, the first ``n mod p`` ranks one element longer (the runtime's own
        :func:`~hpcbsp.runtime.distribution.block_range`);
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

from typing import Any, Sequence, Union

import numpy as np

from .errors import BSPError

IndexLike = Union[int, np.integer, np.ndarray, Sequence[int]]


def _as_index(values: IndexLike, what: str) -> tuple[np.ndarray, bool]:
    """``values`` as an int64 array, and whether it was a scalar."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        if arr.size == 0 and arr.dtype.kind == "f":
            arr = arr.astype(np.int64)
        else:
            raise BSPError(f"{what}: indices must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False), arr.ndim == 0


def _out(arr: np.ndarray, scalar: bool) -> Any:
    return int(arr) if scalar else arr


def _check_int(value: Any, name: str, minimum: int, where: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise BSPError(f"{where}: {name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class Partitioning:
    """A 1-D partitioning of ``n`` global indices over ``p`` ranks (abstract base).

    Subclasses define :meth:`_owner_local`, :meth:`_global` and :meth:`local_sizes`; the checked,
    vectorised public methods are here.
    """

    n: int
    p: int

    # ------------------------------------------------------------------ subclass hooks
    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def local_sizes(self) -> np.ndarray:
        """Number of elements on each rank, an int64 array of length ``p``."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        """A JSON-able description; :func:`from_description` rebuilds the partitioning."""
        raise NotImplementedError

    # ------------------------------------------------------------------ public API
    def _check_global(self, g: IndexLike, call: str) -> tuple[np.ndarray, bool]:
        arr, scalar = _as_index(g, f"{self!r}.{call}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n):
            bad = arr[(arr < 0) | (arr >= self.n)].flat[0]
            raise BSPError(f"{self!r}.{call}: global index {bad} is outside 0..{self.n - 1}")
        return arr, scalar

    def owner(self, g: IndexLike) -> Any:
        """Rank that holds global index ``g`` (int or array)."""
        arr, scalar = self._check_global(g, "owner")
        return _out(self._owner_local(arr)[0], scalar)

    def local_index(self, g: IndexLike) -> Any:
        """Local index of global index ``g`` on its owner."""
        arr, scalar = self._check_global(g, "local_index")
        return _out(self._owner_local(arr)[1], scalar)

    def locate(self, g: IndexLike) -> tuple[Any, Any]:
        """``(owner, local index)`` of global index ``g``: the arguments of a put or get."""
        arr, scalar = self._check_global(g, "locate")
        rank, local = self._owner_local(arr)
        return _out(rank, scalar), _out(local, scalar)

    def global_index(self, rank: IndexLike, local: IndexLike) -> Any:
        """Global index of local index ``local`` on ``rank`` (broadcast against each other)."""
        r, rs = _as_index(rank, f"{self!r}.global_index")
        l, ls = _as_index(local, f"{self!r}.global_index")
        r, l = np.broadcast_arrays(r, l)
        if r.size and (r.min() < 0 or r.max() >= self.p):
            raise BSPError(f"{self!r}.global_index: rank {r[(r < 0) | (r >= self.p)].flat[0]} is "
                           f"outside 0..{self.p - 1}")
        sizes = self.local_sizes()
        if r.size:
            bad = (l < 0) | (l >= sizes[r])
            if bad.any():
                i = np.flatnonzero(bad.ravel())[0]
                raise BSPError(f"{self!r}.global_index: local index {l.flat[i]} is outside rank "
                               f"{r.flat[i]}'s part (size {sizes[r.flat[i]]})")
        return _out(self._global(r, l), rs and ls)

    def local_size(self, rank: int) -> int:
        """Number of elements on ``rank``."""
        _check_int(rank, "rank", 0, f"{self!r}.local_size")
        if rank >= self.p:
            raise BSPError(f"{self!r}.local_size: rank {rank} is outside 0..{self.p - 1}")
        return int(self.local_sizes()[rank])

    def global_indices(self, rank: int) -> np.ndarray:
        """The global indices held by ``rank``, in local order (increasing)."""
        size = self.local_size(rank)
        return self._global(np.full(size, rank, dtype=np.int64), np.arange(size, dtype=np.int64))

    def local_range_above(self, rank: int, g: int) -> int:
        """First local index on ``rank`` whose global index is ``>= g`` (local order follows global
        order, so the elements at or after ``g`` are a suffix of the local part)."""
        return int(np.searchsorted(self.global_indices(rank), g))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Partitioning) and self.describe() == other.describe()

    def __hash__(self) -> int:
        return hash(repr(self))


class BlockCyclic(Partitioning):
    """Blocks of ``block`` consecutive indices dealt out to ranks 0, 1, ..., p-1, 0, 1, ...

    Global index ``g`` is in block ``k = g // block``, on rank ``k mod p`` at local index
    ``(k // p) * block + g mod block``.  The last block may be short, and ranks past the last
    block (``p`` larger than the number of blocks) hold nothing.

    Parameters
    ----------
    n : int
        Number of global indices (>= 0).
    p : int
        Number of ranks (>= 1).
    block : int
        Block size (>= 1).
    """

    def __init__(self, n: int, p: int, block: int):
        where = f"BlockCyclic(n={n!r}, p={p!r}, block={block!r})"
        self.n = _check_int(n, "n", 0, where)
        self.p = _check_int(p, "p", 1, where)
        self.block = _check_int(block, "block", 1, where)
        nblocks, last = divmod(self.n, self.block)
        full_rounds, extra = divmod(nblocks, self.p)
        sizes = np.full(self.p, full_rounds * self.block, dtype=np.int64)
        sizes[:extra] += self.block
        sizes[extra % self.p] += last  # the short last block goes to the next rank in turn
        self._sizes = sizes

    def __repr__(self) -> str:
        return f"BlockCyclic(n={self.n}, p={self.p}, block={self.block})"

    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, within = np.divmod(g, self.block)
        rounds, rank = np.divmod(k, self.p)
        return rank, rounds * self.block + within

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        rounds, within = np.divmod(local, self.block)
        return (rounds * self.p + rank) * self.block + within

    def local_sizes(self) -> np.ndarray:
        return self._sizes.copy()

    def describe(self) -> dict[str, Any]:
        return {"kind": "block-cyclic", "n": self.n, "p": self.p, "block": self.block}


class Cyclic(BlockCyclic):
    """Global index ``g`` on rank ``g mod p`` at local index ``g // p`` (block-cyclic with block 1).

    Parameters
    ----------
    n : int
        Number of global indices (>= 0).
    p : int
        Number of ranks (>= 1).
    """

    def __init__(self, n: int, p: int):
        where = f"Cyclic(n={n!r}, p={p!r})"
        super().__init__(_check_int(n, "n", 0, where), _check_int(p, "p", 1, where), 1)

    def __repr__(self) -> str:
        return f"Cyclic(n={self.n}, p={self.p})"

    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        local, rank = np.divmod(g, self.p)
        return rank, local

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        return local * self.p + rank

    def describe(self) -> dict[str, Any]:
        return {"kind": "cyclic", "n": self.n, "p": self.p}


class Block(Partitioning):
    """Contiguous blocks: rank r holds ``n // p`` indices, plus one if ``r < n mod p``.

    The same split as :func:`hpcbsp.runtime.distribution.block_range`, which the runtime's
    checkpoints and the block-row apps use.

    Parameters
    ----------
    n : int
        Number of global indices (>= 0).
    p : int
        Number of ranks (>= 1).
    """

    def __init__(self, n: int, p: int):
        where = f"Block(n={n!r}, p={p!r})"
        self.n = _check_int(n, "n", 0, where)
        self.p = _check_int(p, "p", 1, where)
        self._base, self._extra = divmod(self.n, self.p)
        sizes = np.full(self.p, self._base, dtype=np.int64)
        sizes[: self._extra] += 1
        self._sizes = sizes
        self._starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    def __repr__(self) -> str:
        return f"Block(n={self.n}, p={self.p})"

    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # The first `extra` ranks hold base + 1 each, covering indices below split.
        big = self._base + 1
        split = self._extra * big
        low = g < split
        rank = np.where(low, g // big, self._extra + (g - split) // max(self._base, 1))
        return rank, g - self._starts[rank]

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        return self._starts[rank] + local

    def local_sizes(self) -> np.ndarray:
        return self._sizes.copy()

    def start(self, rank: int) -> int:
        """First global index of ``rank``'s block."""
        self.local_size(rank)  # checks the rank
        return int(self._starts[rank])

    def describe(self) -> dict[str, Any]:
        return {"kind": "block", "n": self.n, "p": self.p}


class Explicit(Partitioning):
    """Any assignment of global indices to ranks, given by an owner per index (Bulk's irregular
    partitionings); each rank's local order is increasing global order.

    Parameters
    ----------
    owners : array_like of int
        ``owners[g]`` is the rank holding global index g.
    p : int
        Number of ranks (every owner must be in ``0..p-1``).
    """

    def __init__(self, owners: IndexLike, p: int):
        where = f"Explicit(owners=..., p={p!r})"
        self.p = _check_int(p, "p", 1, where)
        own, _ = _as_index(owners, where)
        own = own.reshape(-1)
        if own.size and (own.min() < 0 or own.max() >= self.p):
            raise BSPError(f"{where}: owner {own[(own < 0) | (own >= self.p)][0]} is outside "
                           f"0..{self.p - 1}")
        self.n = int(own.size)
        self._owners = own.copy()
        order = np.argsort(own, kind="stable")          # by rank, then global index
        self._sizes = np.bincount(own, minlength=self.p).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]]).astype(np.int64)
        self._by_rank = order                            # global indices grouped by rank
        self._starts = starts
        local = np.empty(self.n, dtype=np.int64)
        local[order] = np.arange(self.n, dtype=np.int64) - np.repeat(starts, self._sizes)
        self._local = local

    def __repr__(self) -> str:
        return f"Explicit(n={self.n}, p={self.p})"

    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._owners[g], self._local[g]

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        return self._by_rank[self._starts[rank] + local]

    def local_sizes(self) -> np.ndarray:
        return self._sizes.copy()

    def describe(self) -> dict[str, Any]:
        return {"kind": "explicit", "n": self.n, "p": self.p, "owners": self._owners.tolist()}


def dims_create(nprocs: int, ndims: int = 2) -> tuple[int, ...]:
    """A balanced processor grid of ``nprocs`` ranks in ``ndims`` dimensions, as ``MPI_Dims_create``.

    The dimensions are as close to each other as the factors of ``nprocs`` allow (the largest
    dimension as small as possible, then the next, ...) and in non-increasing order:
    ``dims_create(6) == (3, 2)``, ``dims_create(12) == (4, 3)``, ``dims_create(7) == (7, 1)``.
    """
    _check_int(nprocs, "nprocs", 1, f"dims_create(nprocs={nprocs!r}, ndims={ndims!r})")
    _check_int(ndims, "ndims", 1, f"dims_create(nprocs={nprocs!r}, ndims={ndims!r})")
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
        arrs = [_as_index(c, f"{self!r}.rank_of") for c in self._per_dim(coords, "rank_of")]
        scalar = all(s for _, s in arrs)
        rank = np.zeros(np.broadcast_shapes(*(a.shape for a, _ in arrs)), dtype=np.int64)
        for (a, _), d in zip(arrs, self.dims):
            if a.size and (a.min() < 0 or a.max() >= d):
                raise BSPError(f"{self!r}.rank_of: grid coordinate {a[(a < 0) | (a >= d)].flat[0]} "
                               f"is outside 0..{d - 1}")
            rank = rank * d + a
        return _out(rank, scalar)

    def coords_of(self, rank: IndexLike) -> tuple[Any, ...]:
        """Grid coordinates ``(s_0, ..., s_{d-1})`` of ``rank``."""
        r, scalar = _as_index(rank, f"{self!r}.coords_of")
        if r.size and (r.min() < 0 or r.max() >= self.p):
            raise BSPError(f"{self!r}.coords_of: rank {r[(r < 0) | (r >= self.p)].flat[0]} is "
                           f"outside 0..{self.p - 1}")
        out = []
        for d in reversed(self.dims):
            r, c = np.divmod(r, d)
            out.append(_out(c, scalar))
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
        return _out(np.asarray(rank), scalar), _out(flat, scalar)

    def global_index(self, rank: IndexLike, local: Sequence[IndexLike]) -> tuple[Any, ...]:
        """Global coordinates of local coordinates ``local`` on ``rank``."""
        coords = self.coords_of(rank)
        loc = self._per_dim(local, "global_index")
        return tuple(q.global_index(c, l) for q, c, l in zip(self.parts, coords, loc))

    def local_shape(self, rank: int) -> tuple[int, ...]:
        """Shape of ``rank``'s local array."""
        _check_int(rank, "rank", 0, f"{self!r}.local_shape")
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


_KINDS = ("block", "cyclic", "block-cyclic")


def partitioning(kind: str, n: int, p: int, block: int = 1) -> Partitioning:
    """A 1-D partitioning by name: ``"block"``, ``"cyclic"`` or ``"block-cyclic"`` (with ``block``)."""
    if kind == "block":
        return Block(n, p)
    if kind == "cyclic":
        return Cyclic(n, p)
    if kind == "block-cyclic":
        return BlockCyclic(n, p, block)
    raise BSPError(f"partitioning(kind={kind!r}): choose one of {', '.join(_KINDS)}")


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
    _check_int(nprocs, "nprocs", 1, where)
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
