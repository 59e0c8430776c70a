"""Sparse matrix-vector product with a 2-D partitioning (hpcbsp.apps.spmv) against scipy.sparse.

Oracles: ``scipy.sparse`` (A @ x) for the product; for the ledger, two hand-computed 4 x 4 cases
on 2 ranks and, at 2-4 ranks, an independent count by brute-force loops over the nonzeros of
what the setup, fan-out and fan-in supersteps must move.  Rectangular matrices whose sizes the
grid does not divide, block and cyclic, and grids 1 x P and P x 1 are used.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from mpi_helpers import run_mpi

import hpcbsp
from hpcbsp.apps.spmv import SpMV, cartesian_layout, random_sparse

sparse = pytest.importorskip("scipy.sparse", reason="the SpMV oracle is scipy.sparse")

mpi = pytest.mark.mpi(min_size=2)


def multiply(bsp, shape, rows, cols, vals, kind="block", dims=None, x=None, repeat=1):
    layout = cartesian_layout(shape, bsp.nprocs, kind, dims)
    mine = layout.matrix.owner((rows, cols)) == bsp.pid if rows.size else np.zeros(0, bool)
    product = SpMV(bsp, layout, rows[mine], cols[mine], vals[mine])
    if x is None:
        x = np.random.default_rng(5).uniform(-1, 1, shape[1])
    for _ in range(repeat):
        y = product(x[layout.x.global_indices(bsp.pid)])
    want = (sparse.coo_matrix((vals, (rows, cols)), shape=shape).tocsr() @ x)[layout.y.global_indices(bsp.pid)]
    np.testing.assert_allclose(y, want, rtol=0, atol=1e-13)
    return layout


def test_vector_entries_live_where_they_are_used():
    for p, kind in ((4, "block"), (6, "cyclic"), (5, "block"), (12, "cyclic")):
        layout = cartesian_layout((23, 17), p, kind)
        rowpart, colpart = layout.matrix.parts
        j, i = np.arange(17), np.arange(23)
        assert np.array_equal(layout.matrix.coords_of(layout.x.owner(j))[1], colpart.owner(j))
        assert np.array_equal(layout.matrix.coords_of(layout.y.owner(i))[0], rowpart.owner(i))
        # spread over the processor column / row: no rank holds more than its share + 1 per group
        assert layout.x.local_sizes().max() - layout.x.local_sizes().min() <= -(-17 // p) + 1


@pytest.mark.parametrize("shape,density", [((1, 1), 1.0), ((10, 7), 0.3), ((60, 45), 0.05)])
def test_one_rank(shape, density):
    with hpcbsp.BSP() as bsp:
        multiply(bsp, shape, *random_sparse(shape, density, seed=1), repeat=2)


@mpi
@pytest.mark.parametrize("kind", ["block", "cyclic"])
@pytest.mark.parametrize("shape,density", [((3, 2), 0.5), ((31, 17), 0.1), ((101, 77), 0.03)])
def test_several_ranks_match_scipy(kind, shape, density):
    with hpcbsp.BSP() as bsp:
        multiply(bsp, shape, *random_sparse(shape, density, seed=2), kind=kind, repeat=2)
        for dims in ((1, bsp.nprocs), (bsp.nprocs, 1)):
            multiply(bsp, shape, *random_sparse(shape, density, seed=3), kind=kind, dims=dims)


@mpi
def test_empty_rows_columns_and_ranks():
    with hpcbsp.BSP() as bsp:
        rows, cols, vals = np.array([0, 4]), np.array([2, 2]), np.array([2.0, -3.0])   # two nonzeros
        multiply(bsp, (5, 6), rows, cols, vals)
        multiply(bsp, (5, 6), np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0))


def expected_traffic(layout, rows, cols):
    """Per superstep (setup, fan-out, fan-in): bytes out of and into every rank, by brute force."""
    p = layout.matrix.p
    need, partial = set(), set()                 # (rank, column) and (rank, row) pairs
    for i, j in zip(rows.tolist(), cols.tolist()):
        r = int(layout.matrix.owner((i, j)))
        need.add((r, j))
        partial.add((r, i))
    steps = {name: ([0] * p, [0] * p) for name in ("spmv:setup", "spmv:fan-out", "spmv:fan-in")}
    for r, j in need:
        o = int(layout.x.owner(j))
        if o != r:
            steps["spmv:setup"][0][r] += 24
            steps["spmv:setup"][1][o] += 24
            steps["spmv:fan-out"][0][o] += 8
            steps["spmv:fan-out"][1][r] += 8
    for r, i in partial:
        o = int(layout.y.owner(i))
        if o != r:
            steps["spmv:setup"][0][r] += 8
            steps["spmv:setup"][1][o] += 8
            steps["spmv:fan-in"][0][r] += 8
            steps["spmv:fan-in"][1][o] += 8
    return steps


@mpi
@pytest.mark.parametrize("kind", ["block", "cyclic"])
def test_ledger_matches_independent_count(kind):
    with hpcbsp.BSP() as bsp:
        shape = (41, 29)
        rows, cols, vals = random_sparse(shape, 0.08, seed=4)
        layout = multiply(bsp, shape, rows, cols, vals, kind=kind, repeat=2)
        mine = [(r.label, r.bytes_out, r.bytes_in) for r in bsp.ledger]
        every = bsp.comm.allgather(mine)
        want = expected_traffic(layout, rows, cols)
        labels = [m[0] for m in mine]
        assert labels == ["spmv:setup", "spmv:fan-out", "spmv:fan-in"] * 1 + ["spmv:fan-out", "spmv:fan-in"]
        for i, label in enumerate(labels):
            assert [e[i][1] for e in every] == want[label][0], label
            assert [e[i][2] for e in every] == want[label][1], label


LEDGER_PROGRAM = """
import json, sys
import numpy as np
import hpcbsp
from hpcbsp.apps.spmv import SpMV, cartesian_layout
dims = tuple(json.loads(sys.argv[1]))
rows, cols = np.array([0, 0, 1, 2, 3, 3]), np.array([0, 3, 1, 2, 0, 1])
vals = np.arange(1.0, 7.0)
with hpcbsp.BSP() as bsp:
    layout = cartesian_layout((4, 4), 2, "block", dims)
    mine = layout.matrix.owner((rows, cols)) == bsp.pid
    y = SpMV(bsp, layout, rows[mine], cols[mine], vals[mine])(np.arange(1.0, 5.0)[layout.x.global_indices(bsp.pid)])
    every = bsp.comm.gather(([(r.label, r.bytes_out, r.bytes_in) for r in bsp.ledger], y.tolist()))
    if bsp.pid == 0:
        print(json.dumps(every))
"""


@pytest.mark.parametrize("dims,want", [
    # 2 x 1: rows 0-1 on rank 0, 2-3 on rank 1; x0, x2 on rank 0, x1, x3 on rank 1; y with its rows.
    # Rank 0 needs x1, x3 and rank 1 needs x0, x2: two 24-byte requests, then two 8-byte values
    # each way; every partial sum is already on the owner of its y.
    ((2, 1), {"spmv:setup": ([48, 48], [48, 48]), "spmv:fan-out": ([16, 16], [16, 16]),
              "spmv:fan-in": ([0, 0], [0, 0])}),
    # 1 x 2: columns 0-1 on rank 0, 2-3 on rank 1, x with its columns; y0, y2 on rank 0, y1, y3 on
    # rank 1.  Rank 0 has partial sums of rows 0, 1, 3 (1 and 3 go to rank 1), rank 1 of rows 0, 2
    # (both to rank 0): two 8-byte announcements and two 8-byte sums each way, no fan-out.
    ((1, 2), {"spmv:setup": ([16, 16], [16, 16]), "spmv:fan-out": ([0, 0], [0, 0]),
              "spmv:fan-in": ([16, 16], [16, 16])}),
])
def test_ledger_hand_computed_two_ranks(dims, want):
    """A 4 x 4 matrix with nonzeros (0,0) (0,3) (1,1) (2,2) (3,0) (3,1) = 1..6, x = 1..4, so
    y = [1 + 8, 6, 12, 5 + 12] = [9, 6, 12, 17]."""
    res = run_mpi(2, ["-c", LEDGER_PROGRAM, json.dumps(dims)], timeout=120)
    assert res.returncode == 0, res.output
    (steps0, y0), (steps1, y1) = json.loads(res.stdout.strip().splitlines()[-1])
    for i, (label, _, _) in enumerate(steps0):
        assert ([steps0[i][1], steps1[i][1]], [steps0[i][2], steps1[i][2]]) == want[label]
    assert [s[0] for s in steps0] == ["spmv:setup", "spmv:fan-out", "spmv:fan-in"]
    y_owner = {(2, 1): ([0, 1], [2, 3]), (1, 2): ([0, 2], [1, 3])}[tuple(dims)]
    full = np.zeros(4)
    full[y_owner[0]], full[y_owner[1]] = y0, y1
    assert full.tolist() == [9.0, 6.0, 12.0, 17.0]


def test_command_line_with_cost_model_and_bad_input(tmp_path):
    ledger = tmp_path / "spmv.json"
    res = run_mpi(4, ["-m", "hpcbsp.apps.spmv", "--repeats", "2", "--partition", "cyclic",
                      "--ledger", str(ledger)], timeout=240)
    assert res.returncode == 0, res.output
    assert "cyclic on a 2x2 grid (4 rank(s)), 2 product(s)" in res.stdout and "OK" in res.stdout
    # the saved ledger feeds the cost model (a made-up profile: this checks the pipeline, not timings)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"format": "hpcbsp-bsp-profile/1", "nprocs": 4, "r_flops": 1e9,
                                   "l_empty": 1e-5, "regimes": [
                                       {"name": "words", "message_bytes": [8, 8], "g": 1e-7, "l": 2e-5},
                                       {"name": "blocks", "message_bytes": [512, 1 << 20], "g": 1e-9, "l": 2e-5}]}))
    cost = run_mpi(1, ["-m", "hpcbsp.cli.cost", "ledger", str(ledger), "--profile", str(profile)],
                   timeout=60)
    assert cost.returncode == 0, cost.output
    assert "spmv:fan-out" in cost.stdout and "BSP model w + g·h + l over 5 supersteps on 4 rank(s)" in cost.stdout
    for args, words in ((["--n", "0"], "argument --n: '0' is not a positive integer"),
                        (["--rows", "0"], "argument --rows: '0' is not a positive integer"),  # the old spelling
                        (["--cols", "0"], "argument --cols: '0' is not a positive integer"),
                        (["--density", "2"], "'2' must lie in [0, 1]"), (["--density", "0"], "--density must be in (0, 1]"),
                        (["--grid", "3x1"], "must equal the number of ranks"),
                        (["--repeats", "0"], "argument --repeats: '0' is not a positive integer"),
                        (["--ledger", "y.txt"], ".json or .csv")):
        bad = run_mpi(1, ["-m", "hpcbsp.apps.spmv", *args], timeout=60)
        assert bad.returncode == 2 and "Traceback" not in bad.output, bad.output
        assert words in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_json_is_the_only_output_and_matches_the_run():
    """--json --quiet: stdout is one JSON object describing this run; --n is the number of rows
    (the nonzeros are round(density * rows * cols), drawn without repetition)."""
    res = run_mpi(2, ["-m", "hpcbsp.apps.spmv", "--n", "40", "--cols", "30", "--density", "0.1",
                      "--repeats", "3", "--json", "--quiet"], timeout=120)
    assert res.returncode == 0, res.output
    assert len(res.stdout.strip().splitlines()) == 1, res.stdout
    out = json.loads(res.stdout)
    assert (out["rows"], out["cols"], out["nonzeros"], out["products"], out["grid"], out["ok"]) == \
        (40, 30, 120, 3, [2, 1], True)
