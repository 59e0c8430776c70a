"""LU with partial pivoting on a 2-D cyclic grid (hpcbsp.apps.lu).

Oracles: ``scipy.linalg.lu_factor`` (LAPACK getrf: the same packed L\\U and the same pivots) and
``P A = L U`` rebuilt with numpy; for the ledger, a hand-computed 4 x 4 case on 2 ranks and an
independent count of what each superstep must move, from the definition of the algorithm and
scipy's pivots.  Sizes that the grid does not divide are used throughout.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from mpi_helpers import run_mpi

import hpcbsp
from hpcbsp.apps.lu import apply_pivots, cyclic_grid, lu, random_matrix

scipy_linalg = pytest.importorskip("scipy.linalg", reason="the LU oracle is scipy.linalg.lu_factor")

mpi = pytest.mark.mpi(min_size=2)


def factor(bsp, a, dims=None):
    layout = cyclic_grid(a.shape[0], bsp.nprocs, dims)
    rows, cols = layout.global_indices(bsp.pid)
    return layout, lu(bsp, a[np.ix_(rows, cols)].copy(), layout)


def check_against_scipy(bsp, a, dims=None):
    layout, res = factor(bsp, a, dims)
    packed, piv = scipy_linalg.lu_factor(a)
    np.testing.assert_array_equal(res.piv, piv)
    np.testing.assert_allclose(res.local, packed[np.ix_(res.rows, res.cols)], rtol=0, atol=1e-10)
    # P A = L U from the factors as this rank has them (rebuilt independently of scipy)
    parts = bsp.comm.allgather((res.rows, res.cols, res.local))
    n = a.shape[0]
    full = np.zeros((n, n))
    for rr, cc, loc in parts:
        full[np.ix_(rr, cc)] = loc
    l_, u_ = np.tril(full, -1) + np.eye(n), np.triu(full)
    np.testing.assert_allclose(apply_pivots(a, res.piv), l_ @ u_, rtol=0, atol=1e-11)
    assert np.all(np.abs(np.tril(full, -1)) <= 1.0 + 1e-15)   # partial pivoting: |l_ik| <= 1
    return layout, res


@pytest.mark.parametrize("n", [1, 2, 7, 20])
def test_one_rank_matches_scipy(n):
    with hpcbsp.BSP() as bsp:
        check_against_scipy(bsp, random_matrix(n, seed=n))


@mpi
@pytest.mark.parametrize("n", [1, 5, 13, 30])
def test_several_ranks_match_scipy(n):
    with hpcbsp.BSP() as bsp:
        check_against_scipy(bsp, random_matrix(n, seed=n + 1))


@mpi
def test_other_grid_shapes():
    with hpcbsp.BSP() as bsp:
        p = bsp.nprocs
        for dims in ((1, p), (p, 1)):
            check_against_scipy(bsp, random_matrix(11, seed=4), dims)


def test_singular_matrix_as_lapack():
    a = random_matrix(6, seed=2)
    a[:, 4] = 0.0     # an exactly zero column stays zero: a zero pivot, skipped as LAPACK does
    with hpcbsp.BSP() as bsp, pytest.warns(Warning, match="exactly zero"):
        _, res = check_against_scipy(bsp, a)
        assert res.singular


# ---------------------------------------------------------------- ledger: what each superstep moved

def expected_traffic(n, dims, piv):
    """(label, bytes_out[rank], bytes_in[rank]) per superstep, from the algorithm's definition."""
    big_m, big_n = dims
    p = big_m * big_n
    layout = cyclic_grid(n, p, dims)
    rows = {r: layout.global_indices(r)[0] for r in range(p)}
    cols = {r: layout.global_indices(r)[1] for r in range(p)}
    coords = {r: layout.coords_of(r) for r in range(p)}
    steps = []
    for k in range(n):
        tk, sk = k % big_n, k % big_m
        out, inn = [0] * p, [0] * p
        for r in range(p):                           # pivot search: 16 bytes to each column peer
            if coords[r][1] == tk:
                out[r] += 16 * (big_m - 1)
                inn[r] += 16 * (big_m - 1)
        steps.append(("lu:pivot-search", out, inn))
        out, inn = [0] * p, [0] * p
        for r in range(p):                           # pivot row: 8 bytes from column tk along rows
            if coords[r][1] == tk:
                out[r] += 8 * (big_n - 1)
            else:
                inn[r] += 8
        steps.append(("lu:pivot-broadcast", out, inn))
        piv_row = int(piv[k])
        if piv_row != k:
            out, inn = [0] * p, [0] * p
            if piv_row % big_m != sk:
                for r in range(p):
                    if coords[r][0] in (sk, piv_row % big_m):
                        out[r] += 8 * cols[r].size
                        inn[r] += 8 * cols[r].size
            steps.append(("lu:row-swap", out, inn))
        out, inn = [0] * p, [0] * p
        for r in range(p):
            s, t = coords[r]
            below = int(np.sum(rows[r] > k))
            right = int(np.sum(cols[r] > k))
            if t == tk:
                out[r] += 8 * below * (big_n - 1)
            else:
                inn[r] += 8 * below
            if s == sk:
                out[r] += 8 * right * (big_m - 1)
            else:
                inn[r] += 8 * right
        steps.append(("lu:broadcast", out, inn))
    return steps


def ledger_steps(bsp):
    """Every rank's (label, bytes_out, bytes_in) per superstep, from the ledger."""
    mine = [(r.label, r.bytes_out, r.bytes_in) for r in bsp.ledger]
    every = bsp.comm.allgather(mine)
    return [(every[0][i][0], [e[i][1] for e in every], [e[i][2] for e in every])
            for i in range(len(mine))]


def test_ledger_hand_computed_two_ranks():
    """A = [[1,2,0,0],[4,1,0,0],[0,0,1,3],[0,0,2,1]] on a 2 x 1 grid (rows 0, 2 on rank 0; 1, 3 on
    rank 1).  Pivots by hand: column 0 -> row 1 (swap rows 0 and 1: 4 values each way); column 1
    -> row 1 itself (1.75 against 0, no swap superstep); column 2 -> row 3 (swap rows 2, 3);
    column 3 -> row 3.  The pivot row parts right of the diagonal: 3, 2, 1, 0 values, from rank
    0, 1, 0, 1; every pivot search moves one 16-byte candidate each way; N = 1, so nothing moves
    along processor rows."""
    a = np.array([[1., 2, 0, 0], [4, 1, 0, 0], [0, 0, 1, 3], [0, 0, 2, 1]])
    want = [("lu:pivot-search", [16, 16], [16, 16]), ("lu:pivot-broadcast", [0, 0], [0, 0]),
            ("lu:row-swap", [32, 32], [32, 32]), ("lu:broadcast", [24, 0], [0, 24]),
            ("lu:pivot-search", [16, 16], [16, 16]), ("lu:pivot-broadcast", [0, 0], [0, 0]),
            ("lu:broadcast", [0, 16], [16, 0]),
            ("lu:pivot-search", [16, 16], [16, 16]), ("lu:pivot-broadcast", [0, 0], [0, 0]),
            ("lu:row-swap", [32, 32], [32, 32]), ("lu:broadcast", [8, 0], [0, 8]),
            ("lu:pivot-search", [16, 16], [16, 16]), ("lu:pivot-broadcast", [0, 0], [0, 0]),
            ("lu:broadcast", [0, 0], [0, 0])]
    res = run_mpi(2, ["-c", LEDGER_PROGRAM, json.dumps(a.tolist())], timeout=120)
    assert res.returncode == 0, res.output
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["piv"] == [1, 1, 3, 3]
    assert [tuple(s) for s in got["steps"]] == [(lab, o, i) for lab, o, i in want]


LEDGER_PROGRAM = """
import json, sys
import numpy as np
import hpcbsp
from hpcbsp.apps.lu import cyclic_grid, lu
a = np.array(json.loads(sys.argv[1]))
with hpcbsp.BSP() as bsp:
    layout = cyclic_grid(a.shape[0], bsp.nprocs)
    rows, cols = layout.global_indices(bsp.pid)
    res = lu(bsp, a[np.ix_(rows, cols)].copy(), layout)
    mine = [(r.label, r.bytes_out, r.bytes_in) for r in bsp.ledger][:-1]  # the last: allreduce
    every = bsp.comm.gather(mine)
    if bsp.pid == 0:
        steps = [[every[0][i][0], [e[i][1] for e in every], [e[i][2] for e in every]]
                 for i in range(len(mine))]
        print(json.dumps({"piv": res.piv.tolist(), "steps": steps}))
"""


@mpi
@pytest.mark.parametrize("n", [6, 11])
def test_ledger_matches_independent_count(n):
    with hpcbsp.BSP() as bsp:
        a = random_matrix(n, seed=7)
        layout, res = factor(bsp, a)
        _, piv = scipy_linalg.lu_factor(a)
        got = ledger_steps(bsp)
        assert got[-1][0] == "allreduce:max"        # the singularity flag, after the stages
        assert got[:-1] == expected_traffic(n, layout.dims, piv)


def test_command_line_checks_itself_and_refuses_bad_input(tmp_path):
    ledger = tmp_path / "lu.json"
    res = run_mpi(3, ["-m", "hpcbsp.apps.lu", "--n", "23", "--ledger", str(ledger)], timeout=180)
    assert res.returncode == 0, res.output
    assert "on a 3x1 cyclic grid (3 rank(s)); pivots equal scipy.linalg.lu_factor's" in res.stdout
    assert "OK" in res.stdout and "lu:pivot-search" in res.stdout
    records = json.loads(ledger.read_text())["records"]
    assert {r["rank"] for r in records} == {0, 1, 2}
    for args, words in ((["--n", "0"], "argument --n: '0' is not a positive integer"),
                        (["--grid", "2x2"], "must equal the number of ranks"),
                        (["--grid", "two"], "write it as MxN"), (["--ledger", "x.txt"], ".json or .csv")):
        bad = run_mpi(1, ["-m", "hpcbsp.apps.lu", *args], timeout=60)
        assert bad.returncode == 2 and "Traceback" not in bad.output, bad.output
        assert words in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_four_ranks_on_a_2x2_grid():
    res = run_mpi(4, ["-m", "hpcbsp.apps.lu", "--n", "19"], timeout=240)
    assert res.returncode == 0, res.output
    assert "on a 2x2 cyclic grid (4 rank(s)); pivots equal" in res.stdout and "OK" in res.stdout


def test_json_is_the_only_output_and_matches_the_run():
    """--json --quiet: stdout is one JSON object describing this run (3 ranks: a 3x1 grid)."""
    res = run_mpi(3, ["-m", "hpcbsp.apps.lu", "--n", "17", "--seed", "4", "--json", "--quiet"], timeout=180)
    assert res.returncode == 0, res.output
    assert len(res.stdout.strip().splitlines()) == 1, res.stdout
    out = json.loads(res.stdout)
    assert (out["n"], out["grid"], out["ranks"], out["pivots_equal"], out["ok"]) == (17, [3, 1], 3, True, True)
    assert 0 <= out["max_error"] <= 1e-8 * 17 and 0 <= out["residual"] <= 1e-12 * 17
