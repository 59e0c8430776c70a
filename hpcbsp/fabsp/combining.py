"""Combining of FA-BSP mailbox records: records that update the same key merge on the way.

A mailbox whose handler is commutative declares how two records of one key combine
(``bsp.mailbox(handler, dtype, combine=RULE)``); then any batch about to leave a rank may have
its records of one key replaced by one record, and the handler sees fewer records with the
same total effect.  The rules (:data:`RULES`):

* ``"sum"``: one record whose value is the sum of theirs (a counter, a histogram);
* ``"min"`` / ``"max"``: the smallest / largest value (relaxations: shortest paths, labels);
* ``"set"``: one of them, the first of the batch (a set insert, or first-wins).

Records.  Either key-only, a plain integer dtype (the record is its key; only ``"set"``), or a
(key, value) pair: a structured dtype of exactly two scalar fields, the first an integer (the
key), the second a number (the value; any plain scalar for ``"set"``).  The key is what the
destination's handler indexes by; records for different destinations never combine (a routed
batch combines by (destination, key)).

What a combined record means to the handler: the handler must give the same result for any
split of a key's records into batches and any order, and for a record of the combined value in
place of the records combined, i.e. it applies ``value`` with the rule's operation (``table[k] +=
v``, ``table[k] = min(table[k], v)``, ``seen.add(k)``).  It sees fewer records and fewer calls:
counts of records or calls are not preserved, and neither is per-pair FIFO order (a combined
batch comes out sorted by key; a batch without two records of one key leaves as it was).
``with_source`` is refused (a combined record may come from several sources).

Exactness.  Integer sums are exact (in int64 wrap-around arithmetic, as the handler's own
additions are); min, max and set are exact for every dtype.  Float sums are reassociated: the
receiver's result differs from adding the records one by one by rounding only, at most
``(n - 1) * eps * sum(|v|)`` for a key of n records (the standard bound for any order of
summation), which is also how much two uncombined runs may differ, since records from several
sources already arrive in no fixed order.

Cost.  :meth:`Combiner.combine` is a few vectorised passes over a batch: where the batch's
(destination, key) pairs span at most :data:`DENSE` times its records (a table's keys, a few
destinations), a table indexed by the pair marks those present and reduces the values into it
(the compiled ``scatter_add``; ``ufunc.at`` for min and max); elsewhere a sort on the pair (an
``argsort``; ``np.unique`` for key-only ``"set"``), the group starts, and ``ufunc.reduceat``
over the values.  Both give one record per pair, sorted by (destination, key).  Where it runs (the aggregation buffers, and so at every
hop, including a node's representative merging its ranks' records for a remote node) is
:class:`~.aggregation.CombiningAggregator`'s business.  No MPI in here.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels import minmax, scatter_add
from ..runtime.errors import UsageError
from .aggregation import take_rows

#: The combine rules a mailbox may declare, and the ufunc that reduces a key's values.
RULES: dict[str, Any] = {"sum": np.add, "min": np.minimum, "max": np.maximum, "set": None}


#: The dense path of :meth:`Combiner.combine` applies where a batch's (destination, key) pairs
#: span at most this many times its records.
DENSE = 4
#: Value dtypes the compiled ``scatter_add`` sums (others take the sort path).
_SUMMED = {np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.int32)}


def check_combine(rule: object, dtype: np.dtype, where: str) -> str:
    """``rule`` for records of ``dtype``, checked (:class:`UsageError` naming ``where``)."""
    if not isinstance(rule, str) or rule not in RULES:
        raise UsageError(f"{where}: combine must be one of {', '.join(RULES)} (or None); got {rule!r}")
    if dtype.names is None:
        if dtype.kind not in "iu":
            raise UsageError(f"{where}: combine={rule!r} needs integer keys, or (key, value) records; "
                             f"dtype {dtype} is neither")
        if rule != "set":
            raise UsageError(f"{where}: combine={rule!r} needs (key, value) records (a structured dtype "
                             f"of two fields); {dtype} records are keys only: combine='set' dedupes them")
        return rule
    fields = [dtype[name] for name in dtype.names]
    if len(fields) != 2 or any(f.subdtype is not None or f.names is not None for f in fields) \
            or fields[0].kind not in "iu":
        raise UsageError(f"{where}: combine={rule!r} needs (key, value) records: two scalar fields, "
                         f"the first an integer; got {dtype}")
    if rule != "set" and fields[1].kind not in "iuf":
        raise UsageError(f"{where}: combine={rule!r} needs numeric values; field {dtype.names[1]!r} "
                         f"is {fields[1]}")
    return rule


class Combiner:
    """Combines batches of wire records (``wire``: the records, or envelopes ``(to, rec)``) of
    user dtype ``dtype`` by the checked ``rule``."""

    def __init__(self, rule: str, dtype: np.dtype, wire: np.dtype):
        self.rule = rule
        self._ufunc = RULES[rule]
        self._routed = wire.names is not None and "to" in wire.names
        self._keyed = dtype.names is not None  # (key, value) records
        self._names: tuple[str, ...] = dtype.names or ()
        self.wire = wire

    def combine(self, batch: np.ndarray) -> np.ndarray:
        """``batch`` with the records of each (destination, key) combined into one: a new
        array, sorted by (destination, key) (first-wins for ``"set"``: the earliest record of
        each key); ``batch`` itself if no two of its records share a key."""
        n = batch.shape[0]
        if n < 2:
            return batch
        recs = batch["rec"] if self._routed else batch
        # (contiguous copies: the fields of packed records are strided by odd sizes)
        key = np.ascontiguousarray(recs[self._names[0]] if self._keyed else recs)
        to = np.ascontiguousarray(batch["to"]) if self._routed else None
        dense = self._dense(batch, recs, key, to)
        if dense is not None:
            return dense
        if not self._routed and not self._keyed:  # key-only set: distinct keys, sorted
            out = np.unique(batch)
            return batch if out.shape[0] == n else out
        group = self._group_key(key, to)
        stable = self.rule == "set"
        order = np.argsort(group, kind="stable" if stable else None)
        sorted_group = group[order]
        new = np.empty(n, dtype=bool)
        new[0] = True
        np.not_equal(sorted_group[1:], sorted_group[:-1], out=new[1:])
        starts = np.flatnonzero(new)
        if starts.shape[0] == n:
            return batch
        out = take_rows(batch, order[starts])
        if self._ufunc is not None:
            values = (recs[self._names[1]])[order]
            reduced = self._ufunc.reduceat(values, starts)
            (out["rec"] if self._routed else out)[self._names[1]] = reduced
        return out

    def _dense(self, batch: np.ndarray, recs: np.ndarray, key: np.ndarray, to: np.ndarray | None) -> np.ndarray | None:
        """:meth:`combine` without a sort, where the (destination, key) pairs of the batch span
        at most :data:`DENSE` times its records: a table indexed by the pair marks the pairs
        present and reduces their values (the compiled ``scatter_add`` for sums of the dtypes it
        takes, ``ufunc.at`` for min and max).  None where it does not apply (first-wins set of
        (key, value) records keeps the sort, which is stable)."""
        n = batch.shape[0]
        if self._keyed and (self.rule == "set" or self.rule == "sum" and recs.dtype[1] not in _SUMMED):
            return None
        kmin, kmax = minmax(key)
        kspan = int(kmax) - int(kmin) + 1
        tmin, tspan = 0, 1
        if to is not None:
            tmin, tmax = minmax(to)
            tspan = int(tmax) - int(tmin) + 1
        span = kspan * tspan
        if span > DENSE * n:
            return None
        slot = key.astype(np.int64) - kmin
        if to is not None:
            slot += (to.astype(np.int64) - tmin) * kspan
        present = np.zeros(span, dtype=bool)
        present[slot] = True
        where = np.flatnonzero(present)
        if where.shape[0] == n:
            return batch
        out = np.empty(where.shape[0], dtype=batch.dtype)
        out_recs = out["rec"] if self._routed else out
        if self._routed:
            out["to"] = where // kspan + tmin
        keys = where % kspan + kmin
        if self._keyed:
            out_recs[self._names[0]] = keys.astype(recs.dtype[0], copy=False)
            values = np.ascontiguousarray(recs[self._names[1]])
            if self.rule == "sum":
                acc = np.zeros(span, dtype=values.dtype)
                scatter_add(acc, slot, values)
            else:
                low = values.dtype.kind == "f" and -np.inf or np.iinfo(values.dtype).min
                high = values.dtype.kind == "f" and np.inf or np.iinfo(values.dtype).max
                acc = np.full(span, high if self.rule == "min" else low, dtype=values.dtype)
                self._ufunc.at(acc, slot, values)
            out_recs[self._names[1]] = acc[where]
        else:
            out_recs[...] = keys.astype(recs.dtype, copy=False)
        return out

    def _group_key(self, key: np.ndarray, to: np.ndarray | None) -> np.ndarray:
        """One int64 per record, equal exactly for records of one (destination, key): the key
        (a uint64 key wraps, which keeps equality), or the destination in the high 32 bits when
        the keys fit in the low 32 (else a lexicographic order of both, as ranks)."""
        k = key.astype(np.int64, copy=False)
        if to is None:
            return k
        dest = to.astype(np.int64)
        if int(k.min()) >= 0 and int(k.max()) < (1 << 32):
            return (dest << 32) | k
        order = np.lexsort((k, dest))  # ranks of (to, key) pairs: equal pairs, equal ranks
        pairs_differ = np.empty(k.shape[0], dtype=bool)
        pairs_differ[0] = False
        sk, st = k[order], dest[order]
        np.logical_or(sk[1:] != sk[:-1], st[1:] != st[:-1], out=pairs_differ[1:])
        ranks = np.empty(k.shape[0], dtype=np.int64)
        ranks[order] = np.cumsum(pairs_differ)
        return ranks


__all__ = ["RULES", "Combiner", "check_combine"]
