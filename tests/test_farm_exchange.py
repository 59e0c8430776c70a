"""The farm's tree exchange against its linear one, and emulated compute (issue 17).

Oracles: the linear exchange (the tree must give the same bits: same partial results, same
slots, same master fold), numpy.linalg.solve for Jacobi, and for emulated compute the fixed
point worked out by hand (Jacobi's Compute is s + d, and an emulating worker re-sends its
partial result at x0 = 0, which is 0, so x = d = b / diag(A) after every iteration).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from mpi4py import MPI
from mpi_helpers import clean_env, run_mpi
from test_farm_skeleton import serial_reference, weighted_mean_problem

import hpcbsp
from hpcbsp import BSPError
from hpcbsp.apps.bsf.jacobi import jacobi_problem
from hpcbsp.apps.bsf.system import diagonally_dominant_system
from hpcbsp.cost.farmmodel import format_farm_parameters, model_from_farm
from hpcbsp.farm import FarmEmulation, parse_emulation, run_farm
from hpcbsp.farm.emulation import emulation_from_env, measure_map, wait_split
from hpcbsp.farm.terms import exchange_count, latency_count, tree_levels

mpi = pytest.mark.mpi(min_size=2)
PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "farm_tree_vs_linear.py")
#: D, the binomial tree's rounds each way over P ranks, counted by hand: the smallest D with 2^D >= P.
ROUNDS_BY_HAND = {2: 1, 3: 2, 4: 2, 5: 3, 8: 3, 9: 4, 16: 4, 17: 5, 32: 5, 33: 6}


@mpi
@pytest.mark.parametrize("length", [1 + 2, 37])
def test_tree_gives_the_same_bits_as_linear(length):
    if MPI.COMM_WORLD.Get_size() - 1 > length:
        pytest.skip("more workers than list elements")
    problem = weighted_mean_problem(length)

    def both(bsp):
        return [run_farm(bsp, problem, np.array([5.0]), max_iter=200, exchange=ex) for ex in ("linear", "tree")]

    linear, tree = hpcbsp.run(both)
    assert tree.x.tobytes() == linear.x.tobytes()
    assert (tree.iterations, tree.converged) == (linear.iterations, linear.converged)
    expected, iterations = serial_reference(problem, np.array([5.0]), 200)
    assert tree.iterations == iterations
    np.testing.assert_allclose(tree.x, expected, rtol=1e-12)
    assert tree.timings.exchange == "tree" and linear.timings.exchange == "linear"


@mpi
def test_tree_jacobi_against_numpy_and_its_ledger_shape():
    n = 40
    a, b = diagonally_dominant_system(n, seed=2)
    with hpcbsp.BSP() as bsp:
        result = run_farm(bsp, jacobi_problem(a, b, 1e-12), np.zeros(n), max_iter=300, exchange="tree")
        labels = [r.label for r in bsp.ledger]
        order = [(r.bytes_out, r.bytes_in, r.msgs_out, r.msgs_in) for r in bsp.ledger if r.label == "farm:order"]
        p = bsp.nprocs
    np.testing.assert_allclose(result.x, np.linalg.solve(a, b), atol=1e-9)
    rounds = ROUNDS_BY_HAND[p]
    assert labels.count("farm:order") == rounds * (result.iterations + 1)
    assert labels.count("farm:result") == rounds * result.iterations
    # No rank sends or receives more than one order message per round.
    assert max(o[2] for o in order) <= 1 and max(o[3] for o in order) <= 1


@pytest.mark.parametrize("nprocs", [4, 5, 9])
def test_tree_equals_linear_on_more_ranks_oversubscribed(nprocs):
    """The same bits both ways, and the tree's exchange as the skeleton ran it: D supersteps of
    each kind per iteration (the order once more, for the exit), and one message into each
    worker per order and out of each worker per result, counted in the ledgers of every rank;
    D against the count by hand and the model's D(K)."""
    res = run_mpi(nprocs, [PROGRAM, "30"], timeout=240, env={"HPCBSP_WAIT": "yield"})
    assert not res.timed_out and res.returncode == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["same"] and doc["converged"] and doc["error"] < 1e-9, doc
    rounds, workers, iterations = ROUNDS_BY_HAND[nprocs], nprocs - 1, doc["iterations"]
    assert doc["supersteps"] == {"farm:order": rounds * (iterations + 1), "farm:result": rounds * iterations}, doc
    assert doc["messages"] == {"farm:order": workers * (iterations + 1), "farm:result": workers * iterations}, doc
    assert tree_levels(workers) == rounds


def test_exchange_count_of_the_model():
    # K = 8 workers, 9 ranks: the binomial tree has D = 4 levels (ROUNDS_BY_HAND);
    # transfers: 8 (linear), φ·4 + (1 − φ)·8 (tree); latencies: 2·8 and 2·4·8.
    assert exchange_count(8.0, "linear") == 8 and exchange_count(8.0, "tree", 0.25) == 0.25 * 4 + 0.75 * 8
    assert [latency_count(np.array([8.0]), c)[0] for c in ("linear", "tree")] == [16.0, 64.0]
    np.testing.assert_array_equal(tree_levels(np.array([p - 1 for p in ROUNDS_BY_HAND], dtype=float)),
                                  list(ROUNDS_BY_HAND.values()))
    # a real K between two counts: the levels of ⌈K⌉ workers (⌈log2(K + 1)⌉ by hand)
    np.testing.assert_array_equal(tree_levels(np.array([2.5, 3.0, 3.5, 7.25])), [2, 2, 3, 4])


@mpi
def test_a_bad_exchange_is_named_on_every_rank():
    with pytest.raises(BSPError, match=r"exchange='star' is not a farm exchange; choose from linear, tree"):
        hpcbsp.run(run_farm, weighted_mean_problem(5), np.array([0.0]), exchange="star")


@mpi
@pytest.mark.parametrize("exchange", ["linear", "tree"])
def test_emulated_compute_waits_the_given_time_and_keeps_the_master_real(exchange):
    n, t_map, iters = 30, 0.02, 4
    a, b = diagonally_dominant_system(n, seed=1)
    result = hpcbsp.run(run_farm, jacobi_problem(a, b, 1e-12), np.zeros(n), max_iter=iters, exchange=exchange,
                        emulate=FarmEmulation(t_map=t_map, t_a=0.0))
    t = result.timings
    assert result.emulated and t.emulated == {"t_map": t_map, "t_a": 0.0, "measured": False}
    # Exactly max_iter iterations (the stop test is run but not obeyed), never "converged".
    assert result.iterations == iters and not result.converged
    # The hand-worked fixed point: x = 0 + d = b / diag(A), bit for bit.
    assert result.x.tobytes() == (b / np.diag(a)).tobytes()
    # The workers' waits add up to at least t_Map per iteration (a sleep is never shorter).
    assert min(t.samples["map_s"]) >= t_map * (1 - 1e-6)
    assert "SIMULATION of compute" in format_farm_parameters(t.as_dict())
    cm = model_from_farm(t.as_dict(), n_boot=0)
    assert cm.model.comm == exchange and "emulated_compute" in cm.fit


@mpi
def test_emulated_compute_measured_on_the_master():
    result = hpcbsp.run(run_farm, weighted_mean_problem(40), np.array([1.0]), max_iter=3,
                        emulate=FarmEmulation())
    em = result.timings.emulated
    assert em["measured"] and em["t_map"] > 0 and em["t_a"] >= 0
    assert result.iterations == 3


def test_single_rank_emulation():
    if MPI.COMM_WORLD.Get_size() != 1:
        pytest.skip("the one-rank layout needs a one-rank world")
    n = 12
    a, b = diagonally_dominant_system(n, seed=1)
    result = hpcbsp.run(run_farm, jacobi_problem(a, b, 1e-12), np.zeros(n), max_iter=3,
                        emulate=FarmEmulation(t_map=0.005, t_a=0.0))
    assert result.iterations == 3 and result.emulated
    assert result.x.tobytes() == (b / np.diag(a)).tobytes()
    assert min(result.timings.samples["map_s"]) >= 0.005 * (1 - 1e-6)


def test_emulation_spec_parsing_and_errors(monkeypatch):
    assert parse_emulation("measure") == FarmEmulation()
    assert parse_emulation("t_map=0.5, t_a=1e-6") == FarmEmulation(0.5, 1e-6)
    assert parse_emulation(FarmEmulation(0.25, 2e-7).spec()) == FarmEmulation(0.25, 2e-7)
    for bad in ("t_map=", "fast", "t_a=1", "t_map=-1"):
        with pytest.raises(ValueError):
            parse_emulation(bad)
    monkeypatch.setenv("HPCBSP_FARM_EMULATE", "off")
    assert emulation_from_env() is None
    monkeypatch.setenv("HPCBSP_FARM_EMULATE", "t_map=0.1")
    assert emulation_from_env() == FarmEmulation(0.1)


def test_wait_split_never_returns_less_than_asked():
    map_s, fold_s = wait_split(0.003, 0.001)
    assert map_s >= 0.003 and fold_s >= 0.001
    assert map_s / fold_s == pytest.approx(3.0)  # split in the proportion asked for


def test_measure_map_counts_every_element_once():
    calls = []
    problem = weighted_mean_problem(600)
    inner = problem.map
    problem.map = lambda x, idx: (calls.append(len(idx)), inner(x, idx))[1]
    t_map, t_a = measure_map(problem, np.array([0.0]))
    assert sum(calls) == 600 and max(calls) <= 256 and t_map > 0 and t_a >= 0


SERIAL_ONLY = pytest.mark.skipif(int(os.environ.get("PMI_SIZE", "1")) > 1,
                                 reason="launches its own MPI jobs: runs in the serial pass, not once per rank")


@SERIAL_ONLY
def test_app_options_say_it_is_a_simulation():
    res = run_mpi(3, ["-m", "hpcbsp.apps.bsf.jacobi", "--n", "120", "--exchange", "tree", "--emulate-compute",
                      "t_map=0.002", "--max-iter", "4"], timeout=120)
    assert not res.timed_out and res.returncode == 0, res.output
    assert "SIMULATION of compute" in res.stdout and "x is not a solution" in res.stdout
    assert "4 iterations (fixed), no check against numpy" in res.stdout and "tree exchange" in res.stdout
    bad = run_mpi(2, ["-m", "hpcbsp.apps.bsf.jacobi", "--emulate-compute", "t_map=soon"], timeout=60)
    assert bad.returncode == 2 and "--emulate-compute" in bad.stderr and "Traceback" not in bad.stderr


@SERIAL_ONLY
def test_calibrate_with_emulated_compute(tmp_path):
    import subprocess
    import sys

    env = clean_env()
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.cli.cost", "calibrate", "--workers", "1,2", "--repeats", "1",
                           "--exchange", "tree", "--emulate-compute", "--out-dir", str(tmp_path), "--timeout", "120",
                           "--", "python", "-m", "hpcbsp.apps.bsf.jacobi", "--n", "100", "--max-iter", "4"],
                          capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("SIMULATION of compute")
    assert "measured by the first run, used by every run" in proc.stderr
    doc = json.loads((tmp_path / "MODEL.json").read_text())
    assert doc["comm"] == "tree" and doc["fit"]["emulated_compute"]["measured"] is True
    # The second run waited exactly what the first measured.
    reports = [json.loads(open(tmp_path / f"report-K{k}-r0.jsonl").readline()) for k in (1, 2)]
    assert reports[1]["emulated"]["t_map"] == reports[0]["emulated"]["t_map"]
    assert reports[1]["emulated"]["measured"] is False
