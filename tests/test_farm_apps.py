"""The BSF example programs and the `make run` demonstration, launched as MPI programs."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from mpi_helpers import run_mpi

from hpcbsp.cost.modelfile import load_model

# Under `mpiexec -n P pytest --with-mpi` every rank runs the serial tests too (pytest-mpi 0.6 does not
# skip them); a test that launches MPI jobs of its own would then start P copies of them at once.
SERIAL_ONLY = pytest.mark.skipif(int(os.environ.get("PMI_SIZE", os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))) > 1,
                                 reason="launches its own MPI jobs: runs in the serial pass, not once per rank")

pytestmark = SERIAL_ONLY


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
    assert "argument --n: '0' is not a positive integer" in bad.stderr
    bad = run_mpi(1, ["-m", "hpcbsp.apps.cimmino", "--relaxation", "3"], timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1


def test_demo(tmp_path):
    res = run_mpi(2, ["-m", "hpcbsp.apps.demo", "--n", "400", "--out-dir", str(tmp_path)], timeout=120)
    assert not res.timed_out and res.returncode == 0, res.output
    assert "OK" in res.stdout and "ledger:" in res.stdout and "K_max" in res.stdout
    png = tmp_path / "speedup.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and str(png) in res.stdout
    cm = load_model(tmp_path / "MODEL.json")
    # The model measured from the run reproduces that run's iteration time at K = 1 (by
    # construction of the components; medians of parts vs median of the whole differ a little).
    k_max = cm.model.k_max()
    assert k_max is None or k_max >= 1
    assert cm.model.speedup(np.array([1.0]))[0] == 1.0
