"""Envelopes of routed records (FA-BSP's relay), compiled: wrap records with their address in
one pass (into an array, or straight into the next hops' buffers), split an arrived batch into
this rank's records and those passing on in one pass.

An envelope is ``to`` (int32), ``from`` (int32, when the origin travels) and the record, packed
with no padding (the wire dtype of :class:`hpcbsp.fabsp.formats.Fixed`).  Numpy oracles:
:func:`hpcbsp.kernels.reference.wrap_envelopes` and :func:`~hpcbsp.kernels.reference.split_envelopes`.
"""
from __future__ import annotations

import numpy as np

from ._extensions import MODULES


def _rows(a: np.ndarray) -> np.ndarray:
    """A contiguous 1-D array as a ``(n, itemsize)`` uint8 view (a copy if not contiguous)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8).reshape(a.shape[0], a.dtype.itemsize)


def wrap_envelopes(recs: np.ndarray, dests: int | np.ndarray, me: int, wire: np.dtype) -> np.ndarray:
    """Envelopes of ``wire`` dtype (``to``, [``from``,] ``rec``) for the 1-D records ``recs``:
    record i to ``dests[i]`` (C-contiguous int64, checked ranks) or to ``dests`` (an int), from
    ``me``."""
    out = np.empty(recs.shape[0], dtype=wire)
    one = isinstance(dests, int)
    MODULES["_envelopes"].wrap(_rows(recs), _NONE if one else dests, dests if one else 0, me,
                               _rec_offset(wire), _rows(out))
    return out


class Scratch:
    """Memory that :func:`split_envelopes` reuses from one batch to the next for what passes on
    (grown as needed): no fresh pages per batch.  What it returns from here is valid until its
    next use."""

    def __init__(self) -> None:
        self._arrays: dict[str, np.ndarray] = {}

    def get(self, name: str, n: int, dtype: np.dtype) -> np.ndarray:
        """``n`` items of ``dtype`` (uninitialised), the same memory as last time if it fits."""
        a = self._arrays.get(name)
        if a is None or a.dtype != dtype or a.shape[0] < n:
            a = self._arrays[name] = np.empty(max(n, 2 * a.shape[0] if a is not None else n), dtype=dtype)
        return a[:n]


def split_envelopes(env: np.ndarray, me: int, hops: np.ndarray, dtype: np.dtype,
                    scratch: Scratch | None = None
                    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """Split arrived envelopes (1-D, ``to``, [``from``,] ``rec``) in arrival order:
    ``(mine, origins, passing, next_hops)``: the records of ``dtype`` addressed to ``me`` and
    their ``from`` (None if the envelope has none), the envelopes for other ranks and
    ``hops[to]`` of each (``hops``: C-contiguous int64, one per rank).  ``ValueError`` for a
    ``to`` outside the ranks.

    ``env`` is consumed: ``mine`` is moved into its memory (a view of it, no allocation) when
    it is a writable C-contiguous array, else into a copy of it.  With ``scratch``,
    ``origins``, ``passing`` and ``next_hops`` are views of its memory, valid until its next use
    (the caller copies what it keeps); else fresh arrays."""
    n = env.shape[0]
    rec_off = _rec_offset(env.dtype)
    if not (env.flags.c_contiguous and env.flags.writeable):
        env = env.copy()
    fresh = scratch.get if scratch is not None else (lambda _, k, dt: np.empty(k, dtype=dt))
    origins = fresh("origins", n if rec_off == 8 else 0, np.dtype(np.int32))
    passing = fresh("passing", n, env.dtype)
    nxt = fresh("next", n, np.dtype(np.int64))
    rows = _rows(env)
    nm, npass = MODULES["_envelopes"].split(rows, rec_off, me, hops, origins, _rows(passing), nxt)
    mine = rows.reshape(-1)[:nm * dtype.itemsize].view(dtype)
    return mine, (origins[:nm] if rec_off == 8 else None), passing[:npass], nxt[:npass]


def wrap_append(dests: np.ndarray, nexts: np.ndarray, recs: np.ndarray, start: int, me: int, wire: np.dtype,
                bufs: np.ndarray, fill: np.ndarray, capacity: int) -> tuple[int, int]:
    """:func:`hpcbsp.kernels.append_by_dest` for records not yet wrapped: the envelope of
    ``wire`` dtype of record i (to ``dests[i]``, from ``me``) goes straight into the buffer of
    ``nexts[i]`` (both C-contiguous int64, checked ranks), in one pass; same arguments and
    result otherwise.  Numpy oracle: :func:`wrap_envelopes`, then appending one at a time."""
    return MODULES["_envelopes"].wrap_append(dests, nexts, _rows(recs), start, me, _rec_offset(wire),
                                             bufs, fill, capacity)


def _rec_offset(wire: np.dtype) -> int:
    """Where the record starts in an envelope (4: after ``to``; 8: after ``to`` and ``from``)."""
    fields = wire.fields
    if fields is None or "rec" not in fields or fields["rec"][1] not in (4, 8):
        raise ValueError(f"envelopes: {wire} is not an envelope (to, [from,] rec)")
    return int(fields["rec"][1])


_NONE = np.empty(0, dtype=np.int64)
