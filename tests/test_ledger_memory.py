"""A rank's resident set does not grow with the number of supersteps (issue 44, item 1).

Target: 2e6 empty supersteps and 2e5 supersteps that put 8 bytes to the next rank grow no rank's
resident set by more than 8 MiB (4 bytes a superstep, where a ledger row alone took 32 bytes and
a superstep with data about 250).  The measure is independent of the ledger: ``VmRSS`` of
``/proc/self/status`` before and after each phase, after a warm-up that fills the ledger's window
twice, in ``tests/programs/ledger_memory.py``.  The quick tests run fewer supersteps (with a
window of 1,000 rows) against the same 4 bytes a superstep (with a floor of 512 KiB for the
allocator's granularity, still below what the unbounded ledger grew: 1.6 MiB per 5e4 empty
supersteps); the full run is marked ``long``.
"""
from __future__ import annotations

import os
import re

import pytest
from mpi_helpers import run_mpi

PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "ledger_memory.py")
BYTES_PER_SUPERSTEP = 4  # 8 MiB over 2e6 supersteps


def _growth(nprocs: int, empty: int, data: int, timeout: float, window: int | None = None) -> dict[int, tuple[int, int]]:
    """Each rank's VmRSS growth in KiB over the empty and the data phase (``window``: the
    ledger's, which the warm-up fills twice)."""
    env = {"HPCBSP_LEDGER_WINDOW": str(window)} if window else None
    res = run_mpi(nprocs, [PROGRAM, str(empty), str(data)], timeout=timeout, env=env)
    assert res.returncode == 0 and not res.timed_out, res.output
    found = {int(r): (int(e), int(d)) for r, e, d in re.findall(r"rss_growth_kib (\d+) (-?\d+) (-?\d+)", res.stdout)}
    assert sorted(found) == list(range(nprocs)), res.output
    return found


def _bound_kib(supersteps: int) -> int:
    return max(BYTES_PER_SUPERSTEP * supersteps // 1024, 512)


# The 3-rank run (44 s of 3 ranks on 2 cores) is with the long tests (`make test-long`).
@pytest.mark.parametrize("nprocs, empty, data", [(1, 200_000, 20_000), (2, 40_000, 4_000),
                                                 pytest.param(3, 20_000, 2_000, marks=pytest.mark.long)])
def test_the_resident_set_does_not_grow_with_the_supersteps(nprocs, empty, data):
    # a window of 1,000 rows (the warm-up fills it twice); the rows beyond it must cost nothing
    for rank, (grew_empty, grew_data) in _growth(nprocs, empty, data, timeout=300, window=1000).items():
        assert grew_empty <= _bound_kib(empty), (rank, grew_empty)
        assert grew_data <= _bound_kib(data), (rank, grew_data)


@pytest.mark.long
@pytest.mark.parametrize("nprocs", [1, 2])  # 3 ranks on 2 cores would take half an hour: the quick test covers 3
def test_two_million_supersteps_grow_no_rank_by_more_than_8_mib(nprocs):
    for rank, (grew_empty, grew_data) in _growth(nprocs, 2_000_000, 200_000, timeout=3000).items():
        assert grew_empty <= 8192 and grew_data <= 8192, (rank, grew_empty, grew_data)
