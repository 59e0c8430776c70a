"""The serial reference: the whole network, step by step, in plain numpy.

Deliberately written apart from the distributed modes (no Numba kernel, no windows, synapses
stored by *source* instead of by target, delivery with ``np.add.at``) so that agreement between
the two is evidence, not tautology.  It evaluates the same update expression as
:func:`.lif.lif_advance` in the same order, on integer input sums (see :mod:`.lif`), so the spike
trains agree exactly.
"""
from __future__ import annotations

import time

import numpy as np

from ...util.progress import Progress
from .network import NetworkSpec, neuron_state, whole_network
from .result import RunResult


def simulate_serial(spec: NetworkSpec, steps: int, *, progress: bool = False) -> RunResult:
    """Simulate ``steps`` steps of the whole network on one process."""
    t_setup = time.perf_counter()
    p = spec.lif
    syn = whole_network(spec)  # by source, so the CSR rows are contiguous already
    indptr = np.zeros(spec.neurons + 1, dtype=np.int64)
    np.cumsum(np.bincount(syn["src"], minlength=spec.neurons), out=indptr[1:])
    tgt = syn["tgt"].astype(np.int64)
    delay = syn["delay"].astype(np.int64)
    weight = syn["weight"].astype(np.int64)
    v_inf, v = neuron_state(spec)
    ref = np.zeros(spec.neurons, dtype=np.int64)
    slots = spec.max_delay + 1
    ring = np.zeros((slots, spec.neurons), dtype=np.int64)
    decay = p.decay
    fired_steps: list[np.ndarray] = []
    fired_ids: list[np.ndarray] = []
    show = Progress("snn serial", steps, enabled=progress, unit="step")
    t0 = time.perf_counter()
    for s in range(steps):
        u = ring[s % slots].copy()
        ring[s % slots] = 0
        active = ref == 0
        ref[~active] -= 1
        x = v_inf + (v - v_inf) * decay + p.j_mv * u
        spiking = active & (x >= p.theta_mv)
        v = np.where(active, np.where(spiking, p.v_reset_mv, x), v)
        ref[spiking] = p.t_ref_steps
        ids = np.flatnonzero(spiking)
        if ids.size:
            fired_steps.append(np.full(ids.size, s, dtype=np.int64))
            fired_ids.append(ids)
            lo, hi = indptr[ids], indptr[ids + 1]
            k = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist())])
            if k.size:
                np.add.at(ring, ((s + delay[k]) % slots, tgt[k]), weight[k])
        if s % 256 == 0:
            show(s)
    wall = time.perf_counter() - t0
    empty = np.empty(0, dtype=np.int64)
    return RunResult("serial", 1, spec.neurons, steps, p.dt_ms,
                     np.concatenate(fired_steps) if fired_steps else empty,
                     np.concatenate(fired_ids) if fired_ids else empty,
                     wall, t0 - t_setup, interval=steps, syncs=0, sync_kind="none (one process)")
