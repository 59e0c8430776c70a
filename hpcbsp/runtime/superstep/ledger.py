"""The superstep ledger: one record per superstep of work, h-relation and synchronisation time.

Each rank keeps its own records, in memory that does not grow with the number of supersteps:
the last ``$HPCBSP_LEDGER_WINDOW`` of them whole (``ledger[i]``, iteration, ``gather``), and
running aggregates over all of them (``ledger.aggregates``: count, totals and maxima of each
metric, the same per label).  ``ledger.stream(DIR)`` also writes every record to a file per rank
as the run goes (:mod:`.ledgerfiles`), which ``hpcbsp ledger merge DIR -o RUN.json`` (or
``save``) turns into the merged file.  ``save`` and ``gather`` are collective and combine all
ranks; cost models (``hpcbsp.cost``) read the saved files.  Counts follow one rule, documented on each
primitive: ``bytes_out``/``bytes_in`` are payload bytes moved between *different* ranks (record
headers and local copies are not counted), ``msgs_out``/``msgs_in`` count communication requests
(a put, a get, the batch of queue records one ``send`` call addresses to one rank, a mailbox
record).  ``records`` counts the requests the superstep's exchange delivered for this rank, its
own included: a superstep with records but no bytes between ranks still runs the exchange on the
ranks that have them, while one with none anywhere is the control step alone.  The h-relation
of superstep i is ``max over ranks of max(bytes_out, bytes_in)``.  ``ledger.bytes_to[d]``: payload
bytes this rank sent to rank d over all supersteps (saved as a ``.json``'s ``"bytes_to"``).
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Iterator

import numpy as np
from mpi4py import MPI

from ...kernels.syncstate import METRICS, OTHER, Rows
from ..environment import setting
from ..errors import UsageError
from .ledgerfiles import RankStream, merge, streams_of, write_records
from .ledgertext import CostModel, summarize


@dataclass
class Traffic:
    """What one superstep moved on this rank: payload bytes and requests between different ranks
    (the counting rule is in the module docstring).  The exchange, the collectives and FA-BSP
    mailboxes each return one; the context adds them up into the superstep's ledger record."""

    bytes_out: int = 0
    bytes_in: int = 0
    msgs_out: int = 0
    msgs_in: int = 0
    records: int = 0  #: requests the exchange delivered for this rank, its own included
    #: Payload bytes out by destination (puts, gets' replies, queue records, mailbox messages to
    #: their next hop; not the collectives'): the ledger adds them to :attr:`Ledger.bytes_to`.
    to: dict[int, int] = field(default_factory=dict)

    def sent(self, dest: int, nbytes: int) -> None:
        """``nbytes`` of payload out to rank ``dest``."""
        self.bytes_out += nbytes
        self.to[dest] = self.to.get(dest, 0) + nbytes

    def add(self, other: "Traffic") -> None:
        self.bytes_out += other.bytes_out
        self.bytes_in += other.bytes_in
        self.msgs_out += other.msgs_out
        self.msgs_in += other.msgs_in
        self.records += other.records
        for dest, nbytes in other.to.items():
            self.to[dest] = self.to.get(dest, 0) + nbytes


FIELDS = ("index", "label", "work_s", "sync_s", "bytes_out", "bytes_in", "msgs_out", "msgs_in")


@dataclass(frozen=True)
class SuperstepRecord:
    """What one rank did in one superstep."""

    index: int
    label: str | None
    work_s: float        #: local computation: from the end of the previous sync to this one
    sync_s: float        #: time inside the sync (waiting, exchange, applying puts)
    bytes_out: int
    bytes_in: int
    msgs_out: int
    msgs_in: int
    start_s: float       #: when the superstep's work began, seconds since the context started
    records: int = 0     #: requests the exchange delivered for this rank, its own included

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _metrics(values: tuple[float, ...]) -> dict[str, float]:
    """A tuple of ``Rows``' metrics as ``{name: value}``: seconds as floats, counts as ints."""
    return {name: (v if name.endswith("_s") else int(v)) for name, v in zip(METRICS, values)}


@dataclass(frozen=True)
class LabelStats:
    """The supersteps of one label: how many, and each metric's total and largest value."""

    count: int
    totals: dict[str, float]
    maxima: dict[str, float]


@dataclass(frozen=True)
class Aggregates:
    """This rank's supersteps since the context started, all of them (in the window or not):
    ``count``, and per metric (``work_s``, ``sync_s``, ``bytes_out``, ``bytes_in``, ``msgs_out``,
    ``msgs_in``, ``records``, as in :class:`SuperstepRecord`) the total and the largest value;
    ``by_label`` the same per label (None included; ``"(other labels)"`` gathers unhashable
    labels and those beyond the 4096th distinct one).  Counts are exact up to 2**53."""

    count: int
    totals: dict[str, float]
    maxima: dict[str, float]
    by_label: dict[Any, LabelStats]

    @classmethod
    def of(cls, rows: Rows) -> "Aggregates":
        return cls(len(rows), _metrics(rows.totals()), _metrics(rows.maxima()),
                   {label: LabelStats(n, _metrics(tot), _metrics(top))
                    for label, (n, tot, top) in rows.by_label().items()})


#: The key of :attr:`Aggregates.by_label` for the labels aggregated together.
OTHER_LABELS = OTHER


class Ledger:
    """This rank's superstep records; ``bsp.ledger``.

    ``len(ledger)`` counts every superstep recorded; ``ledger[i]`` is superstep row ``i`` (``-1``:
    the last) while it is in the window of the last ``window`` rows (an IndexError naming
    ``$HPCBSP_LEDGER_WINDOW`` once it has left); iteration, ``records``, ``gather`` and
    ``summary``'s table cover the window, ``aggregates`` every row.
    """

    def __init__(self, comm: MPI.Comm, origin: float | None = None, window: int | None = None):
        self._comm = comm  # the context's: freed when it closes
        self._rank = comm.Get_rank()
        self._size = comm.Get_size()
        #: ``time.perf_counter()`` when the context started: ``start_s`` counts from it, and the
        #: first superstep's work began then.
        self.origin = time.perf_counter() if origin is None else origin
        # Raw rows ``(index, label, t_sync, t_end, traffic)`` go in: the superstep's sync began at
        # ``t_sync`` and ended at ``t_end`` (perf_counter); its work began when the previous row
        # ended (or at ``origin``); ``traffic`` is a Traffic or None (nothing moved), of which
        # only the counts are kept.  Appending one is the cheapest thing an empty sync can do (a
        # compiled store); records are built on access.
        self._rows = Rows(setting("HPCBSP_LEDGER_WINDOW") if window is None else window, self.origin)
        #: The raw rows themselves (the compiled empty sync appends its row here).
        self.rows = self._rows
        #: ``add(row)`` records one superstep, a raw row as above (the store's own append, so
        #: that the sync's finisher makes no Python call).
        self.add: Callable[[tuple], None] = self._rows.append
        #: Payload bytes this rank sent to each rank over every superstep (:attr:`Traffic.to`; O(p)).
        self.bytes_to = np.zeros(self._size, np.int64)
        self._stream: RankStream | None = None
        self._keep = True  # whether save keeps the stream (and its folder) going

    @property
    def window(self) -> int:
        """How many of the most recent supersteps are kept whole."""
        return int(self._rows.window)

    @property
    def first(self) -> int:
        """The row number of the oldest superstep still in the window (0 until it is full)."""
        return int(self._rows.first)

    def totals(self) -> dict[str, float]:
        """Each metric's total over every superstep recorded (``aggregates.totals``, cheaper):
        the difference of two readings is what the supersteps between them did."""
        return _metrics(self._rows.totals())

    @property
    def aggregates(self) -> Aggregates:
        """Count, totals and maxima over every superstep recorded, per label too."""
        return Aggregates.of(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[SuperstepRecord]:
        for row in self._rows:
            yield self._record(row)

    def __getitem__(self, i: int) -> SuperstepRecord:
        return self._record(self._rows[i])

    def _record(self, row: tuple) -> SuperstepRecord:
        index, label, began, t_sync, t_end, bytes_out, bytes_in, msgs_out, msgs_in, records = row
        return SuperstepRecord(index, label, t_sync - began, t_end - t_sync, bytes_out, bytes_in, msgs_out, msgs_in,
                               began - self.origin, records)

    @property
    def records(self) -> list[SuperstepRecord]:
        """The records in the window."""
        return list(self)

    def stream(self, directory: str | os.PathLike[str], keep: bool = True) -> str:
        """Write every superstep record of this rank to files in ``directory`` as the run goes
        (in batches of at most 4096 rows; the formats: :mod:`.ledgerfiles`); every rank calls it
        with the same folder, before any row has left the window (best: right after the context
        opens).  ``save`` then merges the files (and, with ``keep`` False, ends the stream and
        removes the folder); so does ``hpcbsp ledger merge DIR -o OUT``, after the job.
        Returns the folder."""
        directory = os.fspath(directory)
        if self._stream is not None:
            raise UsageError(f"rank {self._rank}: the ledger already streams to {self._stream.directory}")
        rows = self._rows
        if rows.first:
            raise UsageError(f"rank {self._rank}: ledger.stream() after {len(rows)} supersteps, {rows.first} of "
                             f"which have left the window of {rows.window} rows ($HPCBSP_LEDGER_WINDOW): start the "
                             "stream right after the context opens")
        self._stream = RankStream(directory, self._rank, self._size, self.origin)
        self._keep = keep
        rows.flushed = 0
        rows.sink = self._stream
        return directory

    def stream_for(self, path: str | os.PathLike[str]) -> str:
        """Stream into ``path``'s folder of per-rank files (:func:`.ledgerfiles.streams_of`:
        ``PATH.ranks``) for a later ``save(path)``, which merges them into ``path`` and removes the
        folder (what the apps' ``--ledger PATH`` does); returns the folder."""
        return self.stream(streams_of(os.fspath(path)), keep=False)

    @property
    def streaming(self) -> str | None:
        """The folder this ledger streams to, or None."""
        return self._stream.directory if self._stream is not None else None

    def flush(self) -> None:
        """Write the rows still waiting to the stream's files (nothing when not streaming)."""
        if self._stream is not None:
            self._stream(self._rows)
            self._stream.totals(self.bytes_to)
            self._stream.flush()

    def end_stream(self) -> None:
        """Write the rows still waiting and close the stream (the context does it when it ends)."""
        if self._stream is not None:
            self.flush()
            self._stream.close()
            self._rows.sink = None
            self._stream = None

    def _check_open(self) -> None:
        if self._comm == MPI.COMM_NULL:
            raise UsageError(f"rank {self._rank}: the ledger's BSP context has ended, so its ranks "
                           "can no longer combine their records: call ledger.gather() or "
                           "ledger.save() inside the BSP block (the records of this rank are "
                           "still here: iterate over the ledger or call summary())")

    def gather(self, root: int | None = 0) -> list[dict[str, Any]] | None:
        """Collective: every rank's records in the window as dicts with a ``rank`` field.

        Returns the list on ``root`` (on every rank if ``root`` is None), ``None`` elsewhere.
        """
        self._check_open()
        mine = [dict(r.as_dict(), rank=self._rank) for r in self]
        if root is None:
            parts = self._comm.allgather(mine)
        else:
            gathered = self._comm.gather(mine, root=root)
            if gathered is None:
                return None
            parts = gathered
        return [rec for part in parts for rec in part]

    def gather_aggregates(self, root: int | None = 0) -> list[Aggregates] | None:
        """Collective: every rank's :attr:`aggregates` in rank order, on ``root`` (on every rank
        if ``root`` is None), ``None`` elsewhere (:mod:`.ledgersummary` combines them)."""
        self._check_open()
        mine = self.aggregates
        return self._comm.allgather(mine) if root is None else self._comm.gather(mine, root=root)

    def save(self, path: str | os.PathLike[str]) -> str | None:
        """Collective: write all ranks' records to ``path`` on rank 0 and return the path there.

        The format follows the extension: ``.json`` (``{"nprocs": P, "records": [...]}``),
        ``.csv`` (one row per rank and superstep), ``.trace.json`` (Chrome/Perfetto trace events,
        one track per rank; open in https://ui.perfetto.dev).  A streaming ledger writes every
        record: each rank flushes its stream and rank 0 merges the files (a shared folder);
        otherwise the records in the window are gathered, and rank 0 says on stderr when older
        ones have left it.
        """
        path = os.fspath(path)
        self._check_open()
        if self._stream is not None:
            directory, keep = self._stream.directory, self._keep
            if keep:
                self.flush()
            else:
                self.end_stream()
            self._comm.Barrier()
            if self._rank != 0:
                return None
            merge(directory, path)
            if not keep:
                shutil.rmtree(directory, ignore_errors=True)
            return path
        dropped = self._comm.allreduce(self._rows.first, op=MPI.SUM)
        matrix = self._comm.gather(self.bytes_to.tolist(), root=0)
        records = self.gather(root=0)
        if records is None:
            return None
        if dropped:
            print(f"ledger: {path} holds the last {self._rows.window} supersteps of each rank; {dropped} older "
                  "records had left the window ($HPCBSP_LEDGER_WINDOW): stream them with bsp.ledger.stream(DIR) "
                  "(the apps' --ledger does)", file=sys.stderr)
        write_records(path, records, self._size, matrix)
        return path

    def summary(self, profile: CostModel | None = None, max_rows: int = 12) -> str:
        """A short text summary of this rank's supersteps in the window (see :func:`summarize`
        for all ranks; at most ``max_rows`` rows), and the totals of all of them when older ones
        have left the window; with a machine ``profile``, the predicted cost w + g·h + l beside
        the measured time.  Not collective."""
        text = summarize([dict(r.as_dict(), rank=self._rank) for r in self], max_rows=max_rows, profile=profile)
        if not self._rows.first:
            return text
        agg = self.aggregates
        return (f"{text}\n  (the table holds the last {self._rows.window} of {agg.count:,} supersteps, "
                f"$HPCBSP_LEDGER_WINDOW; all of them: w {1e3 * agg.totals['work_s']:.3f} ms, "
                f"sync {1e3 * agg.totals['sync_s']:.3f} ms, {agg.totals['bytes_out']:,} bytes out, "
                f"{agg.totals['bytes_in']:,} in)")


assert tuple(f.name for f in fields(SuperstepRecord))[: len(FIELDS)] == FIELDS
