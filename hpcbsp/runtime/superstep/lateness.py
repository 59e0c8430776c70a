"""Who arrived last at the sync, live: the setting, the watch and its line.

With ``$HPCBSP_LATENESS`` (or ``BSP(lateness=MS)``) set to a threshold in milliseconds, every
control step carries one more word per rank: its work since its last superstep ended, packed
with its rank (:class:`hpcbsp.kernels.controlstep.Lateness`).  The step's MAX reduction then
gives every rank the latest rank, its work and the earliest rank's work, at no extra message.
A rank counts as late in a superstep when its work exceeds the earliest rank's by more than the
threshold (the earliest, not the median: one MAX reduction gives the maximum and the minimum
only; at 2 ranks they are the same, and the offline report, :mod:`hpcbsp.report`, uses the
median of the other ranks' work from every row).  When one rank was late in
:data:`~hpcbsp.kernels.controlstep.LATE_COUNT` of the last
:data:`~hpcbsp.kernels.controlstep.LATE_WINDOW` supersteps, rank 0 writes :func:`line` to
stderr (at most once per window); :func:`parse` reads it back.  Off (the default), the record
and the step are those of a context without it.

Offline, from every rank's ledger rows (:func:`late_steps`): in each superstep the rank whose
work was longest arrived last; its lateness is its work minus the median of the *other* ranks'
work (at 2 ranks the other rank's: the median of all would halve a clear delay), and the wait it
caused is the sum over the others of its work minus theirs.  A superstep is named late
(:func:`late_text`) when that lateness exceeds both 10 % of the median work of all ranks and
1 ms (:data:`LATE_FRACTION`, :data:`LATE_FLOOR_S`).  ``bsp.ledger.summary()`` and
``hpcbsp report`` (:mod:`hpcbsp.report`) use them.
"""
from __future__ import annotations

import re
import struct
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ...kernels.controlstep import Lateness
from ...kernels.syncstate import Rows
from ...util import envparse
from ..environment import setting
from ..errors import BadInput
from ..failure.lines import PREFIX, ranks_on_hosts

__all__ = ["LATE_FLOOR_S", "LATE_FRACTION", "LATE_RECORD", "Late", "LateSteps", "late_lines", "late_steps",
           "late_text", "line", "milliseconds", "parse", "threshold", "watch", "work_matrix"]

_NFIELDS = 5  # the control step's plain fields (.control)
#: The control record with the lateness field: 6 fields and their negations (its size: the
#: Python step's buffers; ``Lateness.pack`` and ``unpack`` write and read it in one call each).
LATE_RECORD = struct.Struct(f"<{2 * _NFIELDS + 2}q")


def threshold(value: float | str | None, rank: int) -> float:
    """The threshold in seconds (0.0: off) for ``BSP(lateness=value)``: ``value`` in milliseconds
    (a number, ``"off"`` or None: ``$HPCBSP_LATENESS``); :class:`BadInput` in one line for a bad
    one."""
    if value is None:
        return float(setting("HPCBSP_LATENESS"))
    try:
        if isinstance(value, bool):
            raise ValueError("")
        return envparse.milliseconds_or_off(str(value).strip())
    except ValueError:
        raise BadInput(f"rank {rank}: BSP(lateness={value!r}): give a number of milliseconds >= 0 or 'off' "
                       "(the threshold by which the last rank must be late to be named)") from None


def line(rank: int, hosts: Sequence[str] | None, count: int, window: int, mean_s: float) -> str:
    """``[hpcbsp] rank 2 (on node4) arrived last in 8 of the last 10 supersteps, +38 ms on average``."""
    return (f"{PREFIX} rank {ranks_on_hosts([rank], hosts)} arrived last in {count} of the last {window} "
            f"supersteps, +{1e3 * mean_s:.0f} ms on average")


@dataclass(frozen=True)
class Late:
    """A lateness line read back."""

    rank: int
    host: str | None
    count: int
    window: int
    mean_ms: float


_LINE = re.compile(r"\[hpcbsp\] rank (?P<rank>\d+)(?: \(on (?P<host>[^)\s]+)\))? arrived last in (?P<count>\d+) "
                   r"of the last (?P<window>\d+) supersteps, \+(?P<ms>\d+) ms on average$")


def parse(text: str) -> Late | None:
    """The :class:`Late` that a line of :func:`line` says, or None for any other line."""
    m = _LINE.search(text.strip())
    if m is None:
        return None
    return Late(int(m["rank"]), m["host"], int(m["count"]), int(m["window"]), float(m["ms"]))


def watch(rows: Rows, rank: int, seconds: float, hosts: Callable[[], Sequence[str] | None]) -> Lateness | None:
    """The control step's :class:`~hpcbsp.kernels.controlstep.Lateness` for a threshold of
    ``seconds`` (None when 0: off): on rank 0 it writes :func:`line` to stderr, naming the
    host that ``hosts()`` gives."""
    if seconds <= 0:
        return None

    def said(late: int, count: int, window: int, mean_s: float) -> None:
        print(line(late, hosts(), count, window, mean_s), file=sys.stderr, flush=True)

    return Lateness(rows, rank, seconds, said if rank == 0 else None)



# -- offline: from every rank's rows -------------------------------------------------------------
#: A superstep is named late when its last rank's lateness exceeds this fraction of the median
#: work and :data:`LATE_FLOOR_S`.
LATE_FRACTION = 0.10
LATE_FLOOR_S = 1e-3


def work_matrix(records: Iterable[dict[str, Any]]) -> tuple[np.ndarray, list[Any], np.ndarray]:
    """``(indices, labels, work)`` of ledger records (``rank``, ``index``, ``label``,
    ``work_s``): the supersteps in order, their labels (rank 0's, else the first seen) and the
    work in seconds as an array of supersteps x ranks (NaN where a rank has no row)."""
    rows = [(int(r["index"]), int(r["rank"]), float(r["work_s"]), r.get("label")) for r in records]
    if not rows:
        return np.zeros(0, np.int64), [], np.zeros((0, 0))
    indices = np.unique(np.fromiter((r[0] for r in rows), np.int64, len(rows)))
    nranks = 1 + max(r[1] for r in rows)
    work = np.full((indices.size, nranks), np.nan)
    labels: list[Any] = [None] * indices.size
    at = np.searchsorted(indices, [r[0] for r in rows])
    for j, (_, rank, w, label) in zip(at, rows):
        work[j, rank] = w
        if labels[j] is None or rank == 0:
            labels[j] = label if label != "" else None
    return indices, labels, work


@dataclass(frozen=True)
class LateSteps:
    """Per superstep (arrays of the supersteps' length): the rank that arrived last, its
    lateness over the median of the others' work, the median work of all ranks, the wait it
    caused the others (summed) and whether it is named late."""

    rank: np.ndarray
    late_s: np.ndarray
    median_s: np.ndarray
    caused_s: np.ndarray
    named: np.ndarray


def late_steps(work: np.ndarray) -> LateSteps:
    """:class:`LateSteps` of a work matrix (supersteps x ranks, NaN: no row; :func:`work_matrix`)."""
    steps, nranks = work.shape
    filled = np.where(np.isnan(work), -np.inf, work)
    rank = filled.argmax(axis=1) if nranks else np.zeros(steps, np.int64)
    top = filled[np.arange(steps), rank] if nranks else np.zeros(steps)
    others = work.copy()
    others[np.arange(steps), rank] = np.nan
    counted = (~np.isnan(others)).sum(axis=1) if nranks else np.zeros(steps, np.int64)
    with np.errstate(all="ignore"):
        median_others = np.array([np.nanmedian(row) if n else t for row, n, t in zip(others, counted, top)])
        median_all = np.array([np.nanmedian(row) for row in work]) if nranks else np.zeros(steps)
        caused = np.nansum(top[:, None] - work, axis=1) if nranks else np.zeros(steps)
    late = top - median_others
    named = (late > LATE_FRACTION * median_all) & (late > LATE_FLOOR_S)
    return LateSteps(rank.astype(np.int64), late, median_all, caused, named)


def milliseconds(seconds: float) -> str:
    """``40 ms``, ``1.5 ms``: whole milliseconds from 10 on, one decimal below."""
    ms = 1e3 * seconds
    return f"{ms:.0f} ms" if abs(ms) >= 9.95 else f"{ms:.1f} ms"


def late_text(index: int, label: Any, rank: int, late_s: float) -> str:
    """``superstep 5 (step5): rank 2 arrived last, +40 ms`` (no parentheses without a label)."""
    name = f"superstep {index}" + (f" ({label})" if label is not None else "")
    return f"{name}: rank {rank} arrived last, +{milliseconds(late_s)}"


def late_lines(records: list[dict[str, Any]], shown: int = 3) -> list[str]:
    """``  late: superstep 5 (step5): rank 2 arrived last, +40 ms`` for the first ``shown`` late
    supersteps of ledger records, and how many more there were (``bsp.ledger.summary()``)."""
    indices, labels, work = work_matrix(records)
    late = late_steps(work)
    named = np.flatnonzero(late.named)
    out = [f"  late: {late_text(int(indices[j]), labels[j], int(late.rank[j]), float(late.late_s[j]))}"
           for j in named[:shown]]
    if named.size > shown:
        out.append(f"  late: {named.size - shown} more supersteps with a late rank (hpcbsp report names them all)")
    return out
