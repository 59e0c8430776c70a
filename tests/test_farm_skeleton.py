"""The BSF farm on the BSP runtime (mpiexec -n 2 and -n 3; one serial case).

Oracles: the same BSF problem iterated by a plain serial loop in the test (no split, no
messages), and numpy.linalg.solve for Jacobi.
"""
from __future__ import annotations

import functools
import json

import numpy as np
import pytest
from mpi4py import MPI

import hpcbsp
from hpcbsp import BSPError
from hpcbsp.apps.bsf.jacobi import jacobi_problem
from hpcbsp.apps.bsf.system import diagonally_dominant_system
from hpcbsp.farm import BSFProblem, run_farm

mpi = pytest.mark.mpi(min_size=2)


def weighted_mean_problem(length: int, tol: float = 1e-12) -> BSFProblem:
    """x ← (Σ_j w_j·(j + x)/2) / Σ_j w_j: a contraction with elements of different weights.

    Map F_x(j) = (w_j·(j + x)/2, w_j); Reduce adds pairs; Compute divides.  The fold order
    differs between the farm and the serial loop, so results agree to rounding, not bits.
    """
    weights = 1.0 + np.arange(length) % 3

    def map_fn(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        w = weights[idx]
        return np.column_stack([w * (idx + x[0]) / 2.0, w])

    return BSFProblem(items=np.arange(length), map=map_fn, reduce=np.add,
                      compute=lambda x, s: np.array([s[0] / s[1]]),
                      stop=lambda xn, x: abs(xn[0] - x[0]) < tol)


def serial_reference(problem: BSFProblem, x0: np.ndarray, max_iter: int) -> tuple[np.ndarray, int]:
    x = np.asarray(x0, dtype=float)
    for i in range(1, max_iter + 1):
        b = problem.map(x, problem.sublist(0, problem.list_length))
        s = functools.reduce(problem.reduce, b)
        x_next = problem.compute(x, s)
        if problem.stop(x_next, x):
            return x_next, i
        x = x_next
    return x, max_iter


@mpi
def test_farm_matches_a_serial_loop_on_every_rank():
    problem = weighted_mean_problem(37)
    result = hpcbsp.run(run_farm, problem, np.array([5.0]), max_iter=200)
    expected, iterations = serial_reference(problem, np.array([5.0]), 200)
    assert result.converged and result.iterations == iterations
    np.testing.assert_allclose(result.x, expected, rtol=1e-12)
    everyone = MPI.COMM_WORLD.allgather((result.x.tolist(), result.iterations, result.timings.t_map))
    assert all(e == everyone[0] for e in everyone), "every rank must return the same result"
    assert result.workers == MPI.COMM_WORLD.Get_size() - 1


@mpi
def test_jacobi_against_numpy_and_the_ledger_shape():
    n = 60
    a, b = diagonally_dominant_system(n, seed=3)
    with hpcbsp.BSP() as bsp:
        result = run_farm(bsp, jacobi_problem(a, b, 1e-12), np.zeros(n), max_iter=300)
        labels = [r.label for r in bsp.ledger]
        ledger = {r.label: r for r in bsp.ledger}
        order_bytes = [(r.bytes_out, r.bytes_in) for r in bsp.ledger if r.label == "farm:order"]
        pid, k = bsp.pid, bsp.nprocs - 1
    np.testing.assert_allclose(result.x, np.linalg.solve(a, b), atol=1e-9)
    # One order and one result superstep per iteration, plus the final order that says stop.
    assert labels.count("farm:order") == result.iterations + 1
    assert labels.count("farm:result") == result.iterations
    assert "farm:result" in ledger
    # The master puts x and the flag (n + 1 words) to each of the K workers.
    expected = (k * (n + 1) * 8, 0) if pid == 0 else (0, (n + 1) * 8)
    assert set(order_bytes) == {expected}


@mpi
def test_iteration_limit_and_measured_parameters():
    problem = weighted_mean_problem(20, tol=-1.0)  # the stop test never holds
    result = hpcbsp.run(run_farm, problem, np.array([0.0]), max_iter=7)
    t = result.timings
    assert result.iterations == 7 and not result.converged
    k, length = MPI.COMM_WORLD.Get_size() - 1, 20
    assert t.list_length == length and t.workers == k and t.iterations == 7
    s = {name: np.asarray(v) for name, v in t.samples.items()}
    assert all(v.size == 7 for v in s.values()) and (s["seconds"] > 0).all() and (s["map_s"] > 0).all()
    assert t.latency > 0
    # The parameters are the medians of what each iteration measured, the exchange being what the
    # model's work terms leave of T, written out by hand here (linear exchange, ceil split):
    # work = t_Map·⌈l/K⌉/l + (⌈l/K⌉ − 1 + K − 1)·t_a + t_p, and 2L + t_c = (T − work)/K.
    share = -(-length // k)
    t_a = (s["fold_s"] + s["master_fold_s"]) / (length - 1)
    work = s["map_s"] * share / length + (share - 1 + k - 1) * t_a + s["compute_s"]
    t_c = np.maximum(np.maximum(s["seconds"] - work, 0) / k - 2 * t.latency, 0)
    assert (t.t_map, t.t_a, t.t_p, t.t_c) == pytest.approx(
        (np.median(s["map_s"]), np.median(t_a), np.median(s["compute_s"]), np.median(t_c)), rel=1e-12, abs=1e-15)
    assert t.seconds_per_iteration == np.median(s["seconds"])


@mpi
def test_report_line_for_calibrate(tmp_path):
    path = MPI.COMM_WORLD.bcast(str(tmp_path / "report.jsonl"), root=0)
    result = hpcbsp.run(run_farm, weighted_mean_problem(12), np.array([1.0]), report=path, label="t")
    MPI.COMM_WORLD.Barrier()
    if MPI.COMM_WORLD.Get_rank() == 0:
        lines = open(path).read().splitlines()
        assert len(lines) == 1
        doc = json.loads(lines[0])
        assert doc["label"] == "t" and doc["iterations"] == result.iterations
        assert doc["workers"] == result.workers and doc["nprocs"] == MPI.COMM_WORLD.Get_size()


@mpi
def test_more_workers_than_elements_is_refused_on_every_rank():
    if MPI.COMM_WORLD.Get_size() < 3:
        pytest.skip("needs at least 2 workers (3 ranks) to outnumber a one-element list")
    with pytest.raises(BSPError, match="map list only 1"):
        hpcbsp.run(run_farm, weighted_mean_problem(1), np.array([0.0]))


def test_single_rank_farm_is_its_own_worker():
    if MPI.COMM_WORLD.Get_size() != 1:
        pytest.skip("the one-rank layout needs a one-rank world")
    problem = weighted_mean_problem(15)
    result = hpcbsp.run(run_farm, problem, np.array([2.0]), max_iter=100)
    expected, iterations = serial_reference(problem, np.array([2.0]), 100)
    assert result.workers == 1 and result.iterations == iterations
    np.testing.assert_allclose(result.x, expected, rtol=1e-12)
    assert result.timings.latency == 0.0 and result.timings.t_c == 0.0
