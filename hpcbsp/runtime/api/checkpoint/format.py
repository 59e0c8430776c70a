"""A checkpoint's files on disk: their names, ``meta.json``, the ranks' parts and their checksums.

A checkpoint is a directory::

    PATH/.hpcbsp-checkpoint  the marker: this directory was written by hpcbsp (written first)
    PATH/meta.json     what is saved: program, superstep, ranks, coarrays (dtype, the length of
                       every rank's part and, where it has one, the layout), replicated state
                       (dtype and shape), and a BLAKE2 checksum of every rank file
    PATH/rank{r}.npz   rank r's coarray parts (``coarray:NAME``) and, in rank0.npz, the
                       replicated state (``state:NAME``)

Every file is flushed and ``fsync``'d before it counts as written.  A rank file is read only if it
matches its checksum, and with ``allow_pickle=False``: loading never runs code from the file.
``meta.json`` of another format or version is refused, naming what it is.  Every function here
is local to one process: the ranks' agreement and the directory swap are
:mod:`~hpcbsp.runtime.api.checkpoint`'s and :mod:`.safety`'s.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from ...errors import BSPError

if TYPE_CHECKING:
    from ..coarray import Coarray

FORMAT = "hpcbsp-checkpoint"
VERSION = 1
#: The file that marks a directory as hpcbsp's own (a checkpoint, or one being written).
MARKER = ".hpcbsp-checkpoint"
#: The names of every file a checkpoint consists of.
OWN_FILE = re.compile(r"meta\.json|rank\d+\.npz|\.hpcbsp-checkpoint")


@dataclass(frozen=True)
class Saved:
    """A checkpoint as :func:`describe` reads it from its ``meta.json`` (no data loaded)."""

    path: str        #: where it was found (``PATH``, or ``PATH.old`` after an interrupted save)
    program: str
    superstep: int   #: the superstep it was saved at, where a restore continues
    nprocs: int      #: the rank count it was saved on
    written: float   #: when ``meta.json`` was written (seconds since the epoch)


def describe(path: str | os.PathLike[str]) -> Saved | None:
    """The checkpoint at ``path`` as its ``meta.json`` says (following an interrupted save to
    ``PATH.old`` as :func:`~hpcbsp.runtime.api.checkpoint.restore` does), or None where there is
    none or it cannot be read.  Reads ``meta.json`` only: for tools that report on a checkpoint
    (``hpcbsp supervise``)."""
    try:
        found, meta = read_meta(os.path.abspath(os.fspath(path)))
        return Saved(found, str(meta["program"]), int(meta["superstep"]), int(meta["nprocs"]),
                     os.path.getmtime(os.path.join(found, "meta.json")))
    except (BSPError, KeyError, TypeError, ValueError, OSError):
        return None


def default_program() -> str:
    """The name a checkpoint is tagged with when none is given: the main script's file name."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name.removesuffix(".__main__")
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


def part_file(rank: int) -> str:
    """The name of rank ``rank``'s file."""
    return f"rank{rank}.npz"


def digest(path: str) -> str:
    """The checksum of the file at ``path`` (BLAKE2b, 16 bytes, hex) as ``meta.json`` keeps it."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def state_digest(arrays: dict[str, np.ndarray]) -> str:
    """A checksum of the replicated state (names, dtypes, shapes and bytes): equal on every rank
    exactly when the ranks passed the same state."""
    return hashlib.blake2b(b"".join(
        name.encode() + arr.dtype.str.encode() + str(arr.shape).encode() + arr.tobytes()
        for name, arr in sorted(arrays.items())), digest_size=16).hexdigest()


def write_marker(folder: str) -> None:
    """Mark ``folder`` (new and empty) as hpcbsp's own."""
    with open(os.path.join(folder, MARKER), "w") as fh:
        fh.write(f"{FORMAT} {VERSION}\n")


def write_part(folder: str, rank: int, payload: dict[str, np.ndarray]) -> str:
    """Write rank ``rank``'s file into ``folder`` (flushed to disk); its checksum.  Raises OSError."""
    fpath = os.path.join(folder, part_file(rank))
    with open(fpath, "wb") as fh:
        np.savez(fh, **cast("dict[str, Any]", payload))  # (numpy's stub types **kwds as allow_pickle's bool)
        fh.flush()
        os.fsync(fh.fileno())
    return digest(fpath)


def make_meta(program: str, superstep: int, nprocs: int, coarrays: dict[str, "Coarray"],
              arrays: dict[str, np.ndarray], digests: list[str]) -> dict[str, Any]:
    """``meta.json``'s content: what is saved (see the module docstring), ``digests`` the rank
    files' checksums in rank order."""
    return {
        "format": FORMAT, "version": VERSION, "program": program,
        "superstep": superstep, "nprocs": nprocs,
        "coarrays": {name: {"dtype": c.dtype.str, "sizes": list(c.sizes),
                            **({"layout": c.layout.describe()} if c.layout is not None else {})}
                     for name, c in coarrays.items()},
        "state": {name: {"dtype": arr.dtype.str, "shape": list(arr.shape)}
                  for name, arr in arrays.items()},
        "checksums": {part_file(r): d for r, d in enumerate(digests)},
    }


def write_meta(folder: str, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` into ``folder`` (flushed to disk): the last file of a save.  Raises OSError."""
    with open(os.path.join(folder, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=1)
        fh.flush()
        os.fsync(fh.fileno())


def meta_program(path: str) -> str | None:
    """The program named by ``path/meta.json`` if that is a readable meta file of this format."""
    try:
        with open(os.path.join(path, "meta.json")) as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        return None
    if isinstance(meta, dict) and meta.get("format") == FORMAT and isinstance(meta.get("program"), str):
        return meta["program"]
    return None


def read_meta(path: str) -> tuple[str, dict[str, Any]]:
    """Find and parse a checkpoint's meta.json (at ``path``, or at ``PATH.old`` where a save was
    interrupted between its two renames): ``(where, meta)``, or a BSPError saying what is wrong."""
    if not os.path.isdir(path) and os.path.isdir(path + ".old"):
        path = path + ".old"  # a save was interrupted between its two renames
    meta_path = os.path.join(path, "meta.json")
    if os.path.lexists(path) and not os.path.isdir(path):
        raise BSPError(f"{path} is not an hpcbsp checkpoint (it is a file, not a directory)")
    if not os.path.isdir(path):
        raise BSPError(f"checkpoint {path} not found (no such directory)")
    try:
        with open(meta_path) as fh:
            meta = json.load(fh)
    except FileNotFoundError:
        if not os.path.isfile(os.path.join(path, MARKER)):
            raise BSPError(f"{path} is not an hpcbsp checkpoint (it has no meta.json)") from None
        raise BSPError(f"checkpoint {path} is incomplete: {meta_path} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BSPError(f"checkpoint {path} is damaged: {meta_path} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise BSPError(f"{path} is not an hpcbsp checkpoint ({meta_path} has no format "
                       f"{FORMAT!r})")
    if meta.get("version") != VERSION:
        raise BSPError(f"checkpoint {path} has format version {meta.get('version')}; this hpcbsp "
                       f"reads version {VERSION}")
    return path, meta


def load(path: str, rank: int, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """Rank ``rank``'s file of the checkpoint at ``path``, checked against its checksum in
    ``meta``; a BSPError when it is missing, damaged or unreadable."""
    fname = part_file(rank)
    fpath = os.path.join(path, fname)
    expected = meta["checksums"].get(fname)
    if not os.path.exists(fpath):
        raise BSPError(f"checkpoint {path} is incomplete: {fname} is missing")
    if digest(fpath) != expected:
        raise BSPError(f"checkpoint {path} is damaged: {fname} does not match its checksum "
                       "(truncated or modified)")
    try:
        with np.load(fpath, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError) as exc:
        raise BSPError(f"checkpoint {path} is damaged: {fname} cannot be read ({exc})") from None
