"""The next measurement: which worker count narrows the K_max interval most for its cost.

A model file's K_max interval is the percentile interval of K_max over its bootstrap replicates
(:meth:`~hpcbsp.cost.modelfile.CalibratedModel.k_max_interval`): replicate b has coefficients
θ_b, a curve T_b(K) and a K_max of its own.  The suggestion uses that same uncertainty, updated
the Bayesian way rather than by a linearised fit, because K_max is far from linear in the
coefficients (a replicate without turnover has K_max = ∞):

* a run at K measures T(K) with a relative error of ``noise / sqrt(repeats)`` (normal);
* a simulated measurement is drawn from the model's predictive distribution: a replicate j
  taken as the truth, ``y = T_j(K)·(1 + σ·ε)`` with ε at the midpoints of Q equal-probability
  strata of the standard normal (a deterministic quadrature, no random draws: the same model
  gives the same suggestion); every replicate (at most :data:`TRUTHS`, a fixed-seed subset
  beyond) serves as the truth in turn;
* each replicate is reweighted by the likelihood of y, ``N(y; T_b(K), (σ·T_b(K))²)``, and the
  interval after the run is the weighted percentile interval of the replicates' K_max (the same
  order statistics as the model's own interval: with equal weights it is that interval);
* the expected width after a run at K is the mean over the simulated measurements (the interval
  shown, the medians of its ends); its cost
  is the point model's ``T(K)·iterations·repeats`` seconds.  The suggestion is the K with the
  largest expected narrowing per second among those whose cost is within the budget.

A K_max beyond the largest K considered (``max_workers``, else the model's K limit: the list
length or :data:`~hpcbsp.farm.model.DEFAULT_K_LIMIT`), or none (no turnover), counts as that K.
Reweighting cannot make a replicate turn over: when none does below that K (the fit refused the
exchange term as noise, say; or the whole interval lies beyond the K that can be run), no K
narrows the interval by this measure, and the suggestion is the largest K within the budget
instead (``explore``), where a turnover would show.  The noise of one run is the
model's own record when it has one (``fit.run_noise``: the spread of repeated runs at one K,
written by ``calibrate``; else the fit's training error, a mean |relative error| turned into a
standard deviation by √(π/2)), else :data:`DEFAULT_NOISE`.
"""
from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, Sequence

import numpy as np

from .errors import CostInputError
from .modelfile import CalibratedModel

#: Relative noise of one run when the model records none.
DEFAULT_NOISE = 0.05
#: Equal-probability strata of the measurement noise per simulated truth.
STRATA = 16
#: Most replicates used as simulated truths (a fixed-seed subset beyond).
TRUTHS = 64
#: Candidate worker counts spread geometrically over 1..the largest allowed.
GRID = 48


def k_max_values(cm: CalibratedModel) -> np.ndarray:
    """Each bootstrap replicate's K_max (∞ for no turnover); the point model's alone without one."""
    models = cm.replicate_models() or [cm.model]
    return np.array([np.inf if (k := m.k_max()) is None else k for m in models], dtype=float)


def weighted_interval(values: np.ndarray, weights: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """The weighted percentile interval of ``values``: lo is the least value with at least the tail's
    weight at or below it, hi the largest with at least the tail's weight at or above it (with
    equal weights, the order statistics of ``np.percentile(method="lower"/"higher")``); one pair
    per row for a 2-d ``weights``."""
    order = np.argsort(values, kind="stable")
    v = values[order]
    w = weights[..., order] / weights.sum(axis=-1, keepdims=True)
    tail = (1.0 - level) / 2.0 - 1e-12
    below = np.cumsum(w, axis=-1)
    above = np.cumsum(w[..., ::-1], axis=-1)[..., ::-1]
    lo = v[np.argmax(below >= tail, axis=-1)]
    hi = v[v.size - 1 - np.argmax((above >= tail)[..., ::-1], axis=-1)]
    return lo, hi


def run_noise(cm: CalibratedModel) -> tuple[float, str]:
    """The relative standard deviation of one run's T, and where it comes from."""
    fit = cm.fit
    if isinstance(fit.get("run_noise"), (int, float)) and fit["run_noise"] > 0:
        return float(fit["run_noise"]), "the spread of repeated runs in the model's calibration"
    if isinstance(fit.get("train_mape"), (int, float)) and fit["train_mape"] > 0:
        return float(fit["train_mape"]) / 100.0 * math.sqrt(math.pi / 2.0), "the fit's training error"
    return DEFAULT_NOISE, f"no record in the model: {100 * DEFAULT_NOISE:g} % assumed (give --noise)"


def candidate_workers(limit: int) -> np.ndarray:
    """Worker counts 1..limit: every one up to 32, then :data:`GRID` geometric steps."""
    small = np.arange(1, min(limit, 32) + 1)
    big = np.unique(np.round(np.geomspace(1, limit, GRID)).astype(int))
    return np.union1d(small, big[big <= limit])


def expected_widths(cm: CalibratedModel, workers: np.ndarray, noise: float, repeats: int, cap: float,
                    level: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Per candidate K after ``repeats`` runs there: the typical interval (the medians of its ends
    over the simulated measurements) and the expected width (the mean), ``(lo, hi, width)``; and
    the width now.  A K_max beyond ``cap``, or none, counts as ``cap``."""
    values = np.minimum(k_max_values(cm), cap)
    n = values.size
    lo0, hi0 = weighted_interval(values, np.ones(n), level)
    models = cm.replicate_models() or [cm.model]
    # (n, C); a model with a negative t_0 may predict no time at some K: a microsecond instead
    times = np.maximum(np.array([m.time(workers) for m in models]), 1e-6)
    rng = np.random.default_rng(0)
    truths = np.arange(n) if n <= TRUTHS else np.sort(rng.choice(n, TRUTHS, replace=False))
    eps = np.array([NormalDist().inv_cdf((q + 0.5) / STRATA) for q in range(STRATA)])
    sigma = noise / math.sqrt(repeats)
    lo, hi, width = (np.empty(workers.size) for _ in range(3))
    for c in range(workers.size):
        t = times[:, c]
        y = (t[truths][:, None] * (1.0 + sigma * eps[None, :])).reshape(-1)          # (D,)
        scale = sigma * t                                                            # (n,)
        loglik = -0.5 * ((y[:, None] - t[None, :]) / scale[None, :]) ** 2 - np.log(scale)[None, :]
        weights = np.exp(loglik - loglik.max(axis=1, keepdims=True))
        a, b = weighted_interval(values, weights, level)
        lo[c], hi[c], width[c] = float(np.median(a)), float(np.median(b)), float(np.mean(b - a))
    return lo, hi, width, float(hi0 - lo0)


def suggest(cm: CalibratedModel, *, budget: float | None = None, repeats: int = 1, iterations: int | None = None,
            noise: float | None = None, max_workers: int | None = None,
            workers: Sequence[int] | None = None) -> dict[str, Any]:
    """The ``suggest --json`` document: the next K to measure and the table it was chosen from.

    ``budget``: most seconds the run(s) at K may take; ``iterations``: iterations of one run
    (default: the model's record, else 1, and the costs are per iteration); ``workers``: the
    candidates (default: 1..``max_workers`` or the model's K limit, :func:`candidate_workers`).
    """
    if budget is not None and not budget > 0:
        raise CostInputError(f"--budget must be a positive number of seconds, got {budget:g}")
    if cm.boot_coefficients is None or len(cm.boot_coefficients) < 2:
        raise CostInputError("the model has no bootstrap replicates, so no interval to narrow: "
                             "fit or calibrate it with --bootstrap 200")
    sigma, source = (noise, "--noise") if noise is not None else run_noise(cm)
    if iterations is None:
        recorded = cm.fit.get("iterations_per_run")
        iterations = int(recorded) if isinstance(recorded, (int, float)) and recorded >= 1 else None
    per = "run" if iterations else "iteration"
    limit = cm.model.k_limit() if max_workers is None else min(cm.model.k_limit(), max_workers)
    ks = np.asarray(sorted(set(workers)) if workers else candidate_workers(limit), dtype=int)
    lo, hi, width, width_now = expected_widths(cm, ks.astype(float), sigma, repeats, float(limit))
    cost = np.maximum(cm.model.time(ks.astype(float)), 1e-6) * (iterations or 1) * repeats
    gain = width_now - width
    fits = np.ones(ks.size, dtype=bool) if budget is None else cost <= budget
    if budget is not None and not fits.any():
        cheapest = int(np.argmin(cost))
        raise CostInputError(f"no run fits --budget {budget:g} s: the cheapest, K = {ks[cheapest]}, takes "
                             f"~{cost[cheapest]:.3g} s per {per}")
    rate = np.where(fits & (gain > 1e-9), gain / cost, -np.inf)
    best = int(np.argmax(rate)) if np.isfinite(rate).any() else None
    now = cm.k_max_interval()
    explore = best is None and (now[1] is None or (now[0] is not None and now[0] >= limit))
    if explore:  # the interval lies beyond the K that can be run: only the largest can show more
        best = int(np.flatnonzero(fits)[-1])
    return {
        "k": None if best is None else int(ks[best]),
        "explore": explore,
        "k_max": cm.model.k_max(), "interval_now": list(now), "width_now": width_now,
        "interval_after": None if best is None else [round(lo[best]), round(hi[best])],
        "width_after": None if best is None else float(width[best]),
        "cost_s": None if best is None else float(cost[best]), "cost_per": per,
        "repeats": repeats, "iterations": iterations, "budget_s": budget,
        "noise": sigma, "noise_source": source,
        "method": f"{len(cm.boot_coefficients)} bootstrap replicates reweighted by simulated measurements "
                  f"({min(TRUTHS, len(cm.boot_coefficients))} truths x {STRATA} noise strata per K)",
        "candidates": [{"workers": int(k), "cost_s": float(c), "width_after": float(w), "within_budget": bool(f)}
                       for k, c, w, f in zip(ks, cost, width, fits)],
    }


def format_suggestion(doc: dict[str, Any]) -> str:
    """The suggestion for people: the K, the interval before and the expected interval after."""
    lo, hi = doc["interval_now"]
    now = f"[{'?' if lo is None else lo}, {'no turnover' if hi is None else hi}]"
    noise = f"run noise {100 * doc['noise']:.2g} % ({doc['noise_source']})"
    if doc["k"] is None:
        return (f"no measurement is expected to narrow the K_max interval {now} (width {doc['width_now']:.4g}); "
                f"{noise}")
    a, b = doc["interval_after"]
    if doc["explore"]:
        a, b = "?", "no turnover" if b >= doc["candidates"][-1]["workers"] else b
    runs = f"{doc['repeats']} run{'s' if doc['repeats'] != 1 else ''}"
    return "\n".join([
        f"measure next: K = {doc['k']}",
        f"K_max 95% interval now {now} (width {doc['width_now']:.4g}); expected after {runs} at K = {doc['k']}: "
        f"[{a}, {b}] (width {doc['width_after']:.4g})",
        *(["(no replicate turns over within the K considered: the largest K the budget allows is where "
           "a turnover would show)"] if doc["explore"] else []),
        f"cost ~{doc['cost_s']:.3g} s per {doc['cost_per']}"
        + ("" if doc["budget_s"] is None else f" (budget {doc['budget_s']:g} s)") + f"; {noise}",
    ])
