"""Checking and grouping records by destination rank: shared by queues and FA-BSP mailboxes."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..kernels import group_by_dest
from .errors import UsageError

if TYPE_CHECKING:
    from .context import BSP


def split_by_destination(bsp: "BSP", pid: int | np.ndarray, recs: np.ndarray,
                         where: str) -> tuple[np.ndarray, list[tuple[int, int, int]], bool]:
    """Group ``recs`` by destination: record i goes to ``pid`` (an int) or to ``pid[i]``.

    Returns ``(records, groups, fresh)``: ``groups`` lists ``(dest, start, stop)`` for every
    destination with records, in ascending rank, slicing ``records`` with send order kept within a
    destination (a stable counting sort); ``fresh`` says whether ``records`` is a new array that the
    caller may keep without copying.  A pid outside the program's ranks, or a pid array of the
    wrong length or type, raises :class:`UsageError` naming ``where``.
    """
    if np.ndim(pid) == 0:
        dest = bsp._check_pid(pid, where)
        return recs, ([(dest, 0, recs.size)] if recs.size else []), False
    dests = np.asarray(pid)
    if dests.shape != (recs.size,) or dests.dtype.kind not in "iu":
        raise UsageError(f"rank {bsp.pid}: {where}: pid must be an int or an integer array with one "
                       f"destination per record ({recs.size} records, got pid of shape {dests.shape}, "
                       f"dtype {dests.dtype})")
    try:
        perm, counts = group_by_dest(np.ascontiguousarray(dests, dtype=np.int64), bsp.nprocs)
    except ValueError as exc:
        raise UsageError(f"rank {bsp.pid}: {where}: {exc} (ranks of this BSP program: "
                       f"0..{bsp.nprocs - 1})") from None
    return recs[perm], destination_slices(counts), True


def destination_slices(counts: np.ndarray) -> list[tuple[int, int, int]]:
    """``(dest, start, stop)`` for every destination with records, in ascending rank: where its
    records lie in an array grouped by :func:`~hpcbsp.kernels.group_by_dest` with these counts."""
    ends = np.cumsum(counts)
    return [(d, int(ends[d] - counts[d]), int(ends[d])) for d in np.flatnonzero(counts).tolist()]
