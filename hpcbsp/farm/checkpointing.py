"""Checkpoint and restart of a farm run: the approximation x, the iteration count, the stop flag.

The farm's coarrays are per-iteration buffers (scratch), so a checkpoint holds only replicated
state and restores onto any number of ranks.  With the same number of workers a restarted run
repeats the uninterrupted one exactly (same partial sums in the same order); with another number
of workers the Reduce adds in another order, so x agrees to rounding.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from ..runtime import BSP
from ..runtime.api.checkpoint import check_target
from ..runtime.api.checkpoint import exists as checkpoint_exists
from ..util.text import plural

PROGRAM = "hpcbsp.farm"


@dataclass(frozen=True)
class FarmCheckpoint:
    """Where and how often to checkpoint a farm run, and whether to resume from it."""

    path: str
    every: int = 0          #: iterations between checkpoints (0: never write)
    restart: bool = False   #: resume from ``path`` if it holds a checkpoint
    quiet: bool = False     #: no "checkpoint written" line on stderr (rank 0)

    def check(self) -> None:
        """Raise :class:`~hpcbsp.runtime.errors.BSPError` (one line) if ``path`` is not a place
        for this farm's checkpoints: a file, a folder that hpcbsp did not write, a checkpoint of
        another program (see :func:`hpcbsp.runtime.api.checkpoint.check_target`).  Local: call it
        before the run."""
        check_target(self.path, PROGRAM)

    def resume(self, bsp: BSP, x: np.ndarray) -> tuple[np.ndarray, int, bool]:
        """Collective: ``(x, iterations, done)`` from the checkpoint, or the start values."""
        if not self.restart or not checkpoint_exists(self.path):
            return x, 0, False
        ck = bsp.restore(self.path, program=PROGRAM)
        if bsp.pid == 0:
            print(f"farm: restarted from {ck.path} at iteration {int(ck.state['iterations'])} "
                  f"(saved on {plural(ck.nprocs, 'rank')}, now {bsp.nprocs})", flush=True)
        return np.array(ck.state["x"]), int(ck.state["iterations"]), bool(ck.state["done"])

    def maybe_save(self, bsp: BSP, x: np.ndarray | None, iterations: int, done: bool) -> None:
        """Collective, every rank with the same ``iterations``: save when one is due.

        Only the master's ``x`` and ``done`` are current; they are broadcast first (one extra
        superstep per checkpoint).
        """
        if not self.every or iterations % self.every:
            return
        x, done = bsp.broadcast((x, done) if bsp.pid == 0 else None)
        bsp.checkpoint(self.path, program=PROGRAM, x=x, iterations=np.int64(iterations), done=np.bool_(done))
        if bsp.pid == 0 and not self.quiet:
            print(f"farm: checkpoint written to {self.path} at iteration {iterations}", file=sys.stderr, flush=True)
