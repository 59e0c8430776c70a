"""Checkpoints of training runs: where they go, when they are taken, and how they are read back.

Each policy run (one policy, one repeat) has its own checkpoint directory, written with
:meth:`hpcbsp.BSP.checkpoint` on a one-rank context (so it is atomic and checksummed like every
hpcbsp checkpoint, and a damaged or foreign one gives a clear error).  It holds two byte arrays:

* ``config``: the run's settings as JSON.  A restart with other settings is refused and the
  message names the settings that differ: continuing would mix two different runs.
* ``snapshot``: the run's state as tagged JSON (:mod:`.snapshot`; no pickle).

A simulated run is deterministic, so a resumed one ends with exactly the bits of an
uninterrupted one.  A real (MPI) run depends on wall-clock timing and is not repeatable even
without a restart: it resumes the server's state (weights, held gradients, policy, log) and goes
on for the rest of its duration.  A run that finished is saved once more, complete, so that a
restart of a multi-policy job does not recompute it.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hpcbsp.elastic.snapshot import SnapshotError, decode, encode

__all__ = ["CheckpointPlan", "CheckpointError", "PROGRAM", "settings_of"]

PROGRAM = "hpcbsp.elastic.train"


class CheckpointError(RuntimeError):
    """A checkpoint cannot be read or does not belong to this run (one line, fit for a CLI)."""


@dataclass
class CheckpointPlan:
    """Where and how often the runs of one job save themselves.

    Attributes
    ----------
    directory : Path
        One subdirectory per policy run: ``{mode}-{policy}-r{repeat}``.
    every : float
        Seconds between saves: virtual seconds in a simulated run, wall-clock seconds (on the
        server) in a real one.
    restart : bool
        Resume each run from its checkpoint where one exists (else start it from the beginning).
    die_after : int or None
        For tests of the restart: the process kills itself (SIGKILL) right after this many saves.
    quiet : bool
        No "checkpoint written" lines on stderr (otherwise at most one every two seconds).
    """

    directory: Path
    every: float = 1.0
    restart: bool = False
    die_after: int | None = None
    quiet: bool = False
    saves: int = field(default=0, init=False)
    _noted: float = field(default=-np.inf, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.every > 0:
            raise ValueError(f"--checkpoint-every must be positive, got {self.every}")

    def next_save(self, t: float) -> float:
        """The first save time (a multiple of ``every``) strictly after ``t``: advancing a run
        to it handles at least the event at ``t``, so every save has something new."""
        k = np.floor(t / self.every) + 1
        while k * self.every <= t:  # k * every can round down onto t
            k += 1
        return float(k * self.every)

    def for_run(self, config: Any, mode: str, policy: str, repeat: int,
                dataset: str) -> tuple[Path, dict[str, Any]]:
        """The checkpoint directory of one policy run, and the settings it is tied to."""
        settings = settings_of(config, mode=mode, policy=policy, repeat=repeat, dataset=dataset)
        return self.directory / f"{mode}-{policy}-r{repeat}", settings

    def check(self, mode: str, policies: list[str], repeats: int) -> None:
        """Raise :class:`CheckpointError` if a run's checkpoint path holds something that is not
        this program's checkpoint (a file or folder of the user's): checked before the runs,
        since a save never replaces it (:func:`hpcbsp.runtime.api.checkpoint.check_target`)."""
        from hpcbsp.runtime.api.checkpoint import check_target
        from hpcbsp.runtime.errors import BSPError

        for repeat in range(repeats):
            for policy in policies:
                try:
                    check_target(self.directory / f"{mode}-{policy}-r{repeat}", PROGRAM)
                except BSPError as exc:
                    raise CheckpointError(str(exc)) from None

    def save(self, path: Path, settings: dict[str, Any], state: Any) -> None:
        """Write ``state`` (objects :mod:`.snapshot` supports) atomically to ``path``."""
        from mpi4py import MPI

        from hpcbsp.runtime.api.context import BSP
        from hpcbsp.runtime.errors import BSPError

        config = json.dumps(settings, sort_keys=True).encode()
        snap = json.dumps(encode(state)).encode()
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with BSP(MPI.COMM_SELF) as bsp:
                bsp.checkpoint(os.fspath(path), program=PROGRAM,
                               config=np.frombuffer(config, dtype=np.uint8),
                               snapshot=np.frombuffer(snap, dtype=np.uint8))
        except BSPError as exc:  # something not ours at path: refused, one line
            raise CheckpointError(str(exc)) from None
        self.saves += 1
        if not self.quiet and time.monotonic() - self._noted >= 2.0:
            self._noted = time.monotonic()
            print(f"[checkpoint] written to {path} (save {self.saves} of this job)", file=sys.stderr, flush=True)
        if self.die_after is not None and self.saves >= self.die_after:
            os.kill(os.getpid(), signal.SIGKILL)  # a test's stand-in for a node failure

    def load(self, path: Path, settings: dict[str, Any]) -> Any | None:
        """The state saved at ``path`` (None if there is no checkpoint there).

        Raises :class:`CheckpointError` if the checkpoint is damaged, foreign, or was written
        with settings other than ``settings``.
        """
        from mpi4py import MPI

        from hpcbsp.runtime.api import checkpoint as ckpt
        from hpcbsp.runtime.api.context import BSP
        from hpcbsp.runtime.errors import BSPError

        if not ckpt.exists(path):
            return None
        try:
            with BSP(MPI.COMM_SELF) as bsp:
                saved = bsp.restore(os.fspath(path), program=PROGRAM).state
            theirs = json.loads(saved["config"].tobytes().decode())
            state = decode(json.loads(saved["snapshot"].tobytes().decode()))
        except BSPError as exc:
            raise CheckpointError(str(exc)) from None
        except (KeyError, UnicodeDecodeError, json.JSONDecodeError, SnapshotError) as exc:
            raise CheckpointError(f"checkpoint {path} is damaged: {exc}") from None
        ours = json.loads(json.dumps(settings, sort_keys=True))
        if theirs != ours:
            raise CheckpointError(f"checkpoint {path} belongs to another run: "
                                  f"{_differences(theirs, ours)}; restart with the same options, "
                                  f"or remove {path} to start afresh")
        return state


#: Settings that do not change what a run computes: a restart may change them (a longer
#: ``--timeout`` is the natural answer to a run that timed out; a sharded server saves the whole
#: state, which any number of ``--servers`` restores: :mod:`hpcbsp.elastic.shards`).
NOT_COMPARED = ("timeout", "servers")


def settings_of(config: Any, **more: Any) -> dict[str, Any]:
    """The settings a checkpoint is tied to: a dataclass configuration plus ``more``."""
    settings = {**asdict(config), **more}
    for name in NOT_COMPARED:
        settings.pop(name, None)
    return settings


def _differences(theirs: dict[str, Any], ours: dict[str, Any], prefix: str = "") -> str:
    out = []
    for key in sorted(set(theirs) | set(ours)):
        a, b = theirs.get(key), ours.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            sub = _differences(a, b, f"{prefix}{key}.")
            if sub:
                out.append(sub)
        elif a != b:
            out.append(f"{prefix}{key} was {a!r}, is {b!r} now")
    return "; ".join(out)
