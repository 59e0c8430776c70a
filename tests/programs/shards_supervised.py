"""A deterministic sharded training run, for ``hpcbsp supervise`` (run by
tests/test_elastic_shards_supervise.py on this machine and tests/test_cluster_supervise_shards.py
across the emulated nodes).

    python shards_supervised.py --servers S --updates N --checkpoint DIR --restart --out W.npy
        [--kill shard:K | worker:K] [--pace SECONDS] [--every SECONDS]
    python shards_supervised.py --placement S,S,...

The job's ranks form one training world (:func:`hpcbsp.elastic.world.launch_world`): S server
ranks, placed as the trainer places them (:func:`hpcbsp.elastic.shards.placed`), and the other
ranks work.  BSP, ``N`` updates; worker w's gradient of the weights x is ``0.1 x + c_w`` (c_w
fixed random values, float64, P = :data:`P`): the weights after N updates depend on nothing but
N and the number of workers, so a run that is killed and resumed from its checkpoint must end
with the bits of an undisturbed one.  The leader shard saves the server's whole state to DIR
every ``--every`` seconds (the trainer's :class:`~hpcbsp.apps.elastic.resume.CheckpointPlan`) and,
with ``--restart``, resumes from it.

Worker w's iterations last ``--pace`` x (1 + 4w) seconds, so that a save mostly finds worker 0's
gradient held (pushed, waiting for the others'): the leader marks a save that holds one (with one
worker, any save) with the file ``DIR.held``.  With ``--kill ROLE:K`` the process of that role (a
server shard or a worker) SIGKILLs itself on the first launch (``$HPCBSP_SUPERVISE_RESTART``
unset or 0) as soon as that file exists: what a rank whose node dies leaves behind, with a held
gradient to be restored.  Rank 0 prints each role's rank and host (``shard K: rank R on HOST``,
``worker K: ...``), the updates, and writes the final weights to ``--out``.  ``--placement``
prints every rank's host (``hosts: HOST,HOST,...``) and, for each S listed, the ranks that serve
(``servers S: ranks R,R,... on HOST,HOST,...``), and ends (nothing trains).  :func:`expected` is the tests' oracle for the weights.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcbsp.apps.elastic.resume import CheckpointPlan
from hpcbsp.elastic.policies import make_policy
from hpcbsp.elastic.server import serve
from hpcbsp.elastic.shards import placed
from hpcbsp.elastic.worker import work
from hpcbsp.elastic.world import World, launch_world

P = 50_000
LR = 0.05
SEED = 7


def offsets(w: int) -> np.ndarray:
    """Worker ``w``'s constant term of its gradient."""
    return np.random.default_rng([SEED, w]).standard_normal(P)


def initial() -> np.ndarray:
    return np.linspace(-1.0, 1.0, P)


def expected(updates: int, workers: int) -> np.ndarray:
    """The oracle, numpy alone: BSP's weights after ``updates`` rounds of every worker's gradient
    on the same weights, each round ``x -= LR * mean(gradients)`` (the mean over the workers in
    order; one worker's gradient itself)."""
    x, c = initial(), np.stack([offsets(w) for w in range(workers)])
    for _ in range(updates):
        grads = 0.1 * x + c
        x -= LR * (grads.mean(axis=0) if workers > 1 else grads[0])
    return x


def held(state: dict[str, Any]) -> list[int]:
    """The workers whose gradients a saved (or resumed) server state holds."""
    coord = state["coord"]
    return [int(w) for w in np.flatnonzero(coord.log.pushes > coord.version)]


def die_when_saved(marker: Path) -> None:
    """SIGKILL this process as soon as ``marker`` exists (a thread's loop)."""
    while not marker.exists():
        time.sleep(0.01)
    os.kill(os.getpid(), signal.SIGKILL)


def marked(ck: Path) -> Path:
    """The file that says a save of ``ck`` holds a gradient."""
    return ck.with_name(ck.name + ".held")


def roles(world: World, part: MPI.Comm, servers: int) -> list[str]:
    """On rank 0: every role's line, in the order of ``part``'s ranks."""
    me = (part.Get_rank(), world.rank, MPI.Get_processor_name())
    everyone = world.comm.gather(me, root=0)
    if everyone is None:
        return []
    lines = []
    for r, rank, host in sorted(everyone):
        role = f"shard {r}" if r < servers else f"worker {r - servers}"
        lines.append(f"{role}: rank {rank} on {host}")
    return lines


def placement(world: World, counts: list[int]) -> None:
    """Rank 0 prints every rank's host, then for each number of servers the world ranks that
    serve and their hosts."""
    hosts = world.comm.gather(MPI.Get_processor_name(), root=0)
    if hosts is not None:
        print(f"hosts: {','.join(hosts)}", flush=True)
    for servers in counts:
        part = placed(world.comm, servers)
        mine = (part.Get_rank(), world.rank, MPI.Get_processor_name())
        part.Free()
        everyone = world.comm.gather(mine, root=0)
        if everyone is not None:
            shards = sorted(everyone)[:servers]
            print(f"servers {servers}: ranks {','.join(str(r) for _, r, _ in shards)} on "
                  f"{','.join(h for _, _, h in shards)}", flush=True)


def train(world: World, args: argparse.Namespace) -> None:
    if args.placement:
        placement(world, args.placement)
        return
    servers = args.servers
    part = placed(world.comm, servers)
    try:
        for line in roles(world, part, servers):
            print(line, flush=True)
        me = part.Get_rank()
        role, index = args.kill.split(":") if args.kill else ("", "-1")
        victim = (role == "shard" and me == int(index)) or (role == "worker" and me == servers + int(index))
        if victim and os.environ.get("HPCBSP_SUPERVISE_RESTART", "0") == "0":
            threading.Thread(target=die_when_saved, args=(marked(args.checkpoint),), daemon=True).start()
        if me >= servers:
            c = offsets(me - servers)
            pace = args.pace * (1 + 4 * (me - servers))
            work(part, lambda x: 0.1 * x + c, P, timeout=world.timeout, servers=servers,
                 iteration_time=lambda start: pace)
            return
        plan = CheckpointPlan(args.checkpoint, every=args.every, restart=args.restart, quiet=True)
        settings = {"updates": args.updates, "params": P, "workers": part.Get_size() - servers}
        state = plan.load(args.checkpoint, settings) if me == 0 and args.restart else None
        resumed = "" if state is None else \
            f" (resumed at update {state['coord'].version}, held gradients of workers {held(state)})"

        def save(now: dict[str, Any]) -> None:
            plan.save(args.checkpoint, settings, now)
            if held(now) or part.Get_size() - servers == 1:  # (one worker: never held)
                marked(args.checkpoint).touch()

        res = serve(part, make_policy("bsp"), initial(), LR, max_updates=args.updates, timeout=world.timeout,
                    resume=state, save=save, save_every=args.every, servers=servers)
        if res is not None:
            np.save(args.out, res.weights)
            print(f"updates {res.log.updates}{resumed}", flush=True)
    finally:
        part.Free()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--updates", type=int, default=40)
    parser.add_argument("--checkpoint", type=Path, default=Path("ck"))
    parser.add_argument("--restart", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("weights.npy"))
    parser.add_argument("--kill", default=None, help="shard:K or worker:K")
    parser.add_argument("--pace", type=float, default=0.01)
    parser.add_argument("--every", type=float, default=0.2)
    parser.add_argument("--placement", type=lambda text: [int(s) for s in text.split(",")], default=None)
    launch_world(train, parser.parse_args(), timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
