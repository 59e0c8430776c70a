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

Local to one rank: every error is a :class:`BSPError` that names the checkpoint and the coarray;
the ranks' agreement on it is the caller's.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...errors import BSPError
from ..coarray import Coarray
from ..partition import Grid, Partitioning, from_description

#: Rank r's saved file's arrays (loaded once, on demand).
Parts = Callable[[int], "dict[str, np.ndarray]"]


def place(c: Coarray, info: dict[str, Any], path: str, saved_p: int, pid: int, p: int,
          part_of: Parts) -> None:
    """Fill this rank's (``pid`` of ``p``) part of ``c`` from its saved record ``info`` (meta.json's
    entry: dtype, sizes, layout) of a checkpoint at ``path`` saved on ``saved_p`` ranks."""
    name = c.name
    if np.dtype(info["dtype"]) != c.dtype:
        raise BSPError(f"checkpoint {path}: coarray {name!r} was saved as "
                       f"{np.dtype(info['dtype'])}, is {c.dtype} here")
    old_sizes = np.asarray(info["sizes"], dtype=np.int64)
    if old_sizes.sum() != sum(c.sizes):
        raise BSPError(f"checkpoint {path}: coarray {name!r} holds {old_sizes.sum()} "
                       f"elements in all, this program's has {sum(c.sizes)}")
    if old_sizes.tolist() == list(c.sizes) and _same_layout(info.get("layout"), c.layout):
        c.flat[:] = part_of(pid)[f"coarray:{name}"].reshape(-1)  # the saved parts as they were
    else:
        _redistribute(c, pid, _layouts(path, name, info, c, saved_p, p), part_of)


def _same_layout(saved: dict[str, Any] | None, here: Partitioning | Grid | None) -> bool:
    """Whether the parts can be given back as they are: the same layout, or none on either side
    (same rank count and sizes: a program that declares no layout gets its own parts back)."""
    if saved is None or here is None:
        return saved is None and here is None
    return bool(saved == here.describe())


def _layouts(path: str, name: str, info: dict[str, Any], c: Coarray, saved_p: int,
             p: int) -> tuple[Partitioning | Grid, Partitioning | Grid]:
    """The saved and the current layout of coarray ``name``, or a BSPError saying why its parts
    cannot be placed on this rank count."""
    where = f"checkpoint {path}: coarray {name!r}"
    moved = f"saved on {saved_p} rank(s) with parts of {info['sizes']} elements, restored on {p}"
    if info.get("layout") is None or c.layout is None:
        missing = "it was saved without a layout" if info.get("layout") is None else \
            "it is registered here without a layout"
        raise BSPError(
            f"{where} was {moved}, and {missing}: hpcbsp cannot know which global elements each part "
            "holds (concatenating them in rank order would permute a cyclic array). Register it with "
            "its layout when saving and restoring (bsp.coarray(..., layout=Block(n, bsp.nprocs)), "
            "Cyclic, BlockCyclic or Grid from hpcbsp.runtime.api.partition), or restore on "
            f"{saved_p} rank(s) with the same part sizes")
    saved = from_description(info["layout"])
    here = c.layout
    same_kind = isinstance(saved, Grid) == isinstance(here, Grid)
    if not same_kind or _shape(saved) != _shape(here):
        raise BSPError(f"{where}: saved with layout {saved!r} of shape {_shape(saved)}, registered here "
                       f"with {here!r} of shape {_shape(here)}: the global arrays differ")
    if saved.p != saved_p or saved.local_sizes().tolist() != list(info["sizes"]):
        raise BSPError(f"{where} is damaged: its layout {saved!r} does not match its saved parts")
    return saved, here


def _shape(layout: Partitioning | Grid) -> tuple[int, ...]:
    return layout.shape if isinstance(layout, Grid) else (layout.n,)


def _redistribute(c: Coarray, pid: int, layouts: tuple[Partitioning | Grid, Partitioning | Grid],
                  part_of: Parts) -> None:
    """Fill this rank's part with the global elements its layout gives it, each read from the
    saved part (and local index) that the saved layout had it in."""
    saved, here = layouts
    if isinstance(saved, Grid) and isinstance(here, Grid):
        mesh = np.meshgrid(*here.global_indices(pid), indexing="ij")  # row-major local order
        owners, local = saved.locate([m.reshape(-1) for m in mesh])
    elif isinstance(saved, Partitioning) and isinstance(here, Partitioning):
        owners, local = saved.locate(here.global_indices(pid))
    else:  # _layouts refuses a pair of different kinds
        raise AssertionError(f"layouts of different kinds: {saved!r}, {here!r}")
    owners, local = np.asarray(owners).reshape(-1), np.asarray(local).reshape(-1)
    for r in np.unique(owners):
        mine = owners == r
        c.flat[mine] = part_of(int(r))[f"coarray:{c.name}"].reshape(-1)[local[mine]]
