"""Fit the BSF model to measured run times: NNLS on relative error, form choice by cross-validation,
bootstrap intervals.

The model is linear in its coefficients, ``T(K) = basis(K) @ [2L + t_c, t_Map, t_a, t_p]``
(:func:`hpcbsp.farm.terms.basis`), so calibration is a least-squares problem with every
coefficient >= 0.  Times span orders of magnitude across K, so the residual minimised is the
relative one, ``(T̂ − T)/T``: each row of the system is divided by its measured time.

Forms (``continuous``/``ceil`` granularity, and the ``linear`` or, when asked, the ``tree``
communication) are chosen by how well they extrapolate, which is what a prediction does.  The
tree form is compared only when asked (``comms``): a fit of T(K) has no L of its own (L = 0,
everything in t_c), and without its latencies the farm's tree, v(K) = φ·D + (1 − φ)·K transfers,
is too close to the linear K for a few noisy runs to tell apart (both picked from the same
linear runs); ``hpcbsp-cost calibrate`` measures L and the exchange form of the program instead.

* **forward validation** when the runs cover at least :data:`MIN_FORWARD_WORKERS` distinct worker
  counts: fit on the lowest m counts, score on all higher ones, for every m from half the counts
  up (rolling origin), averaged.  The candidates are every form with and without each term
  that the K range may not identify (the exchange 2L + t_c, which grows with K, and t_a); a
  candidate may keep such a term only when the whole range identifies it (at least
  :data:`SIGNIFICANCE` standard errors, or a clear forward gain), and the terms the chosen one
  leaves out are *refused*: reported with both scores, never fitted from noise.  (A K-linear
  term fitted to the noise of short runs, under 2 s at K = 100, made the extrapolation to 3x
  the measured K over-predict by up to 18 % on cluster runs.)
* **cross-validation** otherwise: leave one worker count out when enough distinct counts remain
  to fit the rest, otherwise leave one row out (which needs repeats), every term kept.

The score is the mean absolute relative error on the held-out rows; ties keep the earlier
candidate (linear before tree, continuous before ceil, more terms before fewer).

Intervals come from a bootstrap of the chosen form: rows are resampled within each worker
count when every count has repeats, else relative residuals are resampled onto the fitted
curve.
"""
from __future__ import annotations

import itertools
from typing import Iterable, Sequence

import numpy as np

from ..farm.model import BSFModel
from ..farm.params import BSFParams
from ..farm.terms import GRANULARITIES, basis
from .errors import CostInputError
from .modelfile import CalibratedModel, provenance
from .nnls import nnls
from .runs import Runs

#: Distinct worker counts needed to identify the continuous form's three aggregates (A, B, C).
MIN_DISTINCT_WORKERS = 3
#: Distinct worker counts from which forms and terms are chosen by forward validation.
MIN_FORWARD_WORKERS = 6
#: Candidates whose forward errors are within this (relative) of the best one's count as equal;
#: the first in preference order is taken.
PARSIMONY = 0.03
#: A kept optional term's coefficient must be at least this many standard errors above zero ...
SIGNIFICANCE = 2.0
#: ... unless the forward error without it is this many times the error with it.
CLEAR_GAIN = 1.5
#: The terms that may be refused (index into the coefficients, name for the report).
OPTIONAL_TERMS: tuple[tuple[int, str], ...] = ((0, "2L + t_c"), (2, "t_a"))


def n_parameters(list_length: int | None) -> int:
    """Coefficients fitted: exchange, t_Map, t_p, and t_a when the list length is known."""
    return 4 if list_length else 3


def design(workers: np.ndarray, comm: str, granularity: str, list_length: int | None,
           without: Sequence[int] = ()) -> np.ndarray:
    """The columns a fit of T(K) uses: :func:`basis` with the coefficients ``without`` (indices)
    and those that T(K) cannot identify set to 0.

    In the linear form the t_a column is l·g(K) + K − 2, a mix of the exchange (K), the Map
    (g(K), ceil or continuous: l·g(K) is ⌈l/K⌉ or l/K) and the constant columns: t_a is not
    identifiable from run times, so it is left at 0 and its time shows up in 2L + t_c and t_Map.
    """
    x = basis(workers, comm, granularity, list_length)
    x[:, list(without)] = 0.0
    if comm == "linear":
        x[:, 2] = 0.0
    return x


def fit_coefficients(workers: np.ndarray, seconds: np.ndarray, comm: str, granularity: str,
                     list_length: int | None, without: Sequence[int] = ()) -> np.ndarray:
    """Non-negative coefficients of one form minimising the relative squared error.

    Returns the coefficient vector ``[2L + t_c, t_Map, t_a, t_p]`` (t_a = 0 without a list length,
    and in the linear form, see :func:`design`); the coefficients ``without`` are held at 0.
    """
    x = design(workers, comm, granularity, list_length, without)
    y = np.asarray(seconds, dtype=float)
    scaled = x / y[:, None]  # (x·β − y)/y = (x/y)·β − 1
    used = np.flatnonzero(np.abs(scaled).max(axis=0) > 0)
    # Columns span many orders of magnitude (K vs 1/K vs l·g(K)); unit-norm columns keep NNLS stable.
    norms = np.linalg.norm(scaled[:, used], axis=0)
    beta_scaled, _ = nnls(scaled[:, used] / norms, np.ones_like(y))
    coef = np.zeros(x.shape[1])
    coef[used] = beta_scaled / norms
    return coef


def relative_errors(workers: np.ndarray, seconds: np.ndarray, coef: np.ndarray, comm: str,
                    granularity: str, list_length: int | None) -> np.ndarray:
    """|T̂ − T|/T per row."""
    pred = basis(workers, comm, granularity, list_length) @ coef
    return np.abs(pred - seconds) / seconds


def cross_validate(runs: Runs, comm: str, granularity: str, list_length: int | None) -> float:
    """Mean held-out absolute relative error of one form; NaN when no fold can be formed."""
    distinct = runs.distinct_workers()
    if distinct.size > MIN_DISTINCT_WORKERS:
        folds = [runs.workers == k for k in distinct]
    elif len(runs) > distinct.size:
        # Leave one row out, keeping only folds whose training set still has every worker count.
        folds = []
        for i in range(len(runs)):
            mask = np.zeros(len(runs), dtype=bool)
            mask[i] = True
            if np.unique(runs.workers[~mask]).size == distinct.size:
                folds.append(mask)
    else:
        folds = []
    errors = []
    for held in folds:
        coef = fit_coefficients(runs.workers[~held], runs.seconds[~held], comm, granularity, list_length)
        errors.append(relative_errors(runs.workers[held], runs.seconds[held], coef, comm, granularity,
                                      list_length))
    return float(np.mean(np.concatenate(errors))) if errors else float("nan")


def forward_errors(runs: Runs, comm: str, granularity: str, list_length: int | None,
                   without: Sequence[int] = ()) -> np.ndarray:
    """Extrapolation errors of one candidate: fit on the lowest m distinct worker counts, the
    relative error of every higher row, for every m from half the counts to all but one."""
    distinct = np.sort(runs.distinct_workers())
    errors = []
    for m in range(max(MIN_DISTINCT_WORKERS, (distinct.size + 1) // 2), distinct.size):
        train = runs.workers <= distinct[m - 1]
        coef = fit_coefficients(runs.workers[train], runs.seconds[train], comm, granularity, list_length, without)
        errors.append(relative_errors(runs.workers[~train], runs.seconds[~train], coef, comm, granularity, list_length))
    return np.concatenate(errors) if errors else np.empty(0)


def coefficient_errors(runs: Runs, comm: str, granularity: str, list_length: int | None,
                       without: Sequence[int] = ()) -> tuple[np.ndarray, np.ndarray]:
    """The fitted coefficients and their standard errors (infinite where the fit cannot tell).

    Linearised at the fit: the relative least squares' covariance σ²·(XᵀX)⁻¹ over the columns
    the fit uses, X the basis divided row by row by the measured time, σ² the residual variance.
    """
    coef = fit_coefficients(runs.workers, runs.seconds, comm, granularity, list_length, without)
    x = design(runs.workers, comm, granularity, list_length, without) / runs.seconds[:, None]
    used = [i for i in range(x.shape[1]) if np.abs(x[:, i]).max() > 0]
    stderr = np.full(x.shape[1], np.inf)
    dof = len(runs) - len(used)
    if dof <= 0 or not used:
        return coef, stderr
    resid = x @ coef - 1.0
    sigma2 = float(resid @ resid) / dof
    xu = x[:, used]
    try:
        cov = sigma2 * np.linalg.inv(xu.T @ xu)
    except np.linalg.LinAlgError:
        return coef, stderr
    stderr[used] = np.sqrt(np.maximum(np.diag(cov), 0.0))
    return coef, stderr


def term_subsets(comm: str, granularity: str, list_length: int | None) -> list[tuple[int, ...]]:
    """The coefficients a candidate may leave out: none first, then each optional term and both."""
    optional = [i for i, _ in OPTIONAL_TERMS if not (i == 2 and (not list_length or comm == "linear"))]
    return [tuple(c) for r in range(len(optional) + 1) for c in itertools.combinations(optional, r)]


def choose_forward(runs: Runs, forms: list[tuple[str, str]], list_length: int | None
                   ) -> tuple[str, str, tuple[int, ...], dict[str, float], list[dict[str, object]]] | None:
    """Form and refused terms by forward validation: ``(comm, granularity, without, scores, refused)``,
    or None when no candidate can be scored and admitted (the caller cross-validates instead).

    A candidate is admissible when every optional term it keeps is identified by the range: its
    coefficient is at least :data:`SIGNIFICANCE` standard errors above zero on all the runs, or
    leaving it out makes the forward error :data:`CLEAR_GAIN` times larger.  Of the admissible
    candidates, the first (in preference order: every term kept, linear before tree, continuous
    before ceil) whose forward error is within :data:`PARSIMONY` of the best is taken.
    """
    candidates = [(c, g, w) for c, g in forms for w in term_subsets(c, g, list_length)]
    scores = {k: float(np.mean(e)) if (e := forward_errors(runs, k[0], k[1], list_length, k[2])).size else float("nan")
              for k in candidates}

    def admissible(k: tuple[str, str, tuple[int, ...]]) -> bool:
        comm, gran, without = k
        coef, stderr = coefficient_errors(runs, comm, gran, list_length, without)
        for index, _ in OPTIONAL_TERMS:
            reduced = (comm, gran, tuple(sorted((*without, index))))
            if index in without or reduced not in scores or coef[index] >= SIGNIFICANCE * stderr[index]:
                continue
            if not scores[reduced] >= CLEAR_GAIN * scores[k]:
                return False
        return True

    admitted = {k: np.isfinite(scores[k]) and admissible(k) for k in candidates}
    finite = [k for k in candidates if admitted[k]]
    if not finite:
        return None
    best = min(scores[k] for k in finite)
    comm, gran, without = next(k for k in finite if scores[k] <= best * (1.0 + PARSIMONY))
    lo, hi = int(runs.workers.min()), int(runs.workers.max())
    refused: list[dict[str, object]] = []
    for index, name in OPTIONAL_TERMS:
        if index in without:
            kept = (comm, gran, tuple(i for i in without if i != index))
            with_it, without_it = scores[kept], scores[(comm, gran, without)]
            if admitted[kept]:  # identified, but it extrapolates worse with it
                why = (f"with it the model extrapolates worse over K = {lo}..{hi}: forward-validation error "
                       f"{100 * with_it:.2f} % with it, {100 * without_it:.2f} % without")
            else:
                why = (f"K = {lo}..{hi} cannot tell it from noise (under {SIGNIFICANCE:g} standard errors; "
                       f"forward-validation error {100 * with_it:.2f} % with it, {100 * without_it:.2f} % without)")
            refused.append({"term": name, "error_with": with_it, "error_without": without_it, "why": why})
    named = {f"{c}/{g}" + "".join(f" -{dict(OPTIONAL_TERMS)[i]}" for i in w): v for (c, g, w), v in scores.items()}
    return comm, gran, without, named, refused


def candidate_forms(comms: Sequence[str] | None, granularities: Sequence[str] | None,
                    list_length: int | None) -> list[tuple[str, str]]:
    """The forms to compare, in order of preference (linear only unless ``comms`` says otherwise)."""
    comms = list(comms or ("linear",))
    if granularities:
        grans = list(granularities)
    else:
        grans = list(GRANULARITIES) if list_length else ["continuous"]
    return list(itertools.product(comms, grans))


def check_enough(runs: Runs, list_length: int | None) -> None:
    """Refuse data that cannot determine the model."""
    n_distinct = runs.distinct_workers().size
    need = n_parameters(list_length)
    if len(runs) < need:
        raise CostInputError(f"{runs.source}: {len(runs)} measurement(s) for {need} parameters; "
                             f"give at least {need} rows")
    if n_distinct < MIN_DISTINCT_WORKERS:
        raise CostInputError(f"{runs.source}: {n_distinct} distinct worker count(s); the model needs at least "
                             f"{MIN_DISTINCT_WORKERS} (communication, work and serial terms)")


def bootstrap(runs: Runs, coef: np.ndarray, comm: str, granularity: str, list_length: int | None,
              n_boot: int, rng: np.random.Generator, without: Sequence[int] = ()) -> tuple[np.ndarray, str]:
    """Bootstrap replicates of the coefficients of one form, and the method used."""
    groups = runs.by_workers()
    fitted = basis(runs.workers, comm, granularity, list_length) @ coef
    if all(v.size >= 2 for v in groups.values()):
        method = "cases within each worker count"
        index = {k: np.flatnonzero(runs.workers == k) for k in groups}
        samples = []
        for _ in range(n_boot):
            rows = np.concatenate([rng.choice(ix, size=ix.size, replace=True) for ix in index.values()])
            samples.append(fit_coefficients(runs.workers[rows], runs.seconds[rows], comm, granularity,
                                            list_length, without))
        return np.array(samples), method
    method = "relative residuals"
    resid = runs.seconds / np.where(fitted > 0, fitted, np.nan) - 1.0
    resid = resid[np.isfinite(resid)]
    if resid.size == 0:
        return np.tile(coef, (n_boot, 1)), method
    samples = []
    for _ in range(n_boot):
        draw = fitted * (1.0 + rng.choice(resid, size=fitted.size, replace=True))
        draw = np.where(draw > 0, draw, runs.seconds)  # a negative draw cannot be a time
        samples.append(fit_coefficients(runs.workers, draw, comm, granularity, list_length, without))
    return np.array(samples), method


def fit_runs(runs: Runs, *, list_length: int | None = None, comms: Iterable[str] | None = None,
             granularities: Iterable[str] | None = None, n_boot: int = 200, seed: int = 0) -> CalibratedModel:
    """Fit the BSF model to measured runs.

    Parameters
    ----------
    runs : Runs
        Measured seconds per worker count (see :mod:`hpcbsp.cost.runs`).
    list_length : int, optional
        l; enables the t_a term and ``ceil`` granularity.  Defaults to the runs' ``list_length``
        column when it is constant.
    comms, granularities : iterable of str, optional
        Restrict the forms compared (default: every form the data allow).
    n_boot : int
        Bootstrap replicates (0 for none).
    seed : int
        Seed of the bootstrap's generator (the fit is deterministic given it).

    Returns
    -------
    CalibratedModel
        The chosen form's point estimate, bootstrap replicates and a ``fit`` record with the
        cross-validation score of every form.
    """
    if list_length is None:
        list_length = runs.list_length()
    forms = candidate_forms(list(comms) if comms else None, list(granularities) if granularities else None,
                            list_length)
    for comm, gran in forms:
        BSFModel(BSFParams(0, 0, 0, 0, 0, list_length), comm, gran)  # validates the form
    check_enough(runs, list_length)
    without: tuple[int, ...] = ()
    refused: list[dict[str, object]] = []
    forward: dict[str, float] = {}
    scores = {f"{c}/{g}": cross_validate(runs, c, g, list_length) for c, g in forms}
    chosen = choose_forward(runs, forms, list_length) if runs.distinct_workers().size >= MIN_FORWARD_WORKERS else None
    if chosen is not None:
        comm, gran, without, forward, refused = chosen
        finite = []
        selection = "forward validation (fit on the lower worker counts, scored on the higher ones)"
    else:
        finite = [(s, i) for i, s in enumerate(scores.values()) if np.isfinite(s)]
        comm, gran = forms[min(finite)[1] if finite else 0]
        selection = ("cross-validation (too few worker counts to validate forward)"
                     if runs.distinct_workers().size < MIN_FORWARD_WORKERS else
                     "cross-validation (no candidate could be validated forward)")
    coef = fit_coefficients(runs.workers, runs.seconds, comm, gran, list_length, without)
    model = BSFModel(BSFParams.from_coefficients(coef, list_length), comm, gran)
    rng = np.random.default_rng(seed)
    boot, method = (None, None) if n_boot <= 0 else bootstrap(runs, coef, comm, gran, list_length, n_boot, rng, without)
    train = relative_errors(runs.workers, runs.seconds, coef, comm, gran, list_length)
    notes = []
    if runs.distinct_workers().size < 5:
        notes.append("fewer than 5 distinct worker counts: form selection and intervals are weak")
    if chosen is None and not finite:
        notes.append("no cross-validation fold could be formed; the first form was taken")
    fit = {
        "source": runs.source,
        "rows": len(runs),
        "workers": [int(k) for k in runs.distinct_workers()],
        "cv_mean_relative_error": {k: (None if not np.isfinite(v) else v) for k, v in scores.items()},
        "forward_mean_relative_error": {k: (None if not np.isfinite(v) else v) for k, v in forward.items()},
        "selection": selection,
        "refused_terms": refused,
        "chosen": f"{comm}/{gran}",
        "train_mape": 100.0 * float(np.mean(train)),
        "n_boot": int(n_boot),
        "seed": int(seed),
        "notes": notes,
        "latency_note": "L and t_c are not separable from run times; their sum 2L + t_c is reported as t_c",
    }
    return CalibratedModel(model, boot, method, fit, provenance(source="fit"))
