"""What a user gives the BSF farm: the map list, Map, an associative Reduce, Compute and StopCond."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

import numpy as np

#: Elements ``[start, stop)`` of the map list, built where they are used (like the BSF skeleton's
#: ``PC_bsf_SetMapListElem``: each worker builds only its own sublist).
Sublist = Callable[[int, int], Any]


@dataclass
class BSFProblem:
    """An iterative algorithm in BSF form (Sokolinsky's Algorithm 1).

    ``x(i+1) = compute(x(i), reduce(⊕, map(F_x(i), A)))`` until ``stop(x(i+1), x(i))``.

    Parameters
    ----------
    items
        The map list A: a sequence or array sliced as ``items[start:stop]``, or a callable
        ``items(start, stop)`` that builds those elements (so no rank holds the whole list).
    list_length
        l, the number of elements of A (default ``len(items)``).
    map
        ``map(x, sublist) -> B``: F_x applied to every element of a sublist; B is an array whose
        axis 0 runs over the elements (the reduce-list of that sublist).  Vectorise it: it is
        called once per worker per iteration.
    reduce
        ``reduce(a, b) -> a ⊕ b`` for two reduce-list elements; must be associative.
    compute
        ``compute(x, s) -> x_next``: the master's step from the folded result s.
    stop
        ``stop(x_next, x) -> bool``: the master's stop condition.
    fold
        Optional vectorised Reduce of a whole reduce-list, ``fold(B) -> B[0] ⊕ B[1] ⊕ ...``
        (e.g. ``lambda b: b.sum(axis=0)`` for ⊕ = +).  It must agree with ``reduce``.

    Reduce-list elements are real numeric arrays of one fixed shape (they travel as float64).
    """

    items: Union[Sequence[Any], np.ndarray, Sublist]
    map: Callable[[np.ndarray, Any], Any]
    reduce: Callable[[np.ndarray, np.ndarray], np.ndarray]
    compute: Callable[[np.ndarray, np.ndarray], np.ndarray]
    stop: Callable[[np.ndarray, np.ndarray], bool]
    list_length: int | None = None
    fold: Callable[[np.ndarray], np.ndarray] | None = None

    def __post_init__(self) -> None:
        if self.list_length is None:
            if callable(self.items):
                raise ValueError("BSFProblem: give list_length when items is a callable")
            self.list_length = len(self.items)
        if int(self.list_length) < 1:
            raise ValueError(f"BSFProblem: the map list is empty (list_length={self.list_length})")
        self.list_length = int(self.list_length)

    def sublist(self, start: int, stop: int) -> Any:
        """Elements ``[start, stop)`` of the map list."""
        if callable(self.items):
            return self.items(start, stop)
        return self.items[start:stop]

    def map_block(self, x: np.ndarray, sub: Any) -> np.ndarray:
        """The reduce-list of a sublist as a float64 array (axis 0: elements)."""
        return np.asarray(self.map(x, sub), dtype=np.float64)

    def fold_block(self, b: np.ndarray) -> np.ndarray:
        """Fold a reduce-list with ⊕ (``fold`` if given, else ``reduce`` left to right)."""
        if self.fold is not None:
            return np.asarray(self.fold(b), dtype=np.float64)
        return np.asarray(functools.reduce(self.reduce, b), dtype=np.float64)
