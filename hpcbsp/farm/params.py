"""The BSF cost parameters of one program on one machine (:class:`BSFParams`), checked, and the
one error type of the cost models (:class:`CostInputError`).

The parameters are those of the model in :mod:`hpcbsp.farm.model` (latency L, t_c, t_Map, t_a,
t_p, the list length l, t_0 and the tree's order share φ).  Every value is checked where the
parameters are made: times are finite and >= 0 (t_0 finite, of any sign), φ lies in [0, 1], the
list length is a whole number >= 1 or None, and t_a needs a list length.  They travel as a
mapping of :data:`PARAM_NAMES` (and ``t_0``, ``order_share``: a model file's ``"params"``, a farm
report), read back by :meth:`BSFParams.from_dict`, and as the coefficient vector of the model's
basis (:meth:`BSFParams.coefficients`, :meth:`BSFParams.from_coefficients`).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable

import numpy as np

__all__ = ["PARAM_NAMES", "BSFParams", "CostInputError"]


class CostInputError(ValueError):
    """Bad input to a cost model: a malformed file, a missing column, an impossible parameter.

    The one error type of the cost models (:mod:`hpcbsp.cost` re-exports it).  It lives here, with
    the model's parameters, because the farm (below ``cost`` in the layers) checks them with it too.  The
    message is one line meant for the user; the command lines print it and exit with status 2,
    without a traceback.
    """


#: The parameter set, in the order of :class:`BSFParams` (reports, RUNS.csv and MODEL.json use these keys).
PARAM_NAMES: tuple[str, ...] = ("latency", "t_c", "t_map", "t_a", "t_p", "list_length")


@dataclass(frozen=True)
class BSFParams:
    """The BSF cost parameters of one program on one machine (seconds; ``list_length`` elements)."""

    latency: float
    t_c: float
    t_map: float
    t_a: float
    t_p: float
    list_length: int | None = None
    #: Constant per iteration of the exchange (seconds, may be negative); 0 in [S21].
    t_0: float = 0.0
    #: The order's share of an exchange's bytes, order / (order + result): the tree form's φ.
    order_share: float = 0.5

    def __post_init__(self) -> None:
        for name in ("latency", "t_c", "t_map", "t_a", "t_p"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise CostInputError(f"BSF parameter {name} must be a finite number >= 0, got {value!r}")
        if not math.isfinite(self.t_0):
            raise CostInputError(f"BSF parameter t_0 must be a finite number, got {self.t_0!r}")
        if not (math.isfinite(self.order_share) and 0.0 <= self.order_share <= 1.0):
            raise CostInputError(f"BSF parameter order_share must be within [0, 1], got {self.order_share!r}")
        if self.list_length is not None and int(self.list_length) < 1:
            raise CostInputError(f"BSF parameter list_length must be an integer >= 1 (> 0), got {self.list_length!r}")
        if self.list_length is None and self.t_a != 0:
            raise CostInputError("t_a needs the list length (the Reduce folds l elements); give --list-length")

    @property
    def exchange(self) -> float:
        """Cost of one master-worker exchange, latency included: 2L + t_c."""
        return 2.0 * self.latency + self.t_c

    def coefficients(self) -> np.ndarray:
        """The coefficient vector matching the columns of :func:`hpcbsp.farm.terms.basis`."""
        return np.array([self.exchange, self.t_map, self.t_a, self.t_p], dtype=float)

    @classmethod
    def from_coefficients(cls, coef: Iterable[float], list_length: int | None,
                          like: "BSFParams | None" = None) -> "BSFParams":
        """Parameters from coefficients ``[2L + t_c, t_Map, t_a, t_p]`` (fitted, or a bootstrap
        replicate).  Without ``like`` the exchange cannot be split, so it all goes to t_c (L = 0,
        t_0 = 0); with ``like`` (the point estimate a replicate varies) its L, t_0 and order share
        are kept and t_c = exchange − 2L."""
        exchange, t_map, t_a, t_p = (max(0.0, float(c)) for c in coef)
        if like is None:
            return cls(latency=0.0, t_c=exchange, t_map=t_map, t_a=t_a if list_length else 0.0, t_p=t_p,
                       list_length=list_length)
        return cls(latency=like.latency, t_c=max(exchange - 2.0 * like.latency, 0.0), t_map=t_map,
                   t_a=t_a if list_length else 0.0, t_p=t_p, list_length=list_length, t_0=like.t_0,
                   order_share=like.order_share)

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, source: str | None = None) -> "BSFParams":
        """The parameters of ``data`` (a model file's ``"params"``, a farm report), checked:
        :class:`CostInputError` names ``source`` (the file, where given), the parameter and what
        it must be (a number >= 0, an integer >= 1, ...)."""
        try:
            return cls._from_dict(data)
        except CostInputError as exc:
            raise CostInputError(f"{source}: {exc}" if source else str(exc)) from None

    @classmethod
    def _from_dict(cls, data: dict) -> "BSFParams":
        if not isinstance(data, dict):
            raise CostInputError("the BSF parameters are not an object of names and numbers")

        def number(name: str, default: float | None = None) -> float:
            if name not in data:
                if default is None:
                    raise CostInputError(f"BSF parameters lack {name!r}")
                return default
            raw = data[name]
            try:
                if isinstance(raw, bool):
                    raise TypeError(raw)
                return float(raw)
            except (TypeError, ValueError):
                raise CostInputError(f"BSF parameter {name} is not a number: {raw!r}") from None

        length = data.get("list_length")
        if length is not None:
            count = number("list_length")
            if not (math.isfinite(count) and count == int(count)):
                raise CostInputError(f"BSF parameter list_length must be a whole number of elements "
                                     f"(an integer >= 1), got {length!r}")
            length = int(count)
        return cls(latency=number("latency"), t_c=number("t_c"), t_map=number("t_map"), t_a=number("t_a", 0.0),
                   t_p=number("t_p"), list_length=length, t_0=number("t_0", 0.0),
                   order_share=number("order_share", 0.5))
