"""The training command: bad input, simulated runs and their outputs, and a real 5-rank MPI run."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import run_mpi

from hpcbsp.apps.elastic.train import main

pytestmark = pytest.mark.serial_only

QUICK = ["--dataset", "generated", "--duration", "1.5", "--eval-every", "0.1", "--base-delay", "0.01"]


@pytest.mark.parametrize("args, message", [
    (["--R", "0"], "R must be at least 1"),
    (["--s-lower", "4", "--s-upper", "2"], "s_L must not exceed s_U"),
    (["--policy", "bsp,fastest"], "unknown policy 'fastest'"),
    (["--workers", "3", "--slowdown", "1,2"], "--slowdown lists 2 workers but there are 3"),
    (["--slowdown", "1,x"], "comma-separated numbers"),
    (["--slowdown", "1,-1"], "slowdowns must be positive"),
    (["--backup", "4"], "must be fewer than the 4 workers"),
    (["--eval-every", "1e-9"], "would evaluate the model"),
])
def test_bad_input_is_one_line_and_status_2(args: list[str], message: str,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["--simulate", *args])
    except SystemExit as exc:  # a value argparse itself refuses (a checked type)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.parametrize("args, message", [
    (["--R", "many"], "--R"),
    (["--duration", "0"], "argument --duration: '0' must be > 0"),
])
def test_argparse_errors_are_one_line_too(args: list[str], message: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--simulate", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_help_shows_the_mpi_example(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "mpiexec -n 5 python -m hpcbsp.apps.elastic.train" in capsys.readouterr().out


def test_real_run_without_mpiexec_explains_what_to_do() -> None:
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.apps.elastic.train", "--dataset", "generated"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "needs at least 2 ranks" in proc.stderr and "--simulate" in proc.stderr
    assert "Traceback" not in proc.stderr


def _read_curves(path: Path) -> dict[str, list[tuple[float, float]]]:
    curves: dict[str, list[tuple[float, float]]] = {}
    with path.open() as fh:
        for row in csv.DictReader(fh):
            curves.setdefault(row["policy"], []).append((float(row["time_s"]), float(row["accuracy"])))
    return curves


def test_simulated_run_writes_curves_waits_staleness_and_plot(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert main(["--simulate", "--policy", "bsp,elastic,ssp", "--R", "8", *QUICK, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "time to reach BSP's final accuracy" in printed
    curves = _read_curves(out / "curves.csv")
    assert set(curves) == {"bsp", "elastic(R=8)", "ssp(s=3)"}
    for points in curves.values():
        times = [t for t, _ in points]
        assert times == sorted(times) and times[-1] == 1.5
        assert all(0.0 <= a <= 1.0 for _, a in points)
    # Recompute the headline from the CSV: BSP's final accuracy = mean of its last 3 points.
    summary = json.loads((out / "summary.json").read_text())
    target = float(np.mean([a for _, a in curves["bsp"][-3:]]))
    table = summary["comparison"]["simulated"]
    for label, points in curves.items():
        first = next((t for t, a in points if a >= target - 1e-6), None)  # the CSV rounds to 1e-6
        assert first is not None
        assert table[label]["time_to_bsp_final_s"] == pytest.approx(first, abs=1e-6)
    with (out / "workers.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 3 * 4
    wait = {(r["policy"], int(r["worker"])): float(r["wait_s"]) for r in rows}
    # The fastest worker waits for the 3x-slower one at every BSP barrier, far less under ElasticBSP.
    assert wait[("bsp", 0)] > 2 * wait[("elastic(R=8)", 0)]
    runs = {r["policy"]: r for r in summary["runs"]}
    with (out / "pushes.csv").open() as fh:
        pushes = list(csv.DictReader(fh))
    for label, r in runs.items():
        mine = [float(p["time_s"]) for p in pushes if p["policy"] == label]
        assert len(mine) == sum(r["pushes"]) and max(mine) >= 1.5  # the stop answers a push
    assert runs["bsp"]["staleness"]["max"] == 0
    assert runs["ssp(s=3)"]["staleness"]["max"] > 0
    assert runs["elastic(R=8)"]["policy_stats"]["barriers"] > 1
    assert (out / "accuracy.png").stat().st_size > 1000


def test_plot_is_skipped_with_a_message_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = tmp_path / "noplot"
    assert main(["--simulate", "--policy", "asp", *QUICK, "--out", str(out)]) == 0
    assert "matplotlib is not installed" in capsys.readouterr().out
    assert not (out / "accuracy.png").exists() and (out / "curves.csv").exists()


def test_mpi_run_with_wrong_slowdown_length_fails_cleanly() -> None:
    res = run_mpi(3, ["-m", "hpcbsp.apps.elastic.train", "--dataset", "generated", "--slowdown", "1,1,2"],
                  timeout=60)
    assert not res.timed_out and res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and "--slowdown lists 3 workers but there are 2" in lines[0]


def test_five_rank_mpi_run_trains_and_writes_outputs(tmp_path: Path) -> None:
    out = tmp_path / "mpi"
    res = run_mpi(5, ["-m", "hpcbsp.apps.elastic.train", "--policy", "elastic,bsp", "--R", "20",
                      "--slowdown", "1,1,1.5,3", *QUICK, "--duration", "1", "--out", str(out)],
                  timeout=150)
    assert not res.timed_out, res.output[-2000:]
    assert res.returncode == 0, res.output[-2000:]
    # Progress lines (the shared helper, tested in test_util_progress.py) go to stderr only.
    assert "[mpi] elastic" in res.stdout and "  [elastic(R=20)]" not in res.stdout
    summary = json.loads((out / "summary.json").read_text())
    runs = {r["policy"]: r for r in summary["runs"]}
    assert set(runs) == {"elastic(R=20)", "bsp"}
    for r in runs.values():
        assert len(r["pushes"]) == 4 and r["updates"] > 0
        assert len(r["worker_blocked_s"]) == 4
    # BSP applies one averaged update per step: every worker contributes to every update.
    assert runs["bsp"]["applied"] == [runs["bsp"]["updates"]] * 4
    assert runs["elastic(R=20)"]["policy_stats"]["barriers"] >= 1
    assert set(_read_curves(out / "curves.csv")) == {"elastic(R=20)", "bsp"}


def test_mlp_trains_on_generated_data(tmp_path: Path) -> None:
    out = tmp_path / "mlp"
    assert main(["--simulate", "--policy", "elastic", "--model", "mlp", "--hidden", "16", *QUICK,
                 "--no-plot", "--out", str(out)]) == 0
    accuracy = [a for _, a in _read_curves(out / "curves.csv")["elastic(R=20)"]]
    assert accuracy[0] < 0.5 < 0.8 < accuracy[-1]  # 5 classes: from chance to well above it
    assert not (out / "accuracy.png").exists()


# Issue 14, item 2: timing values a virtual clock cannot get through used to hang the command
# (`--base-delay 0`: every iteration at t = 0 for ever).  Each is now refused before the run.
@pytest.mark.parametrize("args, message", [
    (["--base-delay", "0"], "--base-delay 0 cannot be simulated"),
    (["--base-delay", "1e-300"], "would simulate about 4e+300 iterations"),
    (["--slowdown", "1e-300,1,1,1"], "would simulate about"),
    (["--change-at", "0", "--change-factor", "1e-300"], "would simulate about"),
    (["--stall-prob", "1", "--stall-factor", "1e-300"], "would simulate about"),
    (["--eval-every", "1e-9"], "would evaluate the model 1e+09 times"),
    (["--duration", "inf"], "argument --duration: 'inf' is not a number"),
    (["--duration", "nan"], "argument --duration: 'nan' is not a number"),
    (["--base-delay", "nan"], "argument --base-delay: 'nan' is not a number"),
    (["--jitter", "nan"], "argument --jitter: 'nan' is not a number"),
    (["--change-at", "nan"], "argument --change-at: 'nan' is not a number"),
    (["--eval-every", "-1"], "argument --eval-every: '-1' must be > 0"),
])
def test_timing_that_would_never_end_is_refused_at_once(args: list[str], message: str,
                                                        tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "hpcbsp.apps.elastic.train", "--simulate", "--dataset", "generated",
           "--duration", "1", "--no-plot", "--out", str(tmp_path / "out"), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)  # was: never ended
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and message in err[0], proc.stderr
    assert not (tmp_path / "out").exists()


def test_zero_base_delay_is_fine_for_a_real_run_but_not_for_the_virtual_clock() -> None:
    """The root cause, in the simulator itself: zero-time iterations are refused there (a
    library caller gets a ValueError instead of a loop that never ends)."""
    from hpcbsp.elastic.policies import make_policy
    from hpcbsp.elastic.simulator import simulate
    from hpcbsp.elastic.timing import TimingModel

    with pytest.raises(ValueError, match="virtual clock would never advance"):
        simulate(make_policy("asp"), TimingModel(base_s=0.0, slowdown=(1.0, 2.0)), duration=1.0)
    # With a latency, zero compute time still advances the clock: 1 / 0.25 = 4 pushes per worker
    # before the stop at t = 1 (pushes at 0.25, 0.5, 0.75; the one at 1.0 is told to stop).
    res = simulate(make_policy("asp"), TimingModel(base_s=0.0, slowdown=(1.0, 2.0), jitter=0.0),
                   duration=1.0, latency_s=0.25)
    assert res.log.updates == 6


# The shared options (docs/cli.md): --n, --ledger, --json on the training program.

def test_mpi_run_saves_the_training_worlds_ledger_and_prints_one_json_object(tmp_path: Path) -> None:
    ledger, out = tmp_path / "ledger.json", tmp_path / "out"
    res = run_mpi(3, ["-m", "hpcbsp.apps.elastic.train", *QUICK, "--duration", "0.5", "--slowdown", "1,2",
                      "--policy", "bsp,allreduce", "--no-plot", "--out-dir", str(out),
                      "--ledger", str(ledger), "--json", "--quiet"], timeout=150)
    assert not res.timed_out and res.returncode == 0, res.output[-2000:]
    result = json.loads(res.stdout)  # stdout is the one JSON object, nothing else
    assert result["mode"] == "mpi" and result["workers"] == 2 and result["ledger"] == str(ledger)
    assert set(result["comparison"]["mpi"]) == {"bsp", "allreduce"}
    assert str(out / "summary.json") in result["written"]
    saved = json.loads(ledger.read_text())
    assert saved["nprocs"] == 3
    # Every rank's supersteps of the world: the broadcast of the checks, the sync after the
    # warm-up, one sync after each of the 2 policy runs.
    for rank in range(3):
        mine = [r for r in saved["records"] if r["rank"] == rank]
        assert [r["label"] for r in mine] == ["broadcast:0", None, None, None], mine


def test_simulated_json_is_the_comparison_and_n_sets_the_samples(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim"
    assert main(["--simulate", *QUICK, "--policy", "bsp,asp", "--n", "1_000", "--no-plot",
                 "--out-dir", str(out), "--json", "--quiet"]) == 0
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert captured.err == ""
    assert result["mode"] == "simulated" and result["samples"] == 1000 and result["ledger"] is None
    assert set(result["comparison"]["simulated"]) == {"bsp", "asp"}
    summary = json.loads((out / "summary.json").read_text())
    assert result["comparison"] == summary["comparison"]
    assert summary["config"]["argv"]["n"] == 1000


@pytest.mark.parametrize("args, message", [
    (["--n", "19"], "--n 19 is too few samples: at least 20"),
    (["--dataset", "digits", "--n", "1798"], "--dataset digits has 1,797 images"),
    (["--ledger", "run.json"], "--ledger needs a real run under mpiexec"),
])
def test_shared_options_are_checked_before_the_run(args: list[str], message: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--simulate", "--dataset", "generated", *args])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_real_runs_ledger_path_is_checked_before_the_run(tmp_path: Path) -> None:
    res = run_mpi(3, ["-m", "hpcbsp.apps.elastic.train", "--dataset", "generated",
                      "--ledger", str(tmp_path / "run.txt")], timeout=60)
    assert not res.timed_out and res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if "error" in ln]
    assert len(lines) == 1 and "use a file name ending in .json or .csv" in lines[0], res.stderr
