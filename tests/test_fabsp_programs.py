"""Whole FA-BSP programs under mpiexec (subprocesses, each with a timeout so a hang fails).

A handler that raises must end the job with that rank's traceback, wherever the other ranks are;
the apps and the benchmark must run, check themselves and report; bad options exit 2.
"""
from __future__ import annotations

import os
import re
import time

import pytest
from mpi_helpers import run_mpi

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")


@pytest.mark.parametrize("where", ["quiesce", "control", "compute"])
def test_handler_exception_ends_the_job_with_its_traceback(where):
    t0 = time.monotonic()
    res = run_mpi(3, [os.path.join(PROGRAMS, "fabsp_handler_fails.py"), where], timeout=60,
                  env={"HPCBSP_ABORT_GRACE": "10"})
    elapsed = time.monotonic() - t0
    assert not res.timed_out, res.output
    assert res.returncode != 0
    assert res.crash is None, res.output
    # Well within the abort grace: the ranks learn of the failure, nobody waits for the grace.
    assert elapsed < 9 + 5, (elapsed, res.output)
    assert res.stderr.count("Traceback (most recent call last)") == 1, res.stderr
    assert f"[rank 1] ValueError: handler on rank one got hop 7 ({where})" in res.stderr
    assert "aborting the job" not in res.stderr
    assert "died without a report" not in res.output
    assert "UNREACHABLE" not in res.stdout


@pytest.mark.parametrize("app, args, unit", [
    ("histogram", ["-n", "20000", "-T", "100"], "updates"),  # -n: the old spelling of --n
    ("index_gather", ["--n", "20000", "-T", "100", "--buffer", "64"], "reads"),
    ("triangles", ["--graph", "rmat", "--scale", "9"], "queries"),
    ("bfs", ["--n", "2000", "--mode", "bsp"], "records"),
    ("toposort", ["--n", "3000"], "rows"),
])
def test_apps_run_check_and_report(app, args, unit):
    res = run_mpi(2, ["-m", f"hpcbsp.apps.irregular.{app}", *args], timeout=120)
    assert res.returncode == 0, res.output
    assert "check against the serial oracle: OK" in res.stdout
    assert f"{unit}/s per rank" in res.stdout and "ledger:" in res.stdout


def test_a_handler_sending_to_a_done_mailbox_ends_the_job_with_the_error():
    res = run_mpi(3, [os.path.join(PROGRAMS, "fabsp_send_to_done.py")], timeout=60)
    assert not res.timed_out and res.returncode != 0 and res.crash is None, res.output
    assert "[rank 1] hpcbsp.runtime.errors.UsageError: rank 1: table.send: the mailbox is done " \
           "for this superstep" in res.stderr, res.stderr
    assert res.stderr.count("Traceback (most recent call last)") == 1, res.stderr
    assert "UNREACHABLE" not in res.stdout


@pytest.mark.parametrize("nprocs, routing", [(4, "2d"), (9, "2d"), (12, "3d")])
def test_routed_mailboxes_at_more_ranks(nprocs, routing):
    """Oversubscribed (up to 12 ranks on this machine's cores): correctness, not speed."""
    res = run_mpi(nprocs, [os.path.join(PROGRAMS, "fabsp_routing.py"), routing], timeout=240,
                  env={"HPCBSP_WAIT": "yield"})
    assert res.returncode == 0 and not res.timed_out, res.output
    ok = re.findall(r"rank (\d+) ok peers=", res.stdout)  # lines of ranks may interleave
    assert sorted(map(int, ok)) == list(range(nprocs)), res.output


def test_index_gather_app_routed_through_a_grid_of_nine():
    res = run_mpi(9, ["-m", "hpcbsp.apps.irregular.index_gather", "--n", "3000", "-T", "50",
                      "--routing", "2d", "--buffer", "64"], timeout=240, env={"HPCBSP_WAIT": "yield"})
    assert res.returncode == 0, res.output
    assert "check against the serial oracle: OK" in res.stdout


def test_benchmark_link_section_counts_the_bytes_per_update():
    """Section 4 on one host: the payload bytes per histogram update it prints, FA-BSP and BSP,
    against an oracle computed here from the updates themselves (8 bytes per update whose
    owner is another rank, over all updates of both ranks: the ledger's counting rule); on one
    host it says that no link was crossed."""
    import numpy as np

    from hpcbsp.apps.irregular.histogram import updates_of

    res = run_mpi(2, ["-m", "hpcbsp.bench", "fabsp", "--quick", "--sections", "link",
                      "--link-rate", "100mbit"], timeout=120)
    assert res.returncode == 0, res.output
    out = res.stdout
    n = 200_000  # --quick (table 10,000 per rank, seed 0: the defaults)
    remote = sum(int(np.count_nonzero(updates_of(r, 2, n, 10_000, 0)[0] != r)) for r in (0, 1))
    want = 8 * remote / (2 * n)
    for mode in ("fabsp", "bsp"):
        line = re.search(rf"histogram +{mode} .*payload +([0-9.]+) B/update", out)
        assert line is not None, out
        assert float(line.group(1)) == pytest.approx(want, abs=0.005), (want, line.group(0))
    assert "100 Mbit/s = 12.50 MB/s each way" in out, out
    assert "index_gather: FA-BSP / BSP =" in out and "wire: one host, no link crossed" in out, out
    assert "hidden fraction" not in out and "CHECK FAILED" not in out, out


def test_app_bad_option_under_mpiexec_is_one_line_and_status_2():
    res = run_mpi(2, ["-m", "hpcbsp.apps.irregular.histogram", "--table", "0"], timeout=60)
    assert res.returncode == 2
    lines = res.program_stderr.strip().splitlines()  # (Open MPI's mpiexec adds a block of its own)
    assert len(lines) == 1 and "--table" in lines[0] and "positive integer" in lines[0], res.stderr


def test_benchmark_quick_run():
    res = run_mpi(2, ["-m", "hpcbsp.bench", "fabsp", "--quick"], timeout=120)
    assert res.returncode == 0, res.output
    out = res.stdout
    for needle in ("histogram: FA-BSP / BSP =", "index_gather: FA-BSP / BSP =",
                   "FA-BSP / naive =", "hidden fraction of communication",
                   "histogram: FA-BSP / bale tuned C (151.6 M", "index_gather: FA-BSP / bale tuned C (67.9 M",
                   "(issued from C)", "rate over direct (medians): 2d "):
        assert needle in out, out
    assert "CHECK FAILED" not in out
    # The overlap run's compute sized to the communication, the hideable fraction (issue 33).
    assert "(as long as the communication: --work-rounds 0)" in out and "(of the hideable" in out, out


@pytest.mark.parametrize("ranks, ratio_2d", [(2, 1.0), (3, 3.0)])
def test_benchmark_memory_section_says_what_the_relaying_rank_moves(ranks, ratio_2d):
    """The memory section's bytes of the busiest rank (its ledger, in + out) under 2d routing
    over direct's.  Oracle, by hand: at 2 ranks every route is one hop and records travel bare,
    so 1.0x; at 3 ranks rank 0 of the 2 x 2 grid sends and receives its own 2/3 n remote records
    and relays 1 -> 2 and 2 -> 1 (1/3 n each way), at 12 B instead of 8: (4/3 n * 12) / (2/3 n * 8)
    = 3.0x (random keys: within a few per cent)."""
    res = run_mpi(ranks, ["-m", "hpcbsp.bench", "fabsp", "--sections", "memory", "--updates", "100000",
                          "--repeat", "1"], timeout=180)
    assert res.returncode == 0, res.output
    found = re.search(r"2d: updates/s/rank .*? the busiest rank moved ([0-9.,]+) MB in \+ out "
                      r"\(([0-9.]+)x direct's busiest\)", res.stdout)
    assert found, res.output
    assert float(found.group(2)) == pytest.approx(ratio_2d, rel=0.05), found.group(0)
    direct = re.search(r"direct: updates/s/rank .*? moved ([0-9.,]+) MB", res.stdout)
    assert direct and float(direct.group(1)) == pytest.approx(2 * (ranks - 1) / ranks * 100_000 * 8 / 1e6, rel=0.05)
