"""``hpcbsp report``: its text against a ledger built by hand (the oracle: lateness computed by
hand in the comments), the same from .json, .csv and a stream folder, the page's figures, a large
ledger drawn in bins, bad input as one line and exit 2, and the page loaded by a real browser
(headless Chromium, where it is installed)."""
from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess

import pytest
from mpi_helpers import run_mpi

from hpcbsp.cli.main import main
from hpcbsp.cost.profile import FORMAT
from hpcbsp.kernels.syncstate import Rows
from hpcbsp.report.figures import MAX_POINTS, bins
from hpcbsp.runtime.superstep.ledger import Traffic
from hpcbsp.runtime.superstep.ledgerfiles import RankStream, write_records

# Works in ms per superstep, ranks 0, 1, 2, with the late rank and its lateness worked by hand:
#  0 "init"  5, 5, 5        no one late
#  1 "step1" 10, 50, 12     rank 1, 50 - median(10, 12) = 39 ms > 10 % of 12 and 1 ms; waited 40 + 38 = 78 ms
#  2 (none)  20, 20, 24     rank 2, 24 - 20 = 4 ms > 10 % of 20 = 2 ms and 1 ms; waited 4 + 4 = 8 ms
#  3 "step3" 100, 105, 100  rank 1, +5 ms, under 10 % of 100: not named
WORK_MS = [("init", (5, 5, 5)), ("step1", (10, 50, 12)), (None, (20, 20, 24)), ("step3", (100, 105, 100))]
SYNC_S = 0.002
BYTES = 1000  # rank r sends (r + 1) * BYTES and receives BYTES per superstep
TEXT = """{path}: 4 supersteps on 3 ranks, 2 supersteps with a late rank (its work beyond the median of the others' \
by more than 10 % of the median work and 1 ms)
superstep 1 (step1): rank 1 arrived last, +39 ms
superstep 2: rank 2 arrived last, +4.0 ms
rank 1: last in 1 superstep, +39 ms on average, the others waited 78 ms for it in all
rank 2: last in 1 superstep, +4.0 ms on average, the others waited 8.0 ms for it in all"""
PROFILE = ('{"format": "%s", "nprocs": 3, "r_flops": 1e9, "l_empty": 1e-5, "regimes": '
           '[{"name": "blocks", "message_bytes": [8, 1048576], "g": 1e-9, "l": 5e-5}]}' % FORMAT)


def records():
    out = []
    for rank in range(3):
        start = 0.0
        for index, (label, works) in enumerate(WORK_MS):
            out.append({"rank": rank, "index": index, "label": label, "work_s": works[rank] / 1e3, "sync_s": SYNC_S,
                        "bytes_out": (rank + 1) * BYTES, "bytes_in": BYTES, "msgs_out": 1, "msgs_in": 1,
                        "start_s": start, "records": 1})
            start += works[rank] / 1e3 + SYNC_S
    return out


def stream(directory):
    """The same rows as every rank's stream files (what bsp.ledger.stream writes)."""
    for rank in range(3):
        rows, t = Rows(64, 0.0), 0.0
        for index, (label, works) in enumerate(WORK_MS):
            t_sync = t + works[rank] / 1e3
            t = t_sync + SYNC_S
            rows.append((index, label, t_sync, t, Traffic((rank + 1) * BYTES, BYTES, 1, 1, 1)))
        sink = RankStream(str(directory), rank, 3, 0.0)
        sink(rows)
        sink.close()


def report(capsys, *argv):
    """``hpcbsp report ARGV``: (status, stdout, stderr); a usage error exits from argparse."""
    try:
        code = main(["report", *map(str, argv)])
    except SystemExit as done:
        code = done.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("suffix", [".json", ".csv", "stream"])
def test_text_names_the_late_supersteps(capsys, tmp_path, suffix):
    path = tmp_path / ("run.ranks" if suffix == "stream" else f"run{suffix}")
    if suffix == "stream":
        stream(path)
    else:
        write_records(str(path), records(), 3)
    code, out, err = report(capsys, path)
    assert (code, err) == (0, "")
    assert out.strip() == TEXT.format(path=path)


def figures(page: str) -> dict[str, bytes]:
    return {ident: base64.b64decode(data) for ident, data in
            re.findall(r'<figure id="([\w-]+)"><img alt="[\w-]+" src="data:image/png;base64,([^"]+)"', page)}


def test_page_holds_its_figures_inline(capsys, tmp_path):
    ledger, profile = tmp_path / "run.json", tmp_path / "profile.json"
    write_records(str(ledger), records(), 3)
    profile.write_text(PROFILE)
    code, out, _ = report(capsys, ledger, "--out", tmp_path / "out", "--profile", profile)
    assert code == 0 and out.strip().endswith(f"page: {tmp_path / 'out' / 'report.html'}")
    page = (tmp_path / "out" / "report.html").read_text()
    found = figures(page)
    assert list(found) == ["timeline", "lateness", "bytes", "prediction"]
    assert all(png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 2000 for png in found.values())
    assert re.findall(r'src="(?!data:)', page) == [] and "<link" not in page  # nothing fetched
    assert "superstep 1 (step1): rank 1 arrived last, +39 ms" in page
    code, _, _ = report(capsys, ledger, "--out", tmp_path / "plain")
    assert list(figures((tmp_path / "plain" / "report.html").read_text())) == ["timeline", "lateness", "bytes"]


def test_large_ledger_is_drawn_in_bins(capsys, tmp_path):
    steps = 3 * MAX_POINTS
    assert len(bins(steps)) <= MAX_POINTS and list(bins(5)) == [0, 1, 2, 3, 4]
    recs = [{"rank": r, "index": i, "label": None, "work_s": 1e-3 * (1 + 2 * (i % 7 == r)), "sync_s": 1e-4,
             "bytes_out": 8, "bytes_in": 8, "msgs_out": 1, "msgs_in": 1, "start_s": 1.1e-3 * i} for r in range(2)
            for i in range(steps)]
    ledger = tmp_path / "big.json"
    write_records(str(ledger), recs, 2)
    code, out, _ = report(capsys, ledger, "--out", tmp_path / "out")
    assert code == 0 and out.startswith(f"{ledger}: 6,000 supersteps on 2 ranks")
    assert "\n... and 1,665 more (the page's lateness figure shows them all)\n" in out  # 2 in 7 of 6,000, 50 shown
    page = (tmp_path / "out" / "report.html").read_text()
    assert len(page) < 1_500_000  # bins, not 6,000 marks per figure
    assert list(figures(page)) == ["timeline", "lateness", "bytes"]


@pytest.mark.parametrize("make, message", [
    (lambda p: None, "no such file or folder"),
    (lambda p: p.write_text("{not json"), "not valid JSON"),
    (lambda p: p.write_text('{"nprocs": 1}'), "not a ledger"),
    (lambda p: p.write_text('{"nprocs": 1, "records": [{"rank": 0}]}'), "lacks 'index'"),
])
def test_bad_ledger_is_one_line(capsys, tmp_path, make, message):
    path = tmp_path / "bad.json"
    make(path)
    code, out, err = report(capsys, path)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("hpcbsp report: ") and message in err, err


def test_bad_arguments_are_one_line(capsys, tmp_path):
    ledger = tmp_path / "run.json"
    write_records(str(ledger), records(), 3)
    (tmp_path / "afile").write_text("")
    for argv, message in [((ledger, "--out", tmp_path / "afile"), "--out folder"),
                          ((ledger, "--profile", tmp_path / "none.json"), "none.json"),
                          ((), "LEDGER")]:
        code, _, err = report(capsys, *argv)
        assert code == 2 and len(err.strip().splitlines()) == 1 and message in err, err


def test_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["report", "--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "hpcbsp report run.json --out report/" in out and "--profile" in out


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium installed (Debian: apt-get install -y chromium): "
                                             "the page is not checked in a browser")
def test_page_loads_in_chromium(capsys, tmp_path):
    import matplotlib.image

    ledger = tmp_path / "run.json"
    write_records(str(ledger), records(), 3)
    assert report(capsys, ledger, "--out", tmp_path / "out")[0] == 0
    shot = tmp_path / "shot.png"
    subprocess.run([str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    "--window-size=1200,2600", f"--screenshot={shot}", f"file://{tmp_path / 'out' / 'report.html'}"],
                   check=True, capture_output=True, timeout=120, env={**os.environ, "HOME": str(tmp_path)})
    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] >= 2000 and pixels.shape[1] >= 1000
    rgb = pixels[..., :3]
    # Not a blank page: the figures' colours (the timeline's blue work bars among them) are drawn.
    blue = ((rgb[..., 2] > 0.6) & (rgb[..., 0] < 0.4)).sum()
    assert blue > 5000 and (rgb < 0.9).any(axis=-1).mean() > 0.05


PAIR_PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "pair_bytes.py")


@pytest.mark.parametrize("nprocs", [2, 3])
def test_bytes_between_rank_pairs(capsys, tmp_path, nprocs):
    """``bsp.ledger.bytes_to`` and the saved ``"bytes_to"`` against the bytes the program moves
    (tests/programs/pair_bytes.py): rank r puts 80 (r + 1) bytes to r + 1 in 5 supersteps and
    mails 1000 int64 records to r - 1.  The same matrix from a streamed ledger, merged or read by
    hpcbsp report directly, whose page draws it."""
    expected = [[0] * nprocs for _ in range(nprocs)]
    for r in range(nprocs):
        expected[r][(r + 1) % nprocs] += 5 * 80 * (r + 1)
        expected[r][(r - 1) % nprocs] += 8 * 1000
    saved, stream = tmp_path / "run.json", tmp_path / "run.ranks"
    res = run_mpi(nprocs, [PAIR_PROGRAM, str(saved), str(stream)], timeout=180)
    assert res.returncode == 0, res.stderr
    said = [json.loads((tmp_path / f"run.json.rank{r}").read_text()) for r in range(nprocs)]
    assert [d["bytes_to"] for d in said] == expected
    assert [d["bytes_out"] for d in said] == [sum(row) for row in expected]  # every byte out has a destination
    assert json.loads(saved.read_text())["bytes_to"] == expected
    assert main(["ledger", "merge", str(stream), "-o", str(tmp_path / "merged.json")]) == 0
    assert json.loads((tmp_path / "merged.json").read_text())["bytes_to"] == expected
    capsys.readouterr()
    code, _, _ = report(capsys, stream, "--out", tmp_path / "out")
    page = (tmp_path / "out" / "report.html").read_text()
    assert code == 0 and "bytes" in figures(page) and "from each rank (row) to each rank (column)" in page


def test_bsf_model_against_farm_iterations(capsys, tmp_path):
    """A farm's ledger by hand: 3 iterations of ``farm:order`` + ``farm:result``, each superstep
    3 ms of work and 1 ms of sync on every rank, so 8 ms an iteration; the model (linear, L = 1 ms,
    t_Map = 10 ms, the rest 0) predicts T(2) = 2 (2 L) + t_Map / 2 = 9 ms for the 3 ranks' 2
    workers: +12.5 %.  Without farm supersteps, --model is one line and exit 2."""
    from hpcbsp.cost.modelfile import CalibratedModel
    from hpcbsp.farm.model import BSFModel
    from hpcbsp.farm.params import BSFParams

    labels = ["setup"] + ["farm:order", "farm:result"] * 3 + ["farm:done"]
    recs = [{"rank": r, "index": i, "label": label, "work_s": 0.003, "sync_s": 0.001, "bytes_out": 0, "bytes_in": 0,
             "msgs_out": 0, "msgs_in": 0, "start_s": 0.004 * i} for r in range(3) for i, label in enumerate(labels)]
    ledger, model = tmp_path / "farm.json", tmp_path / "model.json"
    write_records(str(ledger), recs, 3)
    model.write_text(json.dumps(CalibratedModel(BSFModel(BSFParams(0.001, 0.0, 0.010, 0.0, 0.0))).as_dict()))
    code, _, err = report(capsys, ledger, "--out", tmp_path / "out", "--model", model)
    assert code == 0, err
    page = (tmp_path / "out" / "report.html").read_text()
    assert list(figures(page)) == ["timeline", "lateness", "bytes", "prediction-bsf"]
    assert "T(K) for K = 2 workers" in page and "mean error +12.5 %" in page
    plain = tmp_path / "plain.json"
    write_records(str(plain), records(), 3)
    code, out, err = report(capsys, plain, "--model", model)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "'farm:order'" in err
