"""``hpcbsp-cost calibrate``: runs a farm program under mpiexec and writes RUNS.csv and MODEL.json."""
from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from hpcbsp.cli.cost import main
from hpcbsp.cost.modelfile import load_model
from hpcbsp.cost.runs import read_runs

pytestmark = pytest.mark.serial_only  # it launches MPI jobs of its own


def test_calibrate_jacobi(tmp_path, capsys):
    code = main(["calibrate", "--workers", "1,2", "--repeats", "2", "--out-dir", str(tmp_path), "--json",
                 "--timeout", "120", "--", "python", "-m", "hpcbsp.apps.bsf.jacobi", "--n", "120"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    runs = read_runs(tmp_path / "RUNS.csv")
    assert sorted(runs.workers.tolist()) == [1, 1, 2, 2] and runs.list_length() == 120
    assert doc["method"] == "components of every run"
    cm = load_model(tmp_path / "MODEL.json")
    assert cm.model.params.list_length == 120 and cm.fit["command"].endswith("--n 120")
    # The model is the medians of every iteration of every run, each decomposed at its own K by
    # hand here (linear exchange, ceil split): one exchange 2L + t_c = (T − work)/K.
    exchange, t_map = [], []
    for path in sorted(tmp_path.glob("report-K*-r*.jsonl")):
        rep = json.loads(path.read_text().splitlines()[-1])
        k, length, s = rep["workers"], rep["list_length"], {n: np.asarray(v) for n, v in rep["samples"].items()}
        share = -(-length // k)
        t_a = (s["fold_s"] + s["master_fold_s"]) / (length - 1)
        work = s["map_s"] * share / length + (share - 1 + k - 1) * t_a + s["compute_s"]
        exchange.extend(np.maximum(s["seconds"] - work, 0) / k)
        t_map.extend(s["map_s"])
    assert len(exchange) >= 4 * 2  # 2 K x 2 repeats, every iteration
    p = cm.model.params
    assert 2 * p.latency + p.t_c == pytest.approx(max(np.median(exchange), 2 * p.latency), rel=1e-9)
    assert p.t_map == pytest.approx(np.median(t_map), rel=1e-12)
    # The check compares the K = 1 model with both measured K, with the APE computed per row.
    points = {p["workers"]: p for p in doc["components_check"]["points"]}
    assert set(points) == {1, 2}
    for k, p in points.items():
        t = runs.seconds[runs.workers == k]
        assert p["measured_mean"] == pytest.approx(t.mean())
        assert p["mape"] == pytest.approx((100 * abs(p["predicted"] - t) / t).mean())


def test_calibrate_needs_a_farm_program(tmp_path, capsys):
    code = main(["calibrate", "--workers", "1", "--repeats", "1", "--out-dir", str(tmp_path), "--",
                 sys.executable, "-c", "pass"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]  # (the rest: progress lines)
    assert code == 2 and len(errors) == 1 and "no farm report" in errors[0] and err.splitlines()[-1] == errors[0]


def test_calibrate_run_killed_by_its_timeout_says_so(tmp_path, capsys):
    """A fractional --timeout is a real limit (0.5 s used to become 0: none), and a run it ends is
    reported as timed out, not as 'status 255: (no output)'."""
    import time

    t0 = time.monotonic()
    code = main(["calibrate", "--workers", "1", "--repeats", "1", "--out-dir", str(tmp_path), "--timeout", "0.5",
                 "--", sys.executable, "-c", "import time; time.sleep(60)"])
    err = capsys.readouterr().err
    assert code == 2 and "timed out after 1 s (--timeout 0.5)" in err, err
    assert time.monotonic() - t0 < 30  # the limit held: the run did not sleep its 60 s


def test_calibrate_without_command(capsys):
    assert main(["calibrate", "--workers", "1"]) == 2
    assert "after '--'" in capsys.readouterr().err
