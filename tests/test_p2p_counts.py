"""The point-to-point MPI calls of the collectives and of a timed sync, counted by a PMPI shim
(``tests/programs/p2pcount.c`` under ``LD_PRELOAD``): counts, not times, so the load of the
machine cannot change them.  ``reduce_scatter`` and ``allgather_blocks`` are one MPI collective
each (no point-to-point call at all, where the rings made ``p - 1`` ``Sendrecv`` per call), and
an empty sync with a timeout makes none either (where every rank announced its arrival to every
other: ``p - 1`` sends and receives per rank per superstep).  Also: ``allreduce(exact=True)``
gives the same bits at 1, 2, 3 and 5 ranks, the correctly rounded sum (``math.fsum``)."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import MPIEXEC, run_mpi

PROGRAMS = Path(__file__).parent / "programs"
K = 8  # supersteps counted


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> str:
    mpicc = shutil.which("mpicc", path=os.path.dirname(MPIEXEC or "")) or shutil.which("mpicc")
    if mpicc is None:
        pytest.skip("no mpicc to build the counting shim with")
    out = tmp_path_factory.mktemp("shim") / "p2pcount.so"
    subprocess.run([mpicc, "-shared", "-fPIC", "-O1", "-o", str(out), str(PROGRAMS / "p2pcount.c")],
                   check=True, timeout=120)
    return str(out)


def _counts(shim: str, nprocs: int, what: str) -> dict:
    res = run_mpi(nprocs, [str(PROGRAMS / "count_p2p.py"), what, str(K)], timeout=120,
                  env={"LD_PRELOAD": shim})
    assert res.returncode == 0 and not res.timed_out, res.output
    got = json.loads(res.stdout.strip().splitlines()[-1])
    assert got["p"] == nprocs and None not in got["sends"], res.output  # the shim was loaded
    return got


@pytest.mark.serial_only
def test_the_shim_counts_what_a_program_sends(shim: str) -> None:
    """The shim itself, against a hand count: rank 0 sends each other rank 3 messages."""
    code = ("import ctypes, json\nfrom mpi4py import MPI\nimport numpy as np\n"
            "c = MPI.COMM_WORLD; b = np.zeros(1)\n"
            "for _ in range(3):\n"
            "    if c.rank == 0:\n"
            "        [c.Send(b, q) for q in range(1, c.size)]\n"
            "    else:\n"
            "        c.Recv(b, 0)\n"
            "lib = ctypes.CDLL(None); lib.hpcbsp_p2p_sends.restype = ctypes.c_long\n"
            "lib.hpcbsp_p2p_recvs.restype = ctypes.c_long\n"
            "got = c.gather((lib.hpcbsp_p2p_sends(), lib.hpcbsp_p2p_recvs()))\n"
            "print(json.dumps(got)) if c.rank == 0 else None\n")
    res = run_mpi(3, ["-c", code], timeout=120, env={"LD_PRELOAD": shim})
    assert res.returncode == 0, res.output
    assert json.loads(res.stdout.strip().splitlines()[-1]) == [[6, 0], [0, 3], [0, 3]]


@pytest.mark.serial_only
@pytest.mark.parametrize("nprocs", [2, 3, 5])  # 5: oversubscribed here
def test_reduce_scatter_and_allgather_blocks_make_no_point_to_point_call(shim: str, nprocs: int) -> None:
    got = _counts(shim, nprocs, "collectives")
    assert got["sends"] == [0] * nprocs and got["recvs"] == [0] * nprocs, got


@pytest.mark.serial_only
@pytest.mark.parametrize("nprocs", [2, 3, 5])  # 5: oversubscribed here
def test_an_empty_sync_with_a_timeout_sends_no_message_whatever_the_rank_count(shim: str, nprocs: int) -> None:
    got = _counts(shim, nprocs, "timed-sync")
    assert got["sends"] == [0] * nprocs and got["recvs"] == [0] * nprocs, got


@pytest.mark.serial_only
@pytest.mark.parametrize("p, late", [(5, (1, 3)), (3, (0,))])  # 5: oversubscribed here
def test_a_timeout_names_every_late_rank_after_a_roll_call_of_o_p_messages(
        shim: str, p: int, late: tuple[int, ...]) -> None:
    """Every rank that times out names exactly the late ranks, with their host.  Six timed
    supersteps before made no point-to-point call.  Giving up: the lowest rank that came, first
    in line, calls the roll (p - 1 sends, a verdict to each other rank that came); a rank makes
    at most one roll call, one verdict per rank and one answer per roll call: at most 3 (p - 1)
    sends and receives each (those that got the first call in time send 1 and receive 2: which
    ones depends on the machine's load, so it is not asserted)."""
    t0 = time.monotonic()
    res = run_mpi(p, [str(PROGRAMS / "late_ranks.py"), ",".join(map(str, late))], timeout=90,
                  env={"LD_PRELOAD": shim, "HPCBSP_SYNC_TIMEOUT": "2"})
    assert not res.timed_out and res.returncode != 0 and time.monotonic() - t0 < 45, res.output
    host = socket.gethostname()
    named = re.findall(r"ranks not arrived: (.*)\); they are", res.stderr)
    assert named and all(n == ", ".join(f"{r} (on {host})" for r in late) for n in named), res.output
    lines = {d["rank"]: d for d in (json.loads(line) for line in res.stdout.splitlines()
                                    if line.startswith("{"))}
    first = min(set(range(p)) - set(late))
    assert first in lines and set(lines) <= set(range(p)) - set(late), res.output
    for d in lines.values():
        assert d["before"] == [0, 0], d
        sends, recvs = d["roll_call"]
        assert sends <= 3 * (p - 1) and recvs <= 3 * (p - 1), d
    assert lines[first]["roll_call"][0] >= p - 1, lines[first]  # the first in line called the roll


@pytest.mark.serial_only
def test_exact_allreduce_gives_the_same_bits_at_1_2_3_and_5_ranks() -> None:
    """Oracle: ``math.fsum`` of the same 20 000 values (a wide range of magnitudes and signs,
    split over the ranks in blocks), which is correctly rounded."""
    values = _exact_values()
    want = math.fsum(values.tolist()).hex()
    for nprocs in (1, 2, 3, 5):
        res = run_mpi(nprocs, [str(PROGRAMS / "exact_bits.py")], timeout=120)
        assert res.returncode == 0 and not res.timed_out, res.output
        assert res.stdout.split() == [want], (nprocs, res.output)
    assert float.fromhex(want) != float(np.sum(values))  # numpy's own sum rounds otherwise


def _exact_values() -> np.ndarray:
    import importlib.util
    spec = importlib.util.spec_from_file_location("exact_bits", PROGRAMS / "exact_bits.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.values()
