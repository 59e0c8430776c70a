"""``python -m hpcbsp.bench elastic`` runs on two ranks and prints every row it promises (its
figures are for a quiet machine and are not asserted here).  Oracle: the rows' text."""
from __future__ import annotations

import pytest
from mpi_helpers import run_mpi


@pytest.mark.serial_only
def test_the_elastic_bench_runs_on_two_ranks():
    res = run_mpi(2, ["-m", "hpcbsp.bench", "elastic", "--quick", "--params", "4096"], timeout=240)
    assert res.returncode == 0 and not res.timed_out, res.output
    for row in ("push+pull via server", "raw Send/Recv", "allreduce step", "bare Allreduce",
                "bsp.allreduce alone", "over the rounds"):
        assert row in res.stdout, res.output
