"""Registered arrays with one-sided ``put`` and ``get`` (BSPlib DRMA, Bulk's coarray shape)."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .errors import UsageError
from .exchange import PUT, Outbox
from .records import as_records, check_pid

if TYPE_CHECKING:
    from .context import BSP
    from .partition import Grid, Partitioning


class GetFuture:
    """The result of :meth:`Coarray.get`; ``value`` is valid after the next ``sync``."""

    __slots__ = ("_value", "_dtype", "_count", "_what", "nbytes")

    def __init__(self, dtype: np.dtype, count: int, what: str):
        self._value: np.ndarray | None = None
        self._dtype = dtype
        self._count = count
        self._what = what
        self.nbytes = count * dtype.itemsize

    @property
    def ready(self) -> bool:
        return self._value is not None

    @property
    def value(self) -> np.ndarray:
        if self._value is None:
            raise UsageError(f"{self._what}: the value is available after the next sync")
        return self._value

    def _fulfil(self, raw: np.ndarray) -> None:
        self._value = raw.view(self._dtype).copy()


class Coarray:
    """An array with a part on every rank; created collectively by :meth:`BSP.coarray`.

    ``local`` is this rank's part.  ``sizes[r]`` is the length of rank r's part.  ``layout`` is
    the partitioning it was registered with (which global elements each part holds), or None.
    """

    def __init__(self, bsp: "BSP", outbox: Outbox, obj_id: int, local: np.ndarray, sizes: tuple[int, ...],
                 name: str, scratch: bool = False, layout: "Partitioning | Grid | None" = None):
        self._bsp = bsp
        self._outbox = outbox  # the context's: requests wait there for the next sync
        self.scratch = scratch
        self._id = obj_id
        self.local = local
        self.sizes = sizes
        self.name = name
        self.layout = layout
        self.dtype = local.dtype
        self.itemsize = local.dtype.itemsize

    def __repr__(self) -> str:
        layout = f", layout={self.layout!r}" if self.layout is not None else ""
        return (f"Coarray({self.name!r}, dtype={self.dtype}, local={self.local.size} elements on "
                f"rank {self._bsp.pid}, {sum(self.sizes)} in all{layout})")

    def put(self, pid: int, values: ArrayLike, offset: int = 0) -> None:
        """Copy ``values`` now; they land in ``pid``'s ``local[offset:offset+len(values)]`` at the next sync.

        h-relation: ``len(values) * itemsize`` bytes and one message out of this rank and into
        ``pid`` (nothing when ``pid`` is this rank: a local copy at the sync).
        """
        arr = as_records(values, self.dtype, self._where("put", pid, offset, np.size(values)))
        self._check_range("put", pid, offset, arr.size)
        self._outbox.add(pid, PUT, self._id, offset, arr.size, arr)

    def hpput(self, pid: int, values: np.ndarray, offset: int = 0) -> None:
        """Unbuffered put (BSPlib's ``bsp_hpput``): like :meth:`put`, without the copy.

        A large contiguous ``values`` of this coarray's dtype is sent from its own memory at the
        next sync, so it **must not change until that sync returns**; in exchange the send side
        copies nothing.  Other values (small, another dtype, non-contiguous) are copied as by
        :meth:`put`.  h-relation: as :meth:`put`.
        """
        arr = np.asarray(values)
        borrow = arr.dtype == self.dtype and arr.flags.c_contiguous
        if not borrow:
            arr = as_records(values, self.dtype, self._where("hpput", pid, offset, np.size(values)))
        arr = arr.reshape(-1)
        self._check_range("hpput", pid, offset, arr.size)
        self._outbox.add(pid, PUT, self._id, offset, arr.size, arr, borrow=borrow)

    def get(self, pid: int, offset: int = 0, count: int | None = None) -> GetFuture:
        """Ask for ``pid``'s ``local[offset:offset+count]`` as it is at the next sync, before puts land.

        ``count`` defaults to the rest of ``pid``'s part.  Returns a :class:`GetFuture` whose
        ``value`` is valid after the next sync.  h-relation: one message out of this rank (the
        request), ``count * itemsize`` bytes out of ``pid`` and into this rank.
        """
        check_pid(pid, self._bsp.nprocs, self._bsp.pid, self._call("get", pid, offset, count))
        if count is None:
            count = self.sizes[pid] - offset
        self._check_range("get", pid, offset, count)
        fut = GetFuture(self.dtype, count, self._where("get", pid, offset, count))
        self._outbox.add_get(pid, self._id, offset, count, fut)
        return fut

    def _call(self, op: str, pid: object, offset: int, count: int | None = None) -> str:
        """The call as an error message names it: ``table.put(pid=1, offset=4, count=2)``."""
        n = "" if count is None else f", count={count}"
        return f"{self.name}.{op}(pid={pid!r}, offset={offset}{n})"

    def _where(self, op: str, pid: object, offset: int, count: int | None = None) -> str:
        return f"rank {self._bsp.pid}: {self._call(op, pid, offset, count)}"

    def _check_range(self, op: str, pid: int, offset: int, count: int) -> None:
        check_pid(pid, self._bsp.nprocs, self._bsp.pid, self._call(op, pid, offset, count))
        size = self.sizes[pid]
        if offset < 0 or count < 0 or offset + count > size:
            raise UsageError(
                f"rank {self._bsp.pid}: {self.name}.{op} of {count} element(s) at offset {offset} "
                f"is outside rank {pid}'s part of {self.name} (size {size})")

    # The exchange's side (see exchange.Target).
    def _read(self, offset: int, count: int) -> np.ndarray:
        return self.local[offset:offset + count]

    def _write(self, offset: int, data: np.ndarray) -> None:
        self.local[offset:offset + data.size] = data

    def _view(self, offset: int, count: int) -> np.ndarray:
        return self.local[offset:offset + count]
