"""``python -m hpcbsp.bench bsf``: its helpers against hand-made cases, and one quick run end to end.

The quick run checks the pipeline (launch, emulated runs, calibration, one line per series), not
the figures: timings on a shared 2-core machine are not evidence (docs/performance.md).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from mpi_helpers import clean_env

from hpcbsp.bench.bsf import flat_top, k_max_agrees, measured_k_max


def test_measured_k_max_is_the_least_k_of_the_fastest_mean():
    workers = np.array([1, 1, 2, 2, 3, 4])
    seconds = np.array([10.0, 12.0, 6.0, 6.0, 5.0, 5.0])  # means 11, 6, 5, 5: fastest first at K = 3
    assert measured_k_max(workers, seconds) == 3
    # Still falling at the last K: the turnover lies beyond the measured range.
    assert measured_k_max(np.array([1, 2, 3]), np.array([3.0, 2.0, 1.0])) is None


def test_flat_top_is_every_k_within_two_percent_of_the_best():
    # Means per K: 10, 5, 4.05, 4.0, 4.07, 4.1, 5 (K = 3 twice: 4.0 and 4.1): best 4.0 (K = 4), 2 % above
    # it is 4.08, so K = 3..5 (4.05, 4.0, 4.07) are on the flat top and K = 6 (4.1) is not.
    workers = np.array([1, 2, 3, 3, 4, 5, 6, 7])
    seconds = np.array([10.0, 5.0, 4.0, 4.1, 4.0, 4.07, 4.1, 5.0])
    assert flat_top(workers, seconds) == (3, 5)
    assert flat_top(np.array([1, 2]), np.array([2.0, 1.0])) == (2, 2)


def test_k_max_target_is_fifteen_percent_or_both_beyond():
    assert k_max_agrees(17, 20) and k_max_agrees(23, 20)   # |3| <= 0.15 * 20 = 3
    assert not k_max_agrees(16, 20) and not k_max_agrees(24, 20)
    assert k_max_agrees(None, None) and not k_max_agrees(None, 20) and not k_max_agrees(20, None)


def test_quick_run_prints_one_line_per_series(tmp_path):
    env = clean_env()
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "bsf", "--quick", "--no-plot",
                           "--apps", "jacobi", "--out-dir", str(tmp_path), "--timeout", "240"],
                          capture_output=True, text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("SIMULATION of compute") for line in lines), proc.stdout
    series = [line for line in lines if "T(K) MAPE = " in line]
    assert len(series) == 2 and "linear exchange" in series[0] and "tree   exchange" in series[1]
    assert all("K_max predicted" in line and "measured" in line for line in series)
    assert (tmp_path / "validation.csv").exists() and (tmp_path / "measurements.json").exists()
    # --report-only models the same measurements again, without a job: the same lines, the same csv.
    first = (tmp_path / "validation.csv").read_text()
    (tmp_path / "validation.csv").unlink()
    again = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "bsf", "--quick", "--no-plot", "--report-only",
                            "--apps", "jacobi", "--out-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    assert again.returncode == 0, again.stderr
    assert [line for line in again.stdout.splitlines() if "T(K) MAPE = " in line] == series
    assert (tmp_path / "validation.csv").read_text() == first


def test_refuses_to_run_under_mpiexec():
    env = dict(os.environ, PMI_RANK="0")
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "bsf", "--quick"], capture_output=True,
                          text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and "run it without mpiexec" in proc.stderr
