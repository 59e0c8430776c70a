"""A sharded parameter server across the emulated nodes of ``slurm/local-cluster.sh start --nodes 4``
(as root): where its server ranks sit, and ``hpcbsp supervise`` after a shard's node is lost
(issue 46, item 1).

Placement: tests/programs/shards_supervised.py ``--placement 2,4,6`` prints which world ranks
serve for 2, 4 and 6 servers (:func:`hpcbsp.elastic.shards.placed`, as the trainer places
them), 8 ranks on the 4 nodes, two a node, placed in blocks (ranks 0 and 1 on the first node)
or round robin (ranks 0 and 4), by hydra's mpiexec and by srun (``--ntasks-per-node=2``: without
it, srun's block layout fills the first node's CPUs first, 4, 2, 1 and 1 ranks, where the servers
are ranks 0, 4, 6 and 7, still one a node).  Oracle: the layout the launch
was asked for, hand-written: the servers are the first rank of each node in rank order, on as
many nodes as there are servers, then the lowest ranks left.

Supervise: the same program trains BSP for 100 updates on 2 servers and a worker (``-n 3``, one
rank a node, the fourth node spare; the follower shard on the second node), saving every 0.2 s,
under ``hpcbsp supervise --hosts`` with ``--restart``.  Once a checkpoint exists, the test
SIGKILLs every process of the job on the follower shard's node.  Checked: one restart, naming the
lost node and the three nodes of the relaunch; the relaunch places the shards on the first and
third nodes; it resumed; the supervisor exits 0; no process of the job is left; the final
weights equal, bit for bit, the numpy oracle's (the program's ``expected``;
tests/test_elastic_shards_supervise.py checks the same on one machine, held gradients included).

Without the 4-node cluster (or not as root) the tests skip and say why; under CI they fail
instead (see cluster_helpers).
"""
from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from cluster_helpers import (
    HOSTFILE,
    assert_none_outlived,
    cluster_nodes,
    cluster_required,  # noqa: F401  (the fixture behind unavailable_marks)
    cluster_unavailable,
    no_leftover_shared_memory,  # noqa: F401  (autouse: the killed ranks' /dev/shm files go)
    supervise_with_a_lost_node,
    unavailable_marks,
)
from mpi_helpers import MPIEXEC, clean_env, hydra_only, program_module

from hpcbsp.util.jobcommand import job_command

PYTHON = sys.executable
PROGRAM = Path(__file__).parent / "programs" / "shards_supervised.py"
NODES = cluster_nodes()
UPDATES = 100

pytestmark = [pytest.mark.slurm, *unavailable_marks(cluster_unavailable(4, mpiexec=True, srun=True))]

#: Per layout: the node index (0-based) of each of the 8 ranks, and the servers expected for 2, 4, 6.
LAYOUTS = {
    "block": ([0, 0, 1, 1, 2, 2, 3, 3], {2: [0, 2], 4: [0, 2, 4, 6], 6: [0, 2, 4, 6, 1, 3]}),
    "cyclic": ([0, 1, 2, 3, 0, 1, 2, 3], {2: [0, 1], 4: [0, 1, 2, 3], 6: [0, 1, 2, 3, 4, 5]}),
}


def _env(tag: str = "") -> dict[str, str]:
    return clean_env(slurm=True, transport=True, PYTHONUNBUFFERED="1", MPIEXEC_TIMEOUT="150",
                     HPCBSP_FAULT_TAG=tag or uuid.uuid4().hex, HPCBSP_SYNC_TIMEOUT="", HPCBSP_WAIT="yield")


def _placement_command(launch: str, layout: str) -> list[str]:
    """8 ranks on the first 4 nodes, two a node, in ``layout``'s order."""
    if launch == "srun":
        return ["srun", "-N", "4", "-n", "8", "--ntasks-per-node=2", "--mpi=pmi2", "--time=3",
                f"--nodelist={','.join(NODES[:4])}", f"--distribution={layout}"]
    assert MPIEXEC is not None
    cmd = job_command(MPIEXEC, 4, hosts=str(HOSTFILE))  # (hydra: -f FILE -ppn 1 -launcher rsh ... -n 4)
    cmd[cmd.index("-ppn") + 1] = "2" if layout == "block" else "1"  # (-ppn 1 -n 8: hydra wraps round the hosts)
    cmd[cmd.index("-n") + 1] = "8"
    return cmd


@hydra_only("the placement options are hydra's (-ppn), and srun --mpi=pmi2 is the cluster's MPICH path")
@pytest.mark.parametrize("launch", ["mpiexec", "srun"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_servers_sit_one_per_node_as_far_as_there_are_nodes(tmp_path: Path, launch: str, layout: str) -> None:
    res = subprocess.run([*_placement_command(launch, layout), PYTHON, str(PROGRAM), "--placement", "2,4,6"],
                         capture_output=True, text=True, timeout=180, env=_env(), cwd=tmp_path,
                         stdin=subprocess.DEVNULL)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    nodes, expected = LAYOUTS[layout]
    assert f"hosts: {','.join(NODES[n] for n in nodes)}\n" in res.stdout, res.stdout  # (placed as asked)
    for servers, ranks in expected.items():
        hosts = ",".join(NODES[nodes[r]] for r in ranks)
        assert f"servers {servers}: ranks {','.join(map(str, ranks))} on {hosts}\n" in res.stdout, res.stdout


def test_a_lost_shard_node_is_replaced_and_the_run_ends_with_the_oracles_weights(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex
    ck, out = tmp_path / "ck", tmp_path / "weights.npy"
    cmd = [PYTHON, "-m", "hpcbsp", "supervise", "--hosts", str(HOSTFILE), "-n", "3", "--", PYTHON, str(PROGRAM),
           "--servers", "2", "--updates", str(UPDATES), "--pace", "0.02", "--checkpoint", str(ck), "--restart",
           "--out", str(out)]
    lost = NODES[1]  # rank 1's: the follower shard's (rank 0, the leader, is on the first node)
    lines, killed_at, code = supervise_with_a_lost_node(cmd, _env(tag), tmp_path, ready=(tmp_path / "ck.held").exists,
                                                        what="the training wrote no checkpoint", node=lost, tag=tag,
                                                        end_within=120)
    assert killed_at is not None
    text = lines.text()
    assert code == 0, text[-4000:]
    assert f"shard 1: rank 1 on {lost}" in text, text[-4000:]  # (where the kill hit, on the first launch)
    restart = lines.first("[hpcbsp supervise] restart 1 of 3")
    assert restart is not None, text[-4000:]
    others = [n for n in NODES[:4] if n != lost]
    assert f"lost node {lost}" in restart[1] and f"relaunching 3 ranks on {','.join(others)}" in restart[1], restart[1]
    assert "[hpcbsp supervise] restart 2" not in text, text[-4000:]
    after = [line for t, line in lines.lines if t > restart[0]]
    assert f"shard 0: rank 0 on {others[0]}" in after and f"shard 1: rank 1 on {others[1]}" in after, after
    assert any(line.startswith(f"updates {UPDATES} (resumed at update") for line in after), text[-4000:]
    expected = program_module("shards_supervised").expected(UPDATES, 1)
    assert np.array_equal(np.load(out).view(np.int64), expected.view(np.int64))
    assert_none_outlived(tag, NODES[:4])
    relaunched = lines.first(f"shard 1: rank 1 on {others[1]}")
    assert relaunched is not None
    print(f"lost {lost}: restart line {restart[0] - killed_at:.1f} s and the relaunched job's first line "
          f"{relaunched[0] - killed_at:.1f} s after the kill")
