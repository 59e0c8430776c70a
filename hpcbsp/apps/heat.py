"""Explicit 1-D heat diffusion as a BSP program, with checkpoint and restart.

    mpiexec -n P python -m hpcbsp.apps.heat [--n N] [--steps S] [--checkpoint DIR --every K
                                            [--per-node]] [--restart] [--out FILE.npy] [--ledger PATH] [--json]

The rod's temperatures are a block-distributed coarray; every superstep each rank puts its edge
values into its neighbours' halo slots and updates its block.  The result does not depend on the
number of ranks (every element sees the same neighbours and the same arithmetic), so a run that
is stopped, restarted from its checkpoint (on any number of ranks) and finished gives
bit-identical temperatures to an uninterrupted run.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sys
from typing import Callable

import numpy as np

import hpcbsp
from hpcbsp.runtime.api.checkpoint import check_target, exists as checkpoint_exists
from hpcbsp.runtime.api.distribution import block_range
from hpcbsp.runtime.api.partition import Block
from hpcbsp.util.args.checks import check_checkpoint, check_memory, check_outputs, ledger_output
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import nonnegative_int, positive_float
from hpcbsp.util.args.vocabulary import add_checkpoint, add_common_options, add_n
from hpcbsp.util.progress import Progress
from hpcbsp.util.text import plural

PROGRAM = "hpcbsp.apps.heat"

def initial(n: int) -> np.ndarray:
    """A hot spot and a ramp: a profile with structure at every scale."""
    x = np.linspace(0.0, 1.0, n)
    return np.exp(-200.0 * (x - 0.3) ** 2) + 0.5 * x


def simulate(bsp: "hpcbsp.BSP", n: int, steps: int, alpha: float, checkpoint: str | None,
             every: int, restart: bool, die_at: int | None,
             progress: Callable[[int], None] | None = None, per_node: bool = False) -> np.ndarray | None:
    """Run ``steps`` explicit steps; return the whole rod on rank 0 (None elsewhere).

    ``progress`` (e.g. a :class:`hpcbsp.util.progress.Progress`) is called with the step count
    after every step, and its ``note`` (if it has one) when a checkpoint was written.  ``per_node``
    writes each checkpoint as one file per node instead of one per rank."""
    lo, hi = block_range(n, bsp.nprocs, bsp.pid)
    u = bsp.coarray(name="u", layout=Block(n, bsp.nprocs))  # restores onto any rank count
    halo = bsp.coarray(2, name="halo", scratch=True)  # [left's last, right's first]
    step = 0
    if restart and checkpoint and checkpoint_exists(checkpoint):
        ck = bsp.restore(checkpoint, program=PROGRAM)
        step = int(ck.state["step"])
        if bsp.pid == 0:
            print(f"restarted from {ck.path} at step {step} (saved on {plural(ck.nprocs, 'rank')}, "
                  f"now {bsp.nprocs})", flush=True)
    else:
        u.local[:] = initial(n)[lo:hi]
    # Fixed ends: the boundary values stay as they are.
    left, right = bsp.pid - 1, bsp.pid + 1
    while step < steps:
        if die_at is not None and step == die_at and bsp.pid == min(1, bsp.nprocs - 1):
            os.kill(os.getpid(), signal.SIGKILL)  # a test of fault tolerance: this rank dies
        if u.local.size:
            if left >= 0:
                halo.put(left, u.local[:1], offset=1)
            if right < bsp.nprocs:
                halo.put(right, u.local[-1:], offset=0)
        bsp.sync("halo")
        if u.local.size:
            ext = np.concatenate([halo.local[:1], u.local, halo.local[1:]])
            new = u.local + alpha * (ext[:-2] - 2.0 * u.local + ext[2:])
            if lo == 0:
                new[0] = u.local[0]
            if hi == n:
                new[-1] = u.local[-1]
            u.local[:] = new
        step += 1
        if checkpoint and every and step % every == 0:
            bsp.checkpoint(checkpoint, program=PROGRAM, per_node=per_node, step=np.int64(step))
            if progress is not None and hasattr(progress, "note"):
                progress.note(f"checkpoint written to {checkpoint} at step {step}")
        if progress is not None:
            progress(step)
    parts = bsp.comm.gather(u.local.copy(), root=0)
    return np.concatenate(parts) if parts is not None else None


def reference(n: int, steps: int, alpha: float) -> np.ndarray:
    """The same computation serially with numpy (the test oracle)."""
    u = initial(n)
    for _ in range(steps):
        new = u.copy()
        new[1:-1] = u[1:-1] + alpha * (u[:-2] - 2.0 * u[1:-1] + u[2:])
        u = new
    return u


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.apps.heat",
                                     description=__doc__.split("\n\n")[0],
                                     epilog="Fault-tolerance demo: run with --checkpoint DIR --every 20 "
                                            "--die-at 50, then again with --restart.")
    add_n(parser, "points on the rod", per="in total", default=10_000)
    parser.add_argument("--steps", type=nonnegative_int, default=200, help="time steps (default 200)")
    parser.add_argument("--alpha", type=positive_float, default=0.25, help="diffusion number, at most 0.5 (default 0.25)")
    add_checkpoint(parser, "steps")
    parser.add_argument("--per-node", action="store_true",
                        help="write each checkpoint as one file per node instead of one per rank")
    parser.add_argument("--out", metavar="FILE.npy", help="write the final temperatures here")
    parser.add_argument("--check", action="store_true", help="compare with the serial numpy run")
    add_common_options(parser, with_seed=False)
    parser.add_argument("--die-at", type=int, metavar="STEP", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.n < 3:
        parser.error("--n must be at least 3")
    if not args.alpha <= 0.5:
        parser.error("--alpha must be in (0, 0.5] for a stable explicit scheme")
    # never over a folder that is not a checkpoint of this program
    check_checkpoint(parser, args, lambda path: check_target(path, PROGRAM), (hpcbsp.BSPError,),
                     exists=checkpoint_exists)
    if args.per_node and not args.every:
        parser.error("--per-node says how checkpoints are written: give it with --checkpoint DIR --every K")
    check_memory(parser, 8.0 * 4 * args.n, f"--n {args.n}", "use a smaller --n")
    check_outputs(parser, [(args.out, "--out file", (".npy",)), ledger_output(args.ledger)])

    def prog(bsp: "hpcbsp.BSP") -> int:
        if args.ledger:  # every superstep's record, in files as the run goes (bounded memory)
            bsp.ledger.stream_for(args.ledger)
        show = Progress("heat", args.steps, enabled=not args.quiet and bsp.pid == 0, unit="step")
        rod = simulate(bsp, args.n, args.steps, args.alpha, args.checkpoint, args.every,
                       args.restart, args.die_at, progress=show, per_node=args.per_node)
        if args.ledger:
            bsp.ledger.save(args.ledger)  # (the ranks' streams merged; no gather)
        if bsp.pid != 0:
            return 0
        assert rod is not None  # rank 0 gathers the rod
        digest = hashlib.blake2b(rod.tobytes(), digest_size=8).hexdigest()
        if args.out:
            np.save(args.out, rod)
        status, same = 0, None
        if args.check:
            ref = reference(args.n, args.steps, args.alpha)
            same = bool(np.array_equal(ref, rod))
            status = 0 if same else 1
        if args.json:
            print(json.dumps({"n": args.n, "steps": args.steps, "ranks": bsp.nprocs, "mean": float(rod.mean()),
                              "digest": digest, "check": same, "out": args.out, "ledger": args.ledger}))
            return status
        print(f"heat: n={args.n} steps={args.steps} on {plural(bsp.nprocs, 'rank')}; "
              f"mean temperature {rod.mean():.12f}; digest {digest}")
        if same is not None:
            print(f"check against serial numpy: {'bit-identical' if same else 'DIFFERENT'}")
        print(f"rank 0's {bsp.ledger.summary(max_rows=6)}")
        for path, what in ((args.out, "temperatures"), (args.ledger, "ledger")):
            if path:
                print(f"{what} written to {path}")
        return status

    return hpcbsp.run(prog)


if __name__ == "__main__":
    sys.exit(main())
