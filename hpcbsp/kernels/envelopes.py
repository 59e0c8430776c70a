"""Envelopes of routed records (FA-BSP's relay), compiled: wrap records with their address in
one pass, split an arrived batch into this rank's records and those passing on in one pass.

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


def split_envelopes(env: np.ndarray, me: int, hops: np.ndarray, dtype: np.dtype
                    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """Split arrived envelopes (1-D, ``to``, [``from``,] ``rec``) in arrival order:
    ``(mine, origins, passing, next_hops)``: the records of ``dtype`` addressed to ``me`` and
    their ``from`` (None if the envelope has none), the envelopes for other ranks and
    ``hops[to]`` of each (``hops``: C-contiguous int64, one per rank).  ``ValueError`` for a
    ``to`` outside the ranks."""
    n = env.shape[0]
    rec_off = _rec_offset(env.dtype)
    mine = np.empty(n, dtype=dtype)
    origins = np.empty(n if rec_off == 8 else 0, dtype=np.int32)
    passing = np.empty(n, dtype=env.dtype)
    nxt = np.empty(n, dtype=np.int64)
    nm, npass = MODULES["_envelopes"].split(_rows(env), rec_off, me, hops, _rows(mine), origins,
                                            _rows(passing), nxt)
    return mine[:nm], (origins[:nm] if rec_off == 8 else None), passing[:npass], nxt[:npass]


def _rec_offset(wire: np.dtype) -> int:
    """Where the record starts in an envelope (4: after ``to``; 8: after ``to`` and ``from``)."""
    fields = wire.fields
    if fields is None or "rec" not in fields or fields["rec"][1] not in (4, 8):
        raise ValueError(f"envelopes: {wire} is not an envelope (to, [from,] rec)")
    return int(fields["rec"][1])


_NONE = np.empty(0, dtype=np.int64)
