"""A list of equal-shaped rows in bounded memory: the newest in a list, older ones on disk.

:class:`Spooled` holds rows that are tuples of plain numbers, one per field of a numpy structured
dtype (``[("worker", int64), ("time_s", float64)]``: ``(3, 0.25)``).  The newest rows (at most
``buffer`` of them, 4096 by default) are a Python list; each time it fills, it is written to an
unnamed temporary file (``tempfile.TemporaryFile`` under ``$TMPDIR``: removed when the object is
closed or collected, and by the system when the process dies) as raw rows of the dtype.  So a
run of any length holds at most ``buffer`` rows in memory, and ``dtype.itemsize`` bytes a row on
disk; reading gives back exactly what was stored (int64 and float64 hold a Python int below
2**63 and a float exactly: what comes back is plain ``int`` and ``float``).

It behaves as the list it replaces for what a run log does with one: ``append``, ``extend``,
``len``, truthiness, iteration in order (file blocks, then the list), ``x[i]`` (negative too)
and ``x[a:b]`` (a list; a row from the file costs a seek), ``==`` with a list or another
``Spooled`` (row by row), ``sort(key=, reverse=)`` (every row read into memory for the sort:
once, at the end of a run) and ``clear``.  Pickling and :mod:`hpcbsp.elastic.snapshot` store
the rows themselves (``__getstate__``/``__setstate__``), so a restored one spools again.
"""
from __future__ import annotations

import tempfile
from collections.abc import Sequence
from typing import IO, Any, Callable, Iterable, Iterator, overload

import numpy as np

#: Rows kept in memory before a batch goes to the file.
BUFFER_ROWS = 4096


class Spooled(Sequence[tuple]):
    """Rows of ``dtype`` (see the module docstring); ``buffer``: rows kept in memory."""

    def __init__(self, dtype: np.dtype, rows: Iterable[tuple] = (), buffer: int = BUFFER_ROWS):
        if buffer < 1:
            raise ValueError(f"a Spooled list keeps at least 1 row in memory, not {buffer}")
        self.dtype = np.dtype(dtype)
        self.buffer = buffer
        self._rows: list[tuple] = []
        self._file: IO[bytes] | None = None
        self._on_disk = 0  # rows in the file, before those in _rows
        self.extend(rows)

    # ------------------------------------------------------------------ adding rows
    def append(self, row: tuple) -> None:
        self._rows.append(row)
        if len(self._rows) >= self.buffer:
            self._spill()

    def extend(self, rows: Iterable[tuple]) -> None:
        for row in rows:
            self.append(row)

    def _spill(self) -> None:
        if self._file is None:
            self._file = tempfile.TemporaryFile(prefix="hpcbsp-spooled-")
        block = np.array(self._rows, dtype=self.dtype)
        self._file.seek(self._on_disk * self.dtype.itemsize)
        self._file.write(block.tobytes())
        self._on_disk += len(self._rows)
        self._rows = []

    def clear(self) -> None:
        self.close()
        self._rows = []

    def close(self) -> None:
        """Remove the file (the rows on disk are gone; the object keeps only those in memory)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._on_disk = 0

    # ------------------------------------------------------------------ reading
    def _read(self, start: int, stop: int) -> list[tuple]:
        """Rows ``start .. stop-1`` of the file, as plain tuples."""
        assert self._file is not None, "rows on disk"
        size = self.dtype.itemsize
        self._file.seek(start * size)
        raw = self._file.read((stop - start) * size)
        return np.frombuffer(raw, dtype=self.dtype).tolist()

    def __len__(self) -> int:
        return self._on_disk + len(self._rows)

    def __bool__(self) -> bool:
        return len(self) > 0

    def __iter__(self) -> Iterator[tuple]:
        for start in range(0, self._on_disk, self.buffer):
            yield from self._read(start, min(start + self.buffer, self._on_disk))
        yield from list(self._rows)

    @overload
    def __getitem__(self, i: int) -> tuple: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple]: ...

    def __getitem__(self, i: int | slice) -> tuple | list[tuple]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        j = i + n if i < 0 else i
        if not 0 <= j < n:
            raise IndexError(f"row {i} of {n}")
        if j >= self._on_disk:
            return self._rows[j - self._on_disk]
        return self._read(j, j + 1)[0]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, (Spooled, list)):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def sort(self, key: Callable[[tuple], Any] | None = None, reverse: bool = False) -> None:
        rows = sorted(self, key=key, reverse=reverse)
        self.clear()
        self.extend(rows)

    def __repr__(self) -> str:
        return f"Spooled({len(self)} rows of {self.dtype.names}, {self._on_disk} on disk)"

    # ------------------------------------------------------------------ state
    def __getstate__(self) -> dict[str, Any]:
        return {"dtype": self.dtype.descr, "buffer": self.buffer, "rows": list(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(np.dtype([tuple(f) for f in state["dtype"]]), state["rows"], state["buffer"])  # type: ignore[misc]

    def __del__(self) -> None:
        file = getattr(self, "_file", None)
        if file is not None:
            file.close()
