"""Checkpoint and restore at superstep boundaries, also onto a different number of ranks.

A checkpoint is a directory of files that hpcbsp wrote: a marker, ``meta.json`` (what is saved,
with a checksum of every other file) and one ``rank{r}.npz`` per rank (:mod:`.format`).

Writing is atomic: every rank writes into ``PATH.tmp``, the ranks agree that all writes
succeeded, and only then does rank 0 swap the new directory in (``PATH`` -> ``PATH.old``,
``PATH.tmp`` -> ``PATH``, remove ``PATH.old``).  A crash or a kill at any point leaves the
previous checkpoint readable (``restore`` falls back to ``PATH.old`` if the swap was
interrupted), and a failed write never replaces it.  Files are read with ``allow_pickle=False``:
loading never runs code from the file.

Nothing that hpcbsp did not write is replaced or removed.  Before it writes anything, a save
checks ``PATH``, ``PATH.tmp`` and ``PATH.old``: each must be absent, an empty directory, or
hpcbsp's own (:mod:`.safety`).  Anything else is refused with a :class:`BSPError` on every rank,
and so is a checkpoint of another program at ``PATH``.  :func:`check_target` makes the same check,
for command lines that want to refuse a bad path before the work starts.

Coarrays are matched by name (those registered with ``scratch=True``, such as halos and
buffers, are not saved), with the layout they were registered with.  On the rank count it was
saved on and with the same part sizes, each rank gets its part back; on another rank count (or
other part sizes) a coarray is redistributed by its layouts, and one without a layout is refused
there (:mod:`.redistribute`).  State passed as keywords is *replicated* (the same on every rank,
e.g. an iteration counter or a global vector): rank 0's copy is saved, and every rank checks at
save time that its copy is identical.  Assumes a file system that all ranks see (one node, or a
cluster's shared file system).

:func:`save` and :func:`restore` are collective (``bsp.checkpoint``, ``bsp.restore``): an error on
any rank is raised on every rank, naming the first rank that had it.  :func:`check_target`,
:func:`exists` and :func:`describe` are local.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import BadInput, BSPError, UsageError
from ...superstep.control import Kind
from .format import (
    MARKER,
    Saved,
    default_program,
    describe,
    load,
    make_meta,
    part_file,
    read_meta,
    state_digest,
    write_meta,
    write_part,
)
from .redistribute import place
from .safety import check_target, exists, remove_own, stage, swap, why_not

if TYPE_CHECKING:
    from ..context import BSP

__all__ = ["Checkpoint", "MARKER", "Saved", "check_target", "default_program", "describe", "exists",
           "restore", "save"]


@dataclass
class Checkpoint:
    """What :meth:`BSP.restore` returns: the saved superstep, rank count and replicated state."""

    path: str
    program: str
    superstep: int
    nprocs: int
    state: dict[str, np.ndarray]


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
    in which the ranks agree on the state's names first).  See the module docstring."""
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
        error = why_not(path, program)
        if error is None:
            try:
                stage(tmp)
            except OSError as exc:
                error = f"cannot create {tmp}: {exc}"
    _agree_or_raise(bsp, error, f"checkpoint {path}")

    # 2. Every rank writes its file; replicated state must really be replicated.
    error, digest = None, None
    try:
        payload = {f"coarray:{name}": c.flat for name, c in coarrays.items()}
        if bsp.pid == 0:
            payload.update({f"state:{name}": arr for name, arr in arrays.items()})
        digest = write_part(tmp, bsp.pid, payload)
    except OSError as exc:
        error = f"cannot write {os.path.join(tmp, part_file(bsp.pid))}: {exc}"
    reports = bsp.comm.gather((error, digest, state_digest(arrays)), root=0)

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
            meta = make_meta(program, bsp.superstep, bsp.nprocs, coarrays, arrays,
                             [d for _, d, _ in reports])
            try:
                write_meta(tmp, meta)
                swap(path, tmp)
            except OSError as exc:
                error = f"cannot complete {path}: {exc}"
        if error:
            try:
                remove_own(tmp)  # the previous checkpoint stays as it was
            except OSError:
                pass
    _agree_or_raise(bsp, error, f"checkpoint {path}")
    return path


def restore(bsp: "BSP", path: str, program: str | None = None) -> Checkpoint:
    """``bsp.restore``: read a checkpoint into the registered coarrays (collective, after a
    control step); the context's superstep counter continues from the saved one.  Returns the
    checkpoint's superstep and state."""
    bsp.extension.agree(Kind.CHECKPOINT, "restore", lambda: f"restore({path!r})")
    path = os.path.abspath(os.fspath(path))
    coarrays = {c.name: c for c in bsp.extension.coarrays() if not c.scratch and c.registered}
    error, result = None, None
    try:
        path, meta = read_meta(path)
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

        def part_of(r: int) -> dict[str, np.ndarray]:  # each rank file loaded (and checked) once
            if r not in cache:
                cache[r] = load(path, r, meta)
            return cache[r]

        for name, c in coarrays.items():
            place(c, saved[name], path, int(meta["nprocs"]), bsp.pid, bsp.nprocs, part_of)
        state0 = cache.get(0) or load(path, 0, meta)
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
