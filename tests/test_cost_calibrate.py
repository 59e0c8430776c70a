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
    # The model, by hand (linear exchange, ceil split): a run's L is its median one-byte superstep
    # per worker, but no more than its iterations' median exchange T − work over 2K; the model's L
    # the median over the runs.  Each iteration's exchange less its 2K·L is K·t_c + t_0; the line
    # through the least run median at K = 1 and at K = 2 gives t_c (its slope) and t_0 (where it
    # meets K = 0).
    reports = [json.loads(path.read_text().splitlines()[-1]) for path in sorted(tmp_path.glob("report-K*-r*.jsonl"))]
    whole, t_map = [], []
    for rep in reports:
        k, length, s = rep["workers"], rep["list_length"], {n: np.asarray(v) for n, v in rep["samples"].items()}
        share = -(-length // k)
        t_a = (s["fold_s"] + s["master_fold_s"]) / (length - 1)
        work = s["map_s"] * share / length + (share - 1 + k - 1) * t_a + s["compute_s"]
        whole.append((k, np.maximum(s["seconds"] - work, 0)))
        t_map.extend(s["map_s"])
    latency = np.median([min(rep["superstep_s"] / k, np.median(w) / (2 * k)) for rep, (k, w) in zip(reports, whole)])
    transfers: dict[int, list[np.ndarray]] = {1: [], 2: []}
    for k, w in whole:
        transfers[k].append(w - 2 * k * latency)
    assert len(transfers[1]) == len(transfers[2]) == 2  # 2 K x 2 repeats
    m1, m2 = (min(np.median(run) for run in transfers[k]) for k in (1, 2))
    if m2 > m1:
        t_c, t_0 = m2 - m1, 2 * m1 - m2
    else:  # no positive slope: one constant per worker, t_0 = 0
        t_c, t_0 = max(np.median(np.concatenate([*transfers[1], *(run / 2 for run in transfers[2])])), 0.0), 0.0
    p = cm.model.params
    assert p.latency == pytest.approx(latency, rel=1e-12)
    assert (p.t_c, p.t_0) == pytest.approx((t_c, t_0), rel=1e-9, abs=1e-15)
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


def test_calibrate_runs_where_suggest_says(tmp_path):
    """``until_width``: after K = 1, 2 the calibration runs where ``suggest`` names on the model of
    those runs (the oracle: suggest called here on the model rebuilt from the first two reports),
    and its progress lines count the runs, the total growing by the suggested run.  A width of -1
    is never reached, so the one suggestion allowed is run however narrow the first interval; the
    emulated Map of 2 s puts K_max beyond K = 3 unless a worker's exchange took over 0.2 s, so
    that there is a K to suggest (the largest, where the interval lies beyond the K allowed)."""
    import io

    from hpcbsp.cost.calibrate import calibrate, format_calibration, model_from_reports, run_record
    from hpcbsp.cost.suggest import suggest
    from hpcbsp.util.progress import parse

    err = io.StringIO()
    doc = calibrate([sys.executable, "-m", "hpcbsp.apps.bsf.jacobi", "--n", "120", "--max-iter", "4"],
                    workers=[1, 2], repeats=1, out_dir=str(tmp_path), timeout=120, n_boot=50, progress=err,
                    until_width=-1, max_workers=3, max_suggested=1, emulate="t_map=2")
    assert len(doc["suggested_workers"]) == 1 and doc["until_width"] == -1
    k = doc["suggested_workers"][0]
    runs = read_runs(tmp_path / "RUNS.csv")
    assert runs.workers.tolist() == [1, 2, k]
    first = {w: [json.loads((tmp_path / f"report-K{w}-r0.jsonl").read_text().splitlines()[-1])] for w in (1, 2)}
    model, _, _ = model_from_reports(first, 120, n_boot=50)
    model.fit.update(run_record(first))
    assert suggest(model, repeats=1, max_workers=3)["k"] == k and 1 <= k <= 3
    counted = [r for r in map(parse, err.getvalue().splitlines()) if r is not None]
    assert [(r.label, r.unit, r.done, r.total) for r in counted] == [
        ("calibrate", "run", 1.0, 2.0), ("calibrate", "run", 2.0, 2.0), ("calibrate", "run", 3.0, 3.0)]
    assert f"running K = {k} " in err.getvalue() and "expected after 1 run at K = " in err.getvalue()
    assert "run where suggest said: K = 3; the interval is " in format_calibration(doc)
