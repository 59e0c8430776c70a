"""The paper-experiment driver's statistics and report (hpcbsp.apps.elastic.paper).

Oracles: scipy's Student t interval, and hand-made curves whose times to target are known.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import hydra_only

from hpcbsp.apps.elastic.paper import compute_mode, main, summarise, t_interval


@pytest.mark.parametrize("n", [2, 3, 5, 12, 31, 40])
def test_t_interval_matches_scipy(n: int) -> None:
    stats = pytest.importorskip("scipy.stats", reason="scipy (comes with the 'digits' extra) is the oracle")
    v = np.random.default_rng(n).normal(3.0, 0.5, n)
    mean, half = t_interval(list(v))
    lo, hi = stats.t.interval(0.95, n - 1, loc=v.mean(), scale=stats.sem(v))
    assert mean == pytest.approx(v.mean())
    assert half == pytest.approx((hi - lo) / 2, rel=2e-3 if n <= 31 else 0.05)  # normal beyond 30 dof
    assert np.isnan(t_interval([1.0])[1])


def _curve(times_acc):
    return [(t, a, 1.0, i) for i, (t, a) in enumerate(times_acc)]


def test_summary_times_to_target_by_hand() -> None:
    curves = {"bsp": {0: _curve([(0, .1), (1, .5), (2, .9)]), 1: _curve([(0, .1), (1, .95), (2, .96)])},
              "asp": {0: _curve([(0, .1), (0.5, .92), (1, .93)]), 1: _curve([(0, .1), (0.5, .95)])},
              "ssp": {0: _curve([(0, .1), (1, .95)]), 1: _curve([(0, .1), (1, .5)])}}
    rows = {r["policy"]: r for r in summarise(curves, 0.9)}
    assert rows["bsp"]["reach_values"] == [2, 1] and rows["bsp"]["reach"][0] == 1.5
    assert rows["asp"]["reach"][0] == 0.5 and rows["asp"]["vs_bsp"] == 3.0
    assert rows["ssp"]["reached"] == 1 and np.isnan(rows["ssp"]["reach"][0])  # one seed never got there
    assert rows["bsp"]["final"][0] == pytest.approx(0.93)


def test_report_command_writes_the_table(tmp_path: Path) -> None:
    with (tmp_path / "curves.csv").open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["mode", "policy", "repeat", "time_s", "accuracy", "loss", "updates"])
        for rep in range(2):
            for t, a in [(0, .1), (1, .5 + rep * .45), (2, .96)]:
                wr.writerow(["mpi", "bsp", rep, t, a, 1.0, t])
    assert main(["report", str(tmp_path), "--target", "0.9"]) == 0
    text = (tmp_path / "paper.md").read_text()
    assert "| bsp | 2 | 0.960 ± 0.000 | 1.50 ± 6.35 | 2/2 | 1.00x |" in text  # 6.35 = 12.706 * 0.5


def test_bad_input_is_one_line_and_status_2(tmp_path: Path) -> None:
    for args, message in ((["report", str(tmp_path)], "curves.csv does not exist"),
                          (["run", "--workers", "3"], "--slowdown lists 4 workers but --workers is 3"),
                          (["run", "--target", "2"], "--target must be an accuracy in (0, 1]"),
                          (["run", "--paced", "0"], "--paced must be a positive number of seconds"),
                          (["run", "--paced", "0.02", "--extra", "--base-delay 1"],
                           "--paced sets train.py's --compute and --base-delay"),
                          (["run", "--hosts", str(tmp_path / "none")], "cannot read it"),
                          (["run", "--hosts", str(_hosts(tmp_path, 4))], "lists 4 host(s), but 5 ranks need one")):
        proc = subprocess.run([sys.executable, "-m", "hpcbsp.apps.elastic.paper", *args],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


def _hosts(tmp_path: Path, n: int) -> Path:
    path = tmp_path / f"hosts{n}"
    path.write_text("".join(f"node{i}  # one rank a node\n" for i in range(1, n + 1)))
    return path


@hydra_only("the command checked is hydra's -f FILE -ppn 1; Open MPI's spelling is tests/test_util_jobcommand.py's")
def test_run_with_hosts_places_one_rank_a_host_the_server_on_the_first(tmp_path: Path) -> None:
    """Oracle: hydra's own spelling of one rank a host (``-f FILE -ppn 1 -n workers+1``), and the
    first host of the file is rank 0's (hydra fills hosts in file order), i.e. the server's."""
    hosts = _hosts(tmp_path, 6)
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.apps.elastic.paper", "run", "--hosts", str(hosts),
                           "--dry-run", "--json", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    command = json.loads(proc.stdout)["command"].split()
    at = command.index("-f")
    assert command[at:at + 6] == ["-f", str(hosts), "-ppn", "1", "-n", "5"], command
    assert "warning" not in proc.stderr  # the cores of this machine are not the job's


@hydra_only("the command checked is hydra's -f FILE -ppn 1; Open MPI's spelling is tests/test_util_jobcommand.py's")
def test_run_with_shards_starts_workers_plus_servers_ranks_and_passes_servers_to_train(tmp_path: Path) -> None:
    """Oracle: 4 workers and 4 shards are 8 ranks, one a host; train.py is told --servers 4."""
    hosts = _hosts(tmp_path, 8)
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.apps.elastic.paper", "run", "--hosts", str(hosts),
                           "--servers", "4", "--dry-run", "--json", "--out", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    command = json.loads(proc.stdout)["command"].split()
    at = command.index("-f")
    assert command[at:at + 6] == ["-f", str(hosts), "-ppn", "1", "-n", "8"], command
    assert command[command.index("--servers") + 1] == "4"


def test_paced_runs_pass_the_pacing_to_train_and_the_report_says_so(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.apps.elastic.paper", "run", "--paced", "0.02", "--dry-run",
                           "--seeds", "2", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("--compute sleep --base-delay 0.02") and "--repeats 2" in proc.stdout
    # The report names how the times were made, from the run's summary.json.
    with (tmp_path / "curves.csv").open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["mode", "policy", "repeat", "time_s", "accuracy", "loss", "updates"])
        wr.writerow(["mpi", "bsp", 0, 1.0, 0.97, 1.0, 5])
    config = {"argv": {"model": "cnn", "dataset": "digits", "duration": 30.0, "compute": "sleep"},
              "timing": {"base_s": 0.02, "slowdown": [1.0, 1.0, 1.5, 3.0], "jitter": 0.1}, "model": {"name": "cnn"}}
    (tmp_path / "summary.json").write_text(json.dumps({"config": config}))
    assert main(["report", str(tmp_path)]) == 0
    assert ("cnn on digits, 4 workers at slowdown 1,1,1.5,3, 30 s per seed; iteration times paced at "
            "0.02 s x slowdown") in (tmp_path / "paper.md").read_text()
    config["argv"]["compute"] = "real"
    (tmp_path / "summary.json").write_text(json.dumps({"config": config}))
    assert main(["report", str(tmp_path)]) == 0
    assert "iteration times: the real compute x slowdown" in (tmp_path / "paper.md").read_text()


def test_the_compute_mode_is_resolved_as_train_does() -> None:
    """The core-count warning is for real compute only: --compute as given (last wins, either
    spelling), ``auto`` meaning real for torch models and paced for the numpy ones."""
    assert compute_mode([], "cnn") == "real" and compute_mode([], "softmax") == "sleep"
    assert compute_mode(["--compute", "real"], "softmax") == "real"
    assert compute_mode(["--compute=sleep"], "cnn") == "sleep"
    assert compute_mode(["--compute", "sleep", "--compute=auto"], "student") == "real"


def test_the_report_reads_the_resolved_mode_and_survives_a_partial_summary(tmp_path: Path) -> None:
    with (tmp_path / "curves.csv").open("w", newline="") as fh:
        wr = csv.writer(fh)
        wr.writerow(["mode", "policy", "repeat", "time_s", "accuracy", "loss", "updates"])
        wr.writerow(["mpi", "bsp", 0, 1.0, 0.97, 1.0, 5])
    # A numpy model with the default "auto": train.py resolved it to sleep, and says so.
    config = {"argv": {"model": "softmax", "dataset": "digits", "duration": 5.0, "compute": "auto"},
              "timing": {"base_s": 0.01, "slowdown": [1.0, 3.0], "jitter": 0.0},
              "model": {"name": "softmax", "compute": "sleep"}}
    (tmp_path / "summary.json").write_text(json.dumps({"config": config}))
    assert main(["report", str(tmp_path)]) == 0
    assert "iteration times paced at 0.01 s x slowdown" in (tmp_path / "paper.md").read_text()
    del config["timing"]["jitter"]  # an older or hand-made summary: no line, no traceback
    (tmp_path / "summary.json").write_text(json.dumps({"config": config}))
    assert main(["report", str(tmp_path)]) == 0
    assert "iteration times" not in (tmp_path / "paper.md").read_text()


def test_run_passes_the_shared_options_to_train_and_prints_one_json_object(tmp_path: Path) -> None:
    # A small real run (3 ranks, two policies of 0.5 s): --n and --ledger reach train.py, and
    # --json makes stdout one object holding train.py's own and the report's rows.
    out, ledger = tmp_path / "run", tmp_path / "ledger.json"
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.apps.elastic.paper", "run", "--workers", "2",
                           "--slowdown", "1,2", "--seeds", "1", "--duration", "0.5", "--model", "softmax",
                           "--dataset", "generated", "--paced", "0.01", "--n", "300", "--ledger", str(ledger),
                           "--extra", "--policy bsp,asp --eval-every 0.1 --quiet", "--out", str(out),
                           "--target", "0.5", "--json"], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert "--n 300" in result["command"] and f"--ledger {ledger}" in result["command"]
    assert result["train"]["samples"] == 300 and result["train"]["ledger"] == str(ledger)
    assert {r["policy"] for r in result["report"]} == {"bsp", "asp"}
    assert str(out / "paper.md") in result["written"]
    assert json.loads(ledger.read_text())["nprocs"] == 3
