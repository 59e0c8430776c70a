"""RUNS.csv: measured run times per worker count, read and checked.

The file has a header row and at least the columns ``workers`` (K, an integer >= 1) and
``seconds`` (time per iteration or per run, > 0); several rows with the same K are repeats.
Other columns are kept as text (``list_length``, if present and constant, is used by ``fit``).
Every problem is reported as one :class:`~hpcbsp.cost.errors.CostInputError` line naming the
file, the line and the column.
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np

from .errors import CostInputError

REQUIRED = ("workers", "seconds")


@dataclass(frozen=True)
class Runs:
    """Measured runs: one entry per row of RUNS.csv."""

    workers: np.ndarray  # int64, >= 1
    seconds: np.ndarray  # float64, > 0
    extra: dict[str, list[str]] = field(default_factory=dict)
    source: str = "<memory>"

    def __post_init__(self) -> None:
        if self.workers.shape != self.seconds.shape or self.workers.ndim != 1:
            raise CostInputError("workers and seconds must be 1-d and of the same length")

    def __len__(self) -> int:
        return int(self.workers.size)

    def distinct_workers(self) -> np.ndarray:
        return np.unique(self.workers)

    def by_workers(self) -> dict[int, np.ndarray]:
        """Seconds grouped by worker count, in ascending K."""
        return {int(k): self.seconds[self.workers == k] for k in self.distinct_workers()}

    def list_length(self) -> int | None:
        """The ``list_length`` column's value when it is present and the same on every row."""
        values = set(self.extra.get("list_length", []))
        if len(values) != 1:
            return None
        try:
            length = int(float(values.pop()))
        except ValueError:
            return None
        return length if length >= 1 else None

    @classmethod
    def from_arrays(cls, workers: Iterable[float], seconds: Iterable[float], source: str = "<memory>") -> "Runs":
        """Runs from two sequences, checked like a file's rows."""
        w = np.asarray(list(workers), dtype=float)
        s = np.asarray(list(seconds), dtype=float)
        _check_values(w, s, source, lines=None)
        return cls(w.astype(np.int64), s, {}, source)


def _check_values(workers: np.ndarray, seconds: np.ndarray, source: str, lines: list[int] | None) -> None:
    def where(i: int) -> str:
        return f"{source}:{lines[i]}" if lines else f"{source} row {i + 1}"

    for i, (k, t) in enumerate(zip(workers, seconds)):
        if not math.isfinite(k) or k < 1 or k != int(k):
            raise CostInputError(f"{where(i)}: workers must be an integer >= 1, got {k:g}")
        if not math.isfinite(t):
            raise CostInputError(f"{where(i)}: seconds must be a finite number, got {t}")
        if t < 0:
            raise CostInputError(f"{where(i)}: negative time {t:g} s")
        if t == 0:
            raise CostInputError(f"{where(i)}: seconds must be > 0 (relative errors need a positive time)")


def read_runs(path: str | os.PathLike) -> Runs:
    """Read and check a RUNS.csv file.

    Raises
    ------
    CostInputError
        Unreadable file, no header, a missing ``workers``/``seconds`` column, a non-numeric
        or out-of-range value, or no data rows.
    """
    source = os.fspath(path)
    try:
        with open(source, newline="") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise CostInputError(f"cannot read runs file {source}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise CostInputError(f"{source} is not a CSV text file: {exc}") from None
    numbered = [(i + 1, row) for i, row in enumerate(rows) if row and any(cell.strip() for cell in row)]
    numbered = [(n, row) for n, row in numbered if not row[0].lstrip().startswith("#")]
    if not numbered:
        raise CostInputError(f"{source} is empty: expected a header with columns {', '.join(REQUIRED)}")
    header = [cell.strip().lower() for cell in numbered[0][1]]
    missing = [name for name in REQUIRED if name not in header]
    if missing:
        raise CostInputError(f"{source} lacks column(s) {', '.join(missing)} "
                             f"(header: {','.join(header)}); need at least workers,seconds")
    data = numbered[1:]
    if not data:
        raise CostInputError(f"{source} has a header but no data rows")
    col = {name: header.index(name) for name in header}
    workers: list[float] = []
    seconds: list[float] = []
    lines: list[int] = []
    extra: dict[str, list[str]] = {name: [] for name in header if name not in REQUIRED}
    for line, row in data:
        if len(row) < len(header):
            raise CostInputError(f"{source}:{line}: {len(row)} fields, the header has {len(header)}")
        for name, out in (("workers", workers), ("seconds", seconds)):
            cell = row[col[name]].strip()
            try:
                out.append(float(cell))
            except ValueError:
                raise CostInputError(f"{source}:{line}: {name} is not a number: {cell!r}") from None
        for name in extra:
            extra[name].append(row[col[name]].strip())
        lines.append(line)
    w = np.asarray(workers)
    s = np.asarray(seconds)
    _check_values(w, s, source, lines)
    return Runs(w.astype(np.int64), s, extra, source)


def write_runs(path: str | os.PathLike, rows: Iterable[Mapping[str, object]],
               columns: Iterable[str] | None = None) -> None:
    """Write RUNS.csv rows (dicts with at least ``workers`` and ``seconds``)."""
    rows = list(rows)
    names = list(columns) if columns is not None else list(REQUIRED) + sorted(
        {key for row in rows for key in row} - set(REQUIRED))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=names, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: _fmt(row.get(k, "")) for k in names})


def _fmt(value: object) -> object:
    # repr of a Python float round-trips exactly; numpy scalars repr as "np.float64(...)".
    return repr(float(value)) if isinstance(value, (float, np.floating)) else value
