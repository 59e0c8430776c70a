"""``python -m hpcbsp.bench watch``: the failure detector on vs off, alternating jobs.

Oracle: the printed medians and ratios recomputed from the printed per-job figures, and the
alternation read back from the job lines."""
from __future__ import annotations

import re
import statistics
import subprocess
import sys

from mpi_helpers import clean_env


def test_the_watch_bench_alternates_and_its_ratios_follow_from_its_figures():
    res = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "watch", "--repeats", "2", "--iters", "200",
                          "--n", "20000"], capture_output=True, text=True, timeout=300,
                         env=clean_env(MPIEXEC_TIMEOUT="280"))
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = re.findall(r"job +(\d+) +detector (on|off) +empty sync +([\d.]+) us +histogram +([\d,]+)", res.stdout)
    assert [side for _, side, _, _ in jobs] == ["on", "off", "off", "on"], res.stdout
    sync = {s: statistics.median(float(t) for _, side, t, _ in jobs if side == s) for s in ("on", "off")}
    rate = {s: statistics.median(float(r.replace(",", "")) for _, side, _, r in jobs if side == s)
            for s in ("on", "off")}
    printed = re.search(r"empty sync ([\d.]+) us on, ([\d.]+) us off: ratio ([\d.]+)", res.stdout)
    assert printed and abs(float(printed[3]) - sync["on"] / sync["off"]) < 0.002 + 0.01 * sync["on"] / sync["off"]
    printed = re.search(r"histogram ([\d,]+) on, ([\d,]+) off updates/s per rank: ratio ([\d.]+)", res.stdout)
    assert printed and abs(float(printed[3]) - rate["on"] / rate["off"]) < 0.002 + 0.01 * rate["on"] / rate["off"]
    assert re.search(r"detector cost target \(<= 2%\): (met|NOT met)", res.stdout)


def test_the_watch_bench_refuses_a_bad_host_file_in_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "watch", "--hosts", str(tmp_path / "none")],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "Traceback" not in res.stderr
