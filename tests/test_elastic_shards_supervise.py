"""``hpcbsp supervise`` keeps a sharded parameter server's run going when one of its ranks is
killed, on this machine (issue 46, item 1; tests/test_cluster_supervise_shards.py does it across
the emulated nodes).

tests/programs/shards_supervised.py trains BSP on a sharded server (2 server ranks) for 40
updates, the leader saving the whole state every 0.2 s; run under ``hpcbsp supervise -n N`` with
``--restart``, one rank SIGKILLs itself on the first launch once a checkpoint holds a worker's
gradient (pushed, waiting for the slower worker's; with one worker, any checkpoint): the follower
shard's rank, the leader shard's, or a worker's.  Checked: the supervisor restarts once,
from the checkpoint, and exits 0; the relaunched run says it resumed; its final weights equal,
bit for bit, both an undisturbed run's (plain mpiexec, same settings) and the oracle's: numpy
alone, 40 rounds of ``x -= lr * mean(0.1 x + c_w)`` (the program's ``expected``).  BSP's weights
depend on nothing but the updates and the workers, so a resumed run that lost its held
gradients, restarted from the initial weights or applied an update twice would differ.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import clean_env, program_module, run_mpi

PROGRAM = Path(__file__).parent / "programs" / "shards_supervised.py"
TAG = "[hpcbsp supervise]"
UPDATES = 40

pytestmark = pytest.mark.serial_only


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.int64)


@pytest.mark.parametrize("ranks", [3, 4])
def test_an_undisturbed_sharded_run_ends_with_the_numpy_oracles_weights(tmp_path: Path, ranks: int) -> None:
    out = tmp_path / "calm.npy"
    res = run_mpi(ranks, [str(PROGRAM), "--servers", "2", "--updates", str(UPDATES), "--checkpoint",
                      str(tmp_path / "ck"), "--restart", "--out", str(out)], timeout=120)
    assert not res.timed_out and res.returncode == 0, res.output[-3000:]
    assert f"updates {UPDATES}\n" in res.stdout
    assert np.array_equal(_bits(np.load(out)), _bits(program_module("shards_supervised").expected(UPDATES, ranks - 2)))


@pytest.mark.parametrize("ranks, victim", [(4, "shard:1"), (4, "shard:0"), (3, "worker:0")])
def test_a_killed_rank_of_a_sharded_run_is_relaunched_and_ends_with_the_undisturbed_weights(
        tmp_path: Path, ranks: int, victim: str) -> None:
    ck, out = tmp_path / "ck", tmp_path / "hit.npy"
    cmd = [sys.executable, "-m", "hpcbsp", "supervise", "-n", str(ranks), "--", sys.executable, str(PROGRAM),
           "--servers", "2", "--updates", str(UPDATES), "--checkpoint", str(ck), "--restart", "--out", str(out),
           "--kill", victim]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path,
                         env=clean_env(MPIEXEC_TIMEOUT="100"), stdin=subprocess.DEVNULL)
    said = [line for line in res.stderr.splitlines() if line.startswith(TAG)]
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    restarts = [line for line in said if "restart " in line and " of 3" in line]
    assert len(restarts) == 1, said
    assert "a rank was killed from outside (SIGKILL" in restarts[0], restarts[0]
    assert f"relaunching from checkpoint {ck} at superstep" in restarts[0], restarts[0]
    assert said[-1] == f"{TAG} the job finished (exit 0) after 1 restart", said
    resumed = [line for line in res.stdout.splitlines() if line.startswith(f"updates {UPDATES} (resumed at update")]
    workers = ranks - 2
    assert len(resumed) == 1 and f"held gradients of workers {[0] if workers > 1 else []}" in resumed[0], \
        res.stdout[-2000:]
    assert np.array_equal(_bits(np.load(out)), _bits(program_module("shards_supervised").expected(UPDATES, workers)))
