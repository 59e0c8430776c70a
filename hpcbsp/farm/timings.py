"""The BSF cost parameters a farm run measures of itself, and the report file ``calibrate`` reads.

Per iteration the master records its iteration time T and the parts it can attribute: the
workers' Map times (summed: t_Map is the Map of the *whole* list on one worker), the folds
(workers' local Reduce plus the master's fold of the K partial results: l − 1 ⊕ in all), and its
compute + stop time t_p.  What remains of T after the model's own work terms at this K is the
master-worker exchange: ``λ(K)·L + v(K)·t_c`` in the model of :mod:`hpcbsp.farm.model`, whose
:func:`~hpcbsp.farm.terms.basis` and :func:`~hpcbsp.farm.terms.latency_count` give every term
here (linear: λ = 2K, v = K; tree: λ = 2·D·K, v = φ·D + (1 − φ)·K).
L is measured separately: a one-byte put and sync (``superstep_s``), per worker it spans
(L = superstep_s / K), so t_c = (exchange − λ(K)·L) / v(K).  Where that one measurement says
more than the iterations allow (λ(K)·L above their median exchange: the few supersteps it times
were disturbed), L is the iterations' median exchange / λ(K) and t_c is 0.  A run at one K cannot tell a
constant t_0 from t_c; the calibration over several K can (:mod:`hpcbsp.cost.farmmodel`).

Taking the model's terms (rather than, say, the slowest worker's clock) means the calibrated
model reproduces the measured T at the measured K; the test of the model is at other K.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

from ..runtime.environment import setting
from ..runtime.errors import BadInput
from ..util.outputs import OutputError, prepare_output
from .params import BSFParams
from .terms import basis, latency_count

#: Environment variable naming a file to which the master appends one JSON line per farm run.
REPORT_ENV = "HPCBSP_FARM_REPORT"

#: Per-iteration columns the master records.
SAMPLE_FIELDS = ("seconds", "map_s", "fold_s", "master_fold_s", "compute_s")
#: Iterations whose samples a run keeps at most (see :class:`Samples`).
MAX_SAMPLES = 4096


class Samples:
    """The master's per-iteration samples (:data:`SAMPLE_FIELDS`) in bounded memory: every
    iteration's until ``limit`` are kept, then every other kept one is dropped and only every
    ``stride``-th iteration (doubled each time) is kept from then on.  The kept ones are always
    iterations ``0, stride, 2·stride, ...``: evenly spread over the whole run, however long, so
    that its medians describe all of it; ``columns`` holds them, one list per field."""

    def __init__(self, limit: int = MAX_SAMPLES):
        if limit < 2:
            raise ValueError(f"a farm keeps at least 2 samples, not {limit}")
        self.limit = limit
        self.stride = 1   #: the kept iterations are the multiples of it
        self.seen = 0     #: iterations recorded, kept or not
        self.columns: dict[str, list[float]] = {k: [] for k in SAMPLE_FIELDS}

    def add(self, *values: float) -> None:
        """Record one iteration: its values of :data:`SAMPLE_FIELDS`, in order."""
        if self.seen % self.stride == 0:
            for key, value in zip(SAMPLE_FIELDS, values, strict=True):
                self.columns[key].append(float(value))
            if len(self.columns[SAMPLE_FIELDS[0]]) >= self.limit:
                self.columns = {k: v[::2] for k, v in self.columns.items()}
                self.stride *= 2
        self.seen += 1



@dataclass
class FarmTimings:
    """What one farm run measured (seconds; medians over iterations unless said otherwise)."""

    workers: int
    list_length: int
    iterations: int
    total_s: float                  #: the whole iteration loop, exit message included
    #: L: median one-byte put + sync, per worker (superstep_s / K), at most the iterations'
    #: median exchange / λ(K)
    latency: float
    t_c: float                      #: exchange − 2L, clipped at 0
    t_map: float
    t_a: float
    t_p: float
    seconds_per_iteration: float    #: median iteration time T(K)
    #: per iteration, SAMPLE_FIELDS (at most :data:`MAX_SAMPLES` iterations, evenly spread: :class:`Samples`)
    samples: dict[str, list[float]] = field(default_factory=dict)
    #: False for a run on one rank (the master is its own worker): nothing was exchanged, so
    #: L and t_c were not measured (they read 0) and the run cannot predict scaling.
    exchange_measured: bool = True
    exchange: str = "linear"        #: the farm's exchange: "linear" (one by one) or "tree"
    #: With emulated compute, the waits' times ``{"t_map", "t_a", "measured"}``; None when real.
    emulated: Optional[dict[str, Any]] = None
    #: The median one-byte superstep itself (seconds; L = superstep_s / K).
    superstep_s: float = 0.0
    #: The order's share of an exchange's bytes, order / (order + partial result): the tree's φ.
    order_share: float = 0.5

    def model_params(self) -> BSFParams:
        """The measured BSF parameters (:class:`hpcbsp.farm.params.BSFParams`)."""
        return BSFParams.from_dict(self.as_dict())

    def params(self) -> dict[str, float | int | None]:
        """The BSF parameters as a mapping (the keys of :data:`hpcbsp.farm.params.PARAM_NAMES`)."""
        return self.model_params().as_dict()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def per_iteration_params(samples: dict[str, np.ndarray], workers: int, list_length: int,
                         latency: float, exchange: str = "linear", order_share: float = 0.5,
                         t_0: float = 0.0) -> dict[str, np.ndarray]:
    """BSF parameters from each iteration's measurements (arrays, one value per iteration).

    ``latency`` is L, per worker.  The model's own work terms at K (the ``t_map``, ``t_a`` and
    ``t_p`` columns of :func:`hpcbsp.farm.terms.basis`, ceil granularity: the farm's split) are
    taken off T; what remains is the exchange.  Less its latencies λ(K)·L and the constant
    ``t_0`` (known only from runs at several K), divided by v(K), it is one transfer t_c.
    ``transfers`` is the exchange less its latencies (v(K)·t_c + t_0), ``exchange`` one
    exchange 2L + t_c.
    """
    t = samples["seconds"]
    t_map = samples["map_s"]
    folds = max(list_length - 1, 1)
    t_a = (samples["fold_s"] + samples["master_fold_s"]) / folds if list_length > 1 else np.zeros_like(t)
    t_p = samples["compute_s"]
    v_k, g, fold_count, _ = basis([workers], exchange, "ceil", list_length, order_share)[0]
    lam = float(latency_count(np.array([float(workers)]), exchange)[0])
    work = t_map * g + fold_count * t_a + t_p
    transfers = np.maximum(t - work, 0.0) - lam * latency
    t_c = np.maximum((transfers - t_0) / v_k, 0.0)
    return {"t_map": t_map, "t_a": t_a, "t_p": t_p, "t_c": t_c, "exchange": 2.0 * latency + t_c,
            "transfers": transfers, "v": np.full_like(t, v_k)}


def summarise(samples: dict[str, list[float]], *, workers: int, list_length: int, iterations: int,
              total_s: float, superstep_s: float, exchange_measured: bool = True, exchange: str = "linear",
              emulated: dict[str, Any] | None = None, order_share: float = 0.5) -> FarmTimings:
    """Medians over iterations of the per-iteration parameters (``exchange_measured``: see
    :class:`FarmTimings`); ``superstep_s`` the one-byte superstep measured, L = superstep_s / K
    unless the iterations' median exchange is less than λ(K)·L (then it is that / λ(K))."""
    arrays = {k: np.asarray(v, dtype=float) for k, v in samples.items()}
    latency = superstep_s / max(workers, 1)
    if iterations == 0 or arrays["seconds"].size == 0:
        return FarmTimings(workers, list_length, 0, total_s, latency, 0.0, 0.0, 0.0, 0.0, 0.0, samples,
                           exchange_measured=exchange_measured, exchange=exchange, emulated=emulated,
                           superstep_s=superstep_s, order_share=order_share)
    if exchange_measured:
        whole = per_iteration_params(arrays, workers, list_length, 0.0, exchange, order_share)["transfers"]
        lam = float(latency_count(np.array([float(workers)]), exchange)[0])
        latency = min(latency, float(np.median(whole)) / lam)
    per = per_iteration_params(arrays, workers, list_length, latency, exchange, order_share)
    return FarmTimings(
        workers=workers, list_length=list_length, iterations=iterations, total_s=total_s,
        latency=latency, t_c=float(np.median(per["t_c"])), t_map=float(np.median(per["t_map"])),
        t_a=float(np.median(per["t_a"])), t_p=float(np.median(per["t_p"])),
        seconds_per_iteration=float(np.median(arrays["seconds"])), samples=samples,
        exchange_measured=exchange_measured, exchange=exchange, emulated=emulated, superstep_s=superstep_s,
        order_share=order_share)


def report_path(path: str | None = None) -> str | None:
    """The file a run's timings go to: ``path``, else ``$HPCBSP_FARM_REPORT``, else None."""
    return path or setting(REPORT_ENV)


def check_report(path: str | None = None) -> None:
    """Before the run: make the missing folders of :func:`report_path` and check that it can be
    written (:class:`~hpcbsp.runtime.errors.BadInput`, one line, if not).  The environment's
    path was checked already when the context started; this is for ``report=``."""
    where = report_path(path)
    if where:
        try:
            prepare_output(where, "the farm report")
        except OutputError as exc:
            raise BadInput(f"{exc}: give the farm a report file that can be written") from None


def append_report(timings: FarmTimings, path: str | None = None, **extra: Any) -> str | None:
    """Append the run's timings as one JSON line to :func:`report_path` (missing folders are
    made); the path, or None where there is none.  A file that cannot be written after all (it
    was checked before the run) costs the run nothing: one line on stderr says so."""
    where = report_path(path)
    if not where:
        return None
    try:
        os.makedirs(os.path.dirname(os.path.abspath(where)), exist_ok=True)
        with open(where, "a") as fh:
            fh.write(json.dumps({**timings.as_dict(), **extra}) + "\n")
    except OSError as exc:
        print(f"[hpcbsp] warning: the farm's timings could not be appended to {where} "
              f"({exc.strerror or exc}); the run's result stands", file=sys.stderr, flush=True)
        return None
    return where
