"""A checkpoint's file-system calls per rank do not grow with the rank count (issue 44, item 5).

The measurement: ``python -m hpcbsp.apps.heat --checkpoint DIR --every K`` (a save), then the
same with ``--restart`` (a restore), each rank under ``strace -ff -y -e trace=%file,%desc``; a
call counts when its text names DIR, ``DIR.tmp`` or ``DIR.old`` or a file in them (``-y`` shows
the path behind a descriptor, so the reads and writes of a checkpoint's files count too), except
the ``execve`` of the command line itself.  The figure is the mean over the ranks of both runs'
calls; its slope is the growth per rank added from the fewest to the most ranks measured.

Run by hand for the figures (each run under a timeout)::

    python tests/test_checkpoint_scaling.py 4 8 16 [--per-node]

(``--per-node``: the saves write one file per node, ``heat --per-node``.)

The test (``long``: 4, 8 and 16 ranks on a machine of a few cores) asserts a slope of at most
0.25 calls per rank added, and is skipped where strace is missing or may not trace.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
from mpi_helpers import run_mpi

HEAT = ["-m", "hpcbsp.apps.heat", "--n", "2000", "--steps", "4", "--quiet"]
#: strace's classes of calls: those that take a path, and those that take a descriptor.
TRACE = ["strace", "-ff", "-y", "-qq", "-e", "trace=%file,%desc"]


def strace_usable() -> str | None:
    """Why strace cannot trace here (None: it can)."""
    if shutil.which("strace") is None:
        return "strace is not installed"
    probe = subprocess.run(["strace", "-qq", "-e", "trace=none", "true"], capture_output=True, timeout=30)
    return None if probe.returncode == 0 else f"strace cannot trace here: {probe.stderr.decode().strip()}"


def calls_naming(folder: str, trace: str) -> int:
    """The calls in one process's ``trace`` whose text names ``folder`` (or its .tmp, .old)."""
    pattern = re.compile(re.escape(folder) + r"(\.tmp|\.old)?(/|[\">]|$)")
    with open(trace, errors="replace") as fh:
        return sum(1 for line in fh if pattern.search(line) and not line.startswith("execve("))


def per_rank(nprocs: int, work: str, extra: list[str] | None = None) -> float:
    """The mean calls per rank naming the checkpoint folder over a save and a restart on
    ``nprocs`` ranks (in ``work``, an empty folder)."""
    folder = os.path.join(work, "ck")
    total = 0
    for i, args in enumerate((["--every", "4"], ["--restart"])):
        logs = os.path.join(work, f"trace{i}")
        os.makedirs(logs)
        res = run_mpi(nprocs, [*TRACE, "-o", os.path.join(logs, "rank"), sys.executable, *HEAT,
                               "--checkpoint", folder, *args, *(extra or [])],
                      python=False, timeout=120 + 20 * nprocs)
        if res.returncode != 0 or res.timed_out:
            raise RuntimeError(f"heat on {nprocs} ranks failed:\n{res.output}")
        traces = os.listdir(logs)
        if len(traces) < nprocs:
            raise RuntimeError(f"{len(traces)} traces for {nprocs} ranks")
        total += sum(calls_naming(folder, os.path.join(logs, t)) for t in traces)
    return total / nprocs


def measure(counts: list[int], extra: list[str] | None = None) -> dict[int, float]:
    """Calls per rank at each rank count."""
    out = {}
    for p in counts:
        with tempfile.TemporaryDirectory(prefix="ckscale") as work:
            out[p] = per_rank(p, work, extra)
    return out


def slope(figures: dict[int, float]) -> float:
    lo, hi = min(figures), max(figures)
    return (figures[hi] - figures[lo]) / (hi - lo)


@pytest.mark.long
def test_calls_per_rank_grow_by_at_most_a_quarter_per_rank_added():
    why = strace_usable()
    if why:
        pytest.skip(why)
    figures = measure([4, 8, 16])
    print(f"calls naming the checkpoint folder per rank: {figures}; slope {slope(figures):.3f}")
    assert slope(figures) <= 0.25, figures


def main(argv: list[str]) -> int:
    why = strace_usable()
    if why:
        print(why, file=sys.stderr)
        return 2
    counts = [int(a) for a in argv if a != "--per-node"] or [4, 8, 16]
    figures = measure(counts, [a for a in argv if a == "--per-node"])
    for p, f in figures.items():
        print(f"{p:3d} ranks: {f:7.2f} calls naming the checkpoint folder per rank (save + restart)")
    print(f"slope: {slope(figures):.3f} calls per rank added ({min(figures)} to {max(figures)} ranks)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
