"""What a simulation run reports, and the collection of spike trains and counters on rank 0."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ...runtime.superstep.ledgersummary import LedgerSummary, gather_summary
from .local import SPIKE
from .network import LocalNetwork, NetworkSpec, distribute

if TYPE_CHECKING:
    from ...runtime import BSP


@dataclass
class RunResult:
    """One run's spike trains and figures (complete on rank 0; other ranks get the counters).

    ``syncs`` counts synchronisations as ``sync_kind`` defines them: for ``bsp`` the supersteps
    of the simulation loop (each one a global barrier); for ``async`` the blocking waits, a rank
    stopping because its inputs did not yet allow it to advance (max over ranks); 0 for
    ``serial``.  ``messages`` counts the messages of the simulation loop between different ranks:
    queue records for ``bsp``, time-advance messages (spikes plus a time stamp, or the time stamp
    alone) for ``async``.
    """

    mode: str
    nprocs: int
    neurons: int
    steps: int
    dt_ms: float
    spike_steps: np.ndarray
    spike_ids: np.ndarray
    wall_s: float
    setup_s: float
    interval: int
    syncs: int
    sync_kind: str
    messages: int = 0
    extra: dict[str, Any] = field(default_factory=dict)
    #: rank 0's: every rank's window of the ledger and its totals of every superstep
    ledger: LedgerSummary | None = None

    @property
    def sim_s(self) -> float:
        return self.steps * self.dt_ms * 1e-3

    @property
    def spikes(self) -> int:
        return int(self.spike_steps.size)

    @property
    def rate_hz(self) -> float:
        """Mean firing rate of all neurons."""
        return self.spikes / (self.neurons * self.sim_s) if self.neurons and self.steps else 0.0

    @property
    def speed(self) -> float:
        """Simulated seconds per wall-clock second of the simulation loop."""
        return self.sim_s / self.wall_s if self.wall_s > 0 else float("inf")

    @property
    def syncs_per_sim_s(self) -> float:
        return self.syncs / self.sim_s if self.steps else 0.0

    def summary(self) -> dict[str, Any]:
        """The figures as a JSON-friendly dict (no spike arrays)."""
        return {"mode": self.mode, "nprocs": self.nprocs, "neurons": self.neurons, "steps": self.steps,
                "dt_ms": self.dt_ms, "spikes": self.spikes, "rate_hz": self.rate_hz, "wall_s": self.wall_s,
                "setup_s": self.setup_s, "sim_s_per_wall_s": self.speed, "interval_steps": self.interval,
                "syncs": self.syncs, "sync_kind": self.sync_kind, "syncs_per_sim_s": self.syncs_per_sim_s,
                "messages": self.messages, **self.extra}


def gather_spikes(bsp: BSP, steps: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Collect every rank's spikes on rank 0, sorted by (step, neuron id) (collective).

    One superstep ("gather spikes").  h-relation: 8 bytes per spike, out of each
    rank other than 0 and into rank 0.  Other ranks get empty arrays.
    """
    q = bsp.queue(SPIKE, name="spike trains")
    rec = np.empty(steps.size, dtype=SPIKE)
    rec["src"] = ids
    rec["step"] = steps
    if rec.size:
        q.send(0, rec)
    bsp.sync("gather spikes")
    got = q.received()
    order = np.lexsort((got["src"], got["step"]))
    return got["step"][order].astype(np.int64), got["src"][order].astype(np.int64)


def build_and_simulate(bsp: BSP, spec: NetworkSpec,
                       simulate: Callable[[BSP, LocalNetwork], RunResult]) -> RunResult:
    """Build the network (:func:`.network.distribute`), then ``simulate(bsp, net)`` (collective).

    Adds the set-up time (max over ranks) and, on rank 0, the ledger's summary to the result
    (:func:`~hpcbsp.runtime.superstep.ledgersummary.gather_summary`: every rank's window of
    supersteps and its totals of all of them).
    """
    t0 = time.perf_counter()
    net = distribute(bsp, spec)
    setup = float(bsp.allreduce(time.perf_counter() - t0, op="max"))
    res = simulate(bsp, net)
    res.setup_s = setup
    res.ledger = gather_summary(bsp.ledger)
    return res
