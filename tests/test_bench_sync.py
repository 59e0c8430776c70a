"""``python -m hpcbsp.bench sync`` runs on one rank and on two and prints every row it promises
(its figures are for a quiet machine: their sizes are not asserted here, only that they were
measured and that each ratio is the quotient of the figures beside it).  Oracles: the rows' text
and the division done in the test."""
from __future__ import annotations

import math
import re
import subprocess
import sys

import pytest
from mpi_helpers import run_mpi

ARGS = ["-m", "hpcbsp.bench", "sync", "--quick", "--mib", "0.25"]


NUM = r"(-?[0-9.]+|nan|inf)"


def figures(pattern: str, text: str) -> list[float]:
    """The numbers of the one row that matches ``pattern`` (a regex with NUM groups)."""
    found = re.findall(pattern, text)
    assert len(found) == 1, (pattern, text)
    values = [float(v) for v in (found[0] if isinstance(found[0], tuple) else (found[0],))]
    assert all(math.isfinite(v) and v > 0 for v in values), (pattern, values)  # measured, not nan or 0
    return values


def ratio_of(printed: float, num: float, den: float, step: float) -> bool:
    """Whether ``printed`` (to 2 decimals) is num / den for figures printed to ``step``."""
    low = (num - step / 2) / (den + step / 2)
    high = (num + step / 2) / max(den - step / 2, 1e-12)
    return low - 0.006 <= printed <= high + 0.006


@pytest.mark.serial_only
def test_the_sync_bench_runs_on_two_ranks_with_its_fine_grained_rows():
    """Every row is there with measured figures (finite, above zero), and each ratio is the
    quotient of the figures printed beside it (the oracle: the division done here)."""
    res = run_mpi(2, ARGS, timeout=240)
    assert res.returncode == 0 and not res.timed_out, res.output
    out = res.stdout
    sync, barrier, ratio = figures(rf"empty sync +{NUM} us +Barrier +{NUM} us +sync/Barrier = {NUM}x", out)
    assert ratio_of(ratio, sync, barrier, 0.01), (sync, barrier, ratio)
    timeout, watched, ratio = figures(rf"the same sync with a timeout \(BSP\(timeout={NUM}\): its deadline watched "
                                      rf"on the control step's non-blocking allreduce\) +{NUM} us = {NUM}x the sync without", out)
    assert timeout == 60 and ratio_of(ratio, watched, sync, 0.01), (watched, sync, ratio)
    # The floor the target names: one integer's allreduce through mpi4py, two ways; the ratio is
    # to the faster.  The compiled call and loop beside them, each with its own ratio.
    plain, persistent, call, loop = figures(
        rf"allreduce \(MAX, in place\) of one integer: Allreduce {NUM} us; persistent Allreduce "
        rf"\(MPI-4; Start \+ Wait from Python\) {NUM} us; one compiled Start \+ Wait per call from Python "
        rf"{NUM} us; the same in a C loop {NUM} us", out)
    floor, ratio = figures(rf"sync / the fastest allreduce of one integer \(the floor the target names\) "
                           rf"through mpi4py, [^,]+ {NUM} us, = {NUM}x", out)
    assert floor == min(plain, persistent) and ratio_of(ratio, sync, floor, 0.01), (plain, persistent, floor, ratio)
    call2, ratio_call, loop2, ratio_loop = figures(
        rf"sync / one integer's one compiled Start \+ Wait per call from Python {NUM} us = {NUM}x \(the least "
        rf"a call from Python costs\); / the same in a C loop {NUM} us = {NUM}x \(no interpreter\)", out)
    assert (call2, loop2) == (call, loop) and ratio_of(ratio_call, sync, call, 0.01) and ratio_of(ratio_loop, sync, loop, 0.01)
    put, a2a, ratio = figures(rf"MiB/rank +{NUM} ms \(.*?\) +pack\+Alltoallv +{NUM} ms \(.*?\) +"
                              rf"throughput ratio = {NUM}x", out)
    assert ratio_of(ratio, a2a, put, 0.01), (put, a2a, ratio)
    median, low, high = figures(rf"the same ratio within each round .*?: median {NUM}x, {NUM}-{NUM} over the rounds", out)
    assert low <= median <= high, (low, median, high)
    # the baseline with the control step's meeting: both ratios are quotients of the printed figures
    agreed, ratio_a2a, ratio_put, median, low, high = figures(
        rf"pack \+ the control step's meeting \(an 80-byte Allreduce\) \+ Alltoallv, the floor of a put that lands "
        rf"only once the ranks agreed, {NUM} ms = {NUM}x pack\+Alltoallv's throughput; the put reaches {NUM}x of "
        rf"it \(within each round: median {NUM}x, {NUM}-{NUM}\)", out)
    assert ratio_of(ratio_a2a, a2a, agreed, 0.01) and ratio_of(ratio_put, agreed, put, 0.01), (agreed, a2a, put)
    assert low <= median <= high, (low, median, high)
    warm, first_put, first_a2a, ratio = figures(
        rf"each block timed after {NUM} untimed supersteps; its first, just after the other side's: put {NUM} ms, "
        rf"pack\+Alltoallv {NUM} ms = {NUM}x", out)
    assert warm >= 1 and ratio_of(ratio, first_a2a, first_put, 0.01), (warm, first_put, first_a2a, ratio)
    # 0.25 MiB over one other rank: each small put is 64 KiB; the fixed cost is the difference
    small_put, small_a2a = figures(rf"hpput of 64 KiB to every other rank \+ sync \(the bulk exchange\) +{NUM} us +"
                                   rf"a bare Alltoallv of the same bytes +{NUM} us", out)
    fixed = float(re.search(rf"the superstep's fixed cost {NUM} us", out).group(1))
    assert abs(fixed - (small_put - small_a2a)) <= 0.11, (small_put, small_a2a, fixed)
    # 0.25 MiB of 8-byte words, as single-element puts: the median over the rounds lies in their range
    elements, median, low, high = figures(
        rf"32,768 single-word puts to random ranks and offsets, one put_elements call +{NUM} ms = "
        rf"{NUM}x the same words as vectorised puts \({NUM}-{NUM} over the rounds\)", out)
    assert low <= median <= high, (low, median, high)
    for row in ("the floor of a random scatter", "as one put call each"):
        assert row in out, res.output
    yield_us, spin_us, ratio = figures(rf"wait=yield vs wait=spin .*?: empty sync +{NUM} us vs +{NUM} us = "
                                       rf"{NUM}x latency", out)
    assert ratio_of(ratio, yield_us, spin_us, 0.01), (yield_us, spin_us, ratio)
    # 32 768 puts of 12 bytes a round: the arena grows after the first round and carries the rest.
    assert "the records were packed into the node's shared arena" in out, res.output
    # every MPI the suite runs on has MPI-4's persistent collectives and its functions are found
    assert re.search(r"control step: a (persistent Allreduce|blocking MPI_Allreduce) "
                     r"\(HPCBSP_CONTROL_COLLECTIVE\), compiled;", out), res.output
    res = run_mpi(2, ARGS, timeout=240, env={"HPCBSP_ELEMENTS_TRANSPORT": "messages", "HPCBSP_COMPILED_SYNC": "0"})
    assert res.returncode == 0 and "the records were sent as messages" in res.stdout, res.output
    # Where the step is not compiled, the row says why (here: the variable), not "not found".
    assert "(HPCBSP_CONTROL_COLLECTIVE), in Python (HPCBSP_COMPILED_SYNC=0);" in res.stdout, res.output


@pytest.mark.serial_only
def test_the_sync_bench_runs_on_one_rank_and_says_nothing_crossed():
    proc = subprocess.run([sys.executable, *ARGS], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "note: with one rank nothing crosses ranks" in proc.stdout
    assert "put_elements" not in proc.stdout  # nothing to send: no fine-grained rows
