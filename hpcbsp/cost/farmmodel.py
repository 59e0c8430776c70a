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
from ..farm.model import BSFModel
from ..farm.params import BSFParams
from ..farm.timings import SAMPLE_FIELDS, per_iteration_params
from ..util.choices import EXCHANGES
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
    """A farm report's parameters, worker count, per-iteration samples and exchange (checked).

    Reports written before ``superstep_s`` existed give the superstep itself as ``latency``;
    L is that per worker."""
    if not report.get("exchange_measured", True) or report.get("nprocs") == 1:
        raise CostInputError(ONE_RANK)
    try:
        data = {"list_length": None, **report}
        if "superstep_s" not in report:
            data["latency"] = float(report["latency"]) / max(int(report["workers"]), 1)
        params = BSFParams.from_dict(data)
        if params.list_length is None:
            raise KeyError("list_length")
        workers = int(report["workers"])
        samples = {k: np.asarray(report["samples"][k], dtype=float) for k in SAMPLE_FIELDS}
    except CostInputError as exc:
        raise CostInputError(f"not a farm report: {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise CostInputError(f"not a farm report: missing or malformed {exc}") from None
    comm = str(report.get("exchange") or "linear")
    if comm not in EXCHANGES:
        raise CostInputError(f"not a farm report: unknown exchange {comm!r}")
    return params, workers, samples, comm


def transfer_line(runs: Sequence[tuple[float, np.ndarray]]) -> tuple[float, float]:
    """(t_c, t_0): the line ``transfers = v·t_c + t_0`` through the least run median at each v.

    ``runs`` holds each run's v(K) and its iterations' exchange less its latencies
    (``transfers``).  A run's median is robust to a slow iteration; of the runs at the same v the
    least median is taken, because interference only ever adds time (on the 2-core machine that
    hosts 33 emulated nodes, a busy minute made every iteration of a run 0.2–0.5 s slower, and
    one such run among two at a K moved the pooled median by half of that).  A line through these
    points separates the per-worker transfer t_c from the per-iteration constant t_0.  With one v
    only (runs at one K) t_0 cannot be told from t_c: t_0 = 0 and t_c is the median ratio.  A
    fitted slope that is not positive falls back to the same.
    """
    best: dict[float, float] = {}
    for v, transfers in runs:
        median = float(np.median(transfers))
        best[v] = min(best.get(v, median), median)
    levels = np.array(sorted(best))
    if levels.size >= 2:
        slope, intercept = np.polyfit(levels, [best[x] for x in levels], 1)
        if slope > 0:
            return float(slope), float(intercept)
    ratios = np.concatenate([transfers / v for v, transfers in runs])
    return float(max(np.median(ratios), 0.0)), 0.0


def model_from_farm_runs(reports: Sequence[Mapping[str, Any]], *, n_boot: int = 200, seed: int = 0,
                         granularity: str = "continuous", spread: bool = False) -> CalibratedModel:
    """The BSF model the farm runs measured of themselves, their iterations pooled.

    Each run's iterations are decomposed at the run's own K (:func:`per_iteration_params`): the
    work terms t_Map, t_a and t_p (medians over all iterations) and the exchange.  L is the
    median of the runs' own one-byte supersteps, per worker.  The exchange less its latencies
    λ(K)·L is v(K)·t_c + t_0: with runs at two or more K the line through the least run median at
    each K gives t_c and t_0 (:func:`transfer_line`).  On 33 emulated nodes at 10 Mbit/s the runs at
    K = 1..3 give t_c = 27 ms, the line rate of one order and one result, and t_0 = −10 ms; the
    ratio at one K, which this replaced, read 17 ms at K = 1 and 24 ms at K = 3 and predicted
    T(32) 15 % short (docs/notes/performance-journal.md, "BSF prediction across 33 emulated
    nodes").  A fit of T(K) would infer the exchange from the small differences between the T of
    a few K (on 33 emulated nodes it swung by a factor of 1.6 between two calibrations).
    Bootstrap and ``spread``: as :func:`model_from_farm`, over the pooled iterations, each
    iteration's t_c taken with the line's t_0.
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
    latency = float(np.median([p.latency for p, _, _, _ in parsed]))
    share = float(np.median([p.order_share for p, _, _, _ in parsed]))
    first_pass = [per_iteration_params(samples, workers, length, latency, comm, share)
                  for _, workers, samples, _ in parsed]
    t_c, t_0 = transfer_line([(float(q["v"][0]), q["transfers"]) for q in first_pass if q["v"].size])
    per = [per_iteration_params(samples, workers, length, latency, comm, share, t_0)
           for _, workers, samples, _ in parsed]
    pooled = {k: np.concatenate([q[k] for q in per]) for k in ("exchange", "t_map", "t_a", "t_p")}
    model = BSFModel(BSFParams(latency=latency, t_c=t_c, t_map=float(np.median(pooled["t_map"])),
                               t_a=float(np.median(pooled["t_a"])), t_p=float(np.median(pooled["t_p"])),
                               list_length=length, t_0=t_0, order_share=share), comm, granularity)
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
