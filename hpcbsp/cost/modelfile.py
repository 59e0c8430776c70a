"""MODEL.json: a calibrated BSF model with its uncertainty, as written by ``fit`` and ``calibrate``.

Layout (``"format": "hpcbsp-bsf-model/1"``)::

    {"format": ..., "comm": "linear"|"tree", "granularity": "continuous"|"ceil",
     "params": {"latency", "t_c", "t_map", "t_a", "t_p", "list_length", "t_0", "order_share"},
     "k_bsf": float|null, "k_max": int|null, "k_max_interval": [lo, hi]|null,
     "bootstrap": {"method": str, "coefficients": [[2L+t_c, t_map, t_a, t_p], ...]}|null,
     "fit": {...how it was obtained...}, "provenance": {...host, date, ...}}

``k_max`` null means no turnover within the searched range; in ``k_max_interval`` a null upper
bound means that some bootstrap fits had no turnover.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..farm.model import BSFModel
from ..farm.params import BSFParams
from .errors import CostInputError

FORMAT = "hpcbsp-bsf-model/1"


@dataclass
class CalibratedModel:
    """A BSF model plus what is known about its uncertainty and origin.

    Attributes
    ----------
    model : BSFModel
        The point estimate.
    boot_coefficients : (n, 4) array or None
        Bootstrap replicates of the coefficient vector ``[2L + t_c, t_Map, t_a, t_p]`` (see
        :func:`hpcbsp.farm.terms.basis`); each replicate keeps the point model's L, t_0 and order
        share (:meth:`BSFParams.from_coefficients`).  They give the intervals of K_max and the
        band of the speedup curve.
    fit : dict
        How the model was obtained (source, rows, worker counts used, cross-validation scores).
    provenance : dict
        Host, date and similar facts.
    """

    model: BSFModel
    boot_coefficients: np.ndarray | None = None
    boot_method: str | None = None
    fit: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    # -- uncertainty ----------------------------------------------------------------------------
    def replicate_models(self) -> list[BSFModel]:
        """One model per bootstrap replicate (empty when there is none)."""
        if self.boot_coefficients is None:
            return []
        length = self.model.params.list_length
        like = self.model.params
        return [self.model.with_params(BSFParams.from_coefficients(c, length, like)) for c in self.boot_coefficients]

    def k_max_interval(self, level: float = 0.95) -> tuple[int | None, int | None]:
        """Percentile interval of K_max over the bootstrap; (k, k) without a bootstrap.

        A replicate without turnover counts as +infinity, so the upper bound is None when more
        than the tail fraction of replicates never turn over.
        """
        reps = self.replicate_models()
        if not reps:
            k = self.model.k_max()
            return (k, k)
        values = np.array([np.inf if (k := m.k_max()) is None else k for m in reps], dtype=float)
        tail = 100.0 * (1.0 - level) / 2.0
        # Order statistics, not interpolation: the bounds are K values some replicate produced.
        lo = float(np.percentile(values, tail, method="lower"))
        hi = float(np.percentile(values, 100.0 - tail, method="higher"))
        return (None if not np.isfinite(lo) else int(lo), None if not np.isfinite(hi) else int(hi))

    def speedup_band(self, workers: np.ndarray, level: float = 0.95) -> tuple[np.ndarray, np.ndarray] | None:
        """Pointwise percentile band of a(K) over the bootstrap, or None without one."""
        reps = self.replicate_models()
        if not reps:
            return None
        curves = np.array([m.speedup(workers) for m in reps])
        tail = 100.0 * (1.0 - level) / 2.0
        lo, hi = np.percentile(curves, [tail, 100.0 - tail], axis=0)
        return lo, hi

    # -- JSON -------------------------------------------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        k_bsf = self.model.k_bsf()
        lo, hi = self.k_max_interval()
        return {
            "format": FORMAT,
            **self.model.as_dict(),
            "k_bsf": k_bsf,
            "k_max": self.model.k_max(),
            "k_max_interval": [lo, hi],
            "bootstrap": None if self.boot_coefficients is None else {
                "method": self.boot_method,
                "coefficients": np.asarray(self.boot_coefficients, dtype=float).tolist(),
            },
            "fit": self.fit,
            "provenance": self.provenance,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<memory>") -> "CalibratedModel":
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise CostInputError(f"{source} is not an hpcbsp BSF model (expected \"format\": \"{FORMAT}\")")
        model = BSFModel.from_dict(data, source)
        boot = data.get("bootstrap")
        coef = None
        method = None
        if boot:
            try:
                coef = np.asarray(boot["coefficients"], dtype=float)
            except (KeyError, TypeError, ValueError):
                raise CostInputError(f"{source}: bootstrap coefficients are malformed") from None
            if coef.ndim != 2 or coef.shape[1] != 4 or not np.all(np.isfinite(coef)) or (coef < 0).any():
                raise CostInputError(f"{source}: bootstrap coefficients must be rows of 4 numbers >= 0")
            method = boot.get("method")
        return cls(model, coef, method, dict(data.get("fit") or {}), dict(data.get("provenance") or {}))


def provenance(**extra: Any) -> dict[str, Any]:
    """Where and when a model or profile was made."""
    return {
        "host": platform.node(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **extra,
    }


def save_model(path: str | os.PathLike, model: CalibratedModel) -> None:
    """Write MODEL.json."""
    with open(path, "w") as fh:
        json.dump(model.as_dict(), fh, indent=1)
        fh.write("\n")


def load_json(path: str | os.PathLike, what: str) -> Any:
    """Read a JSON file, turning every failure into one :class:`CostInputError` line."""
    source = os.fspath(path)
    try:
        with open(source) as fh:
            return json.load(fh)
    except OSError as exc:
        raise CostInputError(f"cannot read {what} {source}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CostInputError(f"{what} {source} is not valid JSON: {exc}") from None


def load_model(path: str | os.PathLike) -> CalibratedModel:
    """Read MODEL.json (as written by :func:`save_model`)."""
    return CalibratedModel.from_dict(load_json(path, "model file"), os.fspath(path))
