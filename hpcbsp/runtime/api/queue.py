"""Typed message queues (BSPlib's BSMP, with Bulk's typed queues and a deterministic order).

A queue carries records of one numpy dtype, or with ``ragged=True`` messages of any length (each
``send`` is one message, an array of the dtype).  Every ``send`` carries an integer tag (BSPlib's
``bsp_set_tagsize`` tag, here one int64 per send; default 0).  After the sync a rank reads what
was sent to it in one piece (:meth:`Queue.received`, :meth:`Queue.tags`) or one message at a time
as BSPlib does (:meth:`Queue.qsize`, :meth:`Queue.get_tag`, :meth:`Queue.move`), in a fixed
order: by source rank, then in send order.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError
from ..superstep.outbox import SEND, Outbox
from .records import as_records, check_pid, split_by_destination

if TYPE_CHECKING:
    from .context import BSP


class Queue:
    """Records of one numpy dtype sent to other ranks; created collectively by :meth:`BSP.queue`.

    With ``ragged``, a message is one ``send``'s whole array (any length, zero included) and
    :meth:`received` returns the list of messages.
    """

    def __init__(self, bsp: "BSP", outbox: Outbox, obj_id: int, dtype: np.dtype, name: str,
                 ragged: bool = False):
        self._bsp = bsp
        self._outbox = outbox  # the context's: records wait there for the next sync
        self._id = obj_id
        self.dtype = dtype
        self.itemsize = dtype.itemsize
        self.name = name
        self.ragged = ragged
        self._messages: list[np.ndarray] = []  # a ragged queue's messages
        self._records = np.empty(0, dtype=dtype)  # a queue's records
        self._reset()

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, dtype={self.dtype}{', ragged' if self.ragged else ''})"

    def send(self, pid: int | np.ndarray, records: object, tag: int = 0) -> None:
        """Send ``records`` to ``pid`` (an int), or record i to ``pid[i]`` (an int array; not for
        a ragged queue), with the integer ``tag``.

        Records are copied now and appear in the receivers' :meth:`received` after the next sync.
        h-relation: ``itemsize`` bytes per record out of this rank and into its destination, and
        one message per destination (the records to one rank travel as one batch behind one
        header, which holds the tag; records to this rank itself are not counted).
        """
        where = f"{self.name}.send"
        if isinstance(tag, (bool, np.bool_)) or not isinstance(tag, (int, np.integer)) \
                or not -2**63 <= tag < 2**63:
            raise UsageError(f"rank {self._bsp.pid}: {where}: tag must be an int64, got {tag!r}")
        recs = as_records(records, self.dtype, f"rank {self._bsp.pid}: {where}")
        outbox = self._outbox
        if self.ragged:
            dest = check_pid(pid, self._bsp.nprocs, self._bsp.pid, f"{where} (a ragged queue: one pid per message)")
            outbox.add(dest, SEND, self._id, int(tag), recs.size, recs)
            return
        grouped, groups, _ = split_by_destination(self._bsp.pid, self._bsp.nprocs, pid, recs, where)
        for dest, start, stop in groups:
            outbox.add(dest, SEND, self._id, int(tag), stop - start, grouped[start:stop])

    def received(self) -> Any:
        """What was sent to this rank in the previous superstep, by source rank, then send order:
        an array of records, or for a ragged queue a list of messages (arrays)."""
        return self._messages if self.ragged else self._records

    def tags(self) -> np.ndarray:
        """The tag of every record of :meth:`received` (of every message, for a ragged queue)."""
        if self.ragged:
            return self._tags.copy()
        return np.repeat(self._tags, np.diff(self._counts))

    # ------------------------------------------------------------------ one message at a time
    def qsize(self) -> tuple[int, int]:
        """BSPlib's ``bsp_qsize``: ``(messages, bytes)`` not yet taken by :meth:`move` (a message
        is a record, or one send of a ragged queue)."""
        if self.ragged:  # _counts: the bytes before each message
            return len(self._messages) - self._next, int(self._counts[-1] - self._counts[self._next])
        n = int(self._counts[-1]) - self._next
        return n, n * self.itemsize

    def get_tag(self) -> int | None:
        """BSPlib's ``bsp_get_tag``: the tag of the next message, or None when none is left."""
        if self.qsize()[0] == 0:
            return None
        if self.ragged:
            return int(self._tags[self._next])
        return int(self._tags[int(np.searchsorted(self._counts, self._next, side="right")) - 1])

    def move(self) -> Any:
        """BSPlib's ``bsp_move``: the next message (a record, or a ragged queue's array), which is
        then taken; a :class:`UsageError` when none is left (check :meth:`qsize`)."""
        if self.qsize()[0] == 0:
            raise UsageError(f"rank {self._bsp.pid}: {self.name}.move(): no message left in this "
                             "superstep's queue (qsize() is 0)")
        msg = self._messages[self._next] if self.ragged else self._records[self._next]
        self._next += 1
        return msg

    # The exchange's side (see exchange.Sink).
    def _deliver(self, batches: list[np.ndarray], tags: list[int]) -> None:
        """This superstep's batches for this rank (views of the receive buffer: copied here)."""
        if self.ragged:
            self._messages = [b.copy() for b in batches]
        else:
            self._records = np.concatenate(batches) if len(batches) > 1 else batches[0].copy()
        # Where each batch starts: in records, or for a ragged queue in bytes (for qsize).
        sizes = [b.nbytes if self.ragged else b.size for b in batches]
        self._counts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self._tags = np.asarray(tags, dtype=np.int64)
        self._next = 0
        self._filled = True

    def _clear(self) -> None:
        """Start a superstep with nothing received (cheap when nothing was: every sync calls it)."""
        if self._filled:
            self._reset()

    def _reset(self) -> None:
        self._messages = []
        self._records = np.empty(0, dtype=self.dtype)
        self._tags = np.empty(0, dtype=np.int64)
        self._counts = np.zeros(1, dtype=np.int64)
        self._next = 0
        self._filled = False
