"""The empty sync's latency against ``Barrier`` and against the floors of its control step.

The empty sync is timed as it runs (its control step compiled where it can be,
:mod:`hpcbsp.runtime.superstep.native`) and, in a second context on the same ranks, with the step
through mpi4py's Python calls (``HPCBSP_COMPILED_SYNC=0``, as before the step was compiled).  The
floors: an allreduce (MAX, in place) of one integer and of the sync's own 80-byte control
record, each plain and persistent through mpi4py (MPI-4's ``Allreduce_init``, Start + Wait from
Python), persistent with one compiled Start + Wait per call from Python (the least any collective
called from Python costs) and in a C loop (no interpreter); and the record's blocking
``MPI_Allreduce`` as one compiled call from Python (the control step's own where the library
runs it faster than the persistent one, :mod:`hpcbsp.runtime.superstep.control`).  Every figure
is timed in the same rounds, one block each in turn, on the benchmark's own communicator.
"""
from __future__ import annotations

import os
from functools import partial
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

import hpcbsp
from hpcbsp.runtime.superstep.native import compiled_allreduce_step, compiled_call, compiled_loop, why_not_compiled

from .common import median_or_nan, per_call

#: The allreduces' buffers: one integer (the floor issue 30's target names), the control record.
BUFFERS = {"one": 1, "record": 10}
#: The sync timeout of the watched context's empty syncs (seconds; never reached).
TIMEOUT_S = 60.0
#: How each buffer's allreduce is called, in the order of the rounds.
HOWS = ("plain", "persistent", "call", "c")


def python_context(bsp: "hpcbsp.BSP") -> "hpcbsp.BSP":
    """A second context on ``bsp``'s ranks whose control step runs through mpi4py's Python calls
    (``HPCBSP_COMPILED_SYNC=0`` while it is made; the variable is restored after)."""
    saved = os.environ.get("HPCBSP_COMPILED_SYNC")
    os.environ["HPCBSP_COMPILED_SYNC"] = "0"
    try:
        return hpcbsp.BSP(bsp.comm)
    finally:
        if saved is None:
            del os.environ["HPCBSP_COMPILED_SYNC"]
        else:
            os.environ["HPCBSP_COMPILED_SYNC"] = saved


class Allreduces:
    """The floors' collectives on ``comm``: each a block timer, by name ``BUFFER_HOW`` (collective
    to make and to close; one an MPI library lacks is absent)."""

    def __init__(self, comm: MPI.Comm, iters: int):
        self.comm, self.iters = comm, iters
        self.buffers = {b: np.zeros(n, np.int64) for b, n in BUFFERS.items()}
        self.requests: dict[str, MPI.Prequest] = {}
        self.loops: dict[str, Any] = {}
        self.calls: dict[str, Any] = {}
        for b, buf in self.buffers.items():
            try:  # MPI-4; an older library has no persistent collectives
                self.requests[b] = comm.Allreduce_init(MPI.IN_PLACE, buf, MPI.MAX)
            except (NotImplementedError, AttributeError, MPI.Exception):
                continue
            self.loops[b] = compiled_loop(self.requests[b])
            self.calls[b] = compiled_call(self.requests[b])
        self.blocking_step = compiled_allreduce_step(comm, bytearray(80))

    def timers(self) -> dict[str, Callable[[], float]]:
        """Name -> the seconds per call of one timed block, for the collectives there are."""
        out: dict[str, Callable[[], float]] = {}
        for b, buf in self.buffers.items():
            out[f"{b}_plain"] = partial(self._time, partial(self.comm.Allreduce, MPI.IN_PLACE, buf, op=MPI.MAX))
            if b in self.requests:
                out[f"{b}_persistent"] = partial(self._time, partial(_start_wait, self.requests[b]))
            if self.calls.get(b) is not None:
                out[f"{b}_call"] = partial(self._checked, self.calls[b])
            if self.loops.get(b) is not None:
                out[f"{b}_c"] = partial(self._in_c, self.loops[b])
        if self.blocking_step is not None:
            out["record_blocking"] = partial(self._time, partial(self.blocking_step.agree, 1, 0, 0, 0, 0))
        return out

    def _time(self, fn: Callable[[], object]) -> float:
        return per_call(fn, self.iters, self.comm)

    def _checked(self, call: Callable[[], int]) -> float:
        """The compiled call's block, then one more call whose MPI error code must be 0."""
        seconds = self._time(call)
        err = call()
        if err:
            raise MPI.Exception(err)
        return seconds

    def _in_c(self, loop: Callable[[int], object]) -> float:
        """The C loop's ``iters`` calls as one timed call, per call."""
        return per_call(partial(loop, self.iters), 1, self.comm) / self.iters

    def close(self) -> None:
        for req in self.requests.values():
            req.Free()
        if self.blocking_step is not None:
            self.blocking_step.close()


def _start_wait(req: MPI.Prequest) -> None:
    req.Start()
    req.Wait()


def empty_sync(bsp: "hpcbsp.BSP", comm: MPI.Comm, iters: int, rounds: int) -> dict[str, Any]:
    """The empty sync, compiled and in Python, in a context with a sync timeout (``BSP(timeout=
    TIMEOUT_S)``: its deadline is watched on the control step's non-blocking allreduce, never
    reached here), ``Barrier`` and the allreduces, one block each in every round: their medians
    in microseconds (``NAME_us``; NaN for one not measured here)."""
    python_ctx = python_context(bsp)
    watched = hpcbsp.BSP(bsp.comm, timeout=TIMEOUT_S, wait=bsp.wait)
    floors = Allreduces(comm, iters)
    timers: dict[str, Callable[[], float]] = {
        "empty_sync": lambda: per_call(bsp.sync, iters, comm),
        "timeout_sync": lambda: per_call(watched.sync, iters, comm),
        "python_sync": lambda: per_call(python_ctx.sync, iters, comm),
        "barrier": lambda: per_call(comm.Barrier, iters, comm),
        **floors.timers()}
    series: dict[str, list[float]] = {key: [] for key in ("empty_sync", "timeout_sync", "python_sync", "barrier")}
    series.update({f"{b}_{how}": [] for b in BUFFERS for how in HOWS})
    series["record_blocking"] = []
    for _ in range(rounds):
        for key, timer in timers.items():
            series[key].append(timer())
    floors.close()
    watched.close()
    python_ctx.close()
    return {"timeout_s": TIMEOUT_S, **{f"{key}_us": 1e6 * median_or_nan(v) for key, v in series.items()}}


def how_it_runs(bsp: "hpcbsp.BSP") -> dict[str, Any]:
    """How ``bsp``'s control step runs: ``compiled`` on every rank (collective), and if not,
    ``why_not``; its ``collective``, persistent or blocking."""
    compiled = bsp.comm.allreduce(int(bsp.extension.compiled_sync), op=MPI.MIN)
    collective = bsp.extension.control_collective
    why_not = "" if compiled else _why_not_compiled(bsp.wait, collective)
    return {"compiled": compiled, "why_not": why_not, "collective": collective}


def _why_not_compiled(wait: str, collective: str) -> str:
    """Why an empty sync's control step is not the compiled call here (for the bench's line)."""
    if wait == "yield":
        return "waits yield (HPCBSP_WAIT=yield or wait=\"yield\"): the step is non-blocking"
    return why_not_compiled(collective) or "the compiled call could not be made"
