"""The BSF example programs and the `make run` demonstration, launched as MPI programs."""
from __future__ import annotations

import json

import numpy as np
import pytest
from mpi_helpers import run_mpi

from hpcbsp.cost.modelfile import load_model

pytestmark = pytest.mark.serial_only  # it launches MPI jobs of its own


@pytest.mark.parametrize("app, n", [("jacobi", 150), ("cimmino", 120)])
@pytest.mark.parametrize("nprocs", [2, 3])
def test_app_solves_and_reports(app, n, nprocs):
    res = run_mpi(nprocs, ["-m", f"hpcbsp.apps.{app}", "--n", str(n), "--json"], timeout=120)
    assert not res.timed_out and res.returncode == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert doc["converged"] and doc["max_error"] < 1e-6
    assert doc["workers"] == nprocs - 1 and doc["timings"]["list_length"] == n


def test_app_text_output_and_bad_input():
    res = run_mpi(2, ["-m", "hpcbsp.apps.jacobi", "--n", "100"], timeout=120)
    assert res.returncode == 0, res.output
    assert "check against numpy.linalg.solve" in res.stdout and "OK" in res.stdout
    assert "K_max" in res.stdout
    bad = run_mpi(2, ["-m", "hpcbsp.apps.jacobi", "--n", "0"], timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "--n must be >= 1" in bad.stderr
    bad = run_mpi(1, ["-m", "hpcbsp.apps.cimmino", "--relaxation", "3"], timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


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
