"""Reading a checkpoint of format version 1 (hpcbsp before issue 44), so that a run saved by an
older hpcbsp restarts under this one.

Version 1 is a directory of ``meta.json`` (every rank's part sizes and every rank file's BLAKE2
checksum in it) and ``rank{r}.npz`` per rank (``coarray:NAME`` arrays, and in ``rank0.npz`` the
replicated state ``state:NAME``).  :func:`as_current` gives its ``meta.json`` the entries a
version 2 restore reads (each coarray's ``total``), :func:`read_state` and :func:`read_parts`
read its files, each checked against its checksum and loaded with ``allow_pickle=False``.  A
save always writes version 2 (and may replace a version 1 checkpoint, :mod:`.safety`).  Local to
one process; every error is a :class:`BSPError` that names the checkpoint and the file.
"""
from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from ...errors import BSPError
from .format import file_checksum


def as_current(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` (version 1) with the entries a restore reads: each coarray's ``total``, and
    ``per_node`` False."""
    for info in meta["coarrays"].values():
        info["total"] = int(sum(info["sizes"]))
    return {**meta, "per_node": False}


def _load(path: str, rank: int, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    name = f"rank{rank}.npz"
    fpath = os.path.join(path, name)
    if not os.path.exists(fpath):
        raise BSPError(f"checkpoint {path} is incomplete: {name} is missing")
    if file_checksum(fpath) != meta["checksums"].get(name):
        raise BSPError(f"checkpoint {path} is damaged: {name} does not match its checksum "
                       "(truncated or modified)")
    try:
        with np.load(fpath, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError) as exc:
        raise BSPError(f"checkpoint {path} is damaged: {name} cannot be read ({exc})") from None


def read_state(path: str, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """The replicated state (from ``rank0.npz``)."""
    saved = _load(path, 0, meta)
    return {name: saved[f"state:{name}"] for name in meta["state"]}


def read_parts(path: str, meta: dict[str, Any], ranks: Sequence[int], names: Sequence[str]
               ) -> dict[int, list[np.ndarray]]:
    """The parts of coarrays ``names`` of the saved ``ranks``, one file each."""
    out = {}
    for r in ranks:
        saved = _load(path, r, meta)
        out[r] = [saved[f"coarray:{name}"].reshape(-1) for name in names]
    return out
