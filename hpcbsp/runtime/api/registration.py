"""Registration: creating a context's coarrays, vars and queues, and deregistering coarrays.

Every registration is collective and is not a superstep: it starts with a control step in which
the ranks must agree on what is registered (the dtype, the number of dimensions, the layout; a
queue's dtype and raggedness), else every rank raises :class:`~.errors.Divergence`.  A coarray's
registration then gathers the part sizes (and, for parts of more than one dimension, the shapes)
with one ``Allgather``.  Registered objects get consecutive ids in the context's list (the
exchange and checkpoints address them by it); BSPlib's ``pop_reg`` takes effect at the next sync.

The :class:`~.context.BSP` methods (``coarray``, ``push_reg``, ``pop_reg``, ``var``, ``queue``)
document the calls; this module checks the arguments (a :class:`~.errors.UsageError` naming the
rank and the call, before any MPI call) and makes them.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import UsageError
from ..superstep.control import Kind, signature
from .coarray import Coarray
from .partition import Grid, Partitioning
from .queue import Queue
from .var import Var

if TYPE_CHECKING:
    from .context import BSP

Layout = Partitioning | Grid


def coarray(bsp: "BSP", n: int | None, dtype: Any, name: str | None, scratch: bool,
            layout: Layout | None, shape: tuple[int, ...] | None) -> Coarray:
    """``bsp.coarray``: a zeroed part of ``n`` elements (or of ``shape``, or of this rank's
    share of ``layout``)."""
    dt = np.dtype(dtype)
    where = f"rank {bsp.pid}: coarray(name={name!r})"
    if shape is not None:
        if n is not None:
            raise UsageError(f"{where}: give n or shape, not both")
        if not isinstance(shape, (tuple, list)) or not all(
                isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) and d >= 0
                for d in shape):
            raise UsageError(f"{where}: shape must be a tuple of non-negative integers, got {shape!r}")
        shape = tuple(int(d) for d in shape)
        n = int(np.prod(shape, dtype=np.int64))
    if layout is not None:
        _check_layout(bsp, layout, where)
        share = layout.local_size(bsp.pid)
        if n is None:
            n = share
            if isinstance(layout, Grid):
                shape = layout.local_shape(bsp.pid)
        elif n != share:
            raise UsageError(f"{where}: n={n!r}, but layout {layout!r} gives rank {bsp.pid} "
                             f"{share} elements (leave n out)")
    if n is None or isinstance(n, (bool, np.bool_)) or int(n) != n or n < 0:
        raise UsageError(f"rank {bsp.pid}: coarray size must be a non-negative integer, got {n!r}")
    local = np.zeros(shape if shape is not None else int(n), dtype=dt)
    return _register_coarray(bsp, local, name, scratch, layout, "coarray")


def push_reg(bsp: "BSP", array: np.ndarray, name: str | None, scratch: bool, layout: Layout | None) -> Coarray:
    """``bsp.push_reg``: ``array`` itself as this rank's part."""
    if not isinstance(array, np.ndarray) or not array.flags.c_contiguous or not array.flags.writeable:
        raise UsageError(f"rank {bsp.pid}: push_reg(name={name!r}): array must be a writeable "
                         "C-contiguous numpy array")
    return _register_coarray(bsp, array, name, scratch, layout, "push_reg")


def pop_reg(bsp: "BSP", c: Coarray) -> None:
    """``bsp.pop_reg``: ``c`` is deregistered from the next sync on."""
    if not isinstance(c, Coarray) or c not in bsp._objects:
        raise UsageError(f"rank {bsp.pid}: pop_reg({c!r}): not a coarray of this context")
    if c.popped_at is not None:
        raise UsageError(f"rank {bsp.pid}: pop_reg({c.name!r}): deregistered already "
                         f"(in superstep {c.popped_at})")
    bsp._agree(Kind.REGISTER, signature(f"pop_reg {bsp._objects.index(c)}"), lambda: f"pop_reg({c.name!r})")
    c.popped_at = bsp.superstep


def var(bsp: "BSP", value: Any, dtype: Any, name: str | None) -> Var:
    """``bsp.var``: a coarray of one value per rank (a scratch one: checkpoints skip it)."""
    arr = np.asarray(value, dtype=dtype)
    if arr.dtype.kind == "O":
        raise UsageError(f"rank {bsp.pid}: var(name={name!r}): the value must be numeric (or a "
                         f"structured record), not {type(value).__name__}")
    name = name or f"var{len(bsp._objects)}"
    bsp._agree(Kind.REGISTER, signature(f"var {arr.dtype.descr} {arr.shape}"),
               lambda: f"var(dtype={arr.dtype}, shape={arr.shape}, name={name!r})")
    c = _register_coarray(bsp, arr.reshape(-1).copy(), name, True, None, "var", agreed=True)
    return Var(c, arr.shape)


def queue(bsp: "BSP", dtype: Any, name: str | None, ragged: bool) -> Queue:
    """``bsp.queue``: a typed message queue, delivered by every sync."""
    dt = np.dtype(dtype)
    name = name or f"queue{len(bsp._objects)}"
    bsp._agree(Kind.REGISTER, signature(f"queue {dt.descr} {bool(ragged)}"),
               lambda: f"queue(dtype={dt}, name={name!r}, ragged={bool(ragged)})")
    q = Queue(bsp, bsp._outbox, len(bsp._objects), dt, name, bool(ragged))
    bsp._objects.append(q)
    bsp._queues.append(q)
    return q


def _register_coarray(bsp: "BSP", local: np.ndarray, name: str | None, scratch: bool,
                      layout: Layout | None, call: str, agreed: bool = False) -> Coarray:
    """The collective part of registering ``local`` as this rank's part: agreement on the
    dtype, the number of dimensions and the layout (unless the caller ``agreed`` already),
    an ``Allgather`` of the sizes (and of the shapes, for parts of more than 1 dimension)."""
    n, dt = local.size, local.dtype
    name = name or f"coarray{len(bsp._objects)}"
    if layout is not None:
        _check_layout(bsp, layout, f"rank {bsp.pid}: {call}(name={name!r})")
    if layout is not None and layout.local_size(bsp.pid) != n:
        raise UsageError(f"rank {bsp.pid}: {call}(name={name!r}): layout {layout!r} gives rank "
                         f"{bsp.pid} {layout.local_size(bsp.pid)} elements, the array has {n}")
    described = json.dumps(layout.describe(), sort_keys=True) if layout is not None else ""
    if not agreed:
        bsp._agree(Kind.REGISTER, signature(f"coarray {dt.descr} {local.ndim} {described}"),
                   lambda: f"{call}({f'n={n}' if local.ndim == 1 else f'shape={local.shape}'}, "
                           f"dtype={dt}, name={name!r}"
                           + (f", layout={layout!r})" if layout is not None else ")"))
    sizes = np.empty(bsp.nprocs, dtype=np.int64)
    bsp.comm.Allgather(np.array([n], dtype=np.int64), sizes)
    shapes = tuple(bsp.comm.allgather(local.shape)) if local.ndim != 1 else None
    arr = Coarray(bsp, bsp._outbox, len(bsp._objects), local, tuple(sizes.tolist()), name,
                  scratch, layout, shapes)
    bsp._objects.append(arr)
    return arr


def _check_layout(bsp: "BSP", layout: Any, where: str) -> None:
    """A :class:`UsageError` at ``where`` unless ``layout`` is a partitioning over ``bsp``'s ranks."""
    if not isinstance(layout, (Partitioning, Grid)):
        raise UsageError(f"{where}: layout must be a partitioning (hpcbsp.runtime.api.partition: "
                         f"Block, Cyclic, BlockCyclic, Explicit, Grid), got {type(layout).__name__}")
    if layout.p != bsp.nprocs:
        raise UsageError(f"{where}: layout {layout!r} is over {layout.p} ranks, this context has "
                         f"{bsp.nprocs}")
