"""Speedup plot of a calibrated BSF model: predicted a(K) with its bootstrap band, measured points,
the ideal line a = K and the K_max marker.  matplotlib (Agg, no display) is imported only here.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from .errors import CostInputError
from .modelfile import CalibratedModel
from .runs import Runs


def curve_workers(cm: CalibratedModel, runs: Runs | None, max_workers: int | None) -> np.ndarray:
    """Integer K values for the curve: log-spaced from 1 past K_max (or the measurements)."""
    if max_workers is None:
        k_max = cm.model.k_max()
        top = 10 * k_max if k_max else 1000
        if runs is not None and len(runs):
            top = max(top, 4 * int(runs.workers.max()))
        max_workers = max(8, top)
    max_workers = cm.model.k_limit(max_workers)
    k = np.unique(np.round(np.logspace(0, np.log10(max(max_workers, 2)), 400)).astype(int))
    return k[k >= 1].astype(float)


def measured_speedup(cm: CalibratedModel, runs: Runs) -> tuple[np.ndarray, np.ndarray, str]:
    """Measured speedup per row: T(1) is the measured mean at K = 1 if present, else the model's."""
    ones = runs.seconds[runs.workers == 1]
    if ones.size:
        t1, label = float(ones.mean()), "measured"
    else:
        t1, label = float(cm.model.time(1)[0]), "measured (T(1) from the model)"
    return runs.workers.astype(float), t1 / runs.seconds, label


def plot_speedup(cm: CalibratedModel, path: str | os.PathLike, *, runs: Runs | None = None,
                 max_workers: int | None = None, title: str | None = None) -> dict[str, Any]:
    """Draw the speedup plot to ``path`` (format from the suffix, e.g. ``.png``, ``.svg``).

    Returns
    -------
    dict
        What was drawn: ``{"path", "k_max", "k_max_interval", "curve_points", "measured_points", "band"}``.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        raise CostInputError("plotting needs matplotlib: pip install 'hpcbsp[plot]'") from None
    k = curve_workers(cm, runs, max_workers)
    model = cm.model
    a = model.speedup(k)
    band = cm.speedup_band(k)
    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    try:
        ax.plot(k, k, color="0.6", lw=1, ls=":", label="ideal a = K")
        ax.plot(k, a, color="C0", lw=2, label=f"BSF model ({model.comm}, {model.granularity})")
        if band is not None:
            ax.fill_between(k, band[0], band[1], color="C0", alpha=0.2, lw=0, label="95% bootstrap band")
        n_measured = 0
        if runs is not None and len(runs):
            kw, sp, label = measured_speedup(cm, runs)
            ax.plot(kw, sp, "o", color="C3", ms=5, label=label)
            n_measured = len(runs)
        k_max = model.k_max()
        lo, hi = cm.k_max_interval()
        if k_max is not None:
            ax.axvline(k_max, color="C2", lw=1.5, label=f"K_max = {k_max}")
            if lo is not None and hi is not None and hi > lo:
                ax.axvspan(lo, hi, color="C2", alpha=0.1, lw=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        lows = [float(np.min(a)), 1.0] + ([float(np.min(band[0]))] if band is not None else [])
        highs = [float(np.max(a)), 1.0] + ([float(np.max(band[1]))] if band is not None else [])
        if runs is not None and len(runs):
            measured = measured_speedup(cm, runs)[1]
            lows.append(float(np.min(measured)))
            highs.append(float(np.max(measured)))
        ax.set_ylim(bottom=max(1e-3, 0.8 * min(lows)), top=1.5 * max(highs))
        plain = FuncFormatter(lambda v, _pos: f"{v:g}")
        ax.xaxis.set_major_formatter(plain)
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(NullFormatter())  # log axes label minor ticks as 2×10^0
        ax.set_xlabel("workers K")
        ax.set_ylabel("speedup a(K) = T(1)/T(K)")
        ax.set_title(title or "Predicted BSF speedup")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        try:
            fig.savefig(path, dpi=110)
        except (OSError, ValueError) as exc:
            raise CostInputError(f"cannot write plot {os.fspath(path)}: {exc}") from None
    finally:
        plt.close(fig)
    return {"path": os.fspath(path), "k_max": model.k_max(), "k_max_interval": [lo, hi],
            "curve_points": int(k.size), "measured_points": n_measured, "band": band is not None}
