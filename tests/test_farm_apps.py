"""The BSF example programs and the `make run` demonstration, launched as MPI programs."""
from __future__ import annotations

import json
import shlex
import subprocess
import sys

import numpy as np
import pytest
from mpi_helpers import clean_env, run_mpi

from hpcbsp.cost.modelfile import load_model

pytestmark = pytest.mark.serial_only  # it launches MPI jobs of its own


@pytest.mark.parametrize("app, n", [("jacobi", 150), ("cimmino", 120)])
@pytest.mark.parametrize("nprocs", [2, 3])
def test_app_solves_and_reports(app, n, nprocs):
    res = run_mpi(nprocs, ["-m", f"hpcbsp.apps.bsf.{app}", "--n", str(n), "--json"], timeout=120)
    assert not res.timed_out and res.returncode == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["converged"] and doc["max_error"] < 1e-6
    assert doc["workers"] == nprocs - 1 and doc["timings"]["list_length"] == n


def test_app_text_output_and_bad_input():
    res = run_mpi(2, ["-m", "hpcbsp.apps.bsf.jacobi", "--n", "100"], timeout=120)
    assert res.returncode == 0, res.output
    assert "check against numpy.linalg.solve" in res.stdout and "OK" in res.stdout
    assert "K_max" in res.stdout
    bad = run_mpi(2, ["-m", "hpcbsp.apps.bsf.jacobi", "--n", "0"], timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "argument --n: '0' is not a positive integer" in bad.stderr
    bad = run_mpi(1, ["-m", "hpcbsp.apps.bsf.cimmino", "--relaxation", "3"], timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


@pytest.mark.alone  # it compares times measured in one run: tests beside it skew one component's median
def test_demo(tmp_path):
    res = run_mpi(2, ["-m", "hpcbsp.apps.demo", "--n", "400", "--out-dir", str(tmp_path)], timeout=120)
    assert not res.timed_out and res.returncode == 0, res.output
    assert "OK" in res.stdout and "ledger:" in res.stdout and "K_max" in res.stdout
    png = tmp_path / "speedup.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and str(png) in res.stdout
    cm = load_model(tmp_path / "MODEL.json")
    # The model measured from the run reproduces that run's iteration time at its own K (the
    # components are medians over the iterations, the measured time the median of their sums,
    # so they agree closely, not exactly).  Oracle: the run's own median iteration time.
    workers = cm.fit["workers"][0]
    measured = cm.fit["seconds_per_iteration"]
    assert workers == 1 and measured > 0
    assert cm.model.time(np.array([workers]))[0] == pytest.approx(measured, rel=0.25)
    k_max = cm.model.k_max()
    assert k_max is None or k_max >= 1


# Issue 14, item 3: a run on one rank measures no communication (the master is its own worker,
# L = t_c = 0) and used to predict K_max = 17 (jacobi --n 100) or 36 (demo --n 300) where a
# 2-rank run of the same solve predicts 1-2.  Now it predicts nothing and says what to run.
@pytest.mark.parametrize("app", ["jacobi", "cimmino"])
def test_one_rank_solve_prints_no_prediction_but_the_command_that_gives_one(app, tmp_path):
    res = run_mpi(1, ["-m", f"hpcbsp.apps.bsf.{app}", "--n", "100"], timeout=120)
    assert res.returncode == 0 and "OK" in res.stdout, res.output  # the solve itself is right
    assert "K_max = " not in res.stdout and "K_max: none" in res.stdout
    assert "L, t_c: not measured" in res.stdout
    command = res.stdout.split("run it on 2 or more ranks: ", 1)[1].strip().splitlines()[0]
    assert " -n 2 " in command and command.endswith(f"-m hpcbsp.apps.bsf.{app} --n 100")
    # The command it names works as written and does predict.
    env = clean_env(MPIEXEC_TIMEOUT="120")
    again = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=150,
                           env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "predicted scalability boundary K_max = " in again.stdout


def test_demo_on_one_rank_refuses_before_the_work(tmp_path):
    out = tmp_path / "demo"
    res = run_mpi(1, ["-m", "hpcbsp.apps.demo", "--n", "300", "--out-dir", str(out)], timeout=60)
    assert res.returncode == 2 and res.stdout == "", res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "one rank measures no communication" in lines[0]
    assert f"-n 2 {sys.executable} -m hpcbsp.apps.demo --n 300 --out-dir {out}" in lines[0]
    assert not out.exists()


def test_cost_model_refuses_a_one_rank_farm_report():
    from hpcbsp.cost.errors import CostInputError
    from hpcbsp.cost.farmmodel import model_from_farm
    from hpcbsp.farm.timings import summarise

    samples = {k: [1e-3, 1e-3] for k in ("seconds", "map_s", "fold_s", "master_fold_s", "compute_s")}
    alone = summarise(samples, workers=1, list_length=10, iterations=2, total_s=2e-3, superstep_s=0.0,
                      exchange_measured=False).as_dict()
    with pytest.raises(CostInputError, match="one rank measures no communication"):
        model_from_farm(alone)
    with pytest.raises(CostInputError, match="one rank"):  # a report line of an older hpcbsp
        model_from_farm({**alone, "exchange_measured": True, "nprocs": 1})
    model_from_farm({**alone, "exchange_measured": True, "nprocs": 2})  # 2 ranks: a model
