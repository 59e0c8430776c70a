"""A saved ledger as arrays, and the report's text.

:func:`load` reads a ledger of any rank count: a merged ``.json`` or ``.csv`` (what
``bsp.ledger.save`` and ``hpcbsp ledger merge`` write; read by :func:`hpcbsp.cost.bspmodel.load_ledger`)
or a stream folder (``bsp.ledger.stream(DIR)``, the apps' ``--ledger PATH`` while it is
``PATH.ranks``; read rank by rank by :func:`~hpcbsp.runtime.superstep.ledgerfiles.read_stream`).
Every problem is one :class:`~hpcbsp.cost.errors.CostInputError` line.  :class:`Run` holds the
supersteps x ranks arrays; its times split as the timeline shows them: *work* (the ledger's
``work_s``), *wait* (the longest work of the superstep minus this rank's: the time it waited for
the last rank) and *exchange* (the rest of its ``sync_s``, at least 0).  ``bytes_to`` is the
ledger's matrix of payload bytes per rank pair (``"bytes_to"``; running totals each rank kept,
O(p) per rank whatever the supersteps), where it has one.  :func:`text` is the
summary on stdout: one line per late superstep (:func:`~hpcbsp.runtime.superstep.lateness.late_text`;
at most ``limit``), then one line per rank that arrived late.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cost.bspmodel import check_records, read_ledger
from ..cost.errors import CostInputError
from ..runtime.errors import BadInput
from ..runtime.superstep.lateness import LateSteps, late_steps, late_text, milliseconds, work_matrix
from ..runtime.superstep.ledgerfiles import stream_bytes_to, stream_records
from ..util.text import plural

__all__ = ["FARM_RESULT", "FARM_START", "Run", "farm_iterations", "load", "text"]

#: The label of the superstep that begins each iteration of the BSF farm (``hpcbsp.farm``).
FARM_START = "farm:order"
#: The label of the superstep(s) that end it.
FARM_RESULT = "farm:result"


@dataclass
class Run:
    """A ledger as arrays of supersteps x ranks (NaN or 0 where a rank has no row)."""

    source: str
    indices: np.ndarray       #: superstep numbers, in order
    labels: list[Any]         #: their labels (None: none)
    work: np.ndarray          #: seconds
    sync: np.ndarray          #: seconds
    start: np.ndarray         #: when the work began, seconds since the context started
    bytes_out: np.ndarray
    bytes_in: np.ndarray
    records: list[dict[str, Any]]  #: the checked records (what the cost model reads)
    #: Payload bytes from rank (row) to rank (column) over the run, where the ledger has them
    #: (``"bytes_to"`` of a merged .json, ``rank-NNNNN.to`` of a stream); None otherwise.
    bytes_to: np.ndarray | None = None

    @property
    def nranks(self) -> int:
        return int(self.work.shape[1])

    @property
    def steps(self) -> int:
        return int(self.work.shape[0])

    def late(self) -> LateSteps:
        """Who arrived last in each superstep (:func:`~hpcbsp.runtime.superstep.lateness.late_steps`)."""
        return late_steps(self.work)

    def measured(self) -> np.ndarray:
        """Seconds per superstep: the max over ranks of work + sync (as :mod:`hpcbsp.cost` measures)."""
        return np.nan_to_num(self.work + self.sync).max(axis=1) if self.nranks else np.zeros(self.steps)

    def split(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(work, wait, exchange)`` in seconds, supersteps x ranks (see the module docstring)."""
        work = np.nan_to_num(self.work)
        wait = work.max(axis=1, keepdims=True) - work
        exchange = np.clip(np.nan_to_num(self.sync) - wait, 0.0, None)
        return work, np.minimum(wait, np.nan_to_num(self.sync)), exchange


def farm_iterations(run: Run) -> np.ndarray:
    """Measured seconds of each iteration of the BSF farm in ``run``: a superstep labelled
    :data:`FARM_START` and the ``farm:result`` ones right after it (the farm's ``farm:latency``
    and ``farm:done`` belong to no iteration); :class:`CostInputError` when the ledger has none
    (not a farm's run)."""
    starts = [j for j, label in enumerate(run.labels) if label == FARM_START]
    if not starts:
        raise CostInputError(f"{run.source}: no superstep is labelled {FARM_START!r}: a BSF model (--model) is "
                             "compared with the iterations of a run of the BSF farm (hpcbsp.farm)")
    measured = run.measured()
    ends = [next((j for j in range(a + 1, run.steps) if run.labels[j] != FARM_RESULT), run.steps) for a in starts]
    return np.array([measured[a:b].sum() for a, b in zip(starts, ends)])


def _records(path: str) -> tuple[list[dict[str, Any]], list[list[int]] | None]:
    if os.path.isdir(path):
        try:
            nprocs, records = stream_records(path)
            return list(records), stream_bytes_to(path, nprocs)
        except BadInput as exc:
            raise CostInputError(str(exc)) from None
    if not os.path.exists(path):
        raise CostInputError(f"ledger {path}: no such file or folder (give a .json or .csv that bsp.ledger.save or "
                             "hpcbsp ledger merge wrote, or the folder bsp.ledger.stream wrote)")
    return read_ledger(path)


def load(path: str | os.PathLike[str]) -> Run:
    """Read the ledger at ``path`` (see the module docstring)."""
    source = os.fspath(path)
    raw, matrix = _records(source)
    records = check_records(raw, source)
    for rec in records:
        if rec["rank"] < 0 or rec["index"] < 0:
            raise CostInputError(f"{source}: a record has a negative rank or superstep")
    indices, labels, work = work_matrix(records)
    shape = work.shape
    sync, start = np.full(shape, np.nan), np.full(shape, np.nan)
    bytes_out, bytes_in = np.zeros(shape, np.int64), np.zeros(shape, np.int64)
    at = np.searchsorted(indices, [r["index"] for r in records])
    for j, rec, given in zip(at, records, raw):
        k = rec["rank"]
        sync[j, k] = rec["sync_s"]
        start[j, k] = _seconds(given.get("start_s"))
        bytes_out[j, k] = rec["bytes_out"]
        bytes_in[j, k] = rec["bytes_in"]
    missing = np.isnan(start)  # (a ledger without start_s: each rank's supersteps back to back)
    if missing.any():
        ends = np.cumsum(np.nan_to_num(work) + np.nan_to_num(sync), axis=0)
        start[missing] = (ends - np.nan_to_num(work) - np.nan_to_num(sync))[missing]
    bytes_to = None
    if matrix is not None:
        bytes_to = np.array(matrix, dtype=np.int64)
        if bytes_to.shape != (work.shape[1], work.shape[1]):
            raise CostInputError(f"{source}: \"bytes_to\" is {len(matrix)} rows for {work.shape[1]} ranks")
    return Run(source, indices, labels, work, sync, start, bytes_out, bytes_in, records, bytes_to)


def _seconds(value: Any) -> float:
    try:
        return float(value) if value not in (None, "") else float("nan")
    except (TypeError, ValueError):
        return float("nan")


def text(run: Run, limit: int = 50) -> str:
    """The report's text: a header, a line per late superstep (the first ``limit``), a line per
    rank that arrived late."""
    late = run.late()
    named = np.flatnonzero(late.named)
    head = (f"{run.source}: {plural(run.steps, 'superstep')} on {plural(run.nranks, 'rank')}, "
            f"{plural(named.size, 'superstep')} with a late rank (its work beyond the median of the others' by more "
            "than 10 % of the median work and 1 ms)")
    lines = [head]
    lines += [late_text(int(run.indices[j]), run.labels[j], int(late.rank[j]), float(late.late_s[j]))
              for j in named[:limit]]
    if named.size > limit:
        lines.append(f"... and {named.size - limit:,} more (the page's lateness figure shows them all)")
    for rank in np.unique(late.rank[named]):
        mine = named[late.rank[named] == rank]
        lines.append(f"rank {rank}: last in {plural(mine.size, 'superstep')}, +{milliseconds(float(late.late_s[mine].mean()))} "
                     f"on average, the others waited {milliseconds(float(late.caused_s[mine].sum()))} for it in all")
    return "\n".join(lines)
