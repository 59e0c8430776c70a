"""Predictions of a calibrated BSF model: T, speedup and efficiency per K, and K_max with its interval."""
from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from ..farm.model import BSFModel
from .errors import CostInputError
from .modelfile import CalibratedModel


def prediction(cm: CalibratedModel, workers: Iterable[int]) -> dict[str, Any]:
    """The ``predict --json`` document.

    Returns
    -------
    dict
        ``{"k_max", "k_max_interval": [lo, hi], "k_bsf", "comm", "granularity", "points": [{"workers",
        "seconds", "speedup", "efficiency"[, "speedup_lo", "speedup_hi"]}], "note"?}``; ``k_max``
        is None, with a note, when the model has no turnover.
    """
    k = np.asarray(sorted(set(int(w) for w in workers)), dtype=float)
    model = cm.model
    t = model.time(k)
    a = model.speedup(k)
    band = cm.speedup_band(k)
    points = []
    for i, kk in enumerate(k):
        point = {"workers": int(kk), "seconds": float(t[i]), "speedup": float(a[i]), "efficiency": float(a[i] / kk)}
        if band is not None:
            point["speedup_lo"], point["speedup_hi"] = float(band[0][i]), float(band[1][i])
        points.append(point)
    k_max = model.k_max()
    lo, hi = cm.k_max_interval()
    doc: dict[str, Any] = {
        "k_max": k_max,
        "k_max_interval": [lo, hi],
        "k_bsf": model.k_bsf(),
        "comm": model.comm,
        "granularity": model.granularity,
        "points": points,
    }
    notes = []
    if k_max is None:
        notes.append(f"no turnover: the fitted model's speedup still rises at K = {model.k_limit()} "
                     "(communication cost not measurable, or the boundary lies beyond the list length)")
    else:
        doc["speedup_at_k_max"] = float(model.speedup([k_max])[0])
        doc["efficiency_at_k_max"] = float(model.efficiency([k_max])[0])
    length = model.params.list_length
    if length and k.size and k.max() > length:
        notes.append(f"K > l = {length} leaves workers without list elements; those rows are extrapolation only")
    if notes:
        doc["note"] = "; ".join(notes)
    return doc


def format_prediction(doc: dict[str, Any]) -> str:
    """The ``predict`` table for people."""
    has_band = any("speedup_lo" in p for p in doc["points"])
    head = f"{'K':>8} {'T [s]':>12} {'speedup':>10} {'efficiency':>10}" + (f" {'speedup 95% band':>22}" if has_band else "")
    lines = [f"BSF model ({doc['comm']} communication, {doc['granularity']} granularity)", head]
    for p in doc["points"]:
        line = f"{p['workers']:>8d} {p['seconds']:>12.6g} {p['speedup']:>10.4g} {p['efficiency']:>10.3f}"
        if has_band:
            line += f" {'[' + format(p['speedup_lo'], '.4g') + ', ' + format(p['speedup_hi'], '.4g') + ']':>22}"
        lines.append(line)
    lines.append(format_k_max(doc))
    if doc.get("note"):
        lines.append(f"note: {doc['note']}")
    return "\n".join(lines)


def format_k_max(doc: dict[str, Any]) -> str:
    """One line: K_max, its interval and the closed form."""
    lo, hi = doc["k_max_interval"]
    interval = f"[{'?' if lo is None else lo}, {'no turnover' if hi is None else hi}]"
    k_bsf = doc.get("k_bsf")
    closed = "" if k_bsf is None else f"; closed form K_BSF = {k_bsf:.4g}"
    if doc["k_max"] is None:
        return f"K_max: none (no turnover), 95% interval {interval}{closed}"
    extra = ""
    if "speedup_at_k_max" in doc:
        extra = f", speedup {doc['speedup_at_k_max']:.4g}, efficiency {doc['efficiency_at_k_max']:.3f}"
    return f"K_max = {doc['k_max']}{extra}, 95% interval {interval}{closed}"


def check_positive_time(model: BSFModel, workers: list[int] | None) -> None:
    """Refuse parameters (``hpcbsp-cost bsf``) that predict no time (or a negative one): speedups would be 0/0."""
    ks = sorted(set([1, 2, 4, 1024, *(workers or [])]))
    with np.errstate(all="ignore"):
        times = model.time(ks)
    bad = [(k, t) for k, t in zip(ks, times) if not (math.isfinite(t) and t > 0)]
    if bad:
        k, t = bad[0]
        raise CostInputError(f"these parameters predict {t:g} s per iteration at K = {k}; the model needs a "
                             "positive time at every K: give a positive --t-map (the work the workers share)")


def default_workers(model: BSFModel) -> list[int]:
    """Powers of 2 past K_max, K_max and the model's K limit: ``hpcbsp-cost bsf``'s default worker counts."""
    k_max = model.k_max()
    top = model.k_limit(max(64, 8 * k_max) if k_max else 100_000)
    out, k = [], 1
    while k < top:
        out.append(k)
        k *= 2
    if k_max:
        out.append(k_max)
    out.append(top)
    return sorted(set(out))
