"""The package's other per-step lists do not grow a rank's resident set with the run (issue 44,
item 1): the parameter-server run log (its push times and accuracy curve, in
:class:`hpcbsp.util.spooled.Spooled`) and the BSF farm (its per-iteration samples, bounded by
``farm.timings.Samples``, and its supersteps' ledger).

The measure is independent of the code measured: ``VmRSS`` of ``/proc/self/status`` before and
after the long phase, after a warm-up (``tests/programs/perstep_memory.py``).  Before the run log
spooled, 1e6 pushes grew it by 100 MiB (105 bytes a push); the quick tests allow 1 MiB for 2e5
pushes (5 bytes a push) and 2 MiB for 6,000 farm iterations at 2 and 3 ranks (the samples'
cap, 4096 iterations of 5 floats, is about 0.7 MiB); the long ones (``long``) 8 MiB for 2e6
pushes and 2e5 iterations.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from mpi_helpers import run_mpi

PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "perstep_memory.py")


def _growth(output: str) -> dict[int, int]:
    return {int(r): int(g) for r, g in re.findall(r"rss_growth_kib (\d+) (-?\d+)", output)}


def _runlog(pushes: int) -> int:
    res = subprocess.run([sys.executable, PROGRAM, "runlog", str(pushes)], capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr
    total = pushes + max(pushes // 10, 10_000)
    # every push is still there: the workers i % 8 of both phases, summed by brute force
    expect = sum(i % 8 for i in range(max(pushes // 10, 10_000))) + sum(i % 8 for i in range(pushes))
    assert f"pushes {total} {expect}" in res.stdout, res.stdout
    return _growth(res.stdout)[0]


def _farm(nprocs: int, iterations: int, timeout: float) -> dict[int, int]:
    res = run_mpi(nprocs, [PROGRAM, "farm", str(iterations)], timeout=timeout, env={"HPCBSP_LEDGER_WINDOW": "1000"})
    assert res.returncode == 0 and not res.timed_out, res.output
    found = _growth(res.stdout)
    assert sorted(found) == list(range(nprocs)), res.output
    return found


def test_the_run_log_keeps_every_push_in_bounded_memory():
    assert _runlog(200_000) <= 1024


# Each rank's memory is its own: 3 ranks (two workers) check nothing of it that 2 do not, and
# on 2 cores they cost 40 s of the suite's time, so the 3-rank run is with the long tests.
@pytest.mark.timeout(420)
@pytest.mark.parametrize("nprocs", [2, pytest.param(3, marks=pytest.mark.long)])
def test_a_long_farm_run_does_not_grow_any_rank(nprocs):
    for rank, grew in _farm(nprocs, 6_000, timeout=400).items():
        assert grew <= 2048, (rank, grew)


@pytest.mark.long
def test_two_million_pushes_grow_the_run_log_by_at_most_8_mib():
    assert _runlog(2_000_000) <= 8192


@pytest.mark.long
@pytest.mark.timeout(3000)
def test_two_hundred_thousand_farm_iterations_grow_no_rank_by_more_than_8_mib():
    for rank, grew in _farm(2, 200_000, timeout=3000).items():
        assert grew <= 8192, (rank, grew)
