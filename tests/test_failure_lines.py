"""The runtime's failure lines (``runtime/failure/lines.py``): written and read back by one module,
and a failure of many ranks said in one short line, once for the job.

Oracles: each writer's line read back by ``parse`` gives the values it was written with; the
lines the node watcher and the detector print today (held to their sources' fixed text) parse
to the node and kind ``hpcbsp supervise`` needs; an uncaught divergence of a real job under
``mpiexec -n 4`` is printed by one rank, with its groups' ranks as ranges.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from mpi_helpers import run_mpi

from hpcbsp.runtime.failure import lines

REPO = Path(__file__).resolve().parents[1]


def test_each_line_is_read_back_as_written():
    said = lines.parse(lines.node_silent("n7", [4, 5, 6, 9], 11.4, 10))
    assert said is not None and (said.kind, said.node, said.ends_job) == ("node silent", "n7", True)
    assert "(ranks 4-6, 9)" in lines.node_silent("n7", [4, 5, 6, 9], 11.4, 10)
    said = lines.parse(lines.rank_stopped(2, 4, 123, "n3", 10.2, 10))
    assert said is not None and (said.kind, said.rank, said.size, said.node, said.ends_job) == (
        "rank stopped", 2, 4, "n3", True)
    said = lines.parse(lines.rank_died(1, 2, 9, "vm", "killed by SIGKILL (out of memory, or a kill from outside)"))
    assert said is not None and (said.kind, said.node, said.killed, said.crashed, said.ends_job) == (
        "died", "vm", True, False, False)
    said = lines.parse(lines.rank_died(0, 2, 9, "vm", "crashed with SIGSEGV"))
    assert said is not None and said.crashed and not said.killed
    said = lines.parse(lines.failed_header(3, 8))
    assert said is not None and (said.kind, said.rank, said.size) == ("failed", 3, 8)
    said = lines.parse(lines.error("--n must be at least 3"))
    assert said is not None and (said.kind, said.text) == ("error", "--n must be at least 3")
    said = lines.parse(lines.rank_says(0, 2, "stopping because rank 1 failed at superstep 1 with ValueError: boom"))
    assert said is not None and (said.kind, said.rank, said.nodes) == ("said", 0, ())
    said = lines.parse(lines.aborted(1, 4, 2, "the input is inconsistent"))
    assert said is not None and (said.kind, said.rank, said.text) == ("aborted", 1, "the input is inconsistent")
    assert lines.aborted(1, 4, 2, "x") == "[hpcbsp] rank 1/4 aborted the program at superstep 2: x"
    assert lines.parse("[heat] step 3/10 (30%, 1.0 s elapsed)") is None and lines.parse("") is None


def test_timeouts_give_the_hosts_of_the_ranks_they_waited_for():
    said = lines.parse(lines.rank_says(0, 4, "sync at superstep 7 timed out waiting for the other ranks (ranks not "
                                             "arrived: 2 (on n3), 3 (on n4), 1 (on n3)); they are stuck"))
    assert said is not None and (said.kind, said.nodes) == ("timeout", ("n3", "n4"))
    said = lines.parse("[hpcbsp] rank 1/4: the data exchange of superstep 7 timed out after 8 s waiting for rank 2 "
                       "(on n3); it stopped inside the exchange")
    assert said is not None and (said.kind, said.nodes) == ("timeout", ("n3",))


def test_a_timeout_of_thousands_of_ranks_names_them_by_host_in_one_short_line():
    """4,096 ranks on 512 hosts of 8, all but rank 17 late.  Oracle: the ranks written for each
    host, read back from their ranges by brute force, are exactly the late ranks on that host."""
    hosts = [f"node{r // 8}" for r in range(4096)]
    late = [r for r in range(4096) if r != 17]
    text = lines.ranks_on_hosts(late, hosts)
    assert len(text) < 400 and text.endswith(f"and {4095 - 63} more ranks on {512 - 8} hosts")
    shown = re.findall(r"(\d[\d, -]*) \(on ([^)]+)\)", text)
    seen: list[int] = []
    for spec, host in shown:
        numbers = [n for run in spec.split(", ") for n in
                   (range(int(run.split("-")[0]), int(run.split("-")[1]) + 1) if "-" in run else [int(run)])]
        assert numbers == [r for r in late if hosts[r] == host], (spec, host)
        seen += numbers
    assert len(shown) == lines.SHOWN_HOSTS and len(seen) == 63
    said = lines.parse(lines.rank_says(0, 4096, f"sync at superstep 3 timed out waiting for the other ranks "
                                                f"(ranks not arrived: {text}); they are stuck"))
    assert said is not None and said.kind == "timeout" and said.nodes == tuple(f"node{k}" for k in range(8))
    # a few ranks are still named one by one, with their hosts
    assert lines.ranks_on_hosts([3, 1], hosts) == "3 (on node0), 1 (on node0)"


@pytest.mark.parametrize("source, writer", [
    ("hpcbsp/runtime/failure/detector.py", "lines.node_silent("),
    ("hpcbsp/runtime/failure/detector.py", "lines.rank_stopped("),
    ("hpcbsp/runtime/failure/deaths.py", "lines.rank_died("),
])
def test_the_watcher_writes_its_lines_here(source, writer):
    """The node watcher and its detector write their failure lines through this module (which
    the test above reads back): no copy of a line's words elsewhere."""
    text = (REPO / source).read_text()
    assert writer in text and "[hpcbsp]" not in text.split('"""', 2)[2], f"{source}: a line written inline"


def test_a_divergence_of_thousands_of_ranks_is_one_short_line():
    text = lines.diverged({"sync(label=None) at superstep 3": [r for r in range(4096) if r != 17],
                           "coarray(n=2) at superstep 3": [17]})
    assert text.startswith("the ranks of this BSP program diverged: ranks 0-4095 except 17: sync(label=None) "
                           "at superstep 3; rank 17: coarray(n=2) at superstep 3. ")
    assert len(text) < 400
    many = lines.diverged({f"call {r}": [r] for r in range(4096)})  # every rank elsewhere
    assert len(many) < 600 and "ranks 6-4095: 4090 other calls" in many
    peers = lines.peers_failed([(r, f"failed with E{r}") for r in range(4096)])
    assert len(peers) < 400 and peers.endswith("; and ranks 4-4095 failed too")


DIVERGE = """
import hpcbsp
with hpcbsp.BSP() as bsp:
    if bsp.pid == 2:
        bsp.coarray(2)
    else:
        bsp.sync()
"""


@pytest.mark.timeout(150)
def test_an_uncaught_divergence_is_printed_once_for_the_job():
    result = run_mpi(4, ["-c", DIVERGE], timeout=120)
    assert not result.timed_out and result.returncode != 0, result.output
    err = result.program_stderr
    assert err.count("the ranks of this BSP program diverged") == 1, err
    assert "ranks 0-1, 3: sync(label=None) at superstep 0; rank 2: coarray(n=2" in err, err
    assert "[hpcbsp] rank 0/4 failed:" in err and "rank 1/4 failed" not in err, err


def test_the_node_watcher_can_load_it_by_path():
    # (python -I -S nodewatch.py puts its folder and util/ on sys.path: the standard library only)
    import subprocess
    import sys

    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import lines; "
            "print(lines.node_silent('n7', [1, 2, 3, 9], 12, 10)); print(lines.parse(lines.rank_died(1, 2, 3, 'h', 'x')).kind)")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(REPO / "hpcbsp/runtime/failure"),
                          str(REPO / "hpcbsp/util")], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[hpcbsp] node n7 (ranks 1-3, 9) has not been heard from for 12 s: it died, "
                                       "froze or lost its link; ending the job (HPCBSP_HEARTBEAT_TIMEOUT=10)", "died"]
