"""The superstep ledger: one record per superstep of work, h-relation and synchronisation time.

Each rank keeps its own records.  ``save`` and ``gather`` are collective and combine all ranks;
cost models (``hpcbsp.cost``) read the saved files.  Counts follow one rule, documented on each
primitive: ``bytes_out``/``bytes_in`` are payload bytes moved between *different* ranks (record
headers and local copies are not counted), ``msgs_out``/``msgs_in`` count communication requests
(a put, a get, the batch of queue records one ``send`` call addresses to one rank, a mailbox
record).  ``records`` counts the requests the superstep's exchange delivered for this rank, its
own included: a superstep with records but no bytes between ranks still runs the exchange on the
ranks that have them, while one with none anywhere is the control step alone.  The h-relation
of superstep i is ``max over ranks of max(bytes_out, bytes_in)``.
"""
from __future__ import annotations

import csv
import json
import os
import time
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Iterable, Iterator, Protocol

from mpi4py import MPI

from ...kernels.syncstate import Rows
from ..errors import UsageError


class CostModel(Protocol):
    """What :func:`summarize` needs of a machine profile (``hpcbsp.cost.profile.Profile`` is one)."""

    def superstep_cost(self, w: float, h_bytes: float, messages: float, local: bool = False) -> float:
        """Predicted seconds of a superstep with work ``w``, h-relation ``h_bytes`` (``local``:
        some rank had records, even if none moved between ranks)."""


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

    def add(self, other: "Traffic") -> None:
        self.bytes_out += other.bytes_out
        self.bytes_in += other.bytes_in
        self.msgs_out += other.msgs_out
        self.msgs_in += other.msgs_in
        self.records += other.records


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


class Ledger:
    """This rank's superstep records; ``bsp.ledger``."""

    def __init__(self, comm: MPI.Comm, origin: float | None = None):
        self._comm = comm  # the context's: freed when it closes
        self._rank = comm.Get_rank()
        self._size = comm.Get_size()
        #: ``time.perf_counter()`` when the context started: ``start_s`` counts from it, and the
        #: first superstep's work began then.
        self.origin = time.perf_counter() if origin is None else origin
        # Raw rows ``(index, label, t_sync, t_end, traffic)``: the superstep's sync began at
        # ``t_sync`` and ended at ``t_end`` (perf_counter); its work began when the previous row
        # ended (or at ``origin``); ``traffic`` is a Traffic or None (nothing moved).  Appending
        # one is the cheapest thing an empty sync can do (32 bytes in a compiled store); records
        # are built on access.
        self._rows = Rows()
        #: The raw rows themselves, append only (the compiled empty sync appends its row here).
        self.rows = self._rows
        #: ``add(row)`` records one superstep, a raw row as above (the store's own append, so
        #: that the sync's finisher makes no Python call).
        self.add: Callable[[tuple], None] = self._rows.append

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[SuperstepRecord]:
        began = self.origin
        for row in self._rows:
            yield self._record(row, began)
            began = row[3]

    def __getitem__(self, i: int) -> SuperstepRecord:
        rows = self._rows
        i = range(len(rows))[i]  # negative indices, and an IndexError out of range
        return self._record(rows[i], rows[i - 1][3] if i else self.origin)

    def _record(self, row: tuple, began: float) -> SuperstepRecord:
        index, label, t_sync, t_end, traffic = row
        if traffic is None:
            return SuperstepRecord(index, label, t_sync - began, t_end - t_sync, 0, 0, 0, 0, began - self.origin)
        return SuperstepRecord(index, label, t_sync - began, t_end - t_sync, traffic.bytes_out, traffic.bytes_in,
                               traffic.msgs_out, traffic.msgs_in, began - self.origin, traffic.records)

    @property
    def records(self) -> list[SuperstepRecord]:
        return list(self)

    def gather(self, root: int | None = 0) -> list[dict[str, Any]] | None:
        """Collective: every rank's records as dicts with a ``rank`` field.

        Returns the list on ``root`` (on every rank if ``root`` is None), ``None`` elsewhere.
        """
        if self._comm == MPI.COMM_NULL:
            raise UsageError(f"rank {self._rank}: the ledger's BSP context has ended, so its ranks "
                           "can no longer combine their records: call ledger.gather() or "
                           "ledger.save() inside the BSP block (the records of this rank are "
                           "still here: iterate over the ledger or call summary())")
        mine = [dict(r.as_dict(), rank=self._rank) for r in self]
        if root is None:
            parts = self._comm.allgather(mine)
        else:
            gathered = self._comm.gather(mine, root=root)
            if gathered is None:
                return None
            parts = gathered
        return [rec for part in parts for rec in part]

    def save(self, path: str | os.PathLike[str]) -> str | None:
        """Collective: write all ranks' records to ``path`` on rank 0 and return the path there.

        The format follows the extension: ``.json`` (``{"nprocs": P, "records": [...]}``),
        ``.csv`` (one row per rank and superstep), ``.trace.json`` (Chrome/Perfetto trace events,
        one track per rank; open in https://ui.perfetto.dev).
        """
        path = os.fspath(path)
        records = self.gather(root=0)
        if records is None:
            return None
        write_records(path, records, self._size)
        return path

    def summary(self, profile: CostModel | None = None) -> str:
        """A short text summary of this rank's supersteps (see :func:`summarize` for all ranks);
        with a machine ``profile``, the predicted cost w + g·h + l beside the measured time."""
        return summarize([dict(r.as_dict(), rank=self._rank) for r in self], profile=profile)


def write_records(path: str, records: list[dict[str, Any]], nprocs: int) -> None:
    """Write gathered ledger records in the format given by ``path``'s extension."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    if path.endswith(".trace.json"):
        with open(tmp, "w") as fh:
            json.dump(_trace_events(records), fh)
    elif path.endswith(".json"):
        with open(tmp, "w") as fh:
            json.dump({"nprocs": nprocs, "records": records}, fh, indent=1)
    elif path.endswith(".csv"):
        columns = ["rank", *FIELDS, "start_s", "records"]
        with open(tmp, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns)
            writer.writeheader()
            for rec in records:
                writer.writerow({c: rec.get(c) for c in columns})
    else:
        raise ValueError(f"ledger path {path!r}: use a .json, .csv or .trace.json extension")
    os.replace(tmp, path)


def _trace_events(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    events = []
    for rec in records:
        rank = rec["rank"]
        start_us = float(rec["start_s"]) * 1e6
        work_us = float(rec["work_s"]) * 1e6
        name = rec["label"] or f"superstep {rec['index']}"
        args = {k: rec[k] for k in ("index", "bytes_out", "bytes_in", "msgs_out", "msgs_in")}
        events.append({"name": name, "cat": "work", "ph": "X", "pid": 0, "tid": rank,
                       "ts": start_us, "dur": work_us, "args": args})
        events.append({"name": "sync", "cat": "sync", "ph": "X", "pid": 0, "tid": rank,
                       "ts": start_us + work_us, "dur": float(rec["sync_s"]) * 1e6, "args": args})
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def per_superstep(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Combine ranks: per superstep, w = max work, sync = max sync time, h = max bytes in/out."""
    steps: dict[int, dict[str, Any]] = {}
    for rec in records:
        i = int(rec["index"])
        s = steps.setdefault(i, {"index": i, "label": rec["label"], "w_s": 0.0, "sync_s": 0.0,
                                 "measured_s": 0.0, "h_bytes": 0, "h_msgs": 0, "msgs": 0, "ranks": 0,
                                 "records": 0})
        s["records"] = max(int(s["records"]), int(rec.get("records") or 0))  # (older ledgers: none)
        s["w_s"] = max(float(s["w_s"]), float(rec["work_s"]))
        s["sync_s"] = max(float(s["sync_s"]), float(rec["sync_s"]))
        s["measured_s"] = max(float(s["measured_s"]), float(rec["work_s"]) + float(rec["sync_s"]))
        for nbytes, msgs in ((rec["bytes_out"], rec["msgs_out"]), (rec["bytes_in"], rec["msgs_in"])):
            if int(nbytes) > int(s["h_bytes"]):
                s["h_bytes"], s["h_msgs"] = int(nbytes), int(msgs)
        s["msgs"] = int(s["msgs"]) + int(rec["msgs_out"])
        s["ranks"] = int(s["ranks"]) + 1
    return [steps[i] for i in sorted(steps)]


def summarize(records: list[dict[str, Any]], max_rows: int = 12,
              profile: CostModel | None = None) -> str:
    """A human-readable table of the supersteps (all ranks combined) and totals.

    With a machine ``profile`` (``hpcbsp-cost probe``), each row also shows the BSP prediction
    w + g·h + l beside the measured time (max over ranks of work + sync), and a last line gives
    the model's mean and largest error.
    """
    steps = per_superstep(records)
    if not steps:
        return "ledger: no supersteps recorded"
    nranks = max(int(s["ranks"]) for s in steps)
    pred = [profile.superstep_cost(float(s["w_s"]), float(s["h_bytes"]), float(s["h_msgs"]),
                                   local=int(s["records"]) > 0) for s in steps] if profile is not None else None
    extra = f" {'measured':>10} {'predicted':>10}" if pred else ""
    lines = [f"ledger: {len(steps)} superstep{'s' if len(steps) != 1 else ''} on {nranks} "
             f"rank{'s' if nranks != 1 else ''}  (w, sync: max over ranks; h: max bytes in or out of one rank; "
             "times in ms; requests: puts, gets, queue sends per destination and mailbox records, "
             "summed over ranks, not MPI messages)",
             f"  {'step':>5} {'label':<18} {'w':>10} {'sync':>10} {'h [bytes]':>12} {'requests':>8}{extra}"]
    rows = list(range(len(steps))) if len(steps) <= max_rows else \
        list(range(max_rows - 2)) + [len(steps) - 2, len(steps) - 1]
    for j, i in enumerate(rows):
        s = steps[i]
        if len(steps) > max_rows and j == max_rows - 2:
            lines.append(f"  {'...':>5}")
        row = (f"  {s['index']:>5} {str(s['label'] or '')[:18]:<18} {1e3 * float(s['w_s']):>10.3f} "
               f"{1e3 * float(s['sync_s']):>10.3f} {int(s['h_bytes']):>12,} {int(s['msgs']):>8,}")
        if pred:
            row += f" {1e3 * float(s['measured_s']):>10.3f} {1e3 * pred[i]:>10.3f}"
        lines.append(row)
    tw = sum(float(s["w_s"]) for s in steps)
    ts = sum(float(s["sync_s"]) for s in steps)
    th = sum(int(s["h_bytes"]) for s in steps)
    total = f"  {'total':>5} {'':<18} {1e3 * tw:>10.3f} {1e3 * ts:>10.3f} {th:>12,}"
    if pred:
        measured = [float(s["measured_s"]) for s in steps]
        total += f" {'':>8} {1e3 * sum(measured):>10.3f} {1e3 * sum(pred):>10.3f}"
        errs = [abs(p - m) / m for p, m in zip(pred, measured) if m > 0]
        lines.append(total)
        if errs:
            lines.append(f"  BSP model w + g·h + l vs measured: mean error {100 * sum(errs) / len(errs):.1f}%, "
                         f"max {100 * max(errs):.1f}%, total {100 * (sum(pred) - sum(measured)) / sum(measured):+.1f}%")
        return "\n".join(lines)
    lines.append(total)
    return "\n".join(lines)


assert tuple(f.name for f in fields(SuperstepRecord))[: len(FIELDS)] == FIELDS
