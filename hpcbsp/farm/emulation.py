"""Emulated compute: a farm run whose workers wait instead of computing (a simulation of compute).

With emulation on, each worker replaces its Map and its local fold by waits of their measured
times for its share of the list (``t_Map·n_j/l`` and ``(n_j − 1)·t_a`` for n_j elements), and
sends a partial result it computed for real once, from the first approximation.  The master's work
(its fold of the K partial results, Compute and StopCond), every message and every
synchronisation stay real.  The iteration count is fixed (``max_iter``; the stop test runs but
is not obeyed), so the x a run ends with is **not** a solution: results, reports and calibrations
say that they come from a simulation of compute.

Why: on a machine with fewer cores than ranks, real Maps of K workers share the cores and the
times measure oversubscription; waits (``time.sleep``, which gives the core away) let K = 1..32
workers run on 2 cores with the communication and the master real, as in Ezhova's BSF simulator.

The times are measured once, on the master before the first iteration, while the workers wait
(:func:`measure_map`); or given (``t_map`` and ``t_a`` seconds, so that runs at different K wait
exactly the same).  ``$HPCBSP_FARM_EMULATE`` switches emulation on for programs that do not pass
it: ``measure`` or ``t_map=SECONDS[,t_a=SECONDS]``.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..runtime.environment import setting
from ..util.envparse import emulation

if TYPE_CHECKING:
    from .problem import BSFProblem

#: Environment variable that turns emulated compute on (``measure`` or ``t_map=S[,t_a=S]``).
EMULATE_ENV = "HPCBSP_FARM_EMULATE"
#: Elements per Map call when the master measures the Map over the whole list (bounds memory).
MEASURE_CHUNK = 256
#: The words every human-readable output of an emulated run carries.
NOTICE = "SIMULATION of compute: workers wait the measured Map time instead of computing"


@dataclass(frozen=True)
class FarmEmulation:
    """Emulated compute of a farm run: the per-list times to wait (None: measure them first)."""

    t_map: float | None = None   #: seconds of the Map over the whole list on one worker
    t_a: float | None = None     #: seconds of one ⊕ of the workers' local fold

    def __post_init__(self) -> None:
        for name in ("t_map", "t_a"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"emulated {name} must be a finite number of seconds >= 0, got {value!r}")
        if self.t_a is not None and self.t_map is None:
            raise ValueError("emulated compute: give t_map with t_a (or neither, to measure both)")

    @property
    def measured(self) -> bool:
        """True when the times are to be measured by the run."""
        return self.t_map is None

    def spec(self) -> str:
        """The ``$HPCBSP_FARM_EMULATE`` value that gives this emulation."""
        if self.t_map is None:
            return "measure"
        return f"t_map={self.t_map!r}" + ("" if self.t_a is None else f",t_a={self.t_a!r}")


def parse_emulation(text: str) -> FarmEmulation:
    """``measure`` or ``t_map=S[,t_a=S]`` as a :class:`FarmEmulation` (ValueError names the
    problem); the format of ``$HPCBSP_FARM_EMULATE`` (:func:`hpcbsp.util.envparse.emulation`)."""
    times = emulation(text)
    if times is None:  # 0, off, no: meaningful in the variable, not where emulation is asked for
        raise ValueError(f"emulated compute {text.strip()!r}: expected 'measure' or "
                         "'t_map=SECONDS[,t_a=SECONDS]'")
    return FarmEmulation(*times)


def emulation_from_env() -> FarmEmulation | None:
    """The emulation ``$HPCBSP_FARM_EMULATE`` asks for, or None when it is unset, empty or
    off; a bad value is :class:`~hpcbsp.runtime.errors.BadInput`."""
    times = setting(EMULATE_ENV)
    return None if times is None else FarmEmulation(*times)


def measure_map(problem: "BSFProblem", x: np.ndarray) -> tuple[float, float]:
    """``(t_Map, t_a)`` of ``problem`` at ``x``: the Map over the whole list and one ⊕, timed here.

    The list is mapped in chunks of :data:`MEASURE_CHUNK` elements (so no rank holds the whole
    reduce-list); each chunk's fold is timed too, and t_a is the fold time per ⊕ (a chunk of m
    elements takes m − 1).
    """
    length = problem.list_length
    assert length is not None  # set by BSFProblem.__post_init__
    t_map = t_fold = 0.0
    folds = 0
    for start in range(0, length, MEASURE_CHUNK):
        stop = min(start + MEASURE_CHUNK, length)
        sub = problem.sublist(start, stop)
        t0 = time.perf_counter()
        b = problem.map_block(x, sub)
        t1 = time.perf_counter()
        problem.fold_block(b)
        t2 = time.perf_counter()
        t_map += t1 - t0
        t_fold += t2 - t1
        folds += stop - start - 1
    return t_map, (t_fold / folds if folds else 0.0)


def real_partial(problem: "BSFProblem", x: np.ndarray, start: int, stop: int) -> np.ndarray:
    """The fold of elements ``[start, stop)`` mapped at ``x``, computed in chunks (flattened)."""
    parts = []
    for lo in range(start, stop, MEASURE_CHUNK):
        hi = min(lo + MEASURE_CHUNK, stop)
        parts.append(problem.fold_block(problem.map_block(x, problem.sublist(lo, hi))))
    if len(parts) == 1:
        return parts[0].reshape(-1)
    return problem.fold_block(np.stack(parts)).reshape(-1)


def wait_split(map_s: float, fold_s: float) -> tuple[float, float]:
    """Sleep ``map_s + fold_s`` as one wait (the core is free meanwhile); return the time it really
    took, split between Map and fold in the proportion asked for.

    One sleep, not two: every sleep overshoots by a fixed tens of microseconds, which a second,
    often tiny, fold wait would add to every iteration.
    """
    total = map_s + fold_s
    t0 = time.perf_counter()
    if total > 0:
        time.sleep(total)
    took = time.perf_counter() - t0
    if total <= 0:
        return took, 0.0
    return took * map_s / total, took * fold_s / total


def describe(times: dict[str, Any] | None) -> str:
    """One line for reports: what was emulated, with which times."""
    if not times:
        return ""
    how = "measured on the master" if times.get("measured") else "given"
    return (f"{NOTICE} (t_Map = {1e3 * times['t_map']:.3f} ms, t_a = {1e9 * times['t_a']:.1f} ns, {how}); "
            "x is not a solution")
