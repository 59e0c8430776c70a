"""The BSF (Bulk Synchronous Farm) cost model: iteration time, speedup and the scalability boundary.

A BSF machine is one master and K workers.  Per iteration the master sends the current
approximation (the *order*) to every worker, each worker maps its share of the list of length l
and folds it, the master folds the K partial results, runs its compute step and the stop test.
With the cost parameters

========  ==================================================================================
L         latency: the cost of one one-byte message (here: of one synchronisation)
t_c       master-worker exchange of one order and one partial result, latency excluded
t_Map     Map over the *whole* list on one worker
t_a       one ``⊕`` of the Reduce
t_p       the master's compute step and stop test
l         list length
========  ==================================================================================

one iteration on K workers costs (``g(K)`` is the slowest worker's share of the list)::

    T(K) = λ(K)·L + v(K)·t_c + t_0 + t_Map·g(K) + (l·g(K) − 1)·t_a + (K − 1)·t_a + t_p

where λ(K) counts latencies and v(K) transfers, by the exchange's form:

* ``comm="linear"``: the master exchanges with the workers one by one, λ(K) = 2K and v(K) = K,
  so the exchange is [S21]'s ``K·(2L + t_c)``;
* ``comm="tree"``: the farm's binomial tree over P = K + 1 ranks, D(K) = ⌈log2(K + 1)⌉ levels
  (:func:`~hpcbsp.farm.terms.tree_levels`).  The order goes down the D levels, one message per level on the path;
  the K partial results come up and all of them pass the master's link (the master folds them
  itself, hence the ``(K − 1)·t_a`` term in both forms).  With φ the order's share of an
  exchange's bytes (``order_share``, order / (order + result)): v(K) = φ·D + (1 − φ)·K.  Each
  level is a superstep each way, and a superstep's synchronisation costs L for every worker it
  spans (the linear form's 2K latencies are its two supersteps' 2·K·L): λ(K) = 2·D·K;
* ``t_0``: a constant per iteration of the exchange, which may be negative.  [S21] has none
  (t_0 = 0); the farm's calibration measures it (a rate-limited link lets a few KiB of every
  message burst leave at once, which no per-worker term can express: on the emulated cluster's
  10 Mbit/s links t_0 ≈ −10 ms against t_c ≈ 27 ms: docs/notes/performance-journal.md, "BSF
  prediction across 33 emulated nodes");
* ``granularity="continuous"``: ``g(K) = 1/K``; ``granularity="ceil"``: ``g(K) = ⌈l/K⌉/l``, the
  slowest worker holds ⌈l/K⌉ elements, which produces the staircase real runs show.  The tree's
  D(K) is an integer in both (the tree has that many levels).

T(1) = 2L + t_c + t_0 + t_Map + (l − 1)·t_a + t_p in every form, so the speedup a(K) = T(1)/T(K)
has a(1) = 1 exactly.  In the continuous linear form T(K) = A·K + B/K + C with A = 2L + t_c + t_a,
B = t_Map + l·t_a, C = t_p + t_0 − 2·t_a and the scalability boundary is K_BSF = sqrt(B/A); the
tree form has no closed form (its D(K) is a staircase): its K_max is the argmax found by search.

When l is unknown (``list_length=None``) the model has no t_a term of its own: t_a is taken as 0,
so t_Map stands for the whole parallel work B and ``ceil`` granularity is unavailable.

The model is data (:class:`~hpcbsp.farm.params.BSFParams`, with its checks and its I/O) plus a
form (:class:`BSFModel`: T(K), the speedup, the efficiency and the boundary K_max); the terms per
K (g, D, v, λ) and the basis functions built of them, which serve prediction and least-squares
fitting alike (:mod:`hpcbsp.cost.fit`), are :mod:`hpcbsp.farm.terms`.

Sources.  [S21] L. B. Sokolinsky, "BSF: a parallel computation model for scalability estimation
of iterative numerical algorithms on cluster computing systems", J. Parallel Distrib. Comput. 149
(2021) 193–206, arXiv:2008.03485: the list-based cost metric (parameters L, t_c, t_Map, t_a, t_p,
l; T_1, T_K, speedup a_BSF, efficiency e_BSF and the boundary K_BSF of its §3).  [E17] N. Ezhova's
BSF simulator (github.com/ezhova-nadezhda/BSF-simulator, ``mpiapp.cpp``), whose code prints the
2017 form T_K = K·(L + t_s) + t_w/K + K·L + t_r + t_p, the linear form here with t_a = 0.  Only
the abstract of [S21] could be retrieved where this module was checked (issue 17), so the
formulas below are cited by what they compute, not by equation number; the linear form follows
the skeleton's Algorithm 2 term by term (K one-by-one exchanges, a worker fold of l/K − 1 ⊕,
a master fold of K − 1 ⊕), and tests/test_cost_bsf_paper.py checks every function against values
worked out by hand from these equations, and against [E17].  The tree form and t_0 are this
project's: the farm's binomial tree counted superstep by superstep, as measured on 33 emulated
nodes (issue 29; an earlier tree form of 1 + log2 K whole exchanges missed those runs by 43–54 %).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable

import numpy as np

from .params import BSFParams, CostInputError
from .terms import as_workers, basis, check_form, latency_count, plateau_starts

__all__ = ["DEFAULT_K_LIMIT", "BSFModel"]

#: Largest K the numeric argmax searches when the list length does not bound it.
DEFAULT_K_LIMIT = 1_000_000


@dataclass(frozen=True)
class BSFModel:
    """A BSF cost model: parameters plus the communication form and the granularity."""

    params: BSFParams
    comm: str = "linear"
    granularity: str = "continuous"

    def __post_init__(self) -> None:
        check_form(self.comm, self.granularity, self.params.list_length)

    def with_params(self, params: BSFParams) -> "BSFModel":
        return replace(self, params=params)

    # -- time, speedup, efficiency -------------------------------------------------------------
    def time(self, workers: Iterable[int] | int | np.ndarray) -> np.ndarray:
        """Predicted seconds per iteration T(K) for each K.

        [S21] §3, the iteration time on K workers (linear form, t_0 = 0):
        ``T_K = K·(2L + t_c) + t_Map·g(K) + (l·g(K) − 1)·t_a + (K − 1)·t_a + t_p``, which at K = 1
        is the paper's ``T_1 = 2L + t_c + t_Map + (l − 1)·t_a + t_p``; with t_a = 0 it is [E17]'s
        ``K·(2L + t_s) + t_w/K + t_r + t_p``.  The tree form and t_0: the module's docstring.
        """
        p = self.params
        x = basis(workers, self.comm, self.granularity, p.list_length, p.order_share)
        lam = latency_count(as_workers(workers), self.comm)
        # Term by term, not a matrix product: equal rows then give bit-equal times, so a(1) == 1.
        return (lam * p.latency + x[:, 0] * p.t_c + p.t_0 + x[:, 1] * p.t_map + x[:, 2] * p.t_a
                + x[:, 3] * p.t_p)

    def speedup(self, workers: Iterable[int] | int | np.ndarray) -> np.ndarray:
        """a(K) = T(1)/T(K): [S21]'s speedup a_BSF(K) = T_1/T_K."""
        return self.time(1)[0] / self.time(workers)

    def efficiency(self, workers: Iterable[int] | int | np.ndarray) -> np.ndarray:
        """e(K) = a(K)/K: [S21]'s parallel efficiency e_BSF(K) = a_BSF(K)/K."""
        k = as_workers(workers)
        return self.speedup(k) / k

    # -- the scalability boundary ---------------------------------------------------------------
    def aggregate(self) -> dict[str, float]:
        """The continuous linear form's aggregate coefficients ``T = A·K + B/K + C``.

        A = 2L + t_c + t_a, B = t_Map + l·t_a, C = t_p + t_0 − 2·t_a ([S21]'s T_K with its terms
        collected).  The tree form has no such aggregate: its parameters are given instead.
        """
        p = self.params
        length = p.list_length or 0
        b = p.t_map + length * p.t_a
        if self.comm == "linear":
            return {"A": p.exchange + p.t_a, "B": b, "C": p.t_p + p.t_0 - 2.0 * p.t_a}
        return {"L": p.latency, "t_c": p.t_c, "order_share": p.order_share, "t_a": p.t_a, "B": b,
                "C": p.t_p + p.t_0 - 2.0 * p.t_a}

    def k_bsf(self) -> float | None:
        """The real-valued boundary of the continuous form; None if T never turns up.

        Linear: the closed form sqrt(B/A), [S21]'s scalability boundary
        K_BSF = sqrt((t_Map + l·t_a)/(2L + t_c + t_a)), the root of dT_K/dK = 0.  Tree: no closed
        form (D(K) is a staircase); the argmax of the continuous-share speedup found by search,
        as a float.  For ``ceil`` granularity this is the boundary of the continuous envelope.
        """
        if self.comm == "tree":
            k = replace(self, granularity="continuous").k_max_numeric()
            return None if k is None else float(k)
        agg = self.aggregate()
        a, b = agg["A"], agg["B"]
        if a <= 0:
            return None
        return math.sqrt(b / a)

    def k_limit(self, k_limit: int | None = None) -> int:
        """Largest K worth considering: the list length (a worker needs an element) or a bound."""
        limit = DEFAULT_K_LIMIT if k_limit is None else int(k_limit)
        if self.params.list_length:
            limit = min(limit, int(self.params.list_length))
        return max(1, limit)

    def k_max_closed(self, k_limit: int | None = None) -> int | None:
        """Integer K_max from the closed form: the better of ⌊K_BSF⌋ and ⌈K_BSF⌉ (first on ties).

        None when the model has no turnover (K_BSF infinite or beyond the limit).  The tree form
        has no closed form: the numeric argmax of its continuous-share form.
        """
        if self.comm == "tree":
            return replace(self, granularity="continuous").k_max_numeric(k_limit)
        k = self.k_bsf()
        limit = self.k_limit(k_limit)
        if limit == 1:
            return 1  # one worker is all there can be
        if k is None or k >= limit:
            return None  # rising up to the limit: no turnover within it
        lo, hi = max(1, math.floor(k)), max(1, math.ceil(k))
        if lo == hi:
            return lo
        # Compare on the continuous envelope (the closed form's own model), not the staircase.
        t_lo, t_hi = replace(self, granularity="continuous").time([lo, hi])
        best = lo if t_lo <= t_hi else hi
        return None if best >= limit and limit > 1 else best

    def k_max_numeric(self, k_limit: int | None = None) -> int | None:
        """Integer K_max as the least K where a(K) is largest on 1..limit, by brute force.

        None when the maximum sits at the limit (no turnover within 1..limit).  With ``ceil``
        granularity only the first K of each plateau of ⌈l/K⌉ is evaluated: within a plateau the
        work is constant and every other term grows with K (all coefficients are >= 0), so a
        plateau's best K is its first.
        """
        limit = self.k_limit(k_limit)
        if limit == 1:
            return 1
        if self.granularity == "ceil":
            assert self.params.list_length, "checked by check_form"
            k = plateau_starts(int(self.params.list_length), limit).astype(float)
        else:
            k = np.arange(1, limit + 1, dtype=float)
        t = self.time(k)
        best = int(np.argmin(t))  # the first minimum: the least K reaching the largest speedup
        if int(k[best]) == limit:
            return None
        return int(k[best])

    def k_max(self, k_limit: int | None = None) -> int | None:
        """The scalability boundary used in reports.

        The closed form for continuous granularity (the tests check it equals the brute-force
        argmax), the plateau search for ``ceil``; the search for the tree form.
        """
        if self.granularity == "continuous" and self.comm == "linear":
            return self.k_max_closed(k_limit)
        return self.k_max_numeric(k_limit)

    def as_dict(self) -> dict:
        return {"comm": self.comm, "granularity": self.granularity, "params": self.params.as_dict()}

    @classmethod
    def from_dict(cls, data: dict, source: str | None = None) -> "BSFModel":
        """The model of ``data`` (a model file's object; ``source``: the file, named in every
        :class:`CostInputError`)."""
        where = f"{source}: " if source else ""
        if "params" not in data:
            raise CostInputError(f"{where}model lacks 'params'")
        params = BSFParams.from_dict(data["params"], source)
        try:
            return cls(params=params, comm=str(data.get("comm", "linear")),
                       granularity=str(data.get("granularity", "continuous")))
        except CostInputError as exc:
            raise CostInputError(f"{where}{exc}") from None
