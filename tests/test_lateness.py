"""Who was late: the live watch (``$HPCBSP_LATENESS``, ``BSP(lateness=)``) and the offline
lateness of a saved ledger, against a program that makes a known rank late in known supersteps
(``tests/programs/late_schedule.py``: rank ``k mod P`` sleeps 30 ms in superstep k, or rank
``P - 1`` in supersteps 5 to 24).  Oracle: that schedule.  At 2 and 3 ranks, with the control
step compiled (``wait=spin``) and through Python (``wait=yield``: the non-blocking step).
Superstep 0 is left out of the comparisons: its work counts from when each rank's context began,
so it includes the context's own start, which the ranks do not reach together."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from mpi_helpers import run_mpi

from hpcbsp.kernels.controlstep import RANK_BITS, Lateness
from hpcbsp.kernels.syncstate import Rows
from hpcbsp.runtime.errors import BadInput
from hpcbsp.runtime.superstep.lateness import late_steps, late_text, line, parse, threshold, work_matrix

PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "late_schedule.py")
SLEEP_MS = 30.0


def _late_rank(schedule: str, k: int, nprocs: int) -> int | None:
    """The schedule of late_schedule.py, written again here (the oracle)."""
    if schedule == "cycle":
        return k % nprocs
    return nprocs - 1 if 5 <= k < 25 else None


@pytest.fixture(params=[(2, "spin"), (2, "yield"), (3, "spin"), (3, "yield")], ids=lambda p: f"{p[0]}ranks-{p[1]}")
def job(request):
    return request.param


def _run(tmp_path, nprocs: int, wait: str, schedule: str, lateness: str = "10"):
    out = str(tmp_path / f"{schedule}.json")
    res = run_mpi(nprocs, [PROGRAM, schedule, out], timeout=180,
                  env={"HPCBSP_LATENESS": lateness, "HPCBSP_WAIT": wait})
    assert res.returncode == 0, res.stderr
    with open(out) as fh:
        return res, json.load(fh)["records"]


def test_offline_lateness_names_the_scheduled_rank(tmp_path, job):
    nprocs, wait = job
    res, records = _run(tmp_path, nprocs, wait, "cycle")
    indices, labels, work = work_matrix(records)
    late = late_steps(work)
    assert list(indices) == list(range(30)) and labels[7] == "step7"
    for k in range(1, 30):
        assert late.rank[k] == _late_rank("cycle", k, nprocs), (k, work[k])
        assert 0.8 * SLEEP_MS <= 1e3 * late.late_s[k] <= 4 * SLEEP_MS, (k, work[k])
        assert late.named[k]
        # the others waited for it: each about 30 ms
        assert 1e3 * late.caused_s[k] >= 0.8 * SLEEP_MS * (nprocs - 1)
    # No rank is late in 8 of 10 supersteps in a row: no live line.
    assert not [ln for ln in res.stderr.splitlines() if parse(ln)], res.stderr


def test_live_line_names_the_rank_late_in_a_row(tmp_path, job):
    nprocs, wait = job
    res, records = _run(tmp_path, nprocs, wait, "last")
    said = [p for p in map(parse, res.stderr.splitlines()) if p is not None]
    assert said, res.stderr
    # Late in supersteps 5 to 24: first said at superstep 12 (8 of 5..14), once per 10 supersteps after.
    assert 1 <= len(said) <= 2
    for s in said:
        assert s.rank == nprocs - 1 and s.window == 10 and s.count >= 8
        assert s.host is not None
        assert 0.8 * SLEEP_MS <= s.mean_ms <= 4 * SLEEP_MS
    # The offline view agrees: exactly the scheduled supersteps are named.
    indices, _, work = work_matrix(records)
    late = late_steps(work)
    assert [int(i) for i in indices[late.named] if i > 0] == list(range(5, 25))
    assert set(late.rank[1:][late.named[1:]].tolist()) == {nprocs - 1}


def test_watch_off_writes_nothing(tmp_path):
    res, _ = _run(tmp_path, 2, "spin", "last", lateness="off")
    assert not [ln for ln in res.stderr.splitlines() if parse(ln)], res.stderr


def test_bad_setting_is_one_line(tmp_path):
    res = run_mpi(2, [PROGRAM, "last", str(tmp_path / "x.json"), "2"], timeout=120,
                  env={"HPCBSP_LATENESS": "soon"})
    assert res.returncode != 0
    lines = [ln for ln in res.stderr.splitlines() if "HPCBSP_LATENESS" in ln]
    assert lines and "'soon' is not off or a number of milliseconds" in lines[0]
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize("value", [-1, "nan", "soon", True, "20ms"])
def test_bad_keyword_is_bad_input(value):
    with pytest.raises(BadInput, match=r"rank 0: BSP\(lateness="):
        threshold(value, 0)


def test_keyword_values():
    assert threshold("off", 0) == 0.0 and threshold(20, 0) == 0.02 and threshold("2.5", 0) == 0.0025


def test_line_reads_back():
    text = line(2, ["node1", "node2", "node4"], 8, 10, 0.038)
    assert text == "[hpcbsp] rank 2 (on node4) arrived last in 8 of the last 10 supersteps, +38 ms on average"
    said = parse(text)
    assert said is not None and (said.rank, said.host, said.count, said.window, said.mean_ms) == (2, "node4", 8, 10, 38)
    assert parse("[hpcbsp] rank 2 arrived last in 9 of the last 10 supersteps, +5 ms on average").host is None
    assert parse("[hpcbsp] rank 2/4: failed") is None


def test_watch_counts_a_window():
    """The compiled watch fed reduced fields by hand: rank 3 late by 25 ms in 8 of 10 steps."""
    said = []
    watch = Lateness(Rows(16, 0.0), 0, 0.010, lambda *a: said.append(a))
    packed = lambda us, rank: (us << RANK_BITS) | rank  # noqa: E731
    for k in range(10):
        late = k not in (2, 6)
        watch.observe(packed(30_000 if late else 6_000, 3), packed(5_000, 1))
        assert watch.last_rank == 3 and watch.last_by == pytest.approx(0.025 if late else 0.001)
    assert said == [(3, 8, 10, pytest.approx(0.025))]
    for _ in range(5):  # at most once per window
        watch.observe(packed(30_000, 3), packed(5_000, 1))
    assert len(said) == 1


def test_hand_ledger_lateness():
    """Hand-computed: superstep 1's works are 10, 50, 12 ms: rank 1 is last, +39 ms over the
    median of the others (11 ms), the others waited 40 + 38 = 78 ms; superstep 0's 10, 10.5,
    10 ms: +0.5 ms, under 1 ms, not named."""
    recs = [{"rank": r, "index": i, "label": f"s{i}", "work_s": w} for i, works in
            enumerate([(0.010, 0.0105, 0.010), (0.010, 0.050, 0.012)]) for r, w in enumerate(works)]
    _, labels, work = work_matrix(recs)
    late = late_steps(work)
    assert late.rank.tolist() == [1, 1] and late.named.tolist() == [False, True]
    assert late.late_s[1] == pytest.approx(0.039) and late.caused_s[1] == pytest.approx(0.078)
    assert late_text(1, labels[1], 1, float(late.late_s[1])) == "superstep 1 (s1): rank 1 arrived last, +39 ms"
    assert np.isclose(late.median_s[1], 0.012)


def _hpcbsp(*argv: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcbsp", *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_info_shows_the_watch():
    assert "lateness watch on (HPCBSP_LATENESS=10 ms)" in _hpcbsp("info", HPCBSP_LATENESS="10").stdout
    assert "lateness watch off (HPCBSP_LATENESS)" in _hpcbsp("info", HPCBSP_LATENESS="off").stdout
    bad = _hpcbsp("info", HPCBSP_LATENESS="soon")
    assert bad.returncode == 0 and "HPCBSP_LATENESS='soon'  INVALID" in bad.stdout


def test_bad_setting_stops_a_command_before_it_starts(tmp_path):
    res = _hpcbsp("run", PROGRAM, "last", str(tmp_path / "x.json"), HPCBSP_LATENESS="-5")
    assert res.returncode == 2 and res.stdout == "" and not (tmp_path / "x.json").exists()
    assert len(res.stderr.strip().splitlines()) == 1 and "HPCBSP_LATENESS='-5'" in res.stderr, res.stderr
