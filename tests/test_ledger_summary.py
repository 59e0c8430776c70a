"""The apps' ledger summary on a run longer than the ledger's window, and their ``--ledger`` file.

An app prints the window's table and, where older supersteps have left it, a line of every
superstep's figures from the running aggregates (``hpcbsp.runtime.superstep.ledgersummary``);
its ``--ledger PATH`` file is streamed, so it holds every superstep however small the window.
Oracle: that complete file, summed and maximised by brute force here (its number of distinct
supersteps, the bytes out of every rank, the largest bytes in or out of one rank in one
superstep, each rank's total work and sync time); for toposort also the app's own count of its
supersteps.  At 2 and 3 ranks (fft runs on a power of two of them: 2 of 3).
"""
from __future__ import annotations

import csv
import json
import os
import re

import pytest
from mpi_helpers import run_mpi

WINDOW = 6
ALL = re.compile(r"all ([\d,]+) supersteps: w ([\d.]+) ms, sync ([\d.]+) ms \(the largest rank total\), "
                 r"([\d,]+) bytes and ([\d,]+) requests between ranks, largest h ([\d,]+) bytes")


def _records(path: str) -> list[dict]:
    if path.endswith(".json"):
        return json.load(open(path))["records"]
    return list(csv.DictReader(open(path)))


def _check_against_file(stdout: str, path: str) -> int:
    """The summary's line of all supersteps equals the brute-force figures of the saved file;
    returns the number of supersteps."""
    recs = _records(path)
    steps = {int(r["index"]) for r in recs}
    ranks = {int(r["rank"]) for r in recs}
    assert sorted(steps) == list(range(len(steps)))  # every superstep, none left out
    assert len(recs) == len(steps) * len(ranks)      # of every rank
    assert f"the table holds the last {WINDOW} of {len(steps):,} supersteps" in stdout, stdout
    found = ALL.search(stdout)
    assert found, stdout
    count, work, sync, nbytes, requests, h_max = found.groups()
    assert int(count.replace(",", "")) == len(steps)
    assert int(nbytes.replace(",", "")) == sum(int(r["bytes_out"]) for r in recs)
    assert int(requests.replace(",", "")) == sum(int(r["msgs_out"]) for r in recs)
    assert int(h_max.replace(",", "")) == max(max(int(r["bytes_out"]), int(r["bytes_in"])) for r in recs)
    for metric, shown in (("work_s", work), ("sync_s", sync)):
        most = max(sum(float(r[metric]) for r in recs if int(r["rank"]) == q) for q in ranks)
        assert float(shown) == pytest.approx(1e3 * most, abs=1.5e-3)
    assert re.search(r"^\s+window\s", stdout, re.M) and not re.search(r"^\s+total\s", stdout, re.M)
    return len(steps)


@pytest.mark.parametrize("nprocs", [2, 3])
def test_toposort_streams_its_ledger_and_sums_every_superstep(nprocs, tmp_path):
    path = str(tmp_path / "topo.csv")
    res = run_mpi(nprocs, ["-m", "hpcbsp.apps.irregular.toposort", "--mode", "bsp", "--n", "1500",
                           "--ledger", path], timeout=180, env={"HPCBSP_LEDGER_WINDOW": str(WINDOW)})
    assert res.returncode == 0 and not res.timed_out, res.output
    steps = _check_against_file(res.stdout, path)
    levels = int(re.search(r"(\d+) levels \((\d+) supersteps\)", res.stdout).group(1))
    assert steps > 2 * levels + 1 > WINDOW  # the elimination's supersteps and the set-up's and check's
    assert not os.path.exists(path + ".ranks")  # the per-rank stream, merged and removed


@pytest.mark.parametrize("nprocs", [2, 3])
def test_fft_summary_covers_every_transform(nprocs, tmp_path):
    path = str(tmp_path / "fft.json")
    res = run_mpi(nprocs, ["-m", "hpcbsp.apps.fft", "--n", "64", "--repeats", "30", "--quiet", "--ledger", path],
                  timeout=180, env={"HPCBSP_LEDGER_WINDOW": str(WINDOW)})
    assert res.returncode == 0 and not res.timed_out, res.output
    assert _check_against_file(res.stdout, path) == 30  # one redistribution per transform


def test_a_short_run_prints_the_whole_table_and_its_total(tmp_path):
    res = run_mpi(2, ["-m", "hpcbsp.apps.fft", "--n", "64", "--repeats", "3", "--quiet"], timeout=120)
    assert res.returncode == 0 and not res.timed_out, res.output
    assert "ledger: 3 supersteps on 2 ranks" in res.stdout
    assert re.search(r"^\s+total\s", res.stdout, re.M) and "the table holds" not in res.stdout
