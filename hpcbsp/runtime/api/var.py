"""A value with one image on every rank (Bulk's ``var``), read and written with put and get.

``x = bsp.var(0.0)`` registers it collectively (every rank gives the same dtype and shape).
``x.value`` is this rank's image, read and written locally at any time; ``x.put(pid, v)`` writes
``pid``'s image at the next sync and ``x.get(pid)`` reads it there (before the superstep's puts
land, as for coarrays).  It is a coarray of one value per rank underneath, so the order of
effects and the h-relations are those of :class:`~.coarray.Coarray`.  Vars are not saved by
checkpoints (keep iteration state in ``bsp.checkpoint(path, **state)``).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .coarray import Coarray, GetFuture


class VarFuture:
    """The result of :meth:`Var.get`: ``value`` (a scalar, or an array of the var's shape) is
    valid after the next sync."""

    __slots__ = ("_future", "_shape")

    def __init__(self, future: GetFuture, shape: tuple[int, ...]):
        self._future = future
        self._shape = shape

    @property
    def ready(self) -> bool:
        return self._future.ready

    @property
    def value(self) -> Any:
        raw = self._future.value
        return raw[0] if not self._shape else raw.reshape(self._shape)


class Var:
    """One value per rank; created collectively by :meth:`BSP.var`."""

    def __init__(self, coarray: Coarray, shape: tuple[int, ...]):
        self._coarray = coarray
        self.shape = shape
        self.dtype = coarray.dtype
        self.name = coarray.name

    def __repr__(self) -> str:
        return f"Var({self.name!r}, dtype={self.dtype}, shape={self.shape}, value={self.value!r})"

    @property
    def value(self) -> Any:
        """This rank's image: a numpy scalar, or a writeable view of the var's shape."""
        local = self._coarray.flat
        return local[0] if not self.shape else local.reshape(self.shape)

    @value.setter
    def value(self, v: Any) -> None:
        self._coarray.flat[:] = np.broadcast_to(np.asarray(v, dtype=self.dtype), self.shape).reshape(-1)

    def put(self, pid: int, value: Any) -> None:
        """Write ``value`` into ``pid``'s image at the next sync.  h-relation: the value's bytes
        out of this rank and into ``pid``."""
        arr = np.broadcast_to(np.asarray(value), self.shape) if np.shape(value) != self.shape else value
        self._coarray.put(pid, np.reshape(arr, -1))

    def get(self, pid: int) -> VarFuture:
        """``pid``'s image as it is at the next sync.  h-relation: the value's bytes out of
        ``pid`` and into this rank."""
        return VarFuture(self._coarray.get(pid), self.shape)
