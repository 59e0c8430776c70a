"""``python -m hpcbsp.bench toposort`` on two ranks: both modes at both sizes, checked, with the
ratio it promises.  Its figures are for a quiet machine: their sizes are not asserted, only
that they were measured and that the ratio is the quotient of the medians printed beside it
(the oracle: the division done here); the app's own oracle checks every run (exit status)."""
from __future__ import annotations

import re

import pytest
from mpi_helpers import run_mpi

NUM = r"([0-9.]+)"


@pytest.mark.serial_only
def test_the_toposort_bench_prints_both_modes_and_their_ratio_at_both_sizes():
    res = run_mpi(2, ["-m", "hpcbsp.bench", "toposort", "--n", "1500", "--large", "3000", "--repeats", "2"],
                  timeout=240)
    assert res.returncode == 0 and not res.timed_out, res.output
    out = res.stdout
    assert "3,000 x 3,000 matrix" in out and "6,000 x 6,000 matrix" in out, out
    assert "CHECK FAILED" not in out
    fabsp = [float(v) for v in re.findall(rf"^ +fabsp +median +{NUM} s", out, re.M)]
    bsp = [float(v) for v in re.findall(rf"^ +bsp +median +{NUM} s", out, re.M)]
    ratios = [float(v) for v in re.findall(rf"FA-BSP / BSP speed = {NUM}x", out)]
    assert len(fabsp) == len(bsp) == len(ratios) == 2, out
    for f, b, r in zip(fabsp, bsp, ratios):
        assert f > 0 and b > 0
        low, high = (b - 5e-5) / (f + 5e-5), (b + 5e-5) / max(f - 5e-5, 1e-9)  # printed to 0.1 ms
        assert low - 0.006 <= r <= high + 0.006, (f, b, r)
    assert all(k in out for k in ("transpose", "columns", "eliminate", "place")), out
