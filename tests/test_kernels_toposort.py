"""toposort's compiled local elimination (``hpcbsp.kernels.toposort.Elimination``).

The ranks of a run are simulated in one process (1, 2 and 3 of them, rows and columns dealt
cyclically), the records each rank hands back delivered to their owners in a random order.
Records are mixed: shrinks and pivots, as the app's one mailbox carries them.  Oracles:
:func:`hpcbsp.kernels.reference.toposort_settle` (numpy, a frontier at a time) run in lockstep
on a copy of every state, call by call (the same state after each call, the same records as
multisets); and at the end, brute force on the unpermuted triangle: every row takes
its own diagonal's column, and its level is the longest chain of rows below it (row i with a
nonzero in column j > i comes one level after row j), computed by a plain loop from the last row.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.apps.irregular.toposort import scrambled_triangle
from hpcbsp.kernels import reference
from hpcbsp.kernels.toposort import Elimination, pivots


def rank_state(rows: np.ndarray, cols: np.ndarray, n: int, p: int, me: int) -> dict[str, np.ndarray]:
    """Rank ``me``'s arrays, built here with plain numpy (not the app's Part): ``rows`` holds
    colsum, count, level, pivot_col per local row."""
    nl = len(range(me, n, p))
    mine = rows % p == me
    state = np.zeros((nl, 4), dtype=np.int64)
    state[:, 0] = np.bincount(rows[mine] // p, weights=cols[mine], minlength=nl)
    state[:, 1] = np.bincount(rows[mine] // p, minlength=nl)
    state[:, 3] = -1
    ours = cols % p == me
    order = np.lexsort((rows[ours], cols[ours] // p))
    col_ptr = np.concatenate([[0], np.cumsum(np.bincount(cols[ours] // p, minlength=nl))]).astype(np.int64)
    return {"rows": state, "claimed": np.zeros(nl, dtype=bool), "col_ptr": col_ptr,
            "col_rows": rows[ours][order].astype(np.int64)}


def brute_force(rows: np.ndarray, cols: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(diagonal column of each row, level of each row) from the unpermuted triangle."""
    orig_row, orig_col = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    orig_row[rows[:n]] = np.arange(n)   # scrambled_triangle lists the diagonal first
    orig_col[cols[:n]] = np.arange(n)
    above: list[list[int]] = [[] for _ in range(n)]
    for r, c in zip(orig_row[rows[n:]].tolist(), orig_col[cols[n:]].tolist()):
        assert c > r, "upper triangular"
        above[r].append(c)
    level = [0] * n
    for i in range(n - 1, -1, -1):
        level[i] = max((level[j] + 1 for j in above[i]), default=0)
    diag = np.empty(n, dtype=np.int64)
    diag[rows[:n]] = cols[:n]
    lev = np.empty(n, dtype=np.int64)
    lev[rows[:n]] = np.array(level)[orig_row[rows[:n]]]
    return diag, lev


def as_set(recs: np.ndarray) -> list[tuple[int, ...]]:
    return sorted(map(tuple, np.asarray(recs).reshape(-1, 3).tolist()))


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_simulated_ranks_match_the_numpy_elimination_and_brute_force(p, seed):
    n = 240
    rows, cols = scrambled_triangle(n, 5.0, seed)
    states = [rank_state(rows, cols, n, p, me) for me in range(p)]
    refs = [{k: v.copy() for k, v in s.items()} for s in states]
    elims = [Elimination(**s, p=p, me=me) for me, s in enumerate(states)]
    rng = np.random.default_rng(seed)
    mail: list[tuple[int, np.ndarray]] = []   # (to, records)

    def call(me: int, recs: np.ndarray) -> None:
        got = elims[me].settle(recs)
        want = reference.toposort_settle(**refs[me], p=p, me=me, records=recs)
        assert as_set(got) == as_set(want)
        for k in ("rows", "claimed"):
            np.testing.assert_array_equal(states[me][k], refs[me][k], err_msg=k)
        assert not np.any(got[:, 0] % p == me), "only other ranks' records come back"
        for to in range(p):
            part = got[got[:, 0] % p == to]
            # delivered in pieces, so that batches split and interleave
            for piece in np.array_split(part, rng.integers(1, 3)) if part.size else []:
                mail.append((to, piece.copy()))

    for me, s in enumerate(states):   # the rows ready at the start pivot at level 0
        rs = s["rows"]
        ready = np.flatnonzero(rs[:, 1] == 1)
        s["claimed"][ready] = refs[me]["claimed"][ready] = True
        rs[ready, 3] = refs[me]["rows"][ready, 3] = rs[ready, 0]
        call(me, pivots(rs[ready, 0], rs[ready, 2], ready * p + me))
    calls = 0
    kinds = set()
    while mail:
        to, recs = mail.pop(int(rng.integers(len(mail))))
        kinds |= set((recs[:, 2] < 0).tolist())
        call(to, recs)
        calls += 1
    assert p == 1 or kinds == {True, False}, "both pivots and shrinks travelled"
    assert p == 1 or calls > 10, "records travelled between the simulated ranks"
    diag, level = brute_force(rows, cols, n)
    assert level.max() >= 4, "the matrix has depth"
    for me, s in enumerate(states):
        np.testing.assert_array_equal(s["rows"][:, 3], diag[me::p])
        np.testing.assert_array_equal(s["rows"][:, 2], level[me::p])
        assert s["claimed"].all() and (s["rows"][:, 1] == 1).all()


def test_shrink_matches_numpy():
    """BSP's step: ``shrink`` against ``np.subtract.at`` and the rows left with one nonzero."""
    n, p, me = 300, 2, 1
    rows, cols = scrambled_triangle(n, 6.0, 5)
    s = rank_state(rows, cols, n, p, me)
    elim = Elimination(**s, p=p, me=me)
    rng = np.random.default_rng(3)
    mine = np.flatnonzero((rows % p == me) & (np.arange(rows.size) >= n))  # off-diagonal ones
    pick = rng.choice(mine, mine.size // 2, replace=False)
    shr = np.stack([rows[pick], cols[pick], np.zeros(pick.size, dtype=np.int64)], axis=1)
    colsum, count = s["rows"][:, 0].copy(), s["rows"][:, 1].copy()
    np.subtract.at(count, shr[:, 0] // p, 1)
    np.subtract.at(colsum, shr[:, 0] // p, shr[:, 1])
    want = np.unique(shr[:, 0] // p)
    want = want[count[want] == 1]
    got = elim.shrink(shr)
    assert sorted(got.tolist()) == want.tolist() and want.size > 5
    np.testing.assert_array_equal(s["rows"][:, 1], count)
    np.testing.assert_array_equal(s["rows"][:, 0], colsum)
    np.testing.assert_array_equal(s["rows"][want, 3], colsum[want])   # the ready rows' columns
    assert s["claimed"][want].all() and s["claimed"].sum() == want.size
    assert elim.shrink(shr[:0]).size == 0


def test_bad_records_are_refused():
    n, p = 50, 2
    rows, cols = scrambled_triangle(n, 4.0, 1)
    s = rank_state(rows, cols, n, p, 0)
    elim = Elimination(**s, p=p, me=0)
    with pytest.raises(ValueError, match="outside"):
        elim.settle(np.array([[2 * n, 0, 0]]))              # a shrink's row past the end
    with pytest.raises(ValueError, match="outside"):
        elim.settle(pivots([-2], [0], [0]))                 # a pivot's negative column
    with pytest.raises(TypeError, match="three int64"):
        elim.settle(np.zeros(3, dtype=[("a", np.int32), ("b", np.int64), ("c", np.int64)]))
    with pytest.raises(TypeError, match="claimed"):
        Elimination(**{**s, "claimed": s["claimed"].astype(np.uint8)}, p=p, me=0)
    with pytest.raises(TypeError, match="rows"):
        Elimination(**{**s, "rows": s["rows"][:, :3].copy()}, p=p, me=0)
    with pytest.raises(ValueError, match="col_ptr"):
        Elimination(**{**s, "col_ptr": s["col_ptr"][::-1].copy()}, p=p, me=0)
