"""Per-record helpers shared by coarrays, queues and FA-BSP mailboxes: checking a destination
rank, converting values to records of a dtype, grouping records by destination rank.

No MPI and no context in here: the callers pass their rank and the number of ranks.
"""
from __future__ import annotations

from typing import Any, Callable, Union

import numpy as np

from ...kernels import check_dests, group_by_dest
from ..errors import UsageError

#: What a call is, for an error message: the text, or a function that makes it (hot paths pass
#: one, so that the text is built only when there is an error to report).
What = Union[str, Callable[[], str]]


def _text(what: What) -> str:
    return what() if callable(what) else what


def check_pid(pid: Any, nprocs: int, me: int, what: What) -> int:
    """``pid`` as an int if it is a rank of a program of ``nprocs`` ranks, else a
    :class:`UsageError` naming this rank (``me``) and the call (``what``)."""
    if isinstance(pid, (bool, np.bool_)) or not isinstance(pid, (int, np.integer)) \
            or not 0 <= pid < nprocs:
        raise UsageError(f"rank {me}: {_text(what)}: pid {pid!r} is not a rank of this BSP program "
                         f"(0..{nprocs - 1})")
    return int(pid)


def as_records(values: object, dtype: np.dtype, what: What) -> np.ndarray:
    """``values`` as a C-contiguous 1-D array of ``dtype``, or a :class:`UsageError` saying why not.

    Numeric values are cast when numpy's ``same_kind`` rule allows it (int -> float, float64 ->
    float32); a cast that would change the kind of value (float -> int, complex -> float) or a
    structured dtype that differs is refused.
    """
    arr = np.asarray(values)
    if arr.dtype != dtype:
        if arr.dtype.names is not None or dtype.names is not None or not np.can_cast(
                arr.dtype, dtype, casting="same_kind"):
            raise UsageError(f"{_text(what)}: values of dtype {arr.dtype} cannot be cast to {dtype}")
        arr = arr.astype(dtype)
    return np.ascontiguousarray(arr.reshape(-1))


def split_by_destination(me: int, nprocs: int, pid: int | np.ndarray, recs: np.ndarray,
                         where: str) -> tuple[np.ndarray, list[tuple[int, int, int]], bool]:
    """Group ``recs`` by destination: record i goes to ``pid`` (an int) or to ``pid[i]``.

    Returns ``(records, groups, fresh)``: ``groups`` lists ``(dest, start, stop)`` for every
    destination with records, in ascending rank, slicing ``records`` with send order kept within a
    destination (a stable counting sort); ``fresh`` says whether ``records`` is a new array that the
    caller may keep without copying.  A pid outside the program's ``nprocs`` ranks, or a pid array
    of the wrong length or type, raises :class:`UsageError` naming this rank (``me``) and ``where``.
    """
    if np.ndim(pid) == 0:
        dest = check_pid(pid, nprocs, me, where)
        return recs, ([(dest, 0, recs.size)] if recs.size else []), False
    dests = _pid_array(pid, recs.size, me, where)
    try:
        perm, counts = group_by_dest(np.ascontiguousarray(dests, dtype=np.int64), nprocs)
    except ValueError as exc:
        raise UsageError(f"rank {me}: {where}: {exc} (ranks of this BSP program: "
                         f"0..{nprocs - 1})") from None
    return recs[perm], destination_slices(counts), True


def check_pids(pid: int | np.ndarray, nprocs: int, nrecords: int, me: int,
               where: str) -> int | np.ndarray:
    """``pid`` checked as :func:`split_by_destination` checks it, without grouping: an int, or
    an int64 array of one rank per record."""
    if np.ndim(pid) == 0:
        return check_pid(pid, nprocs, me, where)
    dests = np.ascontiguousarray(_pid_array(pid, nrecords, me, where), dtype=np.int64)
    try:
        check_dests(dests, nprocs)  # one compiled pass
    except ValueError as exc:
        raise UsageError(f"rank {me}: {where}: {exc} (ranks of this BSP program: "
                         f"0..{nprocs - 1})") from None
    return dests


def _pid_array(pid: object, nrecords: int, me: int, where: str) -> np.ndarray:
    dests = np.asarray(pid)
    if dests.shape != (nrecords,) or dests.dtype.kind not in "iu":
        raise UsageError(f"rank {me}: {where}: pid must be an int or an integer array with one "
                         f"destination per record ({nrecords} records, got pid of shape "
                         f"{dests.shape}, dtype {dests.dtype})")
    return dests


def destination_slices(counts: np.ndarray) -> list[tuple[int, int, int]]:
    """``(dest, start, stop)`` for every destination with records, in ascending rank: where its
    records lie in an array grouped by :func:`~hpcbsp.kernels.group_by_dest` with these counts."""
    ends = np.cumsum(counts)
    return [(d, int(ends[d] - counts[d]), int(ends[d])) for d in np.flatnonzero(counts).tolist()]
