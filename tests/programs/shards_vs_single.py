"""Sharded parameter server against the single server, for every policy (run by
tests/test_elastic_shards.py under ``mpiexec -n 5``).

For S = 1, 2, 3 server ranks and 2 workers (the other ranks sit out), every policy trains a
deterministic "model": worker w's gradient of weights x is ``0.1 x + c_w`` (c_w fixed random
values), so a run is fixed by the order and times of its pushes.  The oracle replays the run's
logged pushes (worker, time) into a fresh single-server Coordinator with a fresh policy of the
same kind, each worker's gradient computed on the weights it was last released with: its final
weights must equal the sharded run's, bit for bit, and so must its updates count.  BSP's result
does not depend on the times at all: its weights must also be the same for S = 1, 2 and 3.

Prints one line per (policy, S) and ``ALL OK`` at the end on rank 0.
"""
from __future__ import annotations

import sys
from functools import partial

import numpy as np
from mpi4py import MPI

from hpcbsp.elastic.coordinator import Coordinator
from hpcbsp.elastic.policies import PolicyOptions, make_policy
from hpcbsp.elastic.server import serve
from hpcbsp.elastic.worker import work

P = 150_001  # float64: 1.2 MB, two reply pieces for one server
WORKERS = 2
UPDATES = 10
LR = 0.05
OPTIONS = PolicyOptions(R=3, s=1, s_lower=1, s_upper=3, backup=1)
POLICIES = ("bsp", "asp", "ssp", "dssp", "backup", "elastic")


def offsets(w: int) -> np.ndarray:
    return np.random.default_rng(100 + w).standard_normal(P)


def gradient(w: int, x: np.ndarray) -> np.ndarray:
    return 0.1 * x + offsets(w)


def pace(w: int, start: float) -> float:
    """Worker w's iteration time: 2 ms, 6 ms, ... (so that the workers' pushes interleave)."""
    return 0.002 * (1 + 2 * w)


def oracle(policy: str, pushes: list[tuple[int, float]], w0: np.ndarray) -> tuple[np.ndarray, int]:
    coord = Coordinator(make_policy(policy, OPTIONS), WORKERS, w0, LR, 0.0, max_updates=UPDATES)
    released = [w0.copy() for _ in range(WORKERS)]
    assert coord.weights is not None
    for w, t in pushes:
        grad = None if coord.stopping else gradient(w, released[w])
        out = coord.push(w, grad, t)
        for r in out.release:
            released[r] = coord.weights.copy()
    return coord.weights, coord.version


def main() -> int:
    world = MPI.COMM_WORLD
    w0 = np.linspace(-1.0, 1.0, P)
    bsp_weights: dict[int, np.ndarray] = {}
    ok = True
    for servers in (1, 2, 3):
        size = servers + WORKERS
        comm = world.Split(0 if world.Get_rank() < size else MPI.UNDEFINED, world.Get_rank())
        if comm == MPI.COMM_NULL:
            continue
        me = comm.Get_rank()
        for policy in POLICIES:
            if me < servers:
                res = serve(comm, make_policy(policy, OPTIONS), w0, LR, max_updates=UPDATES, timeout=60,
                            wait="yield", servers=servers)
            else:
                w = me - servers
                work(comm, partial(gradient, w), P, timeout=60, wait="yield", servers=servers,
                     iteration_time=partial(pace, w))
                res = None
            if me == 0:
                assert res is not None
                expect, version = oracle(policy, list(res.log.push_times), w0)
                same = bool(np.array_equal(res.weights.view(np.int64), expect.view(np.int64)))
                ok &= same and version == res.log.updates
                if policy == "bsp":
                    bsp_weights[servers] = res.weights
                print(f"{policy} servers={servers}: updates {res.log.updates} (oracle {version}), "
                      f"weights {'identical' if same else 'DIFFER'} to the single-server replay", flush=True)
        comm.Free()
    if world.Get_rank() == 0:
        same_bsp = all(np.array_equal(bsp_weights[1], bsp_weights[s]) for s in (2, 3))
        print(f"bsp: weights of 1, 2 and 3 servers {'identical' if same_bsp else 'DIFFER'}")
        ok &= same_bsp
        print("ALL OK" if ok else "FAILED", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
