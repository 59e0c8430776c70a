"""Checkpoint and restore at superstep boundaries, also onto a different number of ranks.

A checkpoint is a directory::

    PATH/.hpcbsp-checkpoint  the marker: this directory was written by hpcbsp (written first)
    PATH/meta.json     what is saved: program, superstep, ranks, coarrays (dtype and the length of
                       every rank's part), replicated state, and a BLAKE2 checksum of every file
    PATH/rank{r}.npz   rank r's coarray parts (and, in rank0.npz, the replicated state)

Writing is atomic: every rank writes into ``PATH.tmp``, the ranks agree that all writes
succeeded, and only then does rank 0 swap the new directory in (``PATH`` -> ``PATH.old``,
``PATH.tmp`` -> ``PATH``, remove ``PATH.old``).  A crash or a kill at any point leaves the
previous checkpoint readable (``restore`` falls back to ``PATH.old`` if the swap was
interrupted), and a failed write never replaces it.  Files are read with ``allow_pickle=False``:
loading never runs code from the file.

Nothing that hpcbsp did not write is replaced or removed.  Before it writes anything, a save
checks ``PATH``, ``PATH.tmp`` and ``PATH.old``: each must be absent, an empty directory, or a
directory that carries the marker (or, from hpcbsp before the marker, a ``meta.json`` of this
format) and holds only the files named above.  Anything else (a file, a folder of the user's, a
checkpoint with files of the user's added, a symbolic link) is refused with a :class:`BSPError`
on every rank, and so is a checkpoint of another program at ``PATH``.  :func:`check_target`
makes the same check, for command lines that want to refuse a bad path before the work starts.

Coarrays are matched by name (those registered with ``scratch=True``, such as halos and
buffers, are not saved), with the layout they were registered with (``bsp.coarray(...,
layout=Block(n, p))``, any partitioning of :mod:`.partition`).  On the rank count it was saved on
and with the same part sizes, each rank gets its part back.  On another rank count (or other
part sizes) a coarray is redistributed by its layouts: every rank takes the global elements its
new layout gives it from wherever the saved layout had them, so a cyclic or block-cyclic array
saved on 3 ranks restores onto 2 or 4 in the right order.  A coarray without a layout, saved or
restored, is refused there with an error that says so: its parts cannot be placed without
guessing (concatenating them in rank order would permute a cyclic array without a word).
State passed as keywords is *replicated*
(the same on every rank, e.g. an iteration counter or a global vector): rank 0's copy is saved,
and every rank checks at save time that its copy is identical.  Assumes a file system that all
ranks see (one node, or a cluster's shared file system).
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

from ..errors import BadInput, BSPError, UsageError
from ..superstep.control import Kind
from .coarray import Coarray
from .partition import Grid, Partitioning, from_description

if TYPE_CHECKING:
    from .context import BSP

FORMAT = "hpcbsp-checkpoint"
VERSION = 1
#: The file that marks a directory as hpcbsp's own (a checkpoint, or one being written).
MARKER = ".hpcbsp-checkpoint"
_OWN_FILE = re.compile(r"meta\.json|rank\d+\.npz|\.hpcbsp-checkpoint")


@dataclass
class Checkpoint:
    """What :meth:`BSP.restore` returns: the saved superstep, rank count and replicated state."""

    path: str
    program: str
    superstep: int
    nprocs: int
    state: dict[str, np.ndarray]


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
    ``PATH.old`` as :func:`restore` does), or None where there is none or it cannot be read.
    Reads ``meta.json`` only: for tools that report on a checkpoint (``hpcbsp supervise``)."""
    try:
        found, meta = _read_meta(os.path.abspath(os.fspath(path)))
        return Saved(found, str(meta["program"]), int(meta["superstep"]), int(meta["nprocs"]),
                     os.path.getmtime(os.path.join(found, "meta.json")))
    except (BSPError, KeyError, TypeError, ValueError, OSError):
        return None


def exists(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds an hpcbsp checkpoint to resume from (also one whose save was
    interrupted between its two renames, which :func:`restore` reads from ``PATH.old``).

    An empty directory or one that hpcbsp did not write is no checkpoint (a save there is
    refused, see :func:`check_target`).
    """
    path = os.fspath(path)
    return _is_own(path) or (not os.path.lexists(path) and _is_own(path + ".old"))


def check_target(path: str | os.PathLike[str], program: str | None = None) -> None:
    """Raise :class:`BSPError` (one line) if a checkpoint may not be written at ``path``.

    ``PATH``, ``PATH.tmp`` and ``PATH.old`` must each be absent, an empty directory, or hpcbsp's
    own (see the module docstring); with ``program``, a checkpoint at ``PATH`` must be of that
    program.  Local and read-only: a command line calls it before the work starts, and
    :meth:`BSP.checkpoint <hpcbsp.runtime.api.context.BSP.checkpoint>` on rank 0 before every save.
    """
    why = _why_not(os.path.abspath(os.fspath(path)), program)
    if why:
        raise BSPError(why)


def _why_not(path: str, program: str | None) -> str | None:
    """Why a checkpoint may not be written at ``path`` (None: it may)."""
    for target in (path, path + ".tmp", path + ".old"):
        why = _foreign(target)
        if why:
            return (f"{why}; hpcbsp writes a checkpoint only where there is none or its own: "
                    f"choose another checkpoint path, or move {target} away")
    if program is not None:
        source = path if os.path.isdir(path) else path + ".old"
        theirs = _meta_program(source)
        if theirs is not None and theirs != program:
            return (f"{source} holds a checkpoint of program {theirs!r}, not of {program!r}: "
                    "choose another checkpoint path, or remove it if it is no longer needed")
    return None


def _foreign(path: str) -> str | None:
    """Why ``path`` is not something a save may replace or remove (None: it may)."""
    if not os.path.lexists(path):
        return None
    if os.path.islink(path):
        return f"{path} is a symbolic link, not an hpcbsp checkpoint"
    if not os.path.isdir(path):
        return f"{path} exists and is not an hpcbsp checkpoint (it is a file)"
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc})"
    if not names:
        return None
    if MARKER not in names and _meta_program(path) is None:
        return f"{path} exists and is not an hpcbsp checkpoint (it holds {_some(names)})"
    others = [n for n in names if not _OWN_FILE.fullmatch(n) or os.path.islink(os.path.join(path, n))
              or not os.path.isfile(os.path.join(path, n))]
    if others:
        return f"{path} is an hpcbsp checkpoint but also holds what hpcbsp did not write ({_some(others)})"
    return None


def _some(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _is_own(path: str) -> bool:
    """Whether ``path`` is a directory that hpcbsp wrote (its marker, or an older checkpoint's
    ``meta.json``)."""
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    return os.path.isfile(os.path.join(path, MARKER)) or _meta_program(path) is not None


def _meta_program(path: str) -> str | None:
    """The program named by ``path/meta.json`` if that is a readable meta file of this format."""
    try:
        with open(os.path.join(path, "meta.json")) as fh:
            meta = json.load(fh)
    except (OSError, ValueError):
        return None
    if isinstance(meta, dict) and meta.get("format") == FORMAT and isinstance(meta.get("program"), str):
        return meta["program"]
    return None


def _remove_own(path: str) -> None:
    """Remove ``path`` if it is absent, empty or hpcbsp's own (checked again here); else raise
    OSError.  Only the files a checkpoint consists of are deleted, the marker last."""
    if not os.path.lexists(path):
        return
    why = _foreign(path)
    if why:
        raise OSError(why)
    names = os.listdir(path)
    for name in sorted(names, key=lambda n: n == MARKER):
        os.remove(os.path.join(path, name))
    os.rmdir(path)


def default_program() -> str:
    """The name a checkpoint is tagged with when none is given: the main script's file name."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name.removesuffix(".__main__")
    return os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"


def _digest(path: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _agree_or_raise(bsp: "BSP", error: str | None, what: str) -> None:
    """Collective: if any rank has an error, every rank raises the first one."""
    errors = bsp.comm.allgather(error)
    bad = [(r, e) for r, e in enumerate(errors) if e]
    if bad:
        rank, msg = bad[0]
        more = f" (and on {len(bad) - 1} more rank(s))" if len(bad) > 1 else ""
        raise BadInput(f"{what} failed on rank {rank}: {msg}{more}")


def save(bsp: "BSP", path: str, program: str | None, state: dict[str, Any]) -> str:
    """``bsp.checkpoint``: write a checkpoint (collective, between supersteps: a control step
    in which the ranks agree on the state's names first).  See the module docstring for the
    format."""
    ext = bsp.extension
    if ext.pending:
        raise UsageError(f"rank {bsp.pid}: checkpoint between supersteps only: {ext.pending} "
                         "request(s) are pending; call sync() first")
    ext.agree(Kind.CHECKPOINT, f"checkpoint {sorted(state)}", lambda: f"checkpoint(state={sorted(state)})")
    path = os.path.abspath(os.fspath(path))
    program = program or default_program()
    arrays = {name: np.asarray(value) for name, value in state.items()}
    for name, arr in arrays.items():
        if arr.dtype.hasobject:
            raise BSPError(f"rank {bsp.pid}: checkpoint state {name!r} holds Python objects; "
                           "only numeric/string numpy data can be saved (no pickle)")
    coarrays = {c.name: c for c in bsp.extension.coarrays() if not c.scratch and c.registered}
    tmp = path + ".tmp"

    # 1. Rank 0 checks that nothing but hpcbsp's own is in the way, and prepares an empty
    #    staging directory that carries the marker from the start.
    error = None
    if bsp.pid == 0:
        error = _why_not(path, program)
        if error is None:
            try:
                _remove_own(tmp)  # left by an interrupted save
                os.makedirs(tmp)
                with open(os.path.join(tmp, MARKER), "w") as fh:
                    fh.write(f"{FORMAT} {VERSION}\n")
            except OSError as exc:
                error = f"cannot create {tmp}: {exc}"
    _agree_or_raise(bsp, error, f"checkpoint {path}")

    # 2. Every rank writes its file; replicated state must really be replicated.
    error, digest = None, None
    fname = f"rank{bsp.pid}.npz"
    try:
        payload = {f"coarray:{name}": c.flat for name, c in coarrays.items()}
        if bsp.pid == 0:
            payload.update({f"state:{name}": arr for name, arr in arrays.items()})
        with open(os.path.join(tmp, fname), "wb") as fh:
            np.savez(fh, **cast("dict[str, Any]", payload))  # (numpy's stub types **kwds as allow_pickle's bool)
            fh.flush()
            os.fsync(fh.fileno())
        digest = _digest(os.path.join(tmp, fname))
    except OSError as exc:
        error = f"cannot write {os.path.join(tmp, fname)}: {exc}"
    state_digest = hashlib.blake2b(b"".join(
        name.encode() + arr.dtype.str.encode() + str(arr.shape).encode() + arr.tobytes()
        for name, arr in sorted(arrays.items())), digest_size=16).hexdigest()
    reports = bsp.comm.gather((error, digest, state_digest), root=0)

    # 3. Rank 0 (the gather's root, which has the reports) checks everything, writes meta.json
    #    last, and swaps the directories.
    error = None
    if reports is not None:
        errs = [(r, e) for r, (e, _, _) in enumerate(reports) if e]
        differ = [r for r, (_, _, sd) in enumerate(reports) if sd != reports[0][2]]
        if errs:
            error = f"rank {errs[0][0]}: {errs[0][1]}"
        elif differ:
            error = (f"the state passed to checkpoint differs between ranks (rank(s) "
                     f"{', '.join(map(str, differ))} differ from rank 0); state must be replicated "
                     "— keep distributed data in coarrays")
        else:
            meta = {
                "format": FORMAT, "version": VERSION, "program": program,
                "superstep": bsp.superstep, "nprocs": bsp.nprocs,
                "coarrays": {name: {"dtype": c.dtype.str, "sizes": list(c.sizes),
                                    **({"layout": c.layout.describe()} if c.layout is not None else {})}
                             for name, c in coarrays.items()},
                "state": {name: {"dtype": arr.dtype.str, "shape": list(arr.shape)}
                          for name, arr in arrays.items()},
                "checksums": {f"rank{r}.npz": d for r, (_, d, _) in enumerate(reports)},
            }
            try:
                with open(os.path.join(tmp, "meta.json"), "w") as fh:
                    json.dump(meta, fh, indent=1)
                    fh.flush()
                    os.fsync(fh.fileno())
                old = path + ".old"
                if os.path.lexists(path):
                    _remove_own(old)  # a leftover of ours: PATH is the newer checkpoint
                    os.rename(path, old)
                    os.rename(tmp, path)
                else:  # none yet, or PATH.old is the last one (an interrupted swap): keep it
                    os.rename(tmp, path)  # until the new one is in place
                _remove_own(old)
            except OSError as exc:
                error = f"cannot complete {path}: {exc}"
        if error:
            try:
                _remove_own(tmp)  # the previous checkpoint stays as it was
            except OSError:
                pass
    _agree_or_raise(bsp, error, f"checkpoint {path}")
    return path


def _read_meta(path: str) -> tuple[str, dict[str, Any]]:
    """Find and parse a checkpoint's meta.json, or raise a BSPError saying what is wrong."""
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


def _load(path: str, fname: str, meta: dict[str, Any]) -> dict[str, np.ndarray]:
    fpath = os.path.join(path, fname)
    expected = meta["checksums"].get(fname)
    if not os.path.exists(fpath):
        raise BSPError(f"checkpoint {path} is incomplete: {fname} is missing")
    if _digest(fpath) != expected:
        raise BSPError(f"checkpoint {path} is damaged: {fname} does not match its checksum "
                       "(truncated or modified)")
    try:
        with np.load(fpath, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError) as exc:
        raise BSPError(f"checkpoint {path} is damaged: {fname} cannot be read ({exc})") from None


def restore(bsp: "BSP", path: str, program: str | None = None) -> Checkpoint:
    """``bsp.restore``: read a checkpoint into the registered coarrays (collective, after a
    control step); the context's superstep counter continues from the saved one.  Returns the
    checkpoint's superstep and state."""
    bsp.extension.agree(Kind.CHECKPOINT, "restore", lambda: f"restore({path!r})")
    path = os.path.abspath(os.fspath(path))
    coarrays = {c.name: c for c in bsp.extension.coarrays() if not c.scratch and c.registered}
    error, result = None, None
    try:
        path, meta = _read_meta(path)
        want = program or default_program()
        if meta["program"] != want:
            raise BSPError(f"checkpoint {path} was written by program {meta['program']!r}, not "
                           f"{want!r}")
        saved = meta["coarrays"]
        missing = sorted(set(coarrays) - set(saved))
        extra = sorted(set(saved) - set(coarrays))
        if missing or extra:
            raise BSPError(f"checkpoint {path} does not match this program's coarrays: "
                           + (f"not in the checkpoint: {', '.join(missing)}; " if missing else "")
                           + (f"not registered here: {', '.join(extra)}" if extra else ""))
        cache: dict[int, dict[str, np.ndarray]] = {}
        for name, c in coarrays.items():
            info = saved[name]
            if np.dtype(info["dtype"]) != c.dtype:
                raise BSPError(f"checkpoint {path}: coarray {name!r} was saved as "
                               f"{np.dtype(info['dtype'])}, is {c.dtype} here")
            old_sizes = np.asarray(info["sizes"], dtype=np.int64)
            if old_sizes.sum() != sum(c.sizes):
                raise BSPError(f"checkpoint {path}: coarray {name!r} holds {old_sizes.sum()} "
                               f"elements in all, this program's has {sum(c.sizes)}")
            part_of = lambda r: cache.setdefault(r, _load(path, f"rank{r}.npz", meta))  # noqa: E731
            if old_sizes.tolist() == list(c.sizes) and _same_layout(info.get("layout"), c.layout):
                _fill(c, bsp.pid, part_of)  # the saved parts as they were
            else:
                _redistribute(c, bsp.pid, _layouts(path, name, info, c, int(meta["nprocs"]), bsp.nprocs),
                              part_of)
        state0 = cache.get(0) or _load(path, "rank0.npz", meta)
        state = {name: state0[f"state:{name}"] for name in meta["state"]}
        result = Checkpoint(path, meta["program"], int(meta["superstep"]), int(meta["nprocs"]), state)
    except BSPError as exc:
        error = str(exc)
    except (KeyError, TypeError, ValueError) as exc:
        error = f"checkpoint {path} is damaged: unexpected content ({type(exc).__name__}: {exc})"
    _agree_or_raise(bsp, error, "restore")
    assert result is not None  # (_agree_or_raise raised on every rank if any rank has no result)
    bsp.superstep = result.superstep
    return result


def _same_layout(saved: dict[str, Any] | None, here: Partitioning | Grid | None) -> bool:
    """Whether the parts can be given back as they are: the same layout, or none on either side
    (same rank count and sizes: a program that declares no layout gets its own parts back)."""
    if saved is None or here is None:
        return saved is None and here is None
    return bool(saved == here.describe())


def _layouts(path: str, name: str, info: dict[str, Any], c: Coarray, saved_p: int,
             p: int) -> tuple[Partitioning | Grid, Partitioning | Grid]:
    """The saved and the current layout of coarray ``name``, or a BSPError saying why its parts
    cannot be placed on this rank count."""
    where = f"checkpoint {path}: coarray {name!r}"
    moved = f"saved on {saved_p} rank(s) with parts of {info['sizes']} elements, restored on {p}"
    if info.get("layout") is None or c.layout is None:
        missing = "it was saved without a layout" if info.get("layout") is None else \
            "it is registered here without a layout"
        raise BSPError(
            f"{where} was {moved}, and {missing}: hpcbsp cannot know which global elements each part "
            "holds (concatenating them in rank order would permute a cyclic array). Register it with "
            "its layout when saving and restoring (bsp.coarray(..., layout=Block(n, bsp.nprocs)), "
            "Cyclic, BlockCyclic or Grid from hpcbsp.runtime.api.partition), or restore on "
            f"{saved_p} rank(s) with the same part sizes")
    saved = from_description(info["layout"])
    here = c.layout
    same_kind = isinstance(saved, Grid) == isinstance(here, Grid)
    if not same_kind or _shape(saved) != _shape(here):
        raise BSPError(f"{where}: saved with layout {saved!r} of shape {_shape(saved)}, registered here "
                       f"with {here!r} of shape {_shape(here)}: the global arrays differ")
    if saved.p != saved_p or saved.local_sizes().tolist() != list(info["sizes"]):
        raise BSPError(f"{where} is damaged: its layout {saved!r} does not match its saved parts")
    return saved, here


def _shape(layout: Partitioning | Grid) -> tuple[int, ...]:
    return layout.shape if isinstance(layout, Grid) else (layout.n,)


def _redistribute(c: Coarray, pid: int, layouts: tuple[Partitioning | Grid, Partitioning | Grid],
                  part_of: Any) -> None:
    """Fill this rank's part with the global elements its layout gives it, each read from the
    saved part (and local index) that the saved layout had it in."""
    saved, here = layouts
    if isinstance(saved, Grid) and isinstance(here, Grid):
        mesh = np.meshgrid(*here.global_indices(pid), indexing="ij")  # row-major local order
        owners, local = saved.locate([m.reshape(-1) for m in mesh])
    elif isinstance(saved, Partitioning) and isinstance(here, Partitioning):
        owners, local = saved.locate(here.global_indices(pid))
    else:  # _layouts refuses a pair of different kinds
        raise AssertionError(f"layouts of different kinds: {saved!r}, {here!r}")
    owners, local = np.asarray(owners).reshape(-1), np.asarray(local).reshape(-1)
    for r in np.unique(owners):
        mine = owners == r
        c.flat[mine] = part_of(int(r))[f"coarray:{c.name}"].reshape(-1)[local[mine]]


def _fill(c: Coarray, pid: int, part_of: Any) -> None:
    """Copy this rank's part from the saved part of the same rank (same sizes on every rank)."""
    c.flat[:] = part_of(pid)[f"coarray:{c.name}"].reshape(-1)
