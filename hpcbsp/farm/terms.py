"""The terms of the BSF iteration time T(K), per worker count K: what the model of
:mod:`hpcbsp.farm.model` charges each parameter for.

* g(K), the slowest worker's share of the list (:func:`share`): 1/K (``continuous``) or
  ⌈l/K⌉/l (``ceil``);
* D(K) = ⌈log2(K + 1)⌉, the levels of the farm's binomial tree (:func:`tree_levels`);
* v(K), the transfers t_c is charged for (:func:`exchange_count`), and λ(K), the latencies L is
  charged for (:func:`latency_count`), by the exchange's form (``linear`` or ``tree``);
* :func:`basis`, the design matrix whose columns multiply the coefficients
  ``[2L + t_c, t_Map, t_a, t_p]`` (:data:`COEFFICIENTS`): the same terms serve prediction and
  least-squares fitting (:mod:`hpcbsp.cost.fit`);
* :func:`plateau_starts`, the least K of every plateau of ⌈l/K⌉, where the ``ceil`` form's argmax
  can lie.

Worker counts are checked to be >= 1 and a form to be known and possible
(:func:`check_form`): :class:`~hpcbsp.farm.params.CostInputError` otherwise.
"""
from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from ..util.choices import EXCHANGES
from .params import CostInputError

__all__ = ["COEFFICIENTS", "GRANULARITIES", "as_workers", "basis", "check_form", "exchange_count",
           "latency_count", "plateau_starts", "share", "tree_levels"]

GRANULARITIES: tuple[str, ...] = ("continuous", "ceil")
#: Names of the coefficients multiplying the columns of :func:`basis`, in order.
COEFFICIENTS: tuple[str, ...] = ("exchange", "t_map", "t_a", "t_p")


def check_form(comm: str, granularity: str, list_length: int | None) -> None:
    """Raise :class:`CostInputError` for an unknown or impossible model form."""
    if comm not in EXCHANGES:
        raise CostInputError(f"unknown communication form {comm!r}; choose from {', '.join(EXCHANGES)}")
    if granularity not in GRANULARITIES:
        raise CostInputError(f"unknown granularity {granularity!r}; choose from {', '.join(GRANULARITIES)}")
    if granularity == "ceil" and not list_length:
        raise CostInputError("granularity 'ceil' needs the list length (give --list-length)")


def as_workers(workers: Iterable[int] | int | np.ndarray) -> np.ndarray:
    """Worker counts as a float array, checked to be >= 1."""
    k = np.atleast_1d(np.asarray(workers, dtype=float))
    if k.size and (not np.all(np.isfinite(k)) or k.min() < 1):
        raise CostInputError("worker counts must be >= 1")
    return k


def share(workers: np.ndarray, granularity: str, list_length: int | None) -> np.ndarray:
    """g(K): the slowest worker's share of the list, 1/K or ⌈l/K⌉/l."""
    if granularity == "ceil":
        assert list_length, "checked by check_form"
        return np.ceil(list_length / workers) / list_length
    return 1.0 / workers


def tree_levels(workers: int | float | np.ndarray) -> np.ndarray:
    """D(K) = ⌈log2(K + 1)⌉, at least 1: the levels of the farm's binomial tree over K + 1 ranks,
    the rounds of its exchange each way (:mod:`hpcbsp.farm.skeleton`), for each K.

    Exact, with no rounding of a logarithm: the bit length of ⌈K⌉ (the exponent ``frexp`` gives),
    which equals ⌈log2(K + 1)⌉ for every real K > 0.
    """
    return np.maximum(1.0, np.frexp(np.ceil(np.asarray(workers, dtype=float)))[1])


def exchange_count(workers: np.ndarray, comm: str, order_share: float = 0.5) -> np.ndarray:
    """v(K), the transfers t_c is charged for: K (linear); φ·D(K) + (1 − φ)·K (tree), φ the order share."""
    if comm == "linear":
        return np.asarray(workers, dtype=float)
    return order_share * tree_levels(workers) + (1.0 - order_share) * np.asarray(workers, dtype=float)


def latency_count(workers: np.ndarray, comm: str) -> np.ndarray:
    """λ(K), the latencies L is charged for: 2K (linear: two supersteps, L per worker each); 2·D(K)·K (tree)."""
    k = np.asarray(workers, dtype=float)
    return 2.0 * k if comm == "linear" else 2.0 * tree_levels(k) * k


def basis(workers: Iterable[int] | int | np.ndarray, comm: str, granularity: str,
          list_length: int | None, order_share: float = 0.5) -> np.ndarray:
    """Design matrix of T(K): one row per K, columns matching :data:`COEFFICIENTS`.

    ``T(K) = basis(K) @ [2L + t_c, t_Map, t_a, t_p]`` for the linear form, and for the tree form
    when L = 0 (as in a fit of T(K), which cannot tell L from t_c); t_0 is part of t_p there.
    The exchange column is v(K) (:func:`exchange_count`).  Without a list length the t_a column
    is zero (t_a is then part of t_Map).
    """
    check_form(comm, granularity, list_length)
    k = as_workers(workers)
    exchanges = exchange_count(k, comm, order_share)
    g = share(k, granularity, list_length)
    if list_length:
        folds = (list_length * g - 1.0) + (k - 1.0)  # worker folds its share, master folds K results
    else:
        folds = np.zeros_like(k)
    return np.column_stack([exchanges, g, folds, np.ones_like(k)])


def plateau_starts(list_length: int, limit: int) -> np.ndarray:
    """The least K of every plateau of ⌈l/K⌉ on 1..limit, ascending.

    The smallest K with ⌈l/K⌉ = v is ⌈l/v⌉; the plateau values are every K up to sqrt(l) and
    every l/v rounded up for v up to sqrt(l), so O(sqrt(l)) candidates cover all plateaus.  Only
    candidates up to ``limit`` are made (K = ⌈l/v⌉ <= limit needs v >= l/limit), so the work is
    O(min(sqrt(l), limit)) even for a list of 10^15 elements.
    """
    root = math.isqrt(list_length) + 1
    small = np.arange(1, min(root, limit) + 1)
    values = np.ceil(list_length / small)  # plateau values reached at K <= sqrt(l)
    v_lo = max(1, list_length // max(limit, 1))
    large_v = np.arange(v_lo, root + 1) if v_lo <= root else np.empty(0, dtype=np.int64)
    candidates = np.concatenate([small, np.ceil(list_length / values), np.ceil(list_length / large_v), [limit]])
    candidates = np.unique(candidates.astype(np.int64))
    return candidates[(candidates >= 1) & (candidates <= limit)]
