"""Registered arrays with one-sided ``put`` and ``get`` (BSPlib DRMA, Bulk's coarray shape).

A coarray's part may be n-dimensional (``bsp.coarray(shape=(m, k))``; shapes may differ per
rank).  ``put``, ``hpput``, ``get`` and ``hpget`` address a part by flat (row-major) offset;
``c.on(pid)[index]`` addresses it by ints and slices, as numpy does::

    c.on(right)[0, :] = row          # a put of the first row of right's part
    col = c.on(left)[:, 2].get()     # a get of left's third column; col.value after the sync

A slice is moved as one put (or get) per contiguous run of elements in the target's row-major
layout: a row is one, a column of an m x k part is m.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from numpy.typing import ArrayLike

from ...kernels import elements
from ..errors import UsageError
from ..superstep.outbox import PUT, Outbox
from .records import as_records, check_pid

if TYPE_CHECKING:
    from .context import BSP
    from .partition import Grid, Partitioning


class GetFuture:
    """The result of :meth:`Coarray.get`; ``value`` is valid after the next ``sync``.

    With ``into`` (:meth:`Coarray.hpget`) the data is written into that array at the sync and
    ``value`` is that array.
    """

    __slots__ = ("_value", "_dtype", "_count", "_what", "nbytes", "_into")

    def __init__(self, dtype: np.dtype, count: int, what: str, into: np.ndarray | None = None):
        self._value: np.ndarray | None = None
        self._dtype = dtype
        self._count = count
        self._what = what
        self._into = into
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
        if self._into is not None:
            self._into[...] = raw.view(self._dtype).reshape(self._into.shape)
            self._value = self._into
        else:
            self._value = raw.view(self._dtype).copy()


class SliceFuture:
    """The result of ``c.on(pid)[index].get()``: ``value`` (an array of the slice's shape) is
    valid after the next sync."""

    __slots__ = ("_parts", "_shape", "_dtype")

    def __init__(self, parts: list[GetFuture], shape: tuple[int, ...], dtype: np.dtype):
        self._parts, self._shape, self._dtype = parts, shape, dtype

    @property
    def ready(self) -> bool:
        return all(f.ready for f in self._parts)

    @property
    def value(self) -> np.ndarray:
        values = [f.value for f in self._parts]
        flat = np.concatenate(values) if len(values) > 1 else values[0] if values else np.empty(0, self._dtype)
        return flat.reshape(self._shape)


class Slice:
    """``c.on(pid)[index]``: a slice of another rank's part, to :meth:`put` into or :meth:`get`."""

    __slots__ = ("_coarray", "_pid", "_index")

    def __init__(self, coarray: "Coarray", pid: int, index: Any):
        self._coarray, self._pid, self._index = coarray, pid, index

    def put(self, values: ArrayLike) -> None:
        """Write ``values`` (broadcast to the slice's shape) at the next sync.  h-relation: the
        slice's bytes, one message per contiguous run."""
        self._coarray._put_slice(self._pid, self._index, values)

    def get(self) -> SliceFuture:
        """The slice as it is at the next sync (before puts land).  h-relation: the slice's
        bytes out of ``pid`` and into this rank; one request per contiguous run."""
        return self._coarray._get_slice(self._pid, self._index)


class Remote:
    """``c.on(pid)``: index it to address ``pid``'s part (``c.on(pid)[i, :] = v``)."""

    __slots__ = ("_coarray", "_pid")

    def __init__(self, coarray: "Coarray", pid: int):
        self._coarray, self._pid = coarray, pid

    def __getitem__(self, index: Any) -> Slice:
        return Slice(self._coarray, self._pid, index)

    def __setitem__(self, index: Any, values: ArrayLike) -> None:
        self._coarray._put_slice(self._pid, index, values)


class Coarray:
    """An array with a part on every rank; created collectively by :meth:`BSP.coarray`.

    ``local`` is this rank's part (of shape ``shapes[pid]``), ``flat`` the same memory as one
    dimension.  ``sizes[r]`` is the number of elements of rank r's part.  ``layout`` is the
    partitioning it was registered with (which global elements each part holds), or None.
    """

    def __init__(self, bsp: "BSP", outbox: Outbox, obj_id: int, local: np.ndarray, sizes: tuple[int, ...],
                 name: str, scratch: bool = False, layout: "Partitioning | Grid | None" = None,
                 shapes: tuple[tuple[int, ...], ...] | None = None):
        self._bsp = bsp
        self._outbox = outbox  # the context's: requests wait there for the next sync
        self.scratch = scratch
        self._id = obj_id
        self.local = local
        self.flat = local.reshape(-1)  # a view: the exchange and checkpoints address elements by it
        self.sizes = sizes
        self._width = elements.offset_width(sizes)  # bytes per offset in put_elements records
        self.shapes = shapes if shapes is not None else tuple((n,) for n in sizes)
        self.name = name
        self.layout = layout
        #: The superstep in which :meth:`BSP.pop_reg` deregistered it (None: registered).
        self.popped_at: int | None = None
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
        arr = as_records(values, self.dtype, lambda: self._where("put", pid, offset, np.size(values)))
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
            arr = as_records(values, self.dtype, lambda: self._where("hpput", pid, offset, np.size(values)))
        arr = arr.reshape(-1)
        self._check_range("hpput", pid, offset, arr.size)
        self._outbox.add(pid, PUT, self._id, offset, arr.size, arr, borrow=borrow)

    def put_elements(self, pids: ArrayLike, offsets: ArrayLike, values: ArrayLike) -> None:
        """Many single-element puts in one call: element i of ``values`` to rank ``pids[i]`` at
        offset ``offsets[i]`` of its part (flat), at the next sync.

        Equivalent to ``for i: put(pids[i], [values[i]], offsets[i])`` in that order (so of two
        puts to one element the later wins), but packed by destination and applied by compiled
        loops: one call for a million scattered words instead of a million calls (on one node,
        the packed records are applied from the sender's memory, not copied: :mod:`.arena`).
        ``values`` may be a scalar (the same value everywhere).  h-relation: ``4 + itemsize`` bytes per
        element (the offset travels with the value; 8 bytes if any part of this coarray has
        more than 2**32 elements), padded to 8 bytes per destination, and one message per destination, out of
        this rank and into each destination.
        """
        where = f"rank {self._bsp.pid}: {self.name}.put_elements"
        if not self.registered:
            raise UsageError(f"{where}: {self.name} was deregistered (pop_reg in superstep {self.popped_at})")
        dest = np.ascontiguousarray(pids)
        offs = np.ascontiguousarray(offsets)
        if dest.ndim != 1 or offs.shape != dest.shape or dest.dtype.kind not in "iu" or offs.dtype.kind not in "iu":
            raise UsageError(f"{where}: pids and offsets must be 1-D integer arrays of one length "
                             f"(got shapes {dest.shape} and {offs.shape})")
        vals = as_records(np.broadcast_to(np.asarray(values), dest.shape) if np.ndim(values) == 0 else values,
                          self.dtype, where)
        if vals.size != dest.size:
            raise UsageError(f"{where}: {vals.size} values for {dest.size} pids and offsets")
        if not dest.size:
            return
        sizes = np.asarray(self.sizes, dtype=np.int64)
        outbox = self._outbox
        # Packed into the outbox's buffer (in the node's shared arena where there is one), which
        # the records are sent or applied from (outbox.py, exchange.py).
        packed, counts, starts = elements.pack_elements(dest.astype(np.int64, copy=False),
                                                        offs.astype(np.int64, copy=False), vals, sizes,
                                                        outbox.element_buffer, self._width)
        if packed is None:
            i = int(counts)  # the index of the first bad put
            if not 0 <= dest[i] < self._bsp.nprocs:
                check_pid(int(dest[i]), self._bsp.nprocs, self._bsp.pid, f"{self.name}.put_elements (element {i})")
            raise UsageError(f"rank {self._bsp.pid}: {self.name}.put_elements: element {i} at offset "
                             f"{int(offs[i])} is outside rank {int(dest[i])}'s part of {self.name} "
                             f"(size {self.sizes[int(dest[i])]})")
        counts, starts = cast(np.ndarray, counts), cast(np.ndarray, starts)
        for d in np.flatnonzero(counts).tolist():
            outbox.add_elements(d, self._id, int(counts[d]), packed[starts[d]:starts[d + 1]])

    def get(self, pid: int, offset: int = 0, count: int | None = None) -> GetFuture:
        """Ask for ``pid``'s ``local[offset:offset+count]`` as it is at the next sync, before puts land.

        ``count`` defaults to the rest of ``pid``'s part.  Returns a :class:`GetFuture` whose
        ``value`` is valid after the next sync.  h-relation: one message out of this rank (the
        request), ``count * itemsize`` bytes out of ``pid`` and into this rank.
        """
        check_pid(pid, self._bsp.nprocs, self._bsp.pid, lambda: self._call("get", pid, offset, count))
        if count is None:
            count = self.sizes[pid] - offset
        self._check_range("get", pid, offset, count)
        fut = GetFuture(self.dtype, count, self._where("get", pid, offset, count))
        self._outbox.add_get(pid, self._id, offset, count, fut)
        return fut

    @property
    def registered(self) -> bool:
        """False once a :meth:`BSP.pop_reg` of it has taken effect (at the sync after it)."""
        return self.popped_at is None or self._bsp.superstep <= self.popped_at

    def hpget(self, pid: int, out: np.ndarray, offset: int = 0) -> GetFuture:
        """BSPlib's ``bsp_hpget``: ``pid``'s ``local[offset:offset+out.size]`` written into ``out``
        (a writeable C-contiguous array of this dtype) at the next sync; no result array is made.

        BSPlib lets an hpget read its source at any moment of the superstep; here it reads, as
        :meth:`get` does, at the sync before the superstep's puts land, which is one of those
        moments.  ``out`` must not be read or written until the sync returns.  h-relation: as
        :meth:`get` with ``count = out.size``.
        """
        call = self._call("hpget", pid, offset, getattr(out, "size", None))
        if not isinstance(out, np.ndarray) or out.dtype != self.dtype or not out.flags.c_contiguous \
                or not out.flags.writeable:
            raise UsageError(f"rank {self._bsp.pid}: {call}: out must be a writeable C-contiguous array "
                             f"of dtype {self.dtype}")
        self._check_range("hpget", pid, offset, out.size)
        fut = GetFuture(self.dtype, out.size, self._where("hpget", pid, offset, out.size), into=out)
        self._outbox.add_get(pid, self._id, offset, out.size, fut)
        return fut

    def on(self, pid: int) -> Remote:
        """``pid``'s part, to index with ints and slices: ``c.on(pid)[1, 2:4] = values`` puts,
        ``c.on(pid)[:, 0].get()`` gets (see the module docstring)."""
        check_pid(pid, self._bsp.nprocs, self._bsp.pid, f"{self.name}.on(pid={pid!r})")
        return Remote(self, pid)

    def _runs(self, pid: int, index: Any) -> tuple[list[tuple[int, int]], tuple[int, ...]]:
        """The contiguous runs ``(flat offset, count)`` of ``pid``'s part that ``index`` selects,
        in row-major order of the selection, and the selection's shape."""
        shape = self.shapes[pid]
        where = f"rank {self._bsp.pid}: {self.name}.on({pid})[{index!r}]"
        idx = index if isinstance(index, tuple) else (index,)
        if len(idx) > len(shape):
            raise UsageError(f"{where}: {len(idx)} indices for rank {pid}'s part of shape {shape}")
        idx = idx + (slice(None),) * (len(shape) - len(idx))
        axes, out_shape = [], []
        for i, dim in zip(idx, shape):
            if isinstance(i, slice):
                r = range(*i.indices(dim))
                axes.append(np.arange(r.start, r.stop, r.step, dtype=np.int64))
                out_shape.append(len(r))
            elif isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)):
                if not -dim <= i < dim:
                    raise UsageError(f"{where}: index {i} is outside 0..{dim - 1} of rank {pid}'s part "
                                     f"of shape {shape}")
                axes.append(np.array([i % dim], dtype=np.int64))
            else:
                raise UsageError(f"{where}: index with ints and slices only, not {type(i).__name__}")
        if any(a.size == 0 for a in axes):
            return [], tuple(out_shape)
        flat = np.ravel_multi_index(np.ix_(*axes), shape).reshape(-1)
        breaks = np.flatnonzero(np.diff(flat) != 1) + 1
        starts, ends = np.concatenate([[0], breaks]), np.concatenate([breaks, [flat.size]])
        return [(int(flat[a]), int(b - a)) for a, b in zip(starts, ends)], tuple(out_shape)

    def _put_slice(self, pid: int, index: Any, values: ArrayLike) -> None:
        runs, shape = self._runs(pid, index)
        where = f"rank {self._bsp.pid}: {self.name}.on({pid})[{index!r}] = ..."
        try:
            full = np.broadcast_to(np.asarray(values), shape)
        except ValueError:
            raise UsageError(f"{where}: values of shape {np.shape(values)} do not fit the slice of "
                             f"shape {shape}") from None
        recs = as_records(full, self.dtype, where)
        pos = 0
        for start, count in runs:
            self.put(pid, recs[pos:pos + count], start)
            pos += count

    def _get_slice(self, pid: int, index: Any) -> SliceFuture:
        runs, shape = self._runs(pid, index)
        return SliceFuture([self.get(pid, start, count) for start, count in runs], shape, self.dtype)

    def _call(self, op: str, pid: object, offset: int, count: int | None = None) -> str:
        """The call as an error message names it: ``table.put(pid=1, offset=4, count=2)``."""
        n = "" if count is None else f", count={count}"
        return f"{self.name}.{op}(pid={pid!r}, offset={offset}{n})"

    def _where(self, op: str, pid: object, offset: int, count: int | None = None) -> str:
        return f"rank {self._bsp.pid}: {self._call(op, pid, offset, count)}"

    def _check_range(self, op: str, pid: int, offset: int, count: int) -> None:
        if not self.registered:
            raise UsageError(f"rank {self._bsp.pid}: {self._call(op, pid, offset, count)}: {self.name} was "
                             f"deregistered (pop_reg in superstep {self.popped_at})")
        check_pid(pid, self._bsp.nprocs, self._bsp.pid, lambda: self._call(op, pid, offset, count))
        size = self.sizes[pid]
        if offset < 0 or count < 0 or offset + count > size:
            raise UsageError(
                f"rank {self._bsp.pid}: {self.name}.{op} of {count} element(s) at offset {offset} "
                f"is outside rank {pid}'s part of {self.name} (size {size})")

    # The exchange's side (see exchange.Target).
    def _read(self, offset: int, count: int) -> np.ndarray:
        return self.flat[offset:offset + count]

    def _write(self, offset: int, data: np.ndarray) -> None:
        self.flat[offset:offset + data.size] = data

    def _view(self, offset: int, count: int) -> np.ndarray:
        return self.flat[offset:offset + count]

    def _write_elements(self, record: np.ndarray, count: int) -> None:
        bad = elements.apply_elements(self.flat, record, count, width=self._width)
        if bad >= 0:  # the sender checked the offsets: only a corrupted message gets here
            raise UsageError(f"rank {self._bsp.pid}: a put_elements record for {self.name} holds an offset "
                             f"outside this rank's part (element {bad})")
