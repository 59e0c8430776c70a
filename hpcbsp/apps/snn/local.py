"""One rank's part of a simulation: neuron state, the input ring buffer and spikes still to deliver.

Both distributed modes drive a :class:`LocalSim` the same way: hand it the spikes that arrived
from other ranks (:meth:`LocalSim.receive`), let it advance its neurons through a window of steps
(:meth:`LocalSim.advance`), and route the window's spikes to the ranks they project to
(:meth:`LocalSim.destinations`).  The mode decides only how far a window may reach and how
spikes and times travel.
"""
from __future__ import annotations

import numpy as np

from .lif import deposit_spikes, lif_advance
from .network import LocalNetwork

#: A spike as it travels between ranks: the source's global id and the step it fired in.
SPIKE = np.dtype([("src", np.int32), ("step", np.int32)])


def _keep(parts: list[np.ndarray], piece: np.ndarray) -> None:
    """Append ``piece`` to ``parts`` (in order), joining the newest two arrays while the last is at
    least half as long as the one before: each array is then less than half the one before it, so
    that a run of any number of windows keeps at most log2(spikes) + 1 arrays (each spike copied
    O(log spikes) times), not one per window."""
    parts.append(piece)
    while len(parts) > 1 and 2 * parts[-1].size >= parts[-2].size:
        last = parts.pop()
        parts[-1] = np.concatenate([parts[-1], last])


class CausalityError(RuntimeError):
    """A spike reached a rank after the step it was due at had been simulated (a bug)."""


class LocalSim:
    """Neurons ``net.lo .. net.hi-1`` advanced window by window; windows are at most ``window`` steps."""

    def __init__(self, net: LocalNetwork, window: int):
        if window < 1:
            raise ValueError(f"window must be >= 1 step, got {window}")
        self.net = net
        self.window = window
        p = net.spec.lif
        self._params = (p.decay, p.theta_mv, p.v_reset_mv, p.t_ref_steps, p.j_mv)
        # int32 halves the ring's memory; a slot can never hold more than a neuron's total
        # absolute incoming weight, which must therefore fit.
        fan_in = np.bincount(net.tgt, weights=np.abs(net.weight), minlength=net.n_local)
        if fan_in.size and fan_in.max() >= 2**31:
            raise ValueError(f"rank {net.pid}: a neuron's total incoming weight exceeds the int32 input buffer")
        # Spikes of a window fire at steps < t1 and are due at most max_delay later; pending
        # spikes are deposited only once they fire before the window's end, so the ring must
        # reach from the window's first step to t1 - 1 + max_delay.
        self.ring = np.zeros((window + net.spec.max_delay + 1, net.n_local), dtype=np.int32)
        self.v = net.v0.copy()
        self.ref = np.zeros(net.n_local, dtype=np.int32)
        self.now = 0
        per_neuron = (window + p.t_ref_steps) // (p.t_ref_steps + 1)
        self._out_src = np.empty(max(net.n_local * per_neuron, 1), dtype=np.int32)
        self._out_step = np.empty_like(self._out_src)
        self._pending: list[np.ndarray] = []
        self._fired_src: list[np.ndarray] = []
        self._fired_step: list[np.ndarray] = []

    def receive(self, spikes: np.ndarray) -> None:
        """Spikes (a :data:`SPIKE` array) from other ranks; delivered when a window reaches them."""
        if spikes.size:
            self._pending.append(spikes)

    def advance(self, t1: int) -> np.ndarray:
        """Simulate steps ``now .. t1-1`` and return their spikes (:data:`SPIKE`, by step then id).

        Every spike from another rank that fired before ``t1`` must have been received, or be
        due at ``t1`` or later (the caller's lookahead guarantees it).
        """
        t0 = self.now
        if not t0 < t1 <= t0 + self.window:
            raise ValueError(f"window {t0}..{t1} is empty or longer than {self.window} steps")
        net = self.net
        self._deposit_pending(t0, t1)
        decay, theta, v_reset, t_ref, j_mv = self._params
        n = lif_advance(t0, t1, self.v, self.ref, net.v_inf, decay, theta, v_reset, t_ref, j_mv, self.ring,
                        net.lo, net.src_row, net.indptr, net.tgt, net.delay, net.weight,
                        self._out_src, self._out_step)
        out = np.empty(n, dtype=SPIKE)
        out["src"] = self._out_src[:n]
        out["step"] = self._out_step[:n]
        if n:
            _keep(self._fired_src, out["src"].copy())
            _keep(self._fired_step, out["step"].copy())
        self.now = t1
        return out

    def destinations(self, spikes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(index, rank)`` pairs: spike ``index`` must go to ``rank`` (other ranks only)."""
        mask = self.net.projects[spikes["src"] - self.net.lo]
        mask[:, self.net.pid] = False
        idx, ranks = np.nonzero(mask)
        # nonzero's results may be strided views; the queue wants contiguous destinations
        return np.ascontiguousarray(idx), np.ascontiguousarray(ranks)

    def fired(self) -> tuple[np.ndarray, np.ndarray]:
        """All spikes of this rank's neurons so far: ``(steps, neuron ids)``."""
        if not self._fired_src:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
        return (np.concatenate(self._fired_step).astype(np.int64),
                np.concatenate(self._fired_src).astype(np.int64))

    def _deposit_pending(self, t0: int, t1: int) -> None:
        if not self._pending:
            return
        spikes = np.concatenate(self._pending) if len(self._pending) > 1 else self._pending[0]
        ready = spikes["step"] < t1
        now = spikes[ready]
        self._pending = [spikes[~ready]] if not ready.all() else []
        if not now.size:
            return
        net = self.net
        late = deposit_spikes(np.ascontiguousarray(now["src"]), np.ascontiguousarray(now["step"]), t0,
                              net.src_row, net.indptr, net.tgt, net.delay, net.weight, self.ring)
        if late:
            raise CausalityError(f"rank {net.pid}: {late} synaptic event(s) arrived after step {t0} "
                                 "had started: the lookahead was violated")
