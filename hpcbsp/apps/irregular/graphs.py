"""Random graphs for the irregular apps (triangles, bfs) and their serial oracles.

Every rank generates the same global edge list from the seed (cheap at the sizes the apps use)
and keeps the rows it owns in the cyclic layout: vertex v on rank ``v % P`` as local row
``v // P``.  The oracles work on the whole graph with plain numpy (scipy only where noted), by
methods unlike the distributed ones, so that they check them independently.
"""
from __future__ import annotations

from collections import deque

import numpy as np


def erdos_renyi(n: int, degree: float, seed: int) -> np.ndarray:
    """About ``n * degree / 2`` random undirected edges on ``n`` vertices (flat, like bale's).

    Returns a ``(m, 2)`` int64 array of distinct pairs ``(u, v)`` with ``u > v``.
    """
    rng = np.random.default_rng([seed, 7])
    m = int(round(n * degree / 2))
    pairs = rng.integers(0, n, size=(m, 2))
    return _canonical(pairs)


def rmat(scale: int, edge_factor: int, seed: int, probs: tuple[float, float, float] = (0.57, 0.19, 0.19)
         ) -> np.ndarray:
    """An R-MAT graph (Graph500 parameters by default) on ``2**scale`` vertices.

    ``edge_factor * 2**scale`` edges are drawn, one quadrant per bit level with probabilities
    ``a, b, c`` (and ``d = 1 - a - b - c``); self loops and duplicates are dropped.  Returns
    distinct ``(u, v)`` with ``u > v``.
    """
    a, b, c = probs
    rng = np.random.default_rng([seed, 11])
    m = edge_factor << scale
    u = np.zeros(m, dtype=np.int64)
    v = np.zeros(m, dtype=np.int64)
    for bit in range(scale):
        r = rng.random(m)
        u |= (r >= a + b).astype(np.int64) << bit                    # quadrants c, d: lower half
        v |= (((r >= a) & (r < a + b)) | (r >= a + b + c)).astype(np.int64) << bit  # b, d: right
    return _canonical(np.stack([u, v], axis=1))


def _canonical(pairs: np.ndarray) -> np.ndarray:
    hi = np.maximum(pairs[:, 0], pairs[:, 1])
    lo = np.minimum(pairs[:, 0], pairs[:, 1])
    keep = hi != lo
    return np.unique(np.stack([hi[keep], lo[keep]], axis=1), axis=0)


def local_rows(edges: np.ndarray, n: int, pid: int, nprocs: int, symmetric: bool
               ) -> tuple[np.ndarray, np.ndarray]:
    """CSR ``(indptr, indices)`` of this rank's rows, local row ``r`` being vertex ``r*P + pid``.

    ``symmetric=False``: the strictly lower triangle (row u holds the v < u it is joined to);
    ``symmetric=True``: every neighbour.  Columns are sorted within each row.
    """
    rows, cols = edges[:, 0], edges[:, 1]
    if symmetric:
        rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    mine = rows % nprocs == pid
    rows, cols = rows[mine] // nprocs, cols[mine]
    order = np.lexsort((cols, rows))
    rows, cols = rows[order], cols[order]
    nlocal = len(range(pid, n, nprocs))
    indptr = np.zeros(nlocal + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=nlocal), out=indptr[1:])
    return indptr, cols.astype(np.int64)


def ragged_arange(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + k) for s, k in zip(starts, lengths)])``, vectorised."""
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    firsts = np.cumsum(lengths) - lengths
    return np.repeat(starts - firsts, lengths) + np.arange(total)


def triangles_dense(edges: np.ndarray, n: int) -> int:
    """Serial oracle: ``trace(A^3) / 6`` with a dense adjacency matrix (small n only)."""
    a = np.zeros((n, n), dtype=np.float64)
    a[edges[:, 0], edges[:, 1]] = 1.0
    a[edges[:, 1], edges[:, 0]] = 1.0
    return int(round(float(np.sum((a @ a) * a)) / 6))


def triangles_sparse(edges: np.ndarray, n: int) -> int | None:
    """Serial oracle for larger graphs: ``sum((A @ A) .* A) / 6`` with scipy.sparse, or None
    if scipy is not installed."""
    try:
        from scipy import sparse
    except ImportError:
        return None
    ones = np.ones(edges.shape[0] * 2)
    a = sparse.csr_matrix((ones, (np.concatenate([edges[:, 0], edges[:, 1]]),
                                  np.concatenate([edges[:, 1], edges[:, 0]]))), shape=(n, n))
    return int(round(float((a @ a).multiply(a).sum()) / 6))


def bfs_levels(edges: np.ndarray, n: int, source: int) -> np.ndarray:
    """Serial oracle: hop distance from ``source`` by a queue-based BFS (-1: unreachable)."""
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for u, v in edges.tolist():
        neighbours[u].append(v)
        neighbours[v].append(u)
    level = np.full(n, -1, dtype=np.int64)
    level[source] = 0
    todo = deque([source])
    while todo:
        u = todo.popleft()
        for v in neighbours[u]:
            if level[v] < 0:
                level[v] = level[u] + 1
                todo.append(v)
    return level


if __name__ == "__main__":
    import sys

    from ...util.args.parser import not_a_program

    sys.exit(not_a_program("hpcbsp.apps.irregular.graphs",
                           "run python -m hpcbsp.apps.irregular.bfs or python -m hpcbsp.apps.irregular.triangles "
                           "(--help for options)"))
