"""The generated network: areas of LIF neurons, random connectivity, integer synaptic delays.

The network depends on the seed and the :class:`NetworkSpec` only, never on the number of ranks:

- neuron ``i`` belongs to area ``floor(i·A/N)`` (areas are contiguous id ranges); within an area
  the first ``exc_fraction`` of the neurons are excitatory (weight ``+w_exc``), the rest
  inhibitory (weight ``-g·w_exc``); weights are integers (see :mod:`.lif` on exactness);
- each neuron's drive and initial potential come from one stream of the seed, drawn for all N;
- neuron ``j``'s ``fanout`` outgoing synapses come from the stream of ``j``'s chunk
  (:data:`CHUNK` consecutive sources, a fixed size), so any rank can generate exactly the
  synapses of its own neurons.  A synapse stays in the source's area with probability
  ``1 - inter_area`` (target uniform in the area, no self-connection, delay uniform in
  ``[delay_min, delay_local_max]`` steps) or goes to another area (area and target uniform,
  delay uniform in ``[delay_long_min, delay_max]``): short local and long inter-area delays, as
  in multi-area cortex models, so the minimum delay is far below the mean.

Distribution: rank r owns the block ``block_range(N, P, r)`` of neuron ids.  Synapses are stored
on the rank of their *target* (:class:`LocalNetwork`); :func:`distribute` generates each rank's
outgoing synapses and routes them there in one superstep, and each rank remembers to which ranks
its own neurons project, so that a spike travels as one ``(source, step)`` record per target rank.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...runtime.api.distribution import block_range
from .lif import LIFParams

if TYPE_CHECKING:
    from ...runtime import BSP

#: Sources per generation chunk: a constant, so that the streams do not depend on the ranks.
CHUNK = 1024

#: Stream tags under the seed (numpy SeedSequence entropy ``[seed, tag, ...]``).
_NEURON_STREAM = 1
_SYNAPSE_STREAM = 2

#: One synapse as generated and as routed to its target's rank (16 bytes).
SYNAPSE = np.dtype([("src", np.int32), ("tgt", np.int32), ("delay", np.int32), ("weight", np.int32)])


@dataclass(frozen=True)
class NetworkSpec:
    """Everything the network depends on.  Delays are in steps of ``lif.dt_ms``."""

    neurons: int = 10_000
    fanout: int = 100
    areas: int = 4
    inter_area: float = 0.2
    exc_fraction: float = 0.8
    w_exc: int = 2
    g: int = 5
    delay_min: int = 2
    delay_local_max: int = 20
    delay_long_min: int = 40
    delay_max: int = 200
    seed: int = 1
    lif: LIFParams = field(default_factory=LIFParams)

    def problems(self) -> list[str]:
        """What is wrong with this specification (empty if nothing)."""
        out = []
        if self.areas < 1:
            out.append("--areas must be >= 1")
        elif self.neurons < 2 * self.areas:
            out.append(f"need at least 2 neurons per area ({self.areas} areas, {self.neurons} neurons)")
        if self.neurons >= 2**31:
            out.append("at most 2^31 - 1 neurons")
        if self.fanout < 0:
            out.append("--fanout must be >= 0")
        if not 0.0 <= self.inter_area <= 1.0:
            out.append("--inter-area must be in [0, 1]")
        if not 0.0 <= self.exc_fraction <= 1.0:
            out.append("the excitatory fraction must be in [0, 1]")
        if not 1 <= self.delay_min <= self.delay_local_max:
            out.append("need 1 <= --delay-min <= --delay-local-max (steps)")
        if not 1 <= self.delay_long_min <= self.delay_max:
            out.append("need 1 <= --delay-long-min <= --delay-max (steps)")
        return out + self.lif.problems()

    @property
    def max_delay(self) -> int:
        return max(self.delay_local_max, self.delay_max)

    def area_of(self, ids: np.ndarray) -> np.ndarray:
        return (ids.astype(np.int64) * self.areas) // self.neurons

    def area_start(self, area: np.ndarray) -> np.ndarray:
        """First neuron id of each area (``ceil(a·N/A)``, consistent with :meth:`area_of`)."""
        return (np.asarray(area, dtype=np.int64) * self.neurons + self.areas - 1) // self.areas

    def weights(self, ids: np.ndarray) -> np.ndarray:
        """Integer weight of the synapses of each source neuron (excitatory first in each area)."""
        area = self.area_of(ids)
        start, stop = self.area_start(area), self.area_start(area + 1)
        n_exc = np.floor(self.exc_fraction * (stop - start)).astype(np.int64)
        return np.where(ids - start < n_exc, self.w_exc, -self.g * self.w_exc).astype(np.int32)


def neuron_state(spec: NetworkSpec) -> tuple[np.ndarray, np.ndarray]:
    """Every neuron's drive ``v_inf`` and initial potential (the same arrays on every rank)."""
    rng = np.random.default_rng([spec.seed, _NEURON_STREAM])
    p = spec.lif
    v_inf = rng.uniform(p.drive_low_mv, p.drive_high_mv, spec.neurons)
    v0 = rng.uniform(p.v_reset_mv, p.theta_mv, spec.neurons)
    return v_inf, v0


def generate_chunk(spec: NetworkSpec, chunk: int) -> np.ndarray:
    """The outgoing synapses of sources ``chunk·CHUNK ..`` (a :data:`SYNAPSE` array, by source)."""
    lo = chunk * CHUNK
    hi = min(spec.neurons, lo + CHUNK)
    k = spec.fanout
    m = max(hi - lo, 0) * k
    rng = np.random.default_rng([spec.seed, _SYNAPSE_STREAM, chunk])
    src = np.repeat(np.arange(lo, hi, dtype=np.int64), k)
    area = spec.area_of(src)
    # Every draw has the same size whatever the values, so each stream is consumed identically.
    inter = rng.random(m) < spec.inter_area if spec.areas > 1 else np.zeros(m, dtype=bool)
    shift = rng.integers(1, max(spec.areas, 2), size=m)
    t_area = np.where(inter, (area + shift) % spec.areas, area)
    start = spec.area_start(t_area)
    size = spec.area_start(t_area + 1) - start
    # Within the own area, draw from size-1 positions and skip the source's own.
    pos = rng.integers(0, np.where(inter, size, size - 1))
    own = src - start
    pos = np.where(~inter & (pos >= own), pos + 1, pos)
    d_lo = np.where(inter, spec.delay_long_min, spec.delay_min)
    d_hi = np.where(inter, spec.delay_max, spec.delay_local_max)
    out = np.empty(m, dtype=SYNAPSE)
    out["src"] = src
    out["tgt"] = start + pos
    out["delay"] = rng.integers(d_lo, d_hi + 1)
    out["weight"] = spec.weights(src)
    return out


def outgoing(spec: NetworkSpec, lo: int, hi: int) -> np.ndarray:
    """The outgoing synapses of sources ``lo .. hi-1`` (generated chunk by chunk)."""
    if hi <= lo:
        return np.empty(0, dtype=SYNAPSE)
    parts = [generate_chunk(spec, c) for c in range(lo // CHUNK, (hi - 1) // CHUNK + 1)]
    syn = np.concatenate(parts)
    return syn[(syn["src"] >= lo) & (syn["src"] < hi)]


def block_owner(ids: np.ndarray, n: int, p: int) -> np.ndarray:
    """The rank owning each id under ``block_range(n, p, ·)`` (vectorised)."""
    starts = np.array([block_range(n, p, r)[0] for r in range(p)], dtype=np.int64)
    return np.searchsorted(starts, ids, side="right") - 1


@dataclass
class LocalNetwork:
    """One rank's neurons ``lo .. hi-1`` and the synapses onto them, as a CSR table by source.

    ``src_row[j]`` is the row of global source ``j`` (``-1``: no synapse onto this rank); row
    ``r``'s synapses are ``indptr[r] .. indptr[r+1]-1`` of ``tgt`` (local index), ``delay`` and
    ``weight``.  ``projects[i, q]``: local neuron ``i`` has a synapse onto rank ``q``.
    ``lookahead[q]``: the minimum delay of the synapses from rank ``q`` onto this one, and
    ``out_lookahead[q]`` of those from this rank onto ``q`` (absent if none; this rank itself
    excluded).
    """

    spec: NetworkSpec
    pid: int
    nprocs: int
    lo: int
    hi: int
    v_inf: np.ndarray
    v0: np.ndarray
    src_row: np.ndarray
    indptr: np.ndarray
    tgt: np.ndarray
    delay: np.ndarray
    weight: np.ndarray
    projects: np.ndarray
    lookahead: dict[int, int]
    out_lookahead: dict[int, int]

    @property
    def n_local(self) -> int:
        return self.hi - self.lo

    @property
    def out_ranks(self) -> list[int]:
        """Ranks (other than this one) that some local neuron projects to."""
        return sorted(self.out_lookahead)

    @property
    def min_delay(self) -> int:
        """Smallest delay of the synapses onto this rank (``max_delay + 1`` if there are none)."""
        return int(self.delay.min()) if self.delay.size else self.spec.max_delay + 1


def build_local(spec: NetworkSpec, pid: int, nprocs: int, out_syn: np.ndarray, in_syn: np.ndarray) -> LocalNetwork:
    """Assemble rank ``pid``'s :class:`LocalNetwork` from its neurons' outgoing synapses and the
    synapses onto its neurons (no communication)."""
    lo, hi = block_range(spec.neurons, nprocs, pid)
    v_inf, v0 = neuron_state(spec)
    projects = np.zeros((hi - lo, nprocs), dtype=bool)
    projects[out_syn["src"] - lo, block_owner(out_syn["tgt"], spec.neurons, nprocs)] = True
    order = np.argsort(in_syn["src"], kind="stable")
    syn = in_syn[order]
    sources, counts = np.unique(syn["src"], return_counts=True)
    src_row = np.full(spec.neurons, -1, dtype=np.int32)
    src_row[sources] = np.arange(sources.size, dtype=np.int32)
    indptr = np.zeros(sources.size + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    return LocalNetwork(spec, pid, nprocs, lo, hi, v_inf[lo:hi].copy(), v0[lo:hi].copy(), src_row, indptr,
                        (syn["tgt"] - lo).astype(np.int32), syn["delay"].copy(), syn["weight"].copy(), projects,
                        _min_delay_by_rank(syn["delay"], block_owner(syn["src"], spec.neurons, nprocs), pid),
                        _min_delay_by_rank(out_syn["delay"], block_owner(out_syn["tgt"], spec.neurons, nprocs), pid))


def _min_delay_by_rank(delay: np.ndarray, rank: np.ndarray, pid: int) -> dict[int, int]:
    """``{q: min delay[rank == q]}`` over the ranks ``q != pid`` that occur."""
    return {q: int(delay[rank == q].min()) for q in np.unique(rank).tolist() if q != pid}


def distribute(bsp: BSP, spec: NetworkSpec) -> LocalNetwork:
    """Generate this rank's neurons' synapses and route each to its target's rank (collective).

    One superstep ("connect").  h-relation: 16 bytes and one queue record per synapse whose
    target lives on another rank, out of the source's rank and into the target's.
    """
    lo, hi = block_range(spec.neurons, bsp.nprocs, bsp.pid)
    out_syn = outgoing(spec, lo, hi)
    q = bsp.queue(SYNAPSE, name="synapses")
    if out_syn.size:
        q.send(block_owner(out_syn["tgt"], spec.neurons, bsp.nprocs), out_syn)
    bsp.sync("connect")
    return build_local(spec, bsp.pid, bsp.nprocs, out_syn, q.received())


def whole_network(spec: NetworkSpec) -> np.ndarray:
    """Every synapse of the network, by source (for the serial reference and the tests)."""
    return outgoing(spec, 0, spec.neurons)
