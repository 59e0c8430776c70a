"""SNN simulator as a program: whole MPI runs by subprocess with a timeout (a deadlock fails, never
hangs), the command line's error handling, and the PNG raster.

Oracle: the serial reference computed in this process (checked against brute force in
test_snn_model.py).
"""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from mpi_helpers import run_mpi

from hpcbsp.apps.snn.network import NetworkSpec, whole_network
from hpcbsp.apps.snn.raster import missing_matplotlib
from hpcbsp.apps.snn.serial import simulate_serial

NET = ["--neurons", "400", "--fanout", "20", "--areas", "4", "--delay-min", "2", "--delay-local-max", "8",
       "--delay-long-min", "12", "--delay-max", "30", "--seed", "3"]
SPEC = NetworkSpec(neurons=400, fanout=20, areas=4, delay_min=2, delay_local_max=8, delay_long_min=12,
                   delay_max=30, seed=3)
TIME = ["--time-ms", "150"]  # 1500 steps


# Each test starts its own processes (and mpiexec).
pytestmark = pytest.mark.serial_only


@pytest.fixture(scope="module")
def reference():
    return simulate_serial(SPEC, 1500)


def snn(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpcbsp.apps.snn", *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


def load(path) -> tuple[np.ndarray, np.ndarray]:
    data = np.load(path)
    return data["step"], data["neuron"]


@pytest.mark.parametrize("nprocs,mode,extra", [
    (2, "async", []),
    (3, "async", ["--window", "7"]),
    (3, "bsp", ["--superstep", "cross"]),
])
def test_mpi_run_gives_the_serial_spike_trains(tmp_path, reference, nprocs, mode, extra):
    out = tmp_path / "spikes.npz"
    res = run_mpi(nprocs, ["-m", "hpcbsp.apps.snn", "--mode", mode, *NET, *TIME, *extra, "--quiet", "--json",
                           "--spikes", str(out)], timeout=90)
    assert not res.timed_out, f"deadlock or hang: {res.output[-2000:]}"
    assert res.returncode == 0, res.output[-2000:]
    steps, ids = load(out)
    assert np.array_equal(steps, reference.spike_steps) and np.array_equal(ids, reference.spike_ids)
    figures = json.loads(res.stdout.strip().splitlines()[-1])
    assert figures["spikes"] == reference.spikes and figures["nprocs"] == nprocs
    assert figures["rate_hz"] == pytest.approx(reference.rate_hz)


def test_kernels_without_jit_give_the_same_spike_trains(tmp_path):
    args = ["--neurons", "120", "--fanout", "10", "--areas", "2", "--delay-long-min", "10", "--delay-max", "20",
            "--time-ms", "30", "--seed", "4"]
    ref = simulate_serial(NetworkSpec(neurons=120, fanout=10, areas=2, delay_long_min=10, delay_max=20, seed=4), 300)
    out = tmp_path / "spikes.npz"
    res = run_mpi(2, ["-m", "hpcbsp.apps.snn", "--mode", "async", *args, "--quiet", "--spikes", str(out)],
                  timeout=90, env={"NUMBA_DISABLE_JIT": "1"})
    assert not res.timed_out and res.returncode == 0, res.output[-2000:]
    steps, ids = load(out)
    assert ref.spikes > 0
    assert np.array_equal(steps, ref.spike_steps) and np.array_equal(ids, ref.spike_ids)


def test_text_report_raster_and_ledger(tmp_path, reference):
    png, ledger = tmp_path / "raster.png", tmp_path / "ledger.json"
    res = run_mpi(2, ["-m", "hpcbsp.apps.snn", "--mode", "bsp", *NET, *TIME, "--quiet", "--raster", str(png),
                      "--ledger", str(ledger)], timeout=90)
    assert res.returncode == 0 and not res.timed_out, res.output[-2000:]
    assert f"spikes: {reference.spikes:,}" in res.stdout
    assert "750 global barriers" in res.stdout  # 1500 steps in supersteps of the 2-step minimum delay
    assert "ledger:" in res.stdout
    records = json.loads(ledger.read_text())["records"]
    assert sum(r["label"] == "snn" for r in records) == 2 * 750
    if missing_matplotlib():
        assert "raster: skipped" in res.stdout
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args,needle", [
    (["--n", "0"], "not a positive integer"),
    (["--n", "5", "--areas", "4"], "at least 2 neurons per area"),
    (["--neurons", "0"], "not a positive integer"),  # the old spelling, kept as an alias
    (["--raster", "r.txt"], ".png, .svg or .pdf"),
    (["--time-ms", "0.15", "--dt", "0.1"], "whole number of steps"),
    (["--delay-min", "0"], "--delay-min"),
    (["--mode", "serial", "--ledger", "x.json"], "--ledger needs"),
    (["--spikes", "x.txt"], ".npz or .csv"),
    (["--ledger", "x.txt"], ".json or .csv"),
])
def test_bad_input_is_one_line_and_status_2(args, needle):
    proc = snn(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_help_describes_the_modes():
    proc = snn("--help")
    assert proc.returncode == 0
    assert "--mode {bsp,async,serial}" in proc.stdout and "--superstep" in proc.stdout


def test_serial_mode_csv_output(tmp_path, reference):
    out = tmp_path / "spikes.csv"
    proc = snn("--mode", "serial", *NET, *TIME, "--quiet", "--spikes", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = np.loadtxt(out, delimiter=",", skiprows=1, dtype=np.int64)
    assert np.array_equal(rows[:, 0], reference.spike_steps) and np.array_equal(rows[:, 1], reference.spike_ids)


def test_benchmark_runs_all_modes_and_checks_their_spike_trains():
    res = run_mpi(2, ["-m", "hpcbsp.bench", "snn", "--neurons", "400", "--fanout", "20", "--time-ms", "50",
                      "--rounds", "1", "--json"], timeout=90)
    assert not res.timed_out and res.returncode == 0, res.output[-2000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["identical"] and out["spikes"] > 0
    rows = {r["run"]: r for r in out["rows"]}
    d_min = int(whole_network(NetworkSpec(neurons=400, fanout=20))["delay"].min())
    assert rows["bsp global d_min"]["interval_steps"] == d_min == out["delay_min"]
    assert rows["bsp global d_min"]["syncs"] == -(-500 // d_min)  # 500 steps
    # ranks hold areas 0-1 and 2-3: only inter-area synapses cross, all with delays >= 40
    cross = rows["bsp cross-rank d_min"]["interval_steps"]
    assert cross >= 40 and rows["async lookahead"]["interval_steps"] == cross
