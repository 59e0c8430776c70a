"""A BSF model from one farm run's own measurements (white-box calibration).

``hpcbsp.farm`` records, per iteration, T and its parts (see :mod:`hpcbsp.farm.timings`); the
medians give the BSF parameters, and resampling the iterations gives bootstrap replicates, so a
single run at small K yields a model with an interval for K_max.  The input is the run's report
as a mapping (``FarmTimings.as_dict()`` or one JSON line of ``$HPCBSP_FARM_REPORT``), so this
module needs nothing from MPI.
"""
from __future__ import annotations

from typing import Any, Mapping

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
    if not report.get("exchange_measured", True) or report.get("nprocs") == 1:
        raise CostInputError(ONE_RANK)
    try:
        params = BSFParams.from_dict({"list_length": None, **report})
        if params.list_length is None:
            raise KeyError("list_length")
        length = params.list_length
        workers = int(report["workers"])
        samples = {k: np.asarray(report["samples"][k], dtype=float) for k in SAMPLE_FIELDS}
    except CostInputError as exc:
        raise CostInputError(f"not a farm report: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CostInputError(f"not a farm report: missing or malformed {exc}") from None
    comm = str(report.get("exchange") or "linear")
    if comm not in ("linear", "tree"):
        raise CostInputError(f"not a farm report: unknown exchange {comm!r}")
    model = BSFModel(params, comm, granularity)
    boot = None
    n_iter = samples["seconds"].size
    if n_boot > 0 and n_iter >= 2:
        rng = np.random.default_rng(seed)
        reps: list[list[float]] = []
        if spread:
            per = per_iteration_params(samples, workers, length, params.latency, comm)
            pick = rng.integers(0, n_iter, size=(n_boot, 4))
            reps = np.column_stack([2.0 * params.latency + per["t_c"][pick[:, 0]], per["t_map"][pick[:, 1]],
                                    per["t_a"][pick[:, 2]], per["t_p"][pick[:, 3]]]).tolist()
        for _ in range(0 if spread else n_boot):
            pick = rng.integers(0, n_iter, size=n_iter)
            per = per_iteration_params({k: v[pick] for k, v in samples.items()}, workers,
                                       length, params.latency, comm)
            reps.append([2.0 * params.latency + float(np.median(per["t_c"])), float(np.median(per["t_map"])),
                         float(np.median(per["t_a"])), float(np.median(per["t_p"]))])
        boot = np.maximum(np.array(reps), 0.0)
    fit = {
        "source": "farm run",
        "workers": [workers],
        "iterations": n_iter,
        "seconds_per_iteration": float(report.get("seconds_per_iteration", np.nan)),
        "label": report.get("label"),
        "method": "components measured by the farm (medians over iterations)",
    }
    if report.get("emulated"):
        fit["emulated_compute"] = dict(report["emulated"])
        fit["method"] = f"{fit['method']}; {NOTICE}"
    kind = None if boot is None else ("single iterations (spread)" if spread else "iterations")
    return CalibratedModel(model, boot, kind, fit,
                           provenance(source="farm", nprocs=report.get("nprocs")))


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
