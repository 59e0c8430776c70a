"""Checkpoint and restore at superstep boundaries, also onto a different number of ranks.

A checkpoint is a directory of files that hpcbsp wrote (:mod:`.format`): a marker, ``meta.json``
(what is saved, in a size that does not grow with the rank count), ``index.npy`` (where each
rank's part is, and its checksum: :mod:`.parts`), ``state.npz`` and the data files: one per rank
(``rank{r}.bin``), or with ``per_node=True`` one per node (``node{k}.bin``: the ranks of a node
send their parts to its lowest rank, which writes them; fewer files for the file system's
metadata server, at the cost of a gather of a node's parts in one process's memory).

What each rank touches does not grow with the rank count: rank 0 alone checks the folder, writes
and reads ``meta.json``, the index and the state, and swaps the directories; it broadcasts the
metadata and sends each rank the index rows of the saved ranks it restores from, and each rank
then opens only the data files that hold them: its own (or its node's) on the rank count it was
saved on, those of the saved ranks whose parts overlap its new part on another one
(:mod:`.redistribute` computes which from the layouts).  A checkpoint of format version 1 (hpcbsp
before issue 44) is restored too (:mod:`.legacy`); a save always writes version 2.

Writing is atomic: every rank writes into ``PATH.tmp``, the ranks agree that all writes
succeeded, and only then does rank 0 swap the new directory in (``PATH`` -> ``PATH.old``,
``PATH.tmp`` -> ``PATH``, remove ``PATH.old``).  A crash or a kill at any point leaves the
previous checkpoint readable (``restore`` falls back to ``PATH.old`` if the swap was
interrupted), and a failed write never replaces it.  Files are read with ``allow_pickle=False``
or as raw bytes: loading never runs code from the file.

Nothing that hpcbsp did not write is replaced or removed.  Before it writes anything, a save
checks ``PATH``, ``PATH.tmp`` and ``PATH.old``: each must be absent, an empty directory, or
hpcbsp's own (:mod:`.safety`).  Anything else is refused with a :class:`BSPError` on every rank,
and so is a checkpoint of another program at ``PATH``.  :func:`check_target` makes the same check,
for command lines that want to refuse a bad path before the work starts.

Coarrays are matched by name (those registered with ``scratch=True``, such as halos and
buffers, are not saved), with the layout they were registered with.  On the rank count it was
saved on and with the same layout (or none on either side and the same part sizes), each rank
gets its part back; on another rank count (or layout) a coarray is redistributed by its layouts,
and one without a layout is refused there (:mod:`.redistribute`).  State passed as keywords is
*replicated* (the same on every rank, e.g. an iteration counter or a global vector): rank 0's copy
is saved, every rank checks at save time that its copy is identical, and a restore broadcasts it.
Assumes a file system that all ranks see (one node, or a cluster's shared file system).

:func:`save` and :func:`restore` are collective (``bsp.checkpoint``, ``bsp.restore``): an error on
any rank is raised on every rank, naming the first rank that had it.  :func:`check_target`,
:func:`exists`, :func:`describe` and :func:`describe_newest` are local.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...errors import BadInput, BSPError, UsageError
from ...superstep.control import Kind
from . import legacy
from .format import (
    INDEX,
    MARKER,
    STATE,
    Saved,
    checksum,
    data_file,
    default_program,
    describe,
    describe_newest,
    make_meta,
    read_meta,
    read_state,
    state_digest,
    write_meta,
    write_state,
)
from .parts import files_of, read_index, read_records, record, write_index, write_records
from .redistribute import place, sources
from .safety import check_target, exists, remove_own, stage, swap, why_not

if TYPE_CHECKING:
    from ..coarray import Coarray
    from ..context import BSP

__all__ = ["Checkpoint", "MARKER", "Saved", "check_target", "default_program", "describe", "describe_newest", "exists",
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


def _saved(bsp: "BSP") -> "dict[str, Coarray]":
    """The coarrays a checkpoint holds, by name, in registration order."""
    return {c.name: c for c in bsp.extension.coarrays() if not c.scratch and c.registered}


def save(bsp: "BSP", path: str, program: str | None, state: dict[str, Any], per_node: bool = False) -> str:
    """``bsp.checkpoint``: write a checkpoint (collective, between supersteps: a control step
    in which the ranks agree on the state's names and ``per_node`` first).  See the module
    docstring."""
    ext = bsp.extension
    if ext.pending:
        raise UsageError(f"rank {bsp.pid}: checkpoint between supersteps only: {ext.pending} "
                         "request(s) are pending; call sync() first")
    ext.agree(Kind.CHECKPOINT, f"checkpoint {sorted(state)} {bool(per_node)}",
              lambda: f"checkpoint(state={sorted(state)}, per_node={bool(per_node)})")
    path = os.path.abspath(os.fspath(path))
    program = program or default_program()
    arrays = {name: np.asarray(value) for name, value in state.items()}
    for name, arr in arrays.items():
        if arr.dtype.hasobject:
            raise BSPError(f"rank {bsp.pid}: checkpoint state {name!r} holds Python objects; "
                           "only numeric/string numpy data can be saved (no pickle)")
    coarrays = _saved(bsp)
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

    # 2. Every rank's record lands in its own data file, or in its node's (written by the
    #    node's lowest rank); replicated state must really be replicated.
    leaders = list(bsp.nodes.node) if per_node else list(range(bsp.nprocs))
    files = files_of(leaders)
    pieces, sizes = record(list(coarrays.values()))
    if per_node:
        error, offset = _write_by_node(bsp, tmp, leaders[bsp.pid], files[bsp.pid], b"".join(pieces))
    else:
        try:
            error, offset = None, write_records(tmp, bsp.pid, False, [pieces])[0]
        except OSError as exc:
            error, offset = f"cannot write {os.path.join(tmp, data_file(bsp.pid, False))}: {exc}", 0
    row = (files[bsp.pid], offset, sum(len(p) for p in pieces), checksum(*pieces), sizes)
    reports = bsp.comm.gather((error, row, state_digest(arrays)), root=0)

    # 3. Rank 0 (the gather's root, which has the reports) checks everything, writes the index,
    #    the state and meta.json last, and swaps the directories.
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
            try:
                sums = {INDEX: write_index(tmp, [r for _, r, _ in reports], len(coarrays)),
                        STATE: write_state(tmp, arrays)}
                write_meta(tmp, make_meta(program, bsp.superstep, bsp.nprocs, len(set(files)), per_node,
                                          coarrays, arrays, sums))
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


def _write_by_node(bsp: "BSP", tmp: str, leader: int, number: int, data: bytes) -> tuple[str | None, int]:
    """Collective: the ranks of each node send their records to the node's lowest rank, which
    writes them into data file ``number``; this rank's error (None) and its record's offset."""
    node = bsp.comm.Split(leader, bsp.pid)
    try:
        records = node.gather(data, root=0)
        replies: list[tuple[str | None, int]] | None = None
        if records is not None:
            try:
                replies = [(None, o) for o in write_records(tmp, number, True, [[r] for r in records])]
            except OSError as exc:
                why = f"cannot write {os.path.join(tmp, data_file(number, True))}: {exc}"
                replies = [(why, 0)] * len(records)
        error, offset = node.scatter(replies, root=0)
        return error, int(offset)
    finally:
        node.Free()


def restore(bsp: "BSP", path: str, program: str | None = None) -> Checkpoint:
    """``bsp.restore``: read a checkpoint into the registered coarrays (collective, after a
    control step); the context's superstep counter continues from the saved one.  Returns the
    checkpoint's superstep and state."""
    bsp.extension.agree(Kind.CHECKPOINT, "restore", lambda: f"restore({path!r})")
    path = os.path.abspath(os.fspath(path))
    coarrays = _saved(bsp)

    # 1. Rank 0 reads the metadata, the index and the state, and broadcasts all but the index.
    head: tuple[str | None, str, dict[str, Any], dict[str, np.ndarray]] = (None, path, {}, {})
    index = None
    if bsp.pid == 0:
        try:
            found, meta = read_meta(path)
            want = program or default_program()
            if meta["program"] != want:
                raise BSPError(f"checkpoint {found} was written by program {meta['program']!r}, not "
                               f"{want!r}")
            if meta["version"] == 1:  # (hpcbsp before issue 44)
                meta = legacy.as_current(meta)
                head = (None, found, meta, legacy.read_state(found, meta))
            else:
                index = read_index(found, meta)
                head = (None, found, meta, read_state(found, meta))
        except BSPError as exc:
            head = (str(exc), path, {}, {})
        except (KeyError, TypeError, ValueError) as exc:
            head = (_damaged(path, exc), path, {}, {})
    failed, path, meta, state = bsp.comm.bcast(head, root=0)
    if failed:
        raise BadInput(f"restore failed on rank 0: {failed}")

    # 2. Every rank says which saved ranks' parts it needs, and is sent their index rows.
    error, need, names = None, [], list(meta.get("coarrays", {}))
    saved_p = int(meta.get("nprocs", 0))
    try:
        missing = sorted(set(coarrays) - set(names))
        extra = sorted(set(names) - set(coarrays))
        if missing or extra:
            raise BSPError(f"checkpoint {path} does not match this program's coarrays: "
                           + (f"not in the checkpoint: {', '.join(missing)}; " if missing else "")
                           + (f"not registered here: {', '.join(extra)}" if extra else ""))
        need = sorted({r for name in names for r in sources(coarrays[name], meta["coarrays"][name], path,
                                                             saved_p, bsp.pid, bsp.nprocs)})
    except BSPError as exc:
        error = str(exc)
    except (KeyError, TypeError, ValueError) as exc:
        error = _damaged(path, exc)
    asks = bsp.comm.gather(need, root=0)
    rows = bsp.comm.scatter([{r: index[r] for r in ask} if index is not None else dict.fromkeys(ask)
                             for ask in asks] if asks is not None else None, root=0)

    # 3. Every rank reads those parts only, and places them.
    if error is None:
        try:
            dtypes = [np.dtype(meta["coarrays"][name]["dtype"]) for name in names]
            parts = (legacy.read_parts(path, meta, sorted(rows), names) if meta["version"] == 1
                     else read_records(path, bool(meta["per_node"]), rows, dtypes))
            for i, name in enumerate(names):
                place(coarrays[name], meta["coarrays"][name], path, saved_p, bsp.pid, bsp.nprocs,
                      {r: p[i] for r, p in parts.items()}.__getitem__)
        except BSPError as exc:
            error = str(exc)
        except (KeyError, TypeError, ValueError) as exc:
            error = _damaged(path, exc)
    _agree_or_raise(bsp, error, "restore")
    bsp.superstep = int(meta["superstep"])
    return Checkpoint(path, meta["program"], int(meta["superstep"]), saved_p, state)


def _damaged(path: str, exc: Exception) -> str:
    return f"checkpoint {path} is damaged: unexpected content ({type(exc).__name__}: {exc})"
