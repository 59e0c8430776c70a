"""1-D partitionings: block, cyclic, block-cyclic and explicit (see the package notes)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import BSPError
from ..distribution import block_sizes
from ._checks import IndexLike, as_index, check_int, result


class Partitioning:
    """A 1-D partitioning of ``n`` global indices (``n >= 0``) over ``p`` ranks (``p >= 1``)
    (abstract base).

    Subclasses define :meth:`_owner_local` and :meth:`_global` and set ``_sizes``, the number of
    elements on each rank; the checked, vectorised public methods are here.
    """

    n: int
    p: int
    _sizes: np.ndarray

    # ------------------------------------------------------------------ subclass hooks
    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def local_sizes(self) -> np.ndarray:
        """Number of elements on each rank, an int64 array of length ``p``."""
        return self._sizes.copy()

    def describe(self) -> dict[str, Any]:
        """A JSON-able description; :func:`from_description` rebuilds the partitioning."""
        raise NotImplementedError

    def _check_sizes(self, n: int, p: int, where: str) -> None:
        """Set ``n`` and ``p``, checked; an error names the constructor call ``where``."""
        self.n = check_int(n, "n", 0, where)
        self.p = check_int(p, "p", 1, where)

    # ------------------------------------------------------------------ public API
    def _check_global(self, g: IndexLike, call: str) -> tuple[np.ndarray, bool]:
        arr, scalar = as_index(g, f"{self!r}.{call}")
        if arr.size and (arr.min() < 0 or arr.max() >= self.n):
            bad = arr[(arr < 0) | (arr >= self.n)].flat[0]
            raise BSPError(f"{self!r}.{call}: global index {bad} is outside 0..{self.n - 1}")
        return arr, scalar

    def owner(self, g: IndexLike) -> Any:
        """Rank that holds global index ``g`` (int or array)."""
        arr, scalar = self._check_global(g, "owner")
        return result(self._owner_local(arr)[0], scalar)

    def local_index(self, g: IndexLike) -> Any:
        """Local index of global index ``g`` on its owner."""
        arr, scalar = self._check_global(g, "local_index")
        return result(self._owner_local(arr)[1], scalar)

    def locate(self, g: IndexLike) -> tuple[Any, Any]:
        """``(owner, local index)`` of global index ``g``: the arguments of a put or get."""
        arr, scalar = self._check_global(g, "locate")
        rank, local = self._owner_local(arr)
        return result(rank, scalar), result(local, scalar)

    def global_index(self, rank: IndexLike, local: IndexLike) -> Any:
        """Global index of local index ``local`` on ``rank`` (broadcast against each other)."""
        r, rs = as_index(rank, f"{self!r}.global_index")
        l, ls = as_index(local, f"{self!r}.global_index")
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
        return result(self._global(r, l), rs and ls)

    def local_size(self, rank: int) -> int:
        """Number of elements on ``rank``."""
        check_int(rank, "rank", 0, f"{self!r}.local_size")
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

    def __repr__(self) -> str:
        """The constructor call, from :meth:`describe`: ``Block(n=10, p=3)``."""
        args = ", ".join(f"{key}={value}" for key, value in self.describe().items() if key != "kind")
        return f"{type(self).__name__}({args})"

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
        self._check_sizes(n, p, where)
        self.block = check_int(block, "block", 1, where)
        nblocks, last = divmod(self.n, self.block)
        full_rounds, extra = divmod(nblocks, self.p)
        sizes = np.full(self.p, full_rounds * self.block, dtype=np.int64)
        sizes[:extra] += self.block
        sizes[extra % self.p] += last  # the short last block goes to the next rank in turn
        self._sizes = sizes

    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k, within = np.divmod(g, self.block)
        rounds, rank = np.divmod(k, self.p)
        return rank, rounds * self.block + within

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        rounds, within = np.divmod(local, self.block)
        return (rounds * self.p + rank) * self.block + within

    def describe(self) -> dict[str, Any]:
        return {"kind": "block-cyclic", "n": self.n, "p": self.p, "block": self.block}


class Cyclic(BlockCyclic):
    """Global index ``g`` on rank ``g mod p`` at local index ``g // p`` (block-cyclic with block 1;
    ``n`` and ``p`` as in every :class:`Partitioning`)."""

    def __init__(self, n: int, p: int):
        self._check_sizes(n, p, f"Cyclic(n={n!r}, p={p!r})")
        super().__init__(self.n, self.p, 1)

    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        local, rank = np.divmod(g, self.p)
        return rank, local

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        return local * self.p + rank

    def describe(self) -> dict[str, Any]:
        return {"kind": "cyclic", "n": self.n, "p": self.p}


class Block(Partitioning):
    """Contiguous blocks: rank r holds ``n // p`` indices, plus one if ``r < n mod p``.

    Rank r's block is ``range(*block_range(n, p, r))``: the sizes come from
    :mod:`hpcbsp.runtime.api.distribution`, the one home of the block split, which the runtime's
    collectives and the block-row apps use without a partitioning object.  (``n`` and ``p`` as in
    every :class:`Partitioning`.)
    """

    def __init__(self, n: int, p: int):
        self._check_sizes(n, p, f"Block(n={n!r}, p={p!r})")
        self._base, self._extra = divmod(self.n, self.p)
        self._sizes = block_sizes(self.n, self.p)
        self._starts = np.concatenate([[0], np.cumsum(self._sizes)[:-1]]).astype(np.int64)

    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # The first `extra` ranks hold base + 1 each, covering indices below split.
        big = self._base + 1
        split = self._extra * big
        low = g < split
        rank = np.where(low, g // big, self._extra + (g - split) // max(self._base, 1))
        return rank, g - self._starts[rank]

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        return self._starts[rank] + local

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
        self.p = check_int(p, "p", 1, where)
        own, _ = as_index(owners, where)
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

    def __repr__(self) -> str:  # the owners are left out
        return f"Explicit(n={self.n}, p={self.p})"

    def _owner_local(self, g: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self._owners[g], self._local[g]

    def _global(self, rank: np.ndarray, local: np.ndarray) -> np.ndarray:
        return self._by_rank[self._starts[rank] + local]

    def describe(self) -> dict[str, Any]:
        return {"kind": "explicit", "n": self.n, "p": self.p, "owners": self._owners.tolist()}


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
