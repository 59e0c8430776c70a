"""``python -m hpcbsp.bench sync`` runs on one rank and on two and prints every row it promises
(its figures are for a quiet machine and are not asserted here).  Oracle: the rows' text."""
from __future__ import annotations

import subprocess
import sys

import pytest
from mpi_helpers import run_mpi

ARGS = ["-m", "hpcbsp.bench", "sync", "--quick", "--mib", "0.25"]


@pytest.mark.serial_only
def test_the_sync_bench_runs_on_two_ranks_with_its_fine_grained_rows():
    res = run_mpi(2, ARGS, timeout=240)
    assert res.returncode == 0 and not res.timed_out, res.output
    for row in ("sync/Barrier =", "throughput ratio =", "32,768 single-word puts to random ranks and offsets, "
                "one put_elements call", "the floor of a random scatter", "as one put call each",
                "wait=yield vs wait=spin"):
        assert row in res.stdout, res.output
    # 32 768 puts of 12 bytes a round: the arena grows after the first round and carries the rest.
    assert "the records were packed into the node's shared arena" in res.stdout, res.output
    res = run_mpi(2, ARGS, timeout=240, env={"HPCBSP_ELEMENTS_TRANSPORT": "messages"})
    assert res.returncode == 0 and "the records were sent as messages" in res.stdout, res.output


@pytest.mark.serial_only
def test_the_sync_bench_runs_on_one_rank_and_says_nothing_crossed():
    proc = subprocess.run([sys.executable, *ARGS], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: with one rank nothing crosses ranks" in proc.stdout
    assert "put_elements" not in proc.stdout  # nothing to send: no fine-grained rows
