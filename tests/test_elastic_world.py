"""A training world (:func:`hpcbsp.elastic.launch_world`): its ranks, its communicator and its
timeout, and that it lives and ends on the runtime's lifecycle.

Oracles: MPI's own view of the job (``MPI.COMM_WORLD``, ``Comm.Compare``), the arguments and the
environment given, and for failures the rules of :mod:`hpcbsp.runtime.api.runner` (the failing rank
named, every rank stopped, a timeout reported in one line).

    mpiexec -n 2 python -m pytest -q --only-mpi tests/test_elastic_world.py   (and -n 3)
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from mpi_helpers import run_mpi


@pytest.mark.mpi(min_size=2)
def test_every_rank_gets_its_role_and_a_private_copy_of_the_communicator() -> None:
    from mpi4py import MPI

    from hpcbsp.elastic import World, launch_world

    seen: list[World] = []

    def body(world: World, tag: str) -> tuple[str, int]:
        seen.append(world)
        assert MPI.Comm.Compare(world.comm, MPI.COMM_WORLD) == MPI.CONGRUENT  # same ranks, other context
        assert world.comm.Get_rank() == world.bsp.pid == MPI.COMM_WORLD.Get_rank()
        # what one rank sends on the world's communicator arrives there, not on COMM_WORLD
        got = world.comm.allreduce(world.rank + 1)
        return tag, got

    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    assert launch_world(body, "x") == ("x", size * (size + 1) // 2)
    world = seen[0]
    assert (world.rank, world.size, world.n_workers, world.is_server) == (rank, size, size - 1, rank == 0)
    assert world.comm == MPI.COMM_NULL  # freed with the context
    assert world.bsp.extension.state == "closed"


@pytest.mark.mpi(min_size=2)
def test_the_timeout_is_the_argument_else_the_environment_else_the_default(monkeypatch) -> None:
    from hpcbsp.elastic import launch_world
    from hpcbsp.elastic.world import DEFAULT_TIMEOUT

    def timeout(world):
        return world.timeout

    monkeypatch.delenv("HPCBSP_SYNC_TIMEOUT", raising=False)
    assert launch_world(timeout) == DEFAULT_TIMEOUT == 60.0
    assert launch_world(timeout, timeout=2.5) == 2.5
    monkeypatch.setenv("HPCBSP_SYNC_TIMEOUT", "7")  # (every rank sets it alike)
    assert launch_world(timeout) == 7.0
    assert launch_world(timeout, timeout=3.0) == 3.0


@pytest.mark.serial_only
def test_a_world_of_one_rank_is_refused_before_any_context_is_made() -> None:
    from hpcbsp.elastic import launch_world
    from hpcbsp.elastic.world import WorldTooSmall

    called = []
    with pytest.raises(WorldTooSmall, match="at least 2 ranks.*this job has 1") as info:
        launch_world(called.append)
    assert (info.value.size, info.value.needed, called) == (1, 2, [])
    assert launch_world(lambda world: world.n_workers, min_ranks=1) == 0


SCRIPT = '''
import sys, time
import numpy as np
from hpcbsp.elastic import launch_world
from hpcbsp.elastic.policies import make_policy
from hpcbsp.elastic.server import serve
from hpcbsp.elastic.worker import work

def body(world, case):
    if world.is_server:
        serve(world.comm, make_policy("asp"), np.zeros(8), 0.1, duration=600.0, timeout=world.timeout)
    elif case == "fail" and world.rank == world.size - 1:
        def grad(w):
            raise RuntimeError("boom in the gradient")
        work(world.comm, grad, 8, timeout=world.timeout)
    elif case == "fail":
        work(world.comm, lambda w: np.ones(8), 8, iteration_time=lambda t: 0.01, timeout=world.timeout)
    else:  # "silent": the workers' first gradient takes too long; the server's wait times out
        work(world.comm, lambda w: time.sleep(8) or np.ones(8), 8, timeout=world.timeout)  # > the 2 s timeout

launch_world(body, sys.argv[1])
print("not reached", flush=True)
'''


@pytest.mark.serial_only
@pytest.mark.parametrize("n", [2, 3])
def test_a_rank_failing_inside_the_server_loop_is_named_and_every_rank_stops(tmp_path: Path, n: int) -> None:
    script = tmp_path / "world_fail.py"
    script.write_text(SCRIPT)
    tic = time.monotonic()
    # (Messages: with the weights in a shared window, a failed worker's release of the window
    # waits for the server's next timeout, see hpcbsp.elastic.transport.)
    res = run_mpi(n, [str(script), "fail"], timeout=90,
                  env={"HPCBSP_ABORT_GRACE": "2", "HPCBSP_PS_TRANSPORT": "messages"})
    took = time.monotonic() - tic
    assert not res.timed_out and res.returncode != 0, res.output
    # The server would serve for 600 s and wait 60 s for a push: the failure ended the job.
    assert took < 45, (took, res.output)
    assert f"rank {n - 1}/{n}" in res.stderr and "RuntimeError: boom in the gradient" in res.stderr
    assert "not reached" not in res.stdout


@pytest.mark.serial_only
def test_a_wait_longer_than_hpcbsp_sync_timeout_is_one_line_naming_the_rank(tmp_path: Path) -> None:
    script = tmp_path / "world_timeout.py"
    script.write_text(SCRIPT)
    res = run_mpi(2, [str(script), "silent"], timeout=90,
                  env={"HPCBSP_SYNC_TIMEOUT": "2", "HPCBSP_ABORT_GRACE": "2"})
    assert not res.timed_out and res.returncode != 0, res.output
    lines = [ln for ln in res.stderr.splitlines() if "rank 0/2" in ln]
    assert len(lines) == 1 and "parameter server: no push from any worker within the timeout" in lines[0], \
        res.stderr
    assert "Traceback" not in res.stderr and "not reached" not in res.stdout
