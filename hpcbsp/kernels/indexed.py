"""Scatter-add and gather on a 1-D table with int64 indices (histogram update, index-gather)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_index_array, flat_view
from ._extensions import MODULES

_EXT = MODULES["_indexed"]
# The fused Cython functions specialised per table dtype, looked up once: indexing a fused
# function by dtype skips its per-call dispatch.
_SPECIALISATION = {np.dtype(t): name for t, name in (
    (np.float64, "double"), (np.float32, "float"), (np.int64, "int64_t"), (np.int32, "int32_t"))}
_SCATTER = {dt: _EXT.scatter_add_checked[name] for dt, name in _SPECIALISATION.items()}
_SCATTER_SCALAR = {dt: _EXT.scatter_add_scalar_checked[name]
                   for dt, name in _SPECIALISATION.items()}
_GATHER = {dt: _EXT.gather[name] for dt, name in _SPECIALISATION.items()}

#: Table dtypes with a compiled loop.  ``gather`` also accepts any other dtype (checked, then
#: ``np.take``); ``scatter_add`` accepts only these.
TABLE_DTYPES: tuple[np.dtype, ...] = tuple(_SPECIALISATION)


def _check_table(table: Any, op: str) -> np.ndarray:
    if not isinstance(table, np.ndarray):
        raise TypeError(f"{op}: the table must be a numpy array, not {type(table).__name__}")
    if table.ndim != 1:
        raise ValueError(f"{op}: the table must be 1-D, not {table.ndim}-D")
    return table


def _check_indices(idx: np.ndarray, size: int) -> None:
    _raise_if_bad(idx, _EXT.first_bad_index(idx, size), size)


def _raise_if_bad(idx: np.ndarray, bad: int, size: int) -> None:
    if bad >= 0:
        raise IndexError(
            f"index {idx[bad]} at position {bad} is out of bounds for a table of size {size}"
        )


def scatter_add(table: np.ndarray, idx: Any, values: Any) -> None:
    """Add ``values`` into ``table`` at ``idx`` in place: ``table[idx[k]] += values[k]``.

    Repeated indices accumulate (like ``np.add.at``, unlike ``table[idx] += values``).

    Parameters
    ----------
    table : ndarray, 1-D, writeable
        float64, float32, int64 or int32; may be a strided view (updated in place).
    idx : array_like of int
        Indices in ``[0, len(table))``; any integer dtype and shape (negative indices are
        errors, not wrapped).
    values : scalar or array_like
        One value for every index (the shape of ``idx``), or a scalar added at every index
        (a histogram update when it is 1).  Cast to the table's dtype under numpy's
        ``same_kind`` rule, so floats into an integer table raise ``TypeError``.

    Raises
    ------
    IndexError
        Naming the first bad index, its position and the table size; every index is checked
        before anything is written, so the table is then unchanged.
    TypeError, ValueError
        For an unsupported table dtype, a read-only table or mismatched shapes.

    Notes
    -----
    Numpy oracle: ``np.add.at`` (:func:`hpcbsp.kernels.reference.scatter_add`).
    """
    scatter = _SCATTER.get(table.dtype) if type(table) is np.ndarray else None
    # Fast path (small calls, e.g. in message handlers): everything already in the right form.
    if (scatter is not None and type(idx) is np.ndarray and type(values) is np.ndarray
            and idx.dtype == np.int64 and idx.ndim == 1 and table.ndim == 1
            and values.dtype == table.dtype and values.shape == idx.shape
            and idx.flags.c_contiguous and table.flags.writeable):
        _raise_if_bad(idx, scatter(table, idx, values), table.shape[0])
        return
    table = _check_table(table, "scatter_add")
    if scatter is None:
        raise TypeError(f"scatter_add: table dtype {table.dtype} is not supported "
                        f"(use one of {', '.join(str(d) for d in TABLE_DTYPES)})")
    if not table.flags.writeable:
        raise ValueError("scatter_add: the table is read-only")
    ix = as_index_array(idx, "index")
    if np.ndim(values) == 0:
        value = _scalar_for(table.dtype, values)
        _raise_if_bad(ix, _SCATTER_SCALAR[table.dtype](table, ix, value), table.shape[0])
        return
    vals = np.asarray(values)
    if vals.dtype != table.dtype and not np.can_cast(vals.dtype, table.dtype, "same_kind"):
        raise TypeError(f"scatter_add: cannot add {vals.dtype} values into a {table.dtype} "
                        "table (casting rule 'same_kind')")
    if vals.shape != np.shape(idx):
        raise ValueError(f"scatter_add: values of shape {vals.shape} for indices of shape "
                         f"{np.shape(idx)} (give one value per index, or a scalar)")
    _raise_if_bad(ix, scatter(table, ix, flat_view(vals.astype(table.dtype, copy=False))),
                  table.shape[0])


def _scalar_for(dtype: np.dtype, value: Any) -> int | float:
    """``value`` as the Python number the kernel converts to ``dtype``, after numpy's
    ``same_kind`` casting check (a float into an integer table is refused)."""
    if type(value) is float and dtype.kind == "f":
        return value
    if type(value) is int:
        return value if dtype.kind in "iu" else float(value)
    arr = np.asarray(value)
    if not np.can_cast(arr.dtype, dtype, "same_kind"):
        raise TypeError(f"scatter_add: cannot add {arr.dtype} values into a {dtype} table "
                        "(casting rule 'same_kind')")
    return arr.astype(dtype).item()


def gather(table: np.ndarray, idx: Any, out: np.ndarray | None = None) -> np.ndarray:
    """``table[idx]`` with bounds checking: ``out[k] = table[idx[k]]``.

    Parameters
    ----------
    table : ndarray, 1-D
        Any dtype (compiled loop for float64, float32, int64, int32); may be a strided view.
    idx : array_like of int
        Indices in ``[0, len(table))``, any integer dtype and shape (negative indices are
        errors, not wrapped).
    out : ndarray, optional
        C-contiguous array of the table's dtype and the shape of ``idx`` to fill (for
        instance a send buffer); allocated when omitted.

    Returns
    -------
    ndarray
        ``out``: the gathered values, shaped like ``idx``.

    Raises
    ------
    IndexError
        Naming the first bad index, its position and the table size.

    Notes
    -----
    Numpy oracle: ``table[idx]`` (:func:`hpcbsp.kernels.reference.gather`).
    """
    table = _check_table(table, "gather")
    ix = as_index_array(idx, "index")
    shape = np.shape(idx)
    if out is None:
        out = np.empty(shape, dtype=table.dtype)
    elif (not isinstance(out, np.ndarray) or out.shape != shape or out.dtype != table.dtype
          or not out.flags.c_contiguous or not out.flags.writeable):
        raise ValueError(f"gather: out must be a writeable C-contiguous {table.dtype} array of "
                         f"shape {shape}")
    _check_indices(ix, table.shape[0])
    compiled = _GATHER.get(table.dtype)
    if compiled is not None:
        compiled(table, ix, out.reshape(-1))
    else:
        np.take(table, ix, out=out.reshape(-1))
    return out
