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
  (:func:`tree_levels`).  The order goes down the D levels, one message per level on the path;
  the K partial results come up and all of them pass the master's link (the master folds them
  itself, hence the ``(K − 1)·t_a`` term in both forms).  With φ the order's share of an
  exchange's bytes (``order_share``, order / (order + result)): v(K) = φ·D + (1 − φ)·K.  Each
  level is a superstep each way, and a superstep's synchronisation costs L for every worker it
  spans (the linear form's 2K latencies are its two supersteps' 2·K·L): λ(K) = 2·D·K;
* ``t_0``: a constant per iteration of the exchange, which may be negative.  [S21] has none
  (t_0 = 0); the farm's calibration measures it (a rate-limited link lets a few KiB of every
  message burst leave at once, which no per-worker term can express: on the emulated cluster's
  10 Mbit/s links t_0 ≈ −10 ms against t_c ≈ 27 ms, docs/performance.md);
* ``granularity="continuous"``: ``g(K) = 1/K``; ``granularity="ceil"``: ``g(K) = ⌈l/K⌉/l``, the
  slowest worker holds ⌈l/K⌉ elements, which produces the staircase real runs show.  The tree's
  D(K) is an integer in both (the tree has that many levels).

T(1) = 2L + t_c + t_0 + t_Map + (l − 1)·t_a + t_p in every form, so the speedup a(K) = T(1)/T(K)
has a(1) = 1 exactly.  In the continuous linear form T(K) = A·K + B/K + C with A = 2L + t_c + t_a,
B = t_Map + l·t_a, C = t_p + t_0 − 2·t_a and the scalability boundary is K_BSF = sqrt(B/A); the
tree form has no closed form (its D(K) is a staircase): its K_max is the argmax found by search.

When l is unknown (``list_length=None``) the model has no t_a term of its own: t_a is taken as 0,
so t_Map stands for the whole parallel work B and ``ceil`` granularity is unavailable.

The model is data (:class:`BSFParams`) plus a form (:class:`BSFModel`); the same basis functions
(:func:`basis`) serve prediction and least-squares fitting (:mod:`hpcbsp.cost.fit`).

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
from dataclasses import asdict, dataclass, replace
from typing import Iterable

import numpy as np

from ..util.choices import EXCHANGES


class CostInputError(ValueError):
    """Bad input to a cost model: a malformed file, a missing column, an impossible parameter.

    The one error type of the cost models (:mod:`hpcbsp.cost` re-exports it).  It lives here, with
    the model, because the farm (below ``cost`` in the layers) checks parameters with it too.  The
    message is one line meant for the user; the command lines print it and exit with status 2,
    without a traceback.
    """


GRANULARITIES: tuple[str, ...] = ("continuous", "ceil")
#: The parameter set, in the order of :class:`BSFParams` (reports, RUNS.csv and MODEL.json use these keys).
PARAM_NAMES: tuple[str, ...] = ("latency", "t_c", "t_map", "t_a", "t_p", "list_length")
#: Names of the coefficients multiplying the columns of :func:`basis`, in order.
COEFFICIENTS: tuple[str, ...] = ("exchange", "t_map", "t_a", "t_p")
#: Largest K the numeric argmax searches when the list length does not bound it.
DEFAULT_K_LIMIT = 1_000_000


@dataclass(frozen=True)
class BSFParams:
    """The BSF cost parameters of one program on one machine (seconds; ``list_length`` elements)."""

    latency: float
    t_c: float
    t_map: float
    t_a: float
    t_p: float
    list_length: int | None = None
    #: Constant per iteration of the exchange (seconds, may be negative); 0 in [S21].
    t_0: float = 0.0
    #: The order's share of an exchange's bytes, order / (order + result): the tree form's φ.
    order_share: float = 0.5

    def __post_init__(self) -> None:
        for name in ("latency", "t_c", "t_map", "t_a", "t_p"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise CostInputError(f"BSF parameter {name} must be a finite number >= 0, got {value!r}")
        if not math.isfinite(self.t_0):
            raise CostInputError(f"BSF parameter t_0 must be a finite number, got {self.t_0!r}")
        if not (math.isfinite(self.order_share) and 0.0 <= self.order_share <= 1.0):
            raise CostInputError(f"BSF parameter order_share must be within [0, 1], got {self.order_share!r}")
        if self.list_length is not None and int(self.list_length) < 1:
            raise CostInputError(f"BSF parameter list_length must be an integer >= 1 (> 0), got {self.list_length!r}")
        if self.list_length is None and self.t_a != 0:
            raise CostInputError("t_a needs the list length (the Reduce folds l elements); give --list-length")

    @property
    def exchange(self) -> float:
        """Cost of one master-worker exchange, latency included: 2L + t_c."""
        return 2.0 * self.latency + self.t_c

    def coefficients(self) -> np.ndarray:
        """The coefficient vector matching the columns of :func:`basis`."""
        return np.array([self.exchange, self.t_map, self.t_a, self.t_p], dtype=float)

    @classmethod
    def from_coefficients(cls, coef: Iterable[float], list_length: int | None,
                          like: "BSFParams | None" = None) -> "BSFParams":
        """Parameters from coefficients ``[2L + t_c, t_Map, t_a, t_p]`` (fitted, or a bootstrap
        replicate).  Without ``like`` the exchange cannot be split, so it all goes to t_c (L = 0,
        t_0 = 0); with ``like`` (the point estimate a replicate varies) its L, t_0 and order share
        are kept and t_c = exchange − 2L."""
        exchange, t_map, t_a, t_p = (max(0.0, float(c)) for c in coef)
        if like is None:
            return cls(latency=0.0, t_c=exchange, t_map=t_map, t_a=t_a if list_length else 0.0, t_p=t_p,
                       list_length=list_length)
        return cls(latency=like.latency, t_c=max(exchange - 2.0 * like.latency, 0.0), t_map=t_map,
                   t_a=t_a if list_length else 0.0, t_p=t_p, list_length=list_length, t_0=like.t_0,
                   order_share=like.order_share)

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, source: str | None = None) -> "BSFParams":
        """The parameters of ``data`` (a model file's ``"params"``, a farm report), checked:
        :class:`CostInputError` names ``source`` (the file, where given), the parameter and what
        it must be (a number >= 0, an integer >= 1, ...)."""
        try:
            return cls._from_dict(data)
        except CostInputError as exc:
            raise CostInputError(f"{source}: {exc}" if source else str(exc)) from None

    @classmethod
    def _from_dict(cls, data: dict) -> "BSFParams":
        if not isinstance(data, dict):
            raise CostInputError("the BSF parameters are not an object of names and numbers")

        def number(name: str, default: float | None = None) -> float:
            if name not in data:
                if default is None:
                    raise CostInputError(f"BSF parameters lack {name!r}")
                return default
            raw = data[name]
            try:
                if isinstance(raw, bool):
                    raise TypeError(raw)
                return float(raw)
            except (TypeError, ValueError):
                raise CostInputError(f"BSF parameter {name} is not a number: {raw!r}") from None

        length = data.get("list_length")
        if length is not None:
            count = number("list_length")
            if not (math.isfinite(count) and count == int(count)):
                raise CostInputError(f"BSF parameter list_length must be a whole number of elements "
                                     f"(an integer >= 1), got {length!r}")
            length = int(count)
        return cls(latency=number("latency"), t_c=number("t_c"), t_map=number("t_map"), t_a=number("t_a", 0.0),
                   t_p=number("t_p"), list_length=length, t_0=number("t_0", 0.0),
                   order_share=number("order_share", 0.5))


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
