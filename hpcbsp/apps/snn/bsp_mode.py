"""``--mode bsp``: supersteps of one minimum delay; spikes travel in the BSP runtime's queues.

A spike fired at step ``e`` reaches no neuron before ``e + d_min``, so every rank can simulate a
window of ``D <= d_min`` steps on its own, then send the window's spikes and synchronise: after
the sync every rank holds every spike it needs for the next window.  Superstep ``k`` simulates
steps ``kD .. (k+1)D - 1``; a run of T steps has ``ceil(T/D)`` supersteps, each a global barrier.

``D`` is, by the ``--superstep`` rule, either the network's minimum delay (``global``: the usual
choice of neural simulators, independent of the distribution) or the minimum delay of the
synapses that cross ranks (``cross``: the longest window that is still exact for this
distribution; with one rank there are none and D is the window cap).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from ...util.progress import Progress
from .local import SPIKE, LocalSim
from .network import LocalNetwork, NetworkSpec
from .result import RunResult, build_and_simulate, gather_spikes

if TYPE_CHECKING:
    from ...runtime import BSP

#: Superstep rules (see the module docstring).
SUPERSTEP_RULES = ("global", "cross")

#: Longest window when nothing limits it (one rank, or no synapses across ranks).
DEFAULT_WINDOW_CAP = 256


def superstep_length(bsp: BSP, net: LocalNetwork, rule: str, cap: int = DEFAULT_WINDOW_CAP) -> int:
    """Steps per superstep under ``rule`` (collective: one ``allreduce``)."""
    if rule == "global":
        local = net.min_delay
    elif rule == "cross":
        local = min(net.lookahead.values(), default=cap)
    else:
        raise ValueError(f"superstep rule must be one of {SUPERSTEP_RULES}, got {rule!r}")
    return int(min(bsp.allreduce(np.int64(min(local, cap)), op="min"), cap))


def simulate_bsp(bsp: BSP, net: LocalNetwork, steps: int, *, rule: str = "global",
                 progress: bool = False, label: str = "snn") -> RunResult:
    """Simulate ``steps`` steps of ``net`` in supersteps (collective); rank 0 gets the spike trains.

    Each superstep adds to the h-relation 8 bytes and one queue record per (spike, other rank
    it projects to), out of the spike's rank and into the target rank.
    """
    d = superstep_length(bsp, net, rule)
    sim = LocalSim(net, d)
    q = bsp.queue(SPIKE, name="spikes")
    show = Progress(f"snn bsp/{rule}", steps, enabled=progress and bsp.pid == 0, unit="step")
    bsp.sync("ready")
    first = bsp.superstep
    sent = bsp.ledger.totals()["msgs_out"]
    t0 = time.perf_counter()
    while sim.now < steps:
        sim.receive(q.received())
        spikes = sim.advance(min(steps, sim.now + d))
        idx, ranks = sim.destinations(spikes)
        if idx.size:
            q.send(ranks, spikes[idx])
        bsp.sync(label)
        show(sim.now)
    sent = bsp.ledger.totals()["msgs_out"] - sent  # the loop's supersteps (the ledger keeps no list of them)
    wall = float(bsp.allreduce(time.perf_counter() - t0, op="max"))
    syncs = bsp.superstep - 1 - first  # the allreduce just above is not part of the loop
    msgs = int(bsp.allreduce(np.int64(sent)))
    spike_steps, spike_ids = gather_spikes(bsp, *sim.fired())
    return RunResult("bsp", bsp.nprocs, net.spec.neurons, steps, net.spec.lif.dt_ms, spike_steps, spike_ids,
                     wall, 0.0, interval=d, syncs=syncs,
                     sync_kind="global barriers (supersteps of the simulation loop)", messages=msgs,
                     extra={"superstep_rule": rule})


def run_bsp(bsp: BSP, spec: NetworkSpec, steps: int, *, rule: str = "global", progress: bool = False) -> RunResult:
    """Build the network (one superstep) and simulate it in BSP mode (collective).

    Rank 0's result carries the spike trains and every rank's ledger.
    """
    return build_and_simulate(bsp, spec, lambda b, net: simulate_bsp(b, net, steps, rule=rule, progress=progress))
