"""``python -m hpcbsp.bench soak``: its counting, and what it does with a run that hangs.

Oracles: pytest's own count line; a job made to hang (one rank sleeps in its work while the
other waits in the sync) must come back as a hang within the timeout, with both ranks' stacks,
each line prefixed by its rank, in its output."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from mpi_helpers import MPIEXEC

from hpcbsp.bench import soak

HANG = """\
import time
import hpcbsp

def prog(bsp):
    if bsp.pid == 0:
        time.sleep(600)
    bsp.sync()

hpcbsp.run(prog)
"""


def test_a_hung_run_is_stopped_with_every_ranks_stack(tmp_path):
    (tmp_path / "hang.py").write_text(HANG)
    t0 = time.monotonic()
    outcome, output, seconds = soak.run_once([MPIEXEC, "-n", "2", sys.executable, str(tmp_path / "hang.py")], 8)
    assert outcome == "hang" and time.monotonic() - t0 < 30, output
    assert '[rank 0]   File "' in output and "hang.py\", line 6 in prog" in output, output
    # Rank 1 waits in the sync: its stack ends at the program's line that calls it (the empty
    # sync is a compiled function there, with no Python frame of its own).
    assert any(line.startswith("[rank 1]") and 'hang.py", line 7 in prog' in line for line in output.splitlines()), output


def test_counts_come_from_pytest_and_a_bad_end_is_never_counted_as_good():
    assert soak.counts("faults", "fail", "== 3 failed, 14 passed in 60.2s ==") == (17, 3)
    assert soak.counts("faults", "pass", "17 passed in 50.0s") == (17, 0)
    assert soak.counts("faults", "hang", "....") == (1, 1)  # no count: a hang or a crash of pytest
    assert soak.counts("calibrate", "pass", "whatever") == (1, 0)


def test_the_soak_runs_an_item_and_writes_its_summary(tmp_path):
    res = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "soak", "--repeats", "1", "--hogs", "1",
                          "--items", "calibrate", "--out-dir", str(tmp_path)], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, MPIEXEC_TIMEOUT="300"))
    assert res.returncode == 0, res.stdout + res.stderr + (tmp_path / "soak.log").read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["total"] == {"runs": 1, "failed": 0, "hung": 0} and summary["hogs"] == 1
    assert (tmp_path / "calibrate" / "MODEL.json").exists()  # the item really ran


def test_the_soak_refuses_an_unknown_item_in_one_line(tmp_path):
    res = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "soak", "--items", "nope", "--out-dir",
                          str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1 and "choose from" in res.stderr
