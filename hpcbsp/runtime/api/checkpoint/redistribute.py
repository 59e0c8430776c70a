"""A saved coarray put back into a registered one: as it was, or onto another layout or rank count.

Coarrays are matched by name, with the layout they were registered with (``bsp.coarray(...,
layout=Block(n, p))``, any partitioning of :mod:`..partition`), which the checkpoint keeps.  On the
rank count it was saved on, with the same part sizes and the same layout (or none on either side),
each rank gets its part back.  Otherwise a coarray is redistributed by its layouts: every rank
takes the global elements its new layout gives it from wherever the saved layout had them, so a
cyclic or block-cyclic array saved on 3 ranks restores onto 2 or 4 in the right order.  A coarray
without a layout, saved or restored, is refused there with an error that says so: its parts cannot
be placed without guessing (concatenating them in rank order would permute a cyclic array without
a word).  Neither is a different dtype, total size, kind of layout (1-D or grid) or global shape.

:func:`sources` says which saved parts a rank needs (from the layouts alone, before any file is
read), :func:`place` fills its part from them.  Local to one rank: every error is a
:class:`BSPError` that names the checkpoint and the coarray; the ranks' agreement on it is the
caller's.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...errors import BSPError
from ..coarray import Coarray
from ..partition import Grid, Partitioning, from_description

#: Saved rank r's part of the coarray being placed (read once, on demand).
Part = Callable[[int], np.ndarray]


def sources(c: Coarray, info: dict[str, Any], path: str, saved_p: int, pid: int, p: int) -> list[int]:
    """The saved ranks whose parts this rank (``pid`` of ``p``) needs to fill its part of ``c``
    from its saved record ``info`` (meta.json's entry: dtype, total, layout) of a checkpoint at
    ``path`` saved on ``saved_p`` ranks: its own where the parts are given back as they were,
    else those that the saved layout puts its new elements on (computed, no file read)."""
    name = c.name
    if np.dtype(info["dtype"]) != c.dtype:
        raise BSPError(f"checkpoint {path}: coarray {name!r} was saved as "
                       f"{np.dtype(info['dtype'])}, is {c.dtype} here")
    if int(info["total"]) != sum(c.sizes):
        raise BSPError(f"checkpoint {path}: coarray {name!r} holds {info['total']} "
                       f"elements in all, this program's has {sum(c.sizes)}")
    if _as_saved(info, c, saved_p, p):
        return [pid]
    owners, _ = _owners(c, pid, _layouts(path, name, info, c, saved_p, p))
    return [int(r) for r in np.unique(owners)]


def place(c: Coarray, info: dict[str, Any], path: str, saved_p: int, pid: int, p: int,
          part_of: Part) -> None:
    """Fill this rank's part of ``c`` (see :func:`sources`) from the saved parts ``part_of(r)``."""
    if _as_saved(info, c, saved_p, p):
        part = part_of(pid).reshape(-1)
        if part.size != c.flat.size:  # no layout on either side: the part sizes must match
            raise BSPError(_no_layout(path, c.name, info, c, saved_p, p,
                                      f"rank {pid}'s part holds {part.size} elements there, {c.flat.size} here"))
        c.flat[:] = part  # the saved parts as they were
        return
    layouts = _layouts(path, c.name, info, c, saved_p, p)
    owners, local = _owners(c, pid, layouts)
    for r in np.unique(owners):
        part = part_of(int(r)).reshape(-1)
        if part.size != layouts[0].local_size(int(r)):
            raise BSPError(f"checkpoint {path}: coarray {c.name!r} is damaged: its layout "
                           f"{layouts[0]!r} does not match its saved parts")
        mine = owners == r
        c.flat[mine] = part[local[mine]]


def _as_saved(info: dict[str, Any], c: Coarray, saved_p: int, p: int) -> bool:
    """Whether the parts are given back as they are: the same rank count, and the same layout,
    or none on either side (a program that declares no layout gets its own parts back)."""
    saved, here = info.get("layout"), c.layout
    if saved_p != p:
        return False
    if saved is None or here is None:
        return saved is None and here is None
    return bool(saved == here.describe())


def _no_layout(path: str, name: str, info: dict[str, Any], c: Coarray, saved_p: int, p: int,
               how: str) -> str:
    missing = "it was saved without a layout" if info.get("layout") is None else \
        "it is registered here without a layout"
    return (f"checkpoint {path}: coarray {name!r} was saved on {saved_p} rank(s) ({how}), restored on "
            f"{p}, and {missing}: hpcbsp cannot know which global elements each part holds "
            "(concatenating them in rank order would permute a cyclic array). Register it with its "
            "layout when saving and restoring (bsp.coarray(..., layout=Block(n, bsp.nprocs)), Cyclic, "
            "BlockCyclic or Grid from hpcbsp.runtime.api.partition), or restore on "
            f"{saved_p} rank(s) with the same part sizes")


def _layouts(path: str, name: str, info: dict[str, Any], c: Coarray, saved_p: int,
             p: int) -> tuple[Partitioning | Grid, Partitioning | Grid]:
    """The saved and the current layout of coarray ``name``, or a BSPError saying why its parts
    cannot be placed on this rank count."""
    where = f"checkpoint {path}: coarray {name!r}"
    if info.get("layout") is None or c.layout is None:
        raise BSPError(_no_layout(path, name, info, c, saved_p, p, f"{info['total']} elements in all"))
    saved = from_description(info["layout"])
    here = c.layout
    same_kind = isinstance(saved, Grid) == isinstance(here, Grid)
    if not same_kind or _shape(saved) != _shape(here):
        raise BSPError(f"{where}: saved with layout {saved!r} of shape {_shape(saved)}, registered here "
                       f"with {here!r} of shape {_shape(here)}: the global arrays differ")
    if saved.p != saved_p:
        raise BSPError(f"{where} is damaged: its layout {saved!r} does not match its saved parts")
    return saved, here


def _shape(layout: Partitioning | Grid) -> tuple[int, ...]:
    return layout.shape if isinstance(layout, Grid) else (layout.n,)


def _owners(c: Coarray, pid: int, layouts: tuple[Partitioning | Grid, Partitioning | Grid]
            ) -> tuple[np.ndarray, np.ndarray]:
    """For each element of this rank's new part (in its local order): the saved rank that had
    it, and its local index there."""
    saved, here = layouts
    if isinstance(saved, Grid) and isinstance(here, Grid):
        mesh = np.meshgrid(*here.global_indices(pid), indexing="ij")  # row-major local order
        owners, local = saved.locate([m.reshape(-1) for m in mesh])
    elif isinstance(saved, Partitioning) and isinstance(here, Partitioning):
        owners, local = saved.locate(here.global_indices(pid))
    else:  # _layouts refuses a pair of different kinds
        raise AssertionError(f"layouts of different kinds: {saved!r}, {here!r}")
    return np.asarray(owners).reshape(-1), np.asarray(local).reshape(-1)
