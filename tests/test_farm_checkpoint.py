"""The farm resumes from a checkpoint: same worker count gives the same bits as an uninterrupted
run; another rank count agrees to rounding (the Reduce adds in another order)."""
from __future__ import annotations

import numpy as np
from mpi_helpers import run_mpi

JACOBI = ["-m", "hpcbsp.apps.bsf.jacobi", "--n", "200"]


def test_interrupted_jacobi_farm_resumes_on_3_2_and_1_ranks(tmp_path):
    full, ck = tmp_path / "full.npy", str(tmp_path / "ck")
    assert run_mpi(3, JACOBI + ["--out", str(full)], timeout=90).returncode == 0
    # Stopped after 8 iterations (the iteration limit stands in for a time limit).
    first = run_mpi(3, JACOBI + ["--max-iter", "8", "--checkpoint", ck, "--every", "4"], timeout=90)
    assert "8 iterations, NOT converged" in first.stdout, first.output
    reference = np.load(full)
    for nprocs in (3, 2, 1):
        out = tmp_path / f"re{nprocs}.npy"
        res = run_mpi(nprocs, JACOBI + ["--checkpoint", ck, "--restart", "--out", str(out)], timeout=90)
        assert res.returncode == 0, res.output
        assert f"restarted from {ck} at iteration 8 (saved on 3 ranks, now {nprocs})" in res.stdout
        x = np.load(out)
        if nprocs == 3:
            np.testing.assert_array_equal(x, reference)  # same K: bit-identical
        else:
            np.testing.assert_allclose(x, reference, rtol=0, atol=1e-13)
