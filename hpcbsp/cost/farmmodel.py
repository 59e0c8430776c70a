"""A BSF model from one farm run's own measurements (white-box calibration).

``hpcbsp.farm`` records, per iteration, T and its parts (see :mod:`hpcbsp.farm.timings`); the
medians give the BSF parameters, and resampling the iterations gives bootstrap replicates, so a
single run at small K yields a model with an interval for K_max.  The input is the run's report
as a mapping (``FarmTimings.as_dict()`` or one JSON line of ``$HPCBSP_FARM_REPORT``), so this
module needs nothing from MPI.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..farm.emulation import NOTICE, describe
from ..farm.model import BSFModel, BSFParams
from ..farm.timings import SAMPLE_FIELDS, per_iteration_params
from .errors import CostInputError
from .modelfile import CalibratedModel, provenance

#: Why a farm run on one rank gives no model (the CLIs add the command to run instead).
ONE_RANK = ("a farm run on one rank measures no communication (the master is its own worker: "
            "L = t_c = 0), so it cannot predict how the program scales; run it on 2 or more ranks")


def model_from_farm(report: Mapping[str, Any], *, n_boot: int = 200, seed: int = 0,
                    granularity: str = "continuous", spread: bool = False) -> CalibratedModel:
    """The BSF model measured by one farm run, with bootstrap over iterations.

    The model's communication form is the run's exchange (``linear`` or ``tree``).  Its
    parameters are medians over iterations.  The replicates (``boot_coefficients``, which give
    the K_max interval and the speedup band) are either

    * ``spread=False``: medians over iterations resampled with replacement: the uncertainty of
      the median, which stays narrow when every iteration is slowed alike (a loaded machine); or
    * ``spread=True``: each parameter taken from one iteration drawn at random (independently per
      parameter): the spread of what single iterations measured, which is narrow only when the
      iterations agree.  On a busy machine the iterations disagree (measured here under a load
      of 20 on 2 cores: the exchange of single iterations ranged from 0.8 to 38 ms), so the band
      is wide instead of a confident, wrong K_max.

    Raises :class:`CostInputError` (:data:`ONE_RANK`) for a run on one rank: it exchanged
    nothing, and a model with L = t_c = 0 would predict scaling with confidence and wrongly.

    Parameters
    ----------
    report
        A farm run's timings (``FarmTimings.as_dict()`` or a report line).
    n_boot
        Bootstrap replicates over iterations (0: none).
    spread
        Replicates from single iterations (the calibration's spread), not medians of resamples.
    granularity
        Granularity of the returned model (the farm's split is ``ceil``-exact; ``continuous``
        gives the classical smooth curve and closed-form K_BSF).
    """
    return model_from_farm_runs([report], n_boot=n_boot, seed=seed, granularity=granularity, spread=spread)


def _parse_report(report: Mapping[str, Any]) -> tuple[BSFParams, int, dict[str, np.ndarray], str]:
    """A farm report's parameters, worker count, per-iteration samples and exchange (checked)."""
    if not report.get("exchange_measured", True) or report.get("nprocs") == 1:
        raise CostInputError(ONE_RANK)
    try:
        params = BSFParams.from_dict({"list_length": None, **report})
        if params.list_length is None:
            raise KeyError("list_length")
        workers = int(report["workers"])
        samples = {k: np.asarray(report["samples"][k], dtype=float) for k in SAMPLE_FIELDS}
    except CostInputError as exc:
        raise CostInputError(f"not a farm report: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CostInputError(f"not a farm report: missing or malformed {exc}") from None
    comm = str(report.get("exchange") or "linear")
    if comm not in ("linear", "tree"):
        raise CostInputError(f"not a farm report: unknown exchange {comm!r}")
    return params, workers, samples, comm


def model_from_farm_runs(reports: Sequence[Mapping[str, Any]], *, n_boot: int = 200, seed: int = 0,
                         granularity: str = "continuous", spread: bool = False) -> CalibratedModel:
    """The BSF model the farm runs measured of themselves, their iterations pooled.

    Each run's iterations are decomposed at the run's own K (:func:`per_iteration_params`); the
    model's coefficients are the medians over all of them: one exchange 2L + t_c as the
    iterations measured it directly (T less the model's work terms, per exchange), t_Map, t_a and
    t_p.  L is the median of the runs' own measurements.  Runs at several small K measure the
    exchange many times over, where a fit of T(K) would infer it from the small differences
    between the T of a few K (on 33 emulated nodes the fit's exchange swung by a factor of 1.6
    between two calibrations, the pooled one by 2 %).  Bootstrap and ``spread``: as
    :func:`model_from_farm`, over the pooled iterations.
    """
    if not reports:
        raise CostInputError("no farm report to model")
    parsed = [_parse_report(r) for r in reports]
    params, _, _, comm = parsed[0]
    length = params.list_length
    assert length is not None, "checked by _parse_report"
    for p, _, _, c in parsed[1:]:
        if c != comm or p.list_length != length:
            raise CostInputError(f"farm reports of different programs: exchange {c} and {comm}, "
                                 f"list length {p.list_length} and {length}")
    per = [per_iteration_params(samples, workers, length, p.latency, comm) for p, workers, samples, _ in parsed]
    pooled = {k: np.concatenate([q[k] for q in per]) for k in ("exchange", "t_map", "t_a", "t_p")}
    latency = float(np.median([p.latency for p, _, _, _ in parsed]))
    exchange = float(np.median(pooled["exchange"]))
    model = BSFModel(BSFParams(latency=latency, t_c=max(exchange - 2.0 * latency, 0.0),
                               t_map=float(np.median(pooled["t_map"])), t_a=float(np.median(pooled["t_a"])),
                               t_p=float(np.median(pooled["t_p"])), list_length=length), comm, granularity)
    columns = [pooled[k] for k in ("exchange", "t_map", "t_a", "t_p")]
    n_iter = columns[0].size
    boot = None
    if n_boot > 0 and n_iter >= 2:
        rng = np.random.default_rng(seed)
        if spread:  # one iteration per parameter, drawn independently
            pick = rng.integers(0, n_iter, size=(n_boot, 4))
            reps = np.column_stack([col[pick[:, j]] for j, col in enumerate(columns)])
        else:       # medians of resampled iterations, one replicate at a time (memory O(iterations))
            reps = np.empty((n_boot, 4))
            for b in range(n_boot):
                pick = rng.integers(0, n_iter, size=n_iter)
                reps[b] = [np.median(col[pick]) for col in columns]
        boot = np.maximum(reps, 0.0)
    first = reports[0]
    fit: dict[str, Any] = {
        "source": "farm run" if len(reports) == 1 else f"{len(reports)} farm runs",
        "workers": sorted({w for _, w, _, _ in parsed}),
        "iterations": n_iter,
        "seconds_per_iteration": float(first.get("seconds_per_iteration", np.nan)),
        "label": first.get("label"),
        "method": "components measured by the farm (medians over iterations"
                  + (", pooled over the runs)" if len(reports) > 1 else ")"),
    }
    if first.get("emulated"):
        fit["emulated_compute"] = dict(first["emulated"])
        fit["method"] = f"{fit['method']}; {NOTICE}"
    kind = None if boot is None else ("single iterations (spread)" if spread else "iterations")
    return CalibratedModel(model, boot, kind, fit, provenance(source="farm", nprocs=first.get("nprocs")))


def format_farm_parameters(report: Mapping[str, Any]) -> str:
    """The measured BSF parameters in one readable block (with the simulation notice if emulated)."""
    notice = describe(report.get("emulated"))
    return ((f"{notice}\n" if notice else "")
            + f"measured BSF parameters (K = {report['workers']}, l = {report['list_length']}, "
            f"{report.get('exchange', 'linear')} exchange, {report['iterations']} iterations, "
            f"median T = {1e3 * report['seconds_per_iteration']:.3f} ms):\n"
            + (f"  L = {report['latency'] * 1e6:.1f} us, t_c = {report['t_c'] * 1e6:.1f} us, "
               if report.get("exchange_measured", True) else
               "  L, t_c: not measured (one rank: nothing was exchanged), ")
            + f"t_Map = {report['t_map'] * 1e3:.3f} ms, t_a = {report['t_a'] * 1e9:.1f} ns, "
            f"t_p = {report['t_p'] * 1e6:.1f} us")
