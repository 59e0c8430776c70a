"""``python -m hpcbsp.bench scale``: its arithmetic by hand, and its requirement measured: the
nearest-neighbour superstep's Python lines on rank 0 do not grow with P (8 ranks against 4;
counts, which load does not distort)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from mpi4py import MPI
from mpi_helpers import clean_env

from hpcbsp.bench import scale


def test_ratios_growth_and_bytes_by_hand():
    assert scale.ratio(30.0, 10.0) == 3.0
    assert np.isnan(scale.ratio(1.0, 0.0))
    assert scale.growth({4: 200, 8: 220, 32: 300}, 4) == {4: 1.0, 8: 1.1, 32: 1.5}
    assert scale.sent_bytes(np.zeros(3)) == 24
    assert scale.sent_bytes(bytearray(40)) == 40
    assert scale.sent_bytes([np.zeros(4, np.int64), MPI.INT64_T]) == 32
    assert scale.sent_bytes([np.zeros(100, np.uint8), ([5, 0, 7], [0, 5, 5]), MPI.BYTE]) == 12
    counts = scale.Counts()
    assert (counts.calls, counts.sent) == (1, scale.CONTROL_BYTES)  # the compiled control step
    counts.call("Isend")
    counts.call("Isend")
    counts.sent += 64 + 32
    assert counts.calls == 3 and counts.names == {"Isend": 2} and counts.metadata(64) == 32 + 80


def test_the_table_shows_ratios_and_the_growth_of_the_neighbour_lines():
    def pattern(bsp, floor, lines):
        return {"bsp_us": bsp, "floor_us": floor, "calls": 5, "metadata_bytes": 112,
                "max_metadata_bytes": 144, "lines": lines, "correct": True}
    rows = scale.rows([{"p": 4, "neighbour": pattern(30.0, 10.0, 200), "alltoall": pattern(50.0, 25.0, 300)},
                       {"p": 8, "neighbour": pattern(40.0, 10.0, 230), "alltoall": pattern(90.0, 30.0, 500)}])
    assert rows[1].split()[:5] == ["4", "neighbour", "30.0", "10.0", "3.00"]
    assert rows[4].split()[4] == "3.00" and rows[4].split()[-1] == "500"
    assert rows[-1].endswith("4: 1.00x, 8: 1.15x")


def test_the_neighbour_supersteps_python_lines_do_not_grow_from_4_to_8_ranks():
    cmd = [sys.executable, "-m", "hpcbsp.bench", "scale", "--ranks", "4,8", "--iters", "3", "--repeats", "1",
           "--timeout", "240"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=clean_env(), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = {int(row.split()[0]): int(row.split()[-1]) for row in proc.stdout.splitlines()
             if row.split()[1:2] == ["neighbour"]}
    assert set(lines) == {4, 8}, proc.stdout
    assert lines[8] <= 1.2 * lines[4], proc.stdout
    assert ("oversubscribed: 8 ranks" in proc.stdout) == ((os.cpu_count() or 1) < 8), proc.stdout
