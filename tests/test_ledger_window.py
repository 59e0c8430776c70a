"""The superstep ledger in memory that does not grow with the number of supersteps: its window,
its aggregates, its stream and ``hpcbsp ledger merge``, at 1, 2 and 3 ranks.

Oracles: the unbounded ledger of the same run (``gather`` with a window above the superstep
count), a brute-force computation over every streamed record (sums in order, ``max``), and what
the program itself put (bytes, requests, labels: ``tests/programs/ledger_stream.py``).  The
resident set: ``/proc/self/status`` (``tests/programs/ledger_memory.py``).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from mpi_helpers import run_mpi

from hpcbsp.cost.bspmodel import load_ledger
from hpcbsp.runtime.superstep.ledgerfiles import read_stream

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
STEPS, WINDOW = 6000, 500  # (6000 rows: the stream's batches of 4096 and a last one at the close)
METRICS = ("work_s", "sync_s", "bytes_out", "bytes_in", "msgs_out", "msgs_in", "records")


def _hpcbsp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcbsp", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module", params=[1, 2, 3])
def run(request, tmp_path_factory) -> tuple[int, str]:
    out = str(tmp_path_factory.mktemp(f"ledger{request.param}"))
    res = run_mpi(request.param, [os.path.join(PROGRAMS, "ledger_stream.py"), out, str(STEPS), str(WINDOW)], timeout=240)
    assert res.returncode == 0 and not res.timed_out, res.output
    return request.param, out


def test_the_saved_stream_is_the_unbounded_gather(run):
    """``save`` of a streaming ledger (each rank's files merged by rank 0) gives exactly the
    records ``gather`` gives of an unbounded ledger of the same run: every field, every rank."""
    nprocs, out = run
    unbounded = json.load(open(os.path.join(out, "unbounded.json")))
    saved = json.load(open(os.path.join(out, "saved.json")))
    assert saved["nprocs"] == nprocs and len(unbounded) == nprocs * STEPS
    assert saved["records"] == unbounded
    assert len(load_ledger(os.path.join(out, "saved.json"))) == nprocs * STEPS  # the cost tools read it


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_merge_writes_what_the_cost_tools_read_and_the_window_is_its_tail(run, suffix):
    """``hpcbsp ledger merge DIR -o OUT``: the cost tools read the file (``load_ledger``) with
    every superstep of every rank; each rank's window (``gather``, and the ranks' own iteration)
    is the last WINDOW records of its stream."""
    nprocs, out = run
    merged = os.path.join(out, f"merged{suffix}")
    res = _hpcbsp("ledger", "merge", os.path.join(out, "two"), "-o", merged)
    assert res.returncode == 0, res.stderr
    assert f"{nprocs * STEPS:,} records of {nprocs} rank" in res.stdout
    loaded = load_ledger(merged)
    assert len(loaded) == nprocs * STEPS
    window = json.load(open(os.path.join(out, "window.json")))
    assert len(window) == nprocs * WINDOW
    streamed = [list(read_stream(os.path.join(out, "two"), r)) for r in range(nprocs)]
    assert [[int(x["index"]) for x in s] for s in streamed] == [list(range(STEPS))] * nprocs
    for r in range(nprocs):
        assert [x for x in window if x["rank"] == r] == streamed[r][-WINDOW:]
        mine = json.load(open(os.path.join(out, f"rank-{r}.json")))
        assert mine["window_records"] == [{k: v for k, v in x.items() if k != "rank"} for x in streamed[r][-WINDOW:]]
        assert (mine["len"], mine["first"], mine["window"]) == (STEPS, STEPS - WINDOW, WINDOW)


def test_the_aggregates_are_a_brute_force_computation_over_every_record(run):
    """Each rank's count, totals and maxima, overall and per label, equal a brute-force pass over
    its streamed records (all STEPS, not only the window); the bytes, requests and label counts
    equal what the program put (rank r receives what rank r - 1 sent)."""
    nprocs, out = run
    for r in range(nprocs):
        mine = json.load(open(os.path.join(out, f"rank-{r}.json")))
        records = list(read_stream(os.path.join(out, "two"), r))

        def totals(recs):
            sums = dict.fromkeys(METRICS, 0)
            for x in recs:
                for m in METRICS:
                    sums[m] += x[m]
            return sums

        assert mine["count"] == len(records) == STEPS
        assert mine["totals"] == pytest.approx(totals(records), rel=1e-12)
        assert mine["maxima"] == {m: max(x[m] for x in records) for m in METRICS}
        assert sorted(mine["by_label"]) == sorted(mine["sent"]["labels"])
        for label, (count, tot, top) in mine["by_label"].items():
            recs = [x for x in records if str(x["label"]) == label]
            assert count == len(recs) == mine["sent"]["labels"][label]
            assert tot == pytest.approx(totals(recs), rel=1e-12)
            assert top == {m: max(x[m] for x in recs) for m in METRICS}
        assert (mine["totals"]["bytes_out"], mine["totals"]["msgs_out"]) == (mine["sent"]["bytes_out"],
                                                                              mine["sent"]["msgs_out"])
        left = json.load(open(os.path.join(out, f"rank-{(r - 1) % nprocs}.json")))
        assert mine["totals"]["bytes_in"] == left["sent"]["bytes_out"]
        assert (mine["totals"]["bytes_out"] > 0) == (nprocs > 1)


def test_merge_of_a_missing_or_damaged_stream_is_one_line_and_status_2(tmp_path):
    res = _hpcbsp("ledger", "merge", str(tmp_path / "nothing"), "-o", str(tmp_path / "m.json"))
    assert res.returncode == 2 and res.stderr.count("\n") == 1 and "no such folder" in res.stderr, res.stderr
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "rank-00000.json").write_text("{not json")
    res = _hpcbsp("ledger", "merge", str(tmp_path / "s"), "-o", str(tmp_path / "m.json"))
    assert res.returncode == 2 and "not a stream header" in res.stderr and "Traceback" not in res.stderr
    res = _hpcbsp("ledger", "merge", str(tmp_path / "s"), "-o", str(tmp_path / "m.txt"))
    assert res.returncode == 2 and ".json" in res.stderr and "Traceback" not in res.stderr
    res = _hpcbsp("ledger", "merge", str(tmp_path / "s"))
    assert res.returncode == 2 and "-o" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize("nprocs", [2, 3])
def test_heat_gathers_no_ledger_and_streams_it_when_asked(nprocs, tmp_path):
    """The heat app makes no ``gather`` of the ledger, with or without ``--ledger``; with it, the
    file holds every superstep of every rank (the steps by hand: one halo superstep per step), as
    the cost tools read it, and the stream's folder is gone."""
    steps = 40
    for ledger in (None, str(tmp_path / "heat.json")):
        args = ["--n", "90", "--steps", str(steps), "--quiet", *(["--ledger", ledger] if ledger else [])]
        res = run_mpi(nprocs, [os.path.join(PROGRAMS, "heat_ledger_calls.py"), *args], timeout=120)
        assert res.returncode == 0 and not res.timed_out, res.output
        assert sorted(re.findall(r"gathers (\d+) (\d+)", res.stdout)) == [(str(r), "0") for r in range(nprocs)], res.output
        assert "rank 0's ledger: " in res.stdout
        if ledger:
            records = load_ledger(ledger)
            halo = [r for r in records if r["label"] == "halo"]
            assert sorted((r["rank"], r["index"]) for r in halo) == [(q, i) for q in range(nprocs) for i in range(steps)]
            assert not os.path.exists(ledger + ".ranks")


def test_a_window_save_says_what_left_and_a_late_stream_is_refused(tmp_path, monkeypatch, capsys):
    """One rank, a window of 50 rows, 120 supersteps: ``save`` without a stream writes the last 50
    (their indices by hand: 70 to 119) and says on stderr that 70 records had left the window;
    ``stream`` is refused once rows have left it (a ``UsageError`` naming the setting), and a
    second ``stream`` while one runs is refused too."""
    import hpcbsp

    monkeypatch.setenv("HPCBSP_LEDGER_WINDOW", "50")
    with hpcbsp.BSP() as bsp:
        assert bsp.ledger.stream(str(tmp_path / "early")) == str(tmp_path / "early")
        with pytest.raises(hpcbsp.UsageError, match="already streams"):
            bsp.ledger.stream(str(tmp_path / "again"))
    with hpcbsp.BSP() as bsp:
        for _ in range(120):
            bsp.sync("s")
        assert (len(bsp.ledger), bsp.ledger.first, bsp.ledger.window, bsp.ledger.aggregates.count) == (120, 70, 50, 120)
        path = bsp.ledger.save(str(tmp_path / "window.json"))
        with pytest.raises(hpcbsp.UsageError, match="HPCBSP_LEDGER_WINDOW"):
            bsp.ledger.stream(str(tmp_path / "late"))
        with pytest.raises(IndexError, match="left the window"):
            bsp.ledger[69]
    assert [int(r["index"]) for r in load_ledger(path)] == list(range(70, 120))
    assert "70 older records had left the window" in capsys.readouterr().err
