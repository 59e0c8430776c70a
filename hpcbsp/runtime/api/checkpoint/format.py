"""A checkpoint's files on disk: their names, ``meta.json`` and the replicated state.

A checkpoint is a directory (format version 2)::

    PATH/.hpcbsp-checkpoint  the marker: this directory was written by hpcbsp (written first)
    PATH/meta.json     what is saved, in a size that does not grow with the rank count: program,
                       superstep, ranks, data files, coarrays (dtype, total length and, where it
                       has one, the layout), replicated state (dtype and shape), and the BLAKE2
                       checksums of ``index.npy`` and ``state.npz``
    PATH/index.npy     one fixed-size row per saved rank: which data file holds its part, where,
                       how long, its checksum, and its length of every coarray (:mod:`.parts`)
    PATH/state.npz     the replicated state (``bsp.checkpoint``'s keywords)
    PATH/rank{r}.bin   rank r's coarray parts, raw (or, saved ``per_node``, ``node{k}.bin``: the
                       parts of every rank of node k, one after the other)

Only rank 0 reads ``meta.json``, ``index.npy`` and ``state.npz`` (and broadcasts what every rank
needs, :mod:`~hpcbsp.runtime.api.checkpoint`); every other rank opens only the data files that
hold what it restores.  Every file is flushed and ``fsync``'d before it counts as written.  A
part is used only if it matches its checksum, the state is read with ``allow_pickle=False``:
loading never runs code from the file.  ``meta.json`` of another format or version is refused,
naming what it is; a version 1 checkpoint (hpcbsp before issue 44: ``meta.json`` with every
rank's sizes and checksums, ``rank{r}.npz``) is restored through :mod:`.legacy`, and replaced by
the next save.
Every function here is local to one process.
"""
from __future__ import annotations

import hashlib
import io
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
VERSION = 2
#: The format versions a restore reads (version 1 through :mod:`.legacy`).
READABLE = (1, VERSION)
#: The file that marks a directory as hpcbsp's own (a checkpoint, or one being written).
MARKER = ".hpcbsp-checkpoint"
#: The names of every file a checkpoint consists of (version 1's ``rank{r}.npz`` too).
OWN_FILE = re.compile(r"meta\.json|index\.npy|state\.npz|(rank|node)\d+\.bin|rank\d+\.npz|\.hpcbsp-checkpoint")
INDEX = "index.npy"
STATE = "state.npz"


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
        found, meta = read_meta(os.path.abspath(os.fspath(path)), any_version=True)
        return Saved(found, str(meta["program"]), int(meta["superstep"]), int(meta["nprocs"]),
                     os.path.getmtime(os.path.join(found, "meta.json")))
    except (BSPError, KeyError, TypeError, ValueError, OSError):
        return None


def describe_newest(path: str | os.PathLike[str]) -> Saved | None:
    """The checkpoint at ``path`` (:func:`describe`), or, where ``path`` is a folder that holds
    none itself, the newest of the checkpoints directly inside it (a program that keeps one per
    run under one folder: ``python -m hpcbsp.apps.elastic.train --checkpoint DIR``), or None.
    Reads ``meta.json`` files only."""
    saved = describe(path)
    if saved is not None:
        return saved
    try:
        inside = [entry.path for entry in os.scandir(path)
                  if entry.is_dir(follow_symlinks=False) and not entry.name.endswith(".old")]
    except OSError:
        return None
    return max((s for s in map(describe, inside) if s is not None), key=lambda s: s.written, default=None)


def default_program() -> str:
    """The name a checkpoint is tagged with when none is given: the main script's file name."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name.removesuffix(".__main__")
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


def data_file(number: int, per_node: bool) -> str:
    """The name of data file ``number``: one rank's (``rank{r}.bin``) or one node's."""
    return f"{'node' if per_node else 'rank'}{number}.bin"


def checksum(*pieces: bytes | memoryview) -> str:
    """A checksum of the bytes of ``pieces`` one after the other (BLAKE2b, 16 bytes, hex), as the
    checkpoint keeps it."""
    h = hashlib.blake2b(digest_size=16)
    for piece in pieces:
        h.update(piece)
    return h.hexdigest()


def file_checksum(path: str) -> str:
    """The checksum of the file at ``path`` (as :func:`checksum` of its bytes)."""
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


def write_synced(path: str, write: Any, mode: str = "wb") -> None:
    """Open ``path``, ``write(fh)``, flush and ``fsync`` it.  Raises OSError."""
    with open(path, mode) as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())


def write_state(folder: str, arrays: dict[str, np.ndarray]) -> str:
    """Write the replicated state into ``folder`` (``state.npz``); its checksum."""
    fpath = os.path.join(folder, STATE)
    write_synced(fpath, lambda fh: np.savez(fh, **cast("dict[str, Any]", arrays)))
    return file_checksum(fpath)


def make_meta(program: str, superstep: int, nprocs: int, files: int, per_node: bool,
              coarrays: dict[str, "Coarray"], arrays: dict[str, np.ndarray],
              checksums: dict[str, str]) -> dict[str, Any]:
    """``meta.json``'s content (see the module docstring): nothing in it grows with the rank
    count but a coarray's layout where the layout itself does (an ``Explicit`` one)."""
    return {
        "format": FORMAT, "version": VERSION, "program": program,
        "superstep": superstep, "nprocs": nprocs, "files": files, "per_node": per_node,
        "coarrays": {name: {"dtype": c.dtype.str, "total": int(sum(c.sizes)),
                            **({"layout": c.layout.describe()} if c.layout is not None else {})}
                     for name, c in coarrays.items()},
        "state": {name: {"dtype": arr.dtype.str, "shape": list(arr.shape)}
                  for name, arr in arrays.items()},
        "checksums": checksums,
    }


def write_meta(folder: str, meta: dict[str, Any]) -> None:
    """Write ``meta.json`` into ``folder`` (flushed to disk): the last file of a save.  Raises OSError."""
    write_synced(os.path.join(folder, "meta.json"), lambda fh: json.dump(meta, fh, indent=1), "w")


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


def read_meta(path: str, any_version: bool = False) -> tuple[str, dict[str, Any]]:
    """Find and parse a checkpoint's meta.json (at ``path``, or at ``PATH.old`` where a save was
    interrupted between its two renames): ``(where, meta)``, or a BSPError saying what is wrong
    (also for a format version that this hpcbsp does not read, unless ``any_version``)."""
    if not os.path.isdir(path) and os.path.isdir(path + ".old"):
        path = path + ".old"  # a save was interrupted between its two renames
    meta_path = os.path.join(path, "meta.json")
    try:
        with open(meta_path) as fh:
            meta = json.load(fh)
    except FileNotFoundError:
        if os.path.lexists(path) and not os.path.isdir(path):
            raise BSPError(f"{path} is not an hpcbsp checkpoint (it is a file, not a directory)") from None
        if not os.path.isdir(path):
            raise BSPError(f"checkpoint {path} not found (no such directory)") from None
        if not os.path.isfile(os.path.join(path, MARKER)):
            raise BSPError(f"{path} is not an hpcbsp checkpoint (it has no meta.json)") from None
        raise BSPError(f"checkpoint {path} is incomplete: {meta_path} is missing") from None
    except NotADirectoryError:
        raise BSPError(f"{path} is not an hpcbsp checkpoint (it is a file, not a directory)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BSPError(f"checkpoint {path} is damaged: {meta_path} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise BSPError(f"{path} is not an hpcbsp checkpoint ({meta_path} has no format "
                       f"{FORMAT!r})")
    if meta.get("version") not in READABLE and not any_version:
        raise BSPError(f"checkpoint {path} has format version {meta.get('version')}; this hpcbsp "
                       f"reads versions {' and '.join(map(str, READABLE))} (restore it with the hpcbsp "
                       "that wrote it, or start afresh)")
    return path, meta


def read_checked(path: str, name: str, meta: dict[str, Any]) -> io.BytesIO:
    """The bytes of file ``name`` of the checkpoint at ``path`` (read once), checked against its
    checksum in ``meta``; a BSPError when it is missing, damaged or unreadable."""
    try:
        with open(os.path.join(path, name), "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise BSPError(f"checkpoint {path} is incomplete: {name} is missing") from None
    except OSError as exc:
        raise BSPError(f"checkpoint {path}: {name} cannot be read ({exc.strerror or exc})") from None
    if checksum(data) != meta["checksums"][name]:
        raise BSPError(f"checkpoint {path} is damaged: {name} does not match its checksum "
                       "(truncated or modified)")
    return io.BytesIO(data)


def read_state(path: str, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    """The replicated state of the checkpoint at ``path`` (:func:`read_checked`)."""
    try:
        with np.load(read_checked(path, STATE, meta), allow_pickle=False) as data:
            state = {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError) as exc:
        raise BSPError(f"checkpoint {path} is damaged: {STATE} cannot be read ({exc})") from None
    return {name: state[name] for name in meta["state"]}
