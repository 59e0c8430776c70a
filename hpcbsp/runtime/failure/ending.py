"""How a node's watcher ends the job for a verdict of the failure detector, whatever the launcher.

Every watcher that learns a verdict SIGKILLs its own node's ranks (:func:`kill`): the verdict
reaches every node, so every node's ranks end.  A frozen node's ranks cannot be ended that way
(its watcher is frozen with them), and a launcher may wait for them: ``mpiexec`` (hydra) ends the
job once a node's launcher fails, but plain ``srun`` (Slurm's default ``KillOnBadExit=0``) waits
for every task until the step's time limit.  So under Slurm the node that speaks for the
verdict also has Slurm cancel the job's own step (:func:`cancel_step`: ``scancel`` of
``$SLURM_JOB_ID.$SLURM_STEP_ID``, the variables Slurm gives every task of the step, inherited by
the watcher): Slurm's daemon on the frozen node kills what is left there, and ``srun`` returns.
Only the speaker runs ``scancel`` (one request to Slurm's controller, not one per node).

Standard library only (loaded by path by the watcher's script).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
from typing import Iterable, Mapping

__all__ = ["kill", "step_of", "cancel_step"]

#: Slurm's own step numbers (batch, extern, interactive, pending ...) start here: never cancelled.
_SPECIAL_STEPS = 0xFFFFFFF0


def kill(pids: Iterable[int]) -> None:
    """SIGKILL each process of ``pids`` (those already gone are no matter)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def step_of(environ: Mapping[str, str]) -> str | None:
    """``JOB.STEP`` of the Slurm step this process belongs to, from ``environ`` (None outside a
    step, or in the batch script's or another special step of Slurm's)."""
    job, step = environ.get("SLURM_JOB_ID", ""), environ.get("SLURM_STEP_ID", "")
    if not (job.isdigit() and step.isdigit()) or int(step) >= _SPECIAL_STEPS:
        return None
    return f"{job}.{step}"


def cancel_step(environ: Mapping[str, str] | None = None) -> subprocess.Popen[bytes] | None:
    """Start ``scancel`` of this job's own step (see the module docstring); None when there is no
    step or no ``scancel``.  Not waited for: the watcher goes on relaying the verdict."""
    step = step_of(os.environ if environ is None else environ)
    scancel = shutil.which("scancel")
    if step is None or scancel is None:
        return None
    try:
        return subprocess.Popen([scancel, "--quiet", step], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None
