"""Leaky integrate-and-fire neurons: the model's parameters and the Numba kernels that step them.

Model (current-based, delta synapses, fixed step ``dt``).  Between spikes the membrane relaxes
towards the neuron's own resting drive ``v_inf`` with time constant ``tau_m``; over one step with
constant drive the exact solution gives ``v <- v_inf + (v - v_inf)·exp(-dt/tau_m)``.  A spike
arriving at step ``s`` adds ``j_mv·w`` to ``v`` (``w`` an integer weight).  Step ``s`` of a neuron
that is not refractory is::

    v = v_inf + (v - v_inf) * decay + j_mv * u      # u: the integer input due at step s
    if v >= theta: spike at s; v = v_reset; the next t_ref steps are refractory

During a refractory step ``v`` stays at ``v_reset`` and the input due at that step is discarded.

Exactness: synaptic weights are integers and the input due at each step is summed as an integer
in a ring buffer (int32 in the distributed modes, int64 in the serial reference; no rounding), so
the order in which spikes arrive, which depends on the number of ranks, on message timing and on
the mode, cannot change the sum.  The float64 update above uses only ``+``, ``-`` and ``*`` in a
fixed order, one neuron at a time, so every implementation (this kernel with or without JIT, the
numpy serial reference) computes the same bits.

The kernels know nothing of MPI (``cache=True``; they run unchanged with ``NUMBA_DISABLE_JIT=1``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit


@dataclass(frozen=True)
class LIFParams:
    """Neuron model parameters (mV, ms); the defaults give irregular firing at ~10-30 Hz."""

    dt_ms: float = 0.1          #: integration step; synaptic delays are whole steps
    tau_m_ms: float = 20.0      #: membrane time constant
    theta_mv: float = 20.0      #: threshold
    v_reset_mv: float = 10.0    #: reset potential (also the potential while refractory)
    t_ref_steps: int = 20       #: refractory steps after a spike (2 ms at dt = 0.1 ms)
    j_mv: float = 0.1           #: potential jump per unit of synaptic weight
    drive_low_mv: float = 18.0  #: each neuron's v_inf is uniform in [drive_low, drive_high)
    drive_high_mv: float = 26.0

    @property
    def decay(self) -> float:
        """``exp(-dt/tau_m)``: computed once, in Python, so every kernel uses the same bits."""
        return math.exp(-self.dt_ms / self.tau_m_ms)

    def problems(self) -> list[str]:
        """What is wrong with these parameters (empty if nothing)."""
        out = []
        if not (self.dt_ms > 0 and self.tau_m_ms > 0):
            out.append("dt and tau_m must be > 0")
        if not self.v_reset_mv < self.theta_mv:
            out.append("the reset potential must be below the threshold")
        if self.t_ref_steps < 0:
            out.append("the refractory period must be >= 0 steps")
        if not self.drive_low_mv <= self.drive_high_mv:
            out.append("drive_low must be <= drive_high")
        return out


@njit(cache=True)
def lif_advance(t0: int, t1: int, v: np.ndarray, ref: np.ndarray, v_inf: np.ndarray, decay: float,
                theta: float, v_reset: float, t_ref: int, j_mv: float, ring: np.ndarray, first_id: int,
                src_row: np.ndarray, indptr: np.ndarray, tgt: np.ndarray, delay: np.ndarray,
                weight: np.ndarray, out_src: np.ndarray, out_step: np.ndarray) -> int:
    """Advance this rank's neurons through steps ``t0 .. t1-1``; return the number of spikes.

    ``ring[s % L, i]`` holds the integer input due at step ``s`` for local neuron ``i``
    (``L = ring.shape[0]`` must exceed ``t1 - t0 - 1 + max delay``); each slot is cleared as it is
    read.  Spikes of local neurons are delivered to local targets at once through the incoming
    synapse table (``src_row[global id]`` -> row of ``indptr``, or -1), since every delay is at
    least one step.  Spikes are written to ``out_src`` (global neuron id) and ``out_step`` in
    step order, then neuron order; the buffers must hold every possible spike of the window
    (at most one per neuron per ``t_ref + 1`` steps).
    """
    L = ring.shape[0]
    n = v.shape[0]
    count = 0
    for s in range(t0, t1):
        slot = s % L
        first = count
        for i in range(n):
            u = ring[slot, i]
            ring[slot, i] = 0
            if ref[i] > 0:
                ref[i] -= 1
                continue
            x = v_inf[i] + (v[i] - v_inf[i]) * decay + j_mv * u
            if x >= theta:
                v[i] = v_reset
                ref[i] = t_ref
                out_src[count] = first_id + i
                out_step[count] = s
                count += 1
            else:
                v[i] = x
        for k in range(first, count):
            row = src_row[out_src[k]]
            if row < 0:
                continue
            for p in range(indptr[row], indptr[row + 1]):
                ring[(s + delay[p]) % L, tgt[p]] += weight[p]
    return count


@njit(cache=True)
def deposit_spikes(src: np.ndarray, step: np.ndarray, now: int, src_row: np.ndarray, indptr: np.ndarray,
                   tgt: np.ndarray, delay: np.ndarray, weight: np.ndarray, ring: np.ndarray) -> int:
    """Add the input of spikes (``src[k]`` fired at ``step[k]``) to the ring buffer.

    Returns the number of synaptic events that were due *before* step ``now`` (already
    simulated): always 0 in a correct run; the caller treats anything else as a causality bug.
    The caller keeps every due step below ``now + L``.
    """
    L = ring.shape[0]
    late = 0
    for k in range(src.shape[0]):
        row = src_row[src[k]]
        if row < 0:
            continue
        e = step[k]
        for p in range(indptr[row], indptr[row + 1]):
            due = e + delay[p]
            if due < now:
                late += 1
            else:
                ring[due % L, tgt[p]] += weight[p]
    return late
