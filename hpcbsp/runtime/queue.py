"""Typed message queues (BSPlib's BSMP, with Bulk's typed queues and a deterministic order)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .exchange import SEND, Outbox
from .records import as_records, split_by_destination

if TYPE_CHECKING:
    from .context import BSP


class Queue:
    """Records of one numpy dtype sent to other ranks; created collectively by :meth:`BSP.queue`."""

    def __init__(self, bsp: "BSP", outbox: Outbox, obj_id: int, dtype: np.dtype, name: str):
        self._bsp = bsp
        self._outbox = outbox  # the context's: records wait there for the next sync
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
        h-relation: ``itemsize`` bytes per record out of this rank and into its destination, and
        one message per destination (the records to one rank travel as one batch behind one
        header; records to this rank itself are not counted).
        """
        recs = as_records(records, self.dtype, f"rank {self._bsp.pid}: {self.name}.send")
        grouped, groups, _ = split_by_destination(self._bsp.pid, self._bsp.nprocs, pid, recs, f"{self.name}.send")
        outbox = self._outbox
        for dest, start, stop in groups:
            outbox.add(dest, SEND, self._id, 0, stop - start, grouped[start:stop])

    def received(self) -> np.ndarray:
        """What was sent to this rank in the previous superstep: by source rank, then send order."""
        return self._received

    # The exchange's side (see exchange.Sink).
    def _deliver(self, batches: list[np.ndarray]) -> None:
        self._received = np.concatenate(batches) if len(batches) > 1 else batches[0].copy()

    def _clear(self) -> None:
        if self._received.size:
            self._received = np.empty(0, dtype=self.dtype)
