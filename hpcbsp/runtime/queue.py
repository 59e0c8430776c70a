"""Typed message queues (BSPlib's BSMP, with Bulk's typed queues and a deterministic order)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..kernels import group_by_dest
from .coarray import as_records
from .errors import BSPError
from .exchange import SEND

if TYPE_CHECKING:
    from .context import BSP


class Queue:
    """Records of one numpy dtype sent to other ranks; created collectively by :meth:`BSP.queue`."""

    def __init__(self, bsp: "BSP", obj_id: int, dtype: np.dtype, name: str):
        self._bsp = bsp
        self._id = obj_id
        self.dtype = dtype
        self.itemsize = dtype.itemsize
        self.name = name
        self._received = np.empty(0, dtype=dtype)

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, dtype={self.dtype})"

    def send(self, pid: int | np.ndarray, records: object) -> None:
        """Send ``records`` to ``pid`` (an int), or record i to ``pid[i]`` (an int array).

        Records are copied now and appear in the receivers' :meth:`received` after the next sync.
        h-relation: ``itemsize`` bytes and one message per record, out of this rank and into its
        destination (records to this rank itself are not counted).
        """
        where = f"rank {self._bsp.pid}: {self.name}.send"
        recs = as_records(records, self.dtype, where)
        outbox = self._bsp._outbox
        if np.ndim(pid) == 0:
            dest = self._bsp._check_pid(pid, f"{self.name}.send")
            outbox.add(dest, SEND, self._id, 0, recs.size, recs, msgs=recs.size)
            return
        dests = np.asarray(pid)
        if dests.shape != (recs.size,) or dests.dtype.kind not in "iu":
            raise BSPError(f"{where}: pid must be an int or an integer array with one destination "
                           f"per record ({recs.size} records, got pid of shape {dests.shape}, "
                           f"dtype {dests.dtype})")
        try:
            perm, counts = group_by_dest(np.ascontiguousarray(dests, dtype=np.int64), self._bsp.nprocs)
        except ValueError as exc:
            raise BSPError(f"{where}: {exc} (ranks of this BSP program: 0..{self._bsp.nprocs - 1})") from None
        grouped = recs[perm]
        start = 0
        for dest, count in enumerate(counts.tolist()):
            if count:
                outbox.add(dest, SEND, self._id, 0, count, grouped[start:start + count], msgs=count)
                start += count

    def received(self) -> np.ndarray:
        """What was sent to this rank in the previous superstep: by source rank, then send order."""
        return self._received

    # The exchange's side (see exchange.Registered).
    def _deliver(self, batches: list[np.ndarray]) -> None:
        self._received = np.concatenate(batches) if len(batches) > 1 else batches[0].copy()

    def _clear(self) -> None:
        if self._received.size:
            self._received = np.empty(0, dtype=self.dtype)

    def _read(self, offset: int, count: int) -> np.ndarray:  # pragma: no cover
        raise AssertionError("get addressed to a queue")

    def _write(self, offset: int, data: np.ndarray) -> None:  # pragma: no cover
        raise AssertionError("put addressed to a queue")
