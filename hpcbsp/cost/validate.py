"""Prediction error of a calibrated BSF model against measured runs, per worker count."""
from __future__ import annotations

from typing import Any

import numpy as np

from .modelfile import CalibratedModel
from .runs import Runs


def region(k: int, trained: list[int]) -> str:
    """``fitted`` (K was in the calibration), ``interpolation`` or ``extrapolation``."""
    if not trained:
        return "unknown"
    if k in trained:
        return "fitted"
    return "interpolation" if min(trained) < k < max(trained) else "extrapolation"


def validation(cm: CalibratedModel, runs: Runs) -> dict[str, Any]:
    """The ``validate --json`` document (percentages).

    Returns
    -------
    dict
        ``{"mape", "max_ape", "points": [{"workers", "runs", "measured_mean", "predicted", "mape",
        "max_ape", "region"}], "by_region": {region: mape}}``.  APE = 100·|T̂ − T|/T per row;
        ``mape`` is its mean over all rows, ``max_ape`` its maximum.
    """
    predicted = cm.model.time(runs.workers)
    ape = 100.0 * np.abs(predicted - runs.seconds) / runs.seconds
    trained = [int(k) for k in cm.fit.get("workers", [])]
    points = []
    for k in runs.distinct_workers():
        mask = runs.workers == k
        points.append({
            "workers": int(k),
            "runs": int(mask.sum()),
            "measured_mean": float(runs.seconds[mask].mean()),
            "predicted": float(predicted[mask][0]),
            "mape": float(ape[mask].mean()),
            "max_ape": float(ape[mask].max()),
            "region": region(int(k), trained),
        })
    by_region: dict[str, float] = {}
    for name in ("fitted", "interpolation", "extrapolation", "unknown"):
        rows = [p for p in points if p["region"] == name]
        if rows:
            weights = np.array([p["runs"] for p in rows], dtype=float)
            by_region[name] = float(np.average([p["mape"] for p in rows], weights=weights))
    return {"mape": float(ape.mean()), "max_ape": float(ape.max()), "points": points, "by_region": by_region}


def format_validation(doc: dict[str, Any]) -> str:
    """The ``validate`` table for people."""
    lines = [f"{'K':>6} {'runs':>5} {'measured [s]':>13} {'predicted [s]':>14} {'MAPE %':>8} {'max APE %':>10}  region"]
    for p in doc["points"]:
        lines.append(f"{p['workers']:>6d} {p['runs']:>5d} {p['measured_mean']:>13.6g} {p['predicted']:>14.6g} "
                     f"{p['mape']:>8.2f} {p['max_ape']:>10.2f}  {p['region']}")
    lines.append(f"all rows: MAPE {doc['mape']:.2f} %, max APE {doc['max_ape']:.2f} %")
    if len(doc["by_region"]) > 1:
        lines.append("by region: " + ", ".join(f"{k} {v:.2f} %" for k, v in doc["by_region"].items()))
    return "\n".join(lines)
