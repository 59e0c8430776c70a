"""The ledger's files: the merged formats the cost tools read, and the per-rank stream.

Merged formats (:func:`write_records`, by the path's extension): ``.json``
(``{"nprocs": P, "records": [...]}``), ``.csv`` (one row per rank and superstep), ``.trace.json``
(Chrome/Perfetto trace events, one track per rank).  Records are written as they come, so that a
file of any length is written in bounded memory.

The stream (:class:`RankStream`, started by ``bsp.ledger.stream(DIR)``): each rank writes, into
``DIR``, ``rank-NNNNN.json`` (a header: the format, rank, nprocs, the context's origin),
``rank-NNNNN.rows`` (every row, appended in batches of at most ``Rows.flush_every`` as the run
goes: :data:`ROW_DTYPE`, 80 bytes a row, native byte order) and ``rank-NNNNN.labels`` (JSON lines:
``{"id": k, "label": L}`` for each distinct label when it is first written, ``{"row": n,
"label": L}`` for a row whose label has no number; a label that is no JSON value is written as
its ``str``) and ``rank-NNNNN.to`` (the rank's payload bytes per destination so far, a JSON list,
replaced at each flush; a merged ``.json`` carries them as ``"bytes_to"``, a p x p matrix).
:func:`merge` (``hpcbsp ledger merge DIR -o OUT``) reads them back, rank by rank in
bounded memory, into the records ``bsp.ledger.gather()`` gives (rank 0's first, each rank's in
superstep order) and writes them as above.
"""
from __future__ import annotations

import csv
import json
import os
from typing import Any, Iterable, Iterator

import numpy as np

from ...kernels.syncstate import FIELD_TYPES
from ...kernels.syncstate import FIELDS as ROW_FIELDS
from ..errors import BadInput

__all__ = ["FORMAT", "ROW_DTYPE", "RankStream", "merge", "read_stream", "stream_bytes_to", "stream_records",
           "streams_of", "write_records"]

#: The header's ``format`` of a stream this module writes and reads.
FORMAT = "hpcbsp ledger stream 1"
#: A streamed row, as ``Rows`` keeps it (``hpcbsp.kernels.syncstate.FIELDS``).
ROW_DTYPE = np.dtype(list(zip(ROW_FIELDS, FIELD_TYPES, strict=True)))
#: The columns of a merged ``.csv``.
CSV_COLUMNS = ("rank", "index", "label", "work_s", "sync_s", "bytes_out", "bytes_in", "msgs_out", "msgs_in",
               "start_s", "records")
_CHUNK = 65536  # rows read at a time by a merge


def streams_of(path: str) -> str:
    """The folder of per-rank files that stand for the merged ledger ``path`` while it streams
    (``bsp.ledger.stream_for(path)``, the apps' ``--ledger PATH``): ``PATH.ranks``."""
    return f"{path}.ranks"


def _name(directory: str, rank: int, suffix: str) -> str:
    return os.path.join(directory, f"rank-{rank:05d}.{suffix}")


class RankStream:
    """One rank's stream into ``directory``: the sink of its ``Rows`` (called with them whenever
    ``flush_every`` rows wait), writing the rows ``flushed`` to the last and moving ``flushed``."""

    def __init__(self, directory: str, rank: int, nprocs: int, origin: float):
        os.makedirs(directory, exist_ok=True)
        with open(_name(directory, rank, "json"), "w") as fh:
            json.dump({"format": FORMAT, "rank": rank, "nprocs": nprocs, "origin": origin,
                       "fields": list(ROW_FIELDS)}, fh)
        self.directory = directory
        self._rows = open(_name(directory, rank, "rows"), "wb")
        self._labels = open(_name(directory, rank, "labels"), "w")
        self._known = 0  # distinct labels written so far
        self._to = _name(directory, rank, "to")

    def __call__(self, rows: Any) -> None:
        start, stop = rows.flushed, len(rows)
        if stop == start:
            return
        block = np.frombuffer(rows.raw(start, stop), dtype=ROW_DTYPE)
        labels = rows.labels()
        lines = [json.dumps({"id": k, "label": labels[k]}, default=str) for k in range(self._known, len(labels))]
        self._known = len(labels)
        for at in np.flatnonzero(block["label"] == -2):  # rows whose label has no number
            n = start + int(at)
            lines.append(json.dumps({"row": n, "label": rows[n][1]}, default=str))
        if lines:
            self._labels.write("\n".join(lines) + "\n")
        self._rows.write(block.tobytes())
        rows.flushed = stop

    def totals(self, bytes_to: np.ndarray) -> None:
        """Write the rank's payload bytes per destination so far (``rank-NNNNN.to``, a JSON list,
        replaced at each call: O(p), whatever the rows)."""
        with open(self._to + ".tmp", "w") as fh:
            json.dump(bytes_to.tolist(), fh)
        os.replace(self._to + ".tmp", self._to)

    def flush(self) -> None:
        """Hand what was written to the operating system (so that another process reads it)."""
        self._labels.flush()
        self._rows.flush()

    def close(self) -> None:
        """Flush the files and close them (the rows must have been handed over first)."""
        self._labels.close()
        self._rows.close()


def _header(directory: str, rank: int) -> dict[str, Any]:
    path = _name(directory, rank, "json")
    try:
        with open(path) as fh:
            head = json.load(fh)
    except OSError as exc:
        raise BadInput(f"ledger stream {directory}: cannot read {path}: {exc.strerror or exc} "
                       "(was every rank's stream written there?)") from None
    except ValueError:
        raise BadInput(f"ledger stream {directory}: {path} is not a stream header (JSON)") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT or head.get("fields") != list(ROW_FIELDS):
        raise BadInput(f"ledger stream {directory}: {path} is not a stream of this hpcbsp ({FORMAT!r})")
    return head


def read_stream(directory: str, rank: int) -> Iterator[dict[str, Any]]:
    """Rank ``rank``'s streamed records in ``directory``, as ``bsp.ledger.gather()`` gives them."""
    head = _header(directory, rank)
    origin = float(head["origin"])
    names: dict[int, Any] = {}
    odd: dict[int, Any] = {}
    with open(_name(directory, rank, "labels")) as fh:
        for line in fh:
            entry = json.loads(line)
            (names if "id" in entry else odd)[entry.get("id", entry.get("row"))] = entry["label"]
    path = _name(directory, rank, "rows")
    if os.path.getsize(path) % ROW_DTYPE.itemsize:
        raise BadInput(f"ledger stream {directory}: {path} ends inside a row (a rank stopped while writing it?)")
    with open(path, "rb") as fh:
        n = 0
        while True:
            block = np.fromfile(fh, dtype=ROW_DTYPE, count=_CHUNK)
            if not block.size:
                return
            work = block["t_sync"] - block["t_began"]
            sync = block["t_end"] - block["t_sync"]
            start = block["t_began"] - origin
            for j, row in enumerate(block.tolist()):
                label = row[1]
                yield {"index": row[0], "label": None if label == -1 else odd[n + j] if label == -2 else names[label],
                       "work_s": float(work[j]), "sync_s": float(sync[j]), "bytes_out": row[5], "bytes_in": row[6],
                       "msgs_out": row[7], "msgs_in": row[8], "start_s": float(start[j]), "records": row[9],
                       "rank": rank}
            n += block.size


def stream_records(directory: str) -> tuple[int, Iterator[dict[str, Any]]]:
    """``(nprocs, records)``: every rank's streamed records in ``directory``, rank 0's first, each
    rank's in superstep order, read rank by rank in bounded memory.  :class:`BadInput` for a
    missing or unreadable stream (every rank's header is checked before the first record)."""
    if not os.path.isdir(directory):
        raise BadInput(f"ledger stream {directory}: no such folder (give the folder bsp.ledger.stream wrote)")
    nprocs = int(_header(directory, 0)["nprocs"])
    for rank in range(1, nprocs):
        _header(directory, rank)  # all there before any record is read
    return nprocs, (rec for rank in range(nprocs) for rec in read_stream(directory, rank))


def stream_bytes_to(directory: str, nprocs: int) -> list[list[int]] | None:
    """Every rank's payload bytes per destination in a stream (``rank-NNNNN.to``), or None when
    a rank's file is missing (a stream of an older hpcbsp) or damaged."""
    matrix = []
    for rank in range(nprocs):
        try:
            with open(_name(directory, rank, "to")) as fh:
                row = json.load(fh)
        except (OSError, ValueError):
            return None
        if not (isinstance(row, list) and len(row) == nprocs and all(isinstance(v, int) for v in row)):
            return None
        matrix.append(row)
    return matrix


def merge(directory: str, out: str) -> tuple[int, int]:
    """Write every rank's stream in ``directory`` to ``out`` (``.json``, ``.csv`` or
    ``.trace.json``); return ``(nprocs, records)``.  :class:`BadInput` for a missing or
    unreadable stream."""
    nprocs, stream = stream_records(directory)
    count = 0

    def records() -> Iterator[dict[str, Any]]:
        nonlocal count
        for rec in stream:
            count += 1
            yield rec

    write_records(out, records(), nprocs, stream_bytes_to(directory, nprocs))
    return nprocs, count


def write_records(path: str, records: Iterable[dict[str, Any]], nprocs: int,
                  bytes_to: list[list[int]] | None = None) -> None:
    """Write ledger records (as gathered: with a ``rank``) in the format of ``path``'s extension,
    one record at a time, through a temporary file renamed at the end.  ``bytes_to`` (``.json``
    only: ``"bytes_to"``): row r holds the payload bytes rank r sent to each rank over the run."""
    if not path.endswith((".json", ".csv")):
        raise ValueError(f"ledger path {path!r}: use a .json, .csv or .trace.json extension")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", newline="") as fh:
        if path.endswith(".csv"):
            writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
            writer.writeheader()
            for rec in records:
                writer.writerow({c: rec.get(c) for c in CSV_COLUMNS})
        else:
            trace = path.endswith(".trace.json")
            fh.write('{"traceEvents": [' if trace else f'{{"nprocs": {nprocs}, "records": [')
            sep = "\n"
            for rec in records:
                for item in (_trace_events(rec) if trace else (rec,)):
                    fh.write(sep + json.dumps(item))
                    sep = ",\n"
            matrix = "" if trace or bytes_to is None else f', "bytes_to": {json.dumps(bytes_to)}'
            fh.write('\n], "displayTimeUnit": "ms"}\n' if trace else f"\n]{matrix}}}\n")
    os.replace(tmp, path)


def _trace_events(rec: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A record's two trace events: its work, then its sync, on the track of its rank."""
    rank = rec["rank"]
    start_us = float(rec["start_s"]) * 1e6
    work_us = float(rec["work_s"]) * 1e6
    name = rec["label"] or f"superstep {rec['index']}"
    args = {k: rec[k] for k in ("index", "bytes_out", "bytes_in", "msgs_out", "msgs_in")}
    return ({"name": name, "cat": "work", "ph": "X", "pid": 0, "tid": rank, "ts": start_us, "dur": work_us,
             "args": args},
            {"name": "sync", "cat": "sync", "ph": "X", "pid": 0, "tid": rank, "ts": start_us + work_us,
             "dur": float(rec["sync_s"]) * 1e6, "args": args})
