"""The ``hpcbsp-cost`` command line: bsf, fit, predict, validate, plot, and its handling of bad input."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from hpcbsp.cli.cost import main
from hpcbsp.farm.model import BSFModel
from hpcbsp.farm.params import BSFParams

SUBCOMMANDS = ["bsf", "fit", "predict", "validate", "plot", "suggest", "calibrate", "probe", "ledger"]
TRUE = BSFModel(BSFParams(0.0, 2e-3, 1.0, 0.0, 1e-3, None))  # K_max = 22


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse exits for --help and usage errors
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def runs_csv(tmp_path):
    rng = np.random.default_rng(0)
    k = np.repeat([1, 2, 3, 4, 6, 8], 3)
    t = TRUE.time(k) * (1 + 0.01 * rng.standard_normal(k.size))
    path = tmp_path / "RUNS.csv"
    path.write_text("workers,seconds\n" + "".join(f"{a},{float(b)!r}\n" for a, b in zip(k, t)))
    return path


@pytest.fixture
def model_json(tmp_path, runs_csv, capsys):
    path = tmp_path / "MODEL.json"
    code, _, err = run_cli(capsys, "fit", "--runs", str(runs_csv), "-o", str(path), "--bootstrap", "40")
    assert code == 0, err
    return path


@pytest.mark.parametrize("sub", SUBCOMMANDS)
def test_every_subcommand_has_help(capsys, sub):
    code, out, _ = run_cli(capsys, sub, "--help")
    assert code == 0 and "--json" in out


def test_bsf_hand_case(capsys):
    # T(K) = K + 100/K: K_max = 10 by both methods, a(10) = 101/20.
    code, out, _ = run_cli(capsys, "bsf", "--latency", "0", "--t-c", "1", "--t-map", "100", "--t-a", "0",
                           "--t-p", "0", "--list-length", "1000", "--workers", "1,10,100", "--json")
    doc = json.loads(out)
    assert code == 0
    assert doc["k_max"] == doc["k_max_closed"] == doc["k_max_numeric"] == 10
    assert doc["k_max_interval"] == [10, 10]
    by_k = {p["workers"]: p for p in doc["points"]}
    assert by_k[1]["speedup"] == 1.0
    assert by_k[10]["seconds"] == pytest.approx(20.0) and by_k[10]["speedup"] == pytest.approx(101 / 20)
    assert by_k[100]["efficiency"] == pytest.approx(101 / 101 / 100)


def test_bsf_text_and_tree_ceil(capsys):
    code, out, _ = run_cli(capsys, "bsf", "--latency", "1e-5", "--t-c", "1e-4", "--t-map", "1", "--t-a", "1e-5",
                           "--t-p", "1e-3", "--list-length", "1000", "--comm", "tree", "--granularity", "ceil")
    model = BSFModel(BSFParams(1e-5, 1e-4, 1.0, 1e-5, 1e-3, 1000), "tree", "ceil")
    assert code == 0
    assert f"K_max = {model.k_max_numeric()}" in out and "closed form" in out


def test_fit_predict_validate_plot_round_trip(capsys, tmp_path, runs_csv, model_json):
    code, out, err = run_cli(capsys, "predict", str(model_json), "--workers", "1,2,4,...,1024", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert [p["workers"] for p in doc["points"]] == [2 ** i for i in range(11)]
    assert set(doc["points"][0]) >= {"workers", "seconds", "speedup", "efficiency"}
    lo, hi = doc["k_max_interval"]
    assert lo <= doc["k_max"] and (hi is None or doc["k_max"] <= hi)
    assert abs(doc["k_max"] - TRUE.k_max()) <= 3  # 1 % noise, K up to 8

    code, out, _ = run_cli(capsys, "validate", str(model_json), "--runs", str(runs_csv), "--json")
    doc = json.loads(out)
    model = json.loads(model_json.read_text())
    p = model["params"]
    data = np.loadtxt(runs_csv, delimiter=",", skiprows=1)
    k, t = data[:, 0], data[:, 1]
    predicted = (2 * p["latency"] + p["t_c"]) * k + p["t_map"] / k + p["t_p"]  # linear/continuous, no l
    ape = 100 * np.abs(predicted - t) / t
    assert model["granularity"] == "continuous" and model["comm"] == "linear"
    assert doc["mape"] == pytest.approx(ape.mean()) and doc["max_ape"] == pytest.approx(ape.max())
    assert [q["workers"] for q in doc["points"]] == [1, 2, 3, 4, 6, 8]
    assert all(q["region"] == "fitted" for q in doc["points"])

    png = tmp_path / "speedup.png"
    code, out, _ = run_cli(capsys, "plot", str(model_json), "--runs", str(runs_csv), "-o", str(png), "--json")
    assert code == 0 and json.loads(out)["band"] is True
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_predict_without_turnover(capsys, tmp_path):
    path = tmp_path / "amdahl.json"
    code, _, _ = run_cli(capsys, "bsf", "--latency", "0", "--t-c", "0", "--t-map", "1", "--t-a", "0", "--t-p",
                         "0.01", "--list-length", "1000000", "-o", str(path))
    assert code == 0
    code, out, _ = run_cli(capsys, "predict", str(path), "--workers", "1,10,100", "--json")
    doc = json.loads(out)
    assert doc["k_max"] is None and "no turnover" in doc["note"]
    assert doc["points"][2]["speedup"] == pytest.approx(1.01 / (0.01 + 0.01))


@pytest.mark.parametrize("csv_text, message", [
    ("workers,time\n1,1\n2,1\n3,1\n", "lacks column"),
    ("workers,seconds\n1,1\n2,x\n3,1\n", "not a number"),
    ("workers,seconds\n1,1\n2,0.5\n", "for 3 parameters"),
    ("workers,seconds\n1,1\n2,-0.5\n3,0.4\n", "negative time"),
])
def test_bad_runs_exit_2_with_one_line(capsys, tmp_path, csv_text, message):
    path = tmp_path / "bad.csv"
    path.write_text(csv_text)
    code, out, err = run_cli(capsys, "fit", "--runs", str(path), "-o", str(tmp_path / "m.json"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and "Traceback" not in err


@pytest.mark.parametrize("argv", [
    ["bsf", "--latency", "1", "--bogus"],
    ["bsf", "--latency", "-1", "--t-c", "0", "--t-map", "1", "--t-a", "0", "--t-p", "0", "--list-length", "5"],
    ["predict", "missing.json"],
    ["predict", "MODEL", "--workers", "1,x"],
    ["frobnicate"],
])
def test_bad_arguments_exit_2_with_one_line(capsys, tmp_path, argv, model_json):
    argv = [str(model_json) if a == "MODEL" else a for a in argv]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err


def test_malformed_model_file(capsys, tmp_path):
    path = tmp_path / "m.json"
    path.write_text("{not json")
    code, _, err = run_cli(capsys, "predict", str(path))
    assert code == 2 and "not valid JSON" in err


@pytest.mark.serial_only  # a child Python would inherit this rank's process-manager variables
def test_module_and_console_script_entry_points(tmp_path):
    args = ["bsf", "--latency", "0", "--t-c", "1", "--t-map", "100", "--t-a", "0", "--t-p", "0",
            "--list-length", "100", "--json"]
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.cli.cost", *args], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["k_max"] == 10
    proc = subprocess.run([sys.executable, "-m", "hpcbsp.cli.cost", "fit", "--runs", str(tmp_path / "none.csv"),
                           "-o", str(tmp_path / "m.json")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "cannot read" in proc.stderr


BSF_OPTIONS = ["--latency", "--t-c", "--t-map", "--t-a", "--t-p", "--list-length"]


@pytest.mark.parametrize("option", BSF_OPTIONS)
@pytest.mark.parametrize("value", ["abc", "-5", "", "1e9x", "nan", "-0.5", "١"])
def test_bsf_bad_values_exit_2_with_one_line(capsys, option, value):
    argv = ["bsf"]
    for opt in BSF_OPTIONS:
        argv += [opt, value if opt == option else ("10" if opt == "--list-length" else "0.001")]
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (argv, out)
    assert err.count("\n") == 1 and "Traceback" not in err
