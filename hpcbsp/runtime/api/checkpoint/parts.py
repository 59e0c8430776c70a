"""The ranks' parts of a checkpoint: their records, the data files that hold them, the index.

A rank's *record* is its parts of the saved coarrays, in ``meta.json``'s order, as raw bytes one
after the other.  A data file holds one record (``rank{r}.bin``) or, saved ``per_node``, the
records of every rank of one node in rank order (``node{k}.bin``; :func:`files_of` numbers the
nodes).  ``index.npy`` (a numpy structured array, :data:`ROW`) has one fixed-size row per saved
rank: its file, the record's offset and length in it, the record's checksum, and the length of
each coarray's part.  Rank 0 writes the index and reads it at a restore; each rank is sent the
rows of the saved ranks it restores from (:func:`~hpcbsp.runtime.api.checkpoint.restore`), and
reads those records only, each file opened once.  Local to one process; every error is a
:class:`BSPError` that names the checkpoint and the file.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ...errors import BSPError
from .format import INDEX, checksum, data_file, file_checksum, read_checked, write_synced

if TYPE_CHECKING:
    from ..coarray import Coarray


def row_dtype(ncoarrays: int) -> np.dtype:
    """An index row of a checkpoint of ``ncoarrays`` coarrays."""
    return np.dtype([("file", "<i8"), ("offset", "<i8"), ("nbytes", "<i8"), ("checksum", "S32"),
                     ("sizes", "<i8", (ncoarrays,))])


#: A record as the pieces it is made of (each coarray's part, its bytes not copied).
Record = Sequence["bytes | memoryview"]


def record(coarrays: Sequence["Coarray"]) -> tuple[list[memoryview], list[int]]:
    """This rank's record of ``coarrays`` (views of their parts' bytes) and the length of each
    part (elements)."""
    return ([np.ascontiguousarray(c.flat).view(np.uint8).data for c in coarrays],
            [int(c.flat.size) for c in coarrays])


def files_of(leaders: Sequence[int]) -> list[int]:
    """The data file of each rank, from each rank's leader (the rank that writes its file: itself,
    or the lowest rank of its node): leaders numbered in increasing order."""
    number = {lead: k for k, lead in enumerate(sorted(set(leaders)))}
    return [number[lead] for lead in leaders]


def write_records(folder: str, number: int, per_node: bool, records: Sequence[Record]) -> list[int]:
    """Write data file ``number`` with ``records`` one after the other (flushed to disk); the
    offset of each.  Raises OSError."""
    offsets = np.concatenate([[0], np.cumsum([sum(len(p) for p in r) for r in records])]).astype(np.int64)

    def write(fh: object) -> None:
        for r in records:
            for piece in r:
                fh.write(piece)  # type: ignore[attr-defined]
    write_synced(os.path.join(folder, data_file(number, per_node)), write)
    return [int(o) for o in offsets[:-1]]


def write_index(folder: str, rows: Sequence[tuple[int, int, int, str, list[int]]], ncoarrays: int) -> str:
    """Write ``index.npy`` (one row per saved rank, in rank order); its checksum.  Raises OSError."""
    index = np.array([(f, o, n, c.encode(), s) for f, o, n, c, s in rows], dtype=row_dtype(ncoarrays))
    fpath = os.path.join(folder, INDEX)
    write_synced(fpath, lambda fh: np.save(fh, index, allow_pickle=False))
    return file_checksum(fpath)


def read_index(path: str, meta: dict) -> np.ndarray:
    """The index of the checkpoint at ``path``, checked against its checksum and shape."""
    try:
        index = np.load(read_checked(path, INDEX, meta), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise BSPError(f"checkpoint {path} is damaged: {INDEX} cannot be read ({exc})") from None
    if index.dtype != row_dtype(len(meta["coarrays"])) or index.shape != (int(meta["nprocs"]),):
        raise BSPError(f"checkpoint {path} is damaged: {INDEX} does not match meta.json")
    return index


def read_records(path: str, per_node: bool, rows: dict[int, np.void],
                 dtypes: Sequence[np.dtype]) -> dict[int, list[np.ndarray]]:
    """The parts of the saved ranks ``rows`` (rank: its index row) as arrays, one per coarray of
    ``dtypes``, each record checked against its checksum; every data file opened once."""
    out: dict[int, list[np.ndarray]] = {}
    by_file: dict[int, list[int]] = {}
    for rank, row in rows.items():
        by_file.setdefault(int(row["file"]), []).append(rank)
    for number, ranks in sorted(by_file.items()):
        name = data_file(number, per_node)
        try:
            fd = os.open(os.path.join(path, name), os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            raise BSPError(f"checkpoint {path} is incomplete: {name} is missing") from None
        except OSError as exc:
            raise BSPError(f"checkpoint {path}: {name} cannot be read ({exc.strerror or exc})") from None
        try:  # open, pread each record, close: no buffering, no seeks
            for rank in sorted(ranks, key=lambda r: int(rows[r]["offset"])):
                row = rows[rank]
                data = _pread(fd, int(row["nbytes"]), int(row["offset"]))
                if len(data) != int(row["nbytes"]) or checksum(data) != row["checksum"].decode():
                    raise BSPError(f"checkpoint {path} is damaged: {name} does not match its "
                                   f"checksum (rank {rank}'s part; truncated or modified)")
                out[rank] = _split(data, row["sizes"], dtypes, f"checkpoint {path}: {name}")
        except OSError as exc:
            raise BSPError(f"checkpoint {path}: {name} cannot be read ({exc.strerror or exc})") from None
        finally:
            os.close(fd)
    return out


def _pread(fd: int, n: int, offset: int) -> bytes:
    """``n`` bytes at ``offset`` (fewer only at the end of the file): one ``pread`` a record of
    under 2 GiB, more for a larger one (Linux reads at most 2 GiB - 4 KiB a call)."""
    chunks, got = [], 0
    while got < n:
        chunk = os.pread(fd, n - got, offset + got)
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _split(data: bytes, sizes: np.ndarray, dtypes: Sequence[np.dtype], where: str) -> list[np.ndarray]:
    """A record cut into its parts."""
    parts, at = [], 0
    for n, dt in zip(sizes.tolist(), dtypes):
        end = at + n * dt.itemsize
        if end > len(data):
            raise BSPError(f"{where} is damaged: a part runs past its record")
        parts.append(np.frombuffer(data, dtype=dt, count=n, offset=at))
        at = end
    if at != len(data):
        raise BSPError(f"{where} is damaged: its record is longer than its parts")
    return parts
