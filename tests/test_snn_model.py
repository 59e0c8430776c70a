"""SNN simulator, one process: kernel, network generation, serial reference, windows and routing.

Oracles: a closed-form LIF spike time, a brute-force pure-Python simulation, brute-force
connectivity checks, and the serial reference for the windowed (distributed) code run in-process.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from hpcbsp.apps.snn.lif import LIFParams, lif_advance
from hpcbsp.apps.snn.local import CausalityError, LocalSim
from hpcbsp.apps.snn.network import (
    CHUNK,
    SYNAPSE,
    NetworkSpec,
    block_owner,
    build_local,
    generate_chunk,
    neuron_state,
    outgoing,
    whole_network,
)
from hpcbsp.apps.snn.serial import simulate_serial
from hpcbsp.runtime.api.distribution import block_range

SMALL = NetworkSpec(neurons=400, fanout=20, areas=4, delay_min=2, delay_local_max=8, delay_long_min=12,
                    delay_max=30, seed=3)


def _as_set(syn: np.ndarray) -> list[tuple[int, ...]]:
    return sorted(map(tuple, np.column_stack([syn[f] for f in SYNAPSE.names]).tolist()))


# ---------------------------------------------------------------------------------------- kernel
def test_kernel_matches_closed_form_spike_times() -> None:
    # One neuron, constant drive above threshold, no synapses: from v_reset, v_n = v_inf +
    # (v_reset - v_inf)·decay^n crosses theta after n = ceil(ln((v_inf-theta)/(v_inf-v_reset)) /
    # ln(decay)) steps; then t_ref refractory steps.
    p = LIFParams()
    v_inf = 23.0
    n_cross = math.log((v_inf - p.theta_mv) / (v_inf - p.v_reset_mv)) / math.log(p.decay)
    assert abs(n_cross - round(n_cross)) > 1e-3  # not a borderline case for float rounding
    n = math.ceil(n_cross)
    period = p.t_ref_steps + n  # reset at the spike, t_ref steps held, then n steps to cross
    steps = 5 * period + 3
    v = np.array([p.v_reset_mv])
    ref = np.zeros(1, np.int32)
    ring = np.zeros((steps + 1, 1), np.int32)
    out_src = np.zeros(steps, np.int32)
    out_step = np.zeros(steps, np.int32)
    none = np.full(1, -1, np.int32)
    empty_i = np.zeros(0, np.int32)
    k = lif_advance(0, steps, v, ref, np.array([v_inf]), p.decay, p.theta_mv, p.v_reset_mv, p.t_ref_steps,
                    p.j_mv, ring, 0, none, np.zeros(1, np.int64), empty_i, empty_i, empty_i, out_src, out_step)
    expected = [n - 1 + j * period for j in range(5)]  # step n-1 is the n-th update
    assert out_step[:k].tolist() == expected
    assert out_src[:k].tolist() == [0] * len(expected)


def test_kernel_input_is_integer_sum_and_refractory_discards_it() -> None:
    p = LIFParams()
    v = np.array([15.0, 15.0])
    ref = np.array([0, 3], np.int32)
    ring = np.zeros((4, 2), np.int32)
    ring[0] = [7, 1000]  # neuron 1 is refractory: its input is dropped
    out = np.zeros(4, np.int32)
    none = np.full(2, -1, np.int32)
    z = np.zeros(0, np.int32)
    lif_advance(0, 1, v, ref, np.array([15.0, 15.0]), p.decay, p.theta_mv, p.v_reset_mv, p.t_ref_steps,
                p.j_mv, ring, 0, none, np.zeros(1, np.int64), z, z, z, out, out.copy())
    assert v[0] == 15.0 + p.j_mv * 7 and v[1] == 15.0 and ref.tolist() == [0, 2]
    assert not ring[0].any()  # the slot is cleared as it is read


def test_jit_and_python_kernels_agree_bit_for_bit() -> None:
    # The Python function under the JIT is what NUMBA_DISABLE_JIT=1 runs.
    net = build_local(SMALL, 0, 1, whole_network(SMALL), whole_network(SMALL))
    results = []
    for fn in (lif_advance, lif_advance.py_func):
        sim = LocalSim(net, 50)
        v, ring, ref = sim.v, sim.ring, sim.ref
        p = SMALL.lif
        out_s, out_t = np.zeros(net.n_local * 5, np.int32), np.zeros(net.n_local * 5, np.int32)
        k = fn(0, 50, v, ref, net.v_inf, p.decay, p.theta_mv, p.v_reset_mv, p.t_ref_steps, p.j_mv, ring,
               net.lo, net.src_row, net.indptr, net.tgt, net.delay, net.weight, out_s, out_t)
        results.append((out_s[:k].copy(), out_t[:k].copy(), v.copy(), ring.copy()))
    assert results[0][0].size > 0
    for a, b in zip(*results):
        assert np.array_equal(a, b)


# -------------------------------------------------------------------------------------- network
def test_generated_connectivity_follows_the_spec() -> None:
    spec = SMALL
    syn = whole_network(spec)
    n, a = spec.neurons, spec.areas
    assert syn.size == n * spec.fanout
    assert np.array_equal(np.bincount(syn["src"], minlength=n), np.full(n, spec.fanout))
    assert not np.any(syn["src"] == syn["tgt"])
    src_area = np.array([i * a // n for i in syn["src"].tolist()])
    tgt_area = np.array([i * a // n for i in syn["tgt"].tolist()])
    inter = src_area != tgt_area
    d = syn["delay"]
    assert np.all((d[~inter] >= spec.delay_min) & (d[~inter] <= spec.delay_local_max))
    assert np.all((d[inter] >= spec.delay_long_min) & (d[inter] <= spec.delay_max))
    assert 0.15 < inter.mean() < 0.25  # inter_area = 0.2 on 8000 synapses
    assert d.min() == spec.delay_min and d.max() == spec.delay_max
    # first 80% of each area excitatory (+w_exc), the rest inhibitory (-g·w_exc)
    for i in range(n):
        area = i * a // n
        start = -(-area * n // a)
        size = -(-(area + 1) * n // a) - start
        w = spec.w_exc if i - start < int(0.8 * size) else -spec.g * spec.w_exc
        assert np.all(syn["weight"][syn["src"] == i] == w)


def test_generation_is_per_chunk_and_reproducible() -> None:
    spec = NetworkSpec(neurons=3 * CHUNK + 5, fanout=3, seed=11)
    whole = whole_network(spec)
    assert np.array_equal(whole, np.concatenate([generate_chunk(spec, c) for c in range(4)]))
    assert np.array_equal(outgoing(spec, 1000, 2100), whole[(whole["src"] >= 1000) & (whole["src"] < 2100)])
    other = whole_network(NetworkSpec(neurons=3 * CHUNK + 5, fanout=3, seed=12))
    assert not np.array_equal(whole, other)


@pytest.mark.parametrize("nprocs", [1, 2, 3, 5])
def test_distribution_is_the_same_network_for_any_rank_count(nprocs: int) -> None:
    spec = SMALL
    whole = whole_network(spec)
    owners = np.array([next(r for r in range(nprocs) if block_range(spec.neurons, nprocs, r)[0] <= i
                            < block_range(spec.neurons, nprocs, r)[1]) for i in range(spec.neurons)])
    assert np.array_equal(block_owner(np.arange(spec.neurons), spec.neurons, nprocs), owners)
    collected = []
    for r in range(nprocs):
        lo, hi = block_range(spec.neurons, nprocs, r)
        mine = outgoing(spec, lo, hi)
        incoming = np.concatenate([outgoing(spec, *block_range(spec.neurons, nprocs, q)) for q in range(nprocs)])
        incoming = incoming[owners[incoming["tgt"]] == r]  # what the queue would deliver to r
        net = build_local(spec, r, nprocs, mine, incoming)
        # rebuild rank r's incoming synapses from its CSR table
        rows = np.flatnonzero(net.src_row >= 0)
        for j in rows.tolist():
            k = net.src_row[j]
            for s in range(net.indptr[k], net.indptr[k + 1]):
                collected.append((j, int(net.tgt[s]) + lo, int(net.delay[s]), int(net.weight[s])))
        # brute force: lookahead from each other rank, and which ranks each local neuron reaches
        into_r = whole[owners[whole["tgt"]] == r]
        expect_la = {q: int(into_r["delay"][owners[into_r["src"]] == q].min())
                     for q in set(owners[into_r["src"]].tolist()) - {r}}
        assert net.lookahead == expect_la
        for i in range(lo, hi):
            reach = set(owners[whole["tgt"][whole["src"] == i]].tolist())
            assert set(np.flatnonzero(net.projects[i - lo]).tolist()) == reach
        assert np.array_equal(net.v_inf, neuron_state(spec)[0][lo:hi])
    assert sorted(collected) == _as_set(whole)


# --------------------------------------------------------------------------- serial reference
def brute_force(spec: NetworkSpec, steps: int) -> list[tuple[int, int]]:
    """Scalar pure-Python simulation: events in a dict, one neuron and one synapse at a time."""
    p = spec.lif
    syn = whole_network(spec).tolist()
    v_inf, v0 = (x.tolist() for x in neuron_state(spec))
    v, ref = list(v0), [0] * spec.neurons
    decay = math.exp(-p.dt_ms / p.tau_m_ms)
    out_syn: dict[int, list[tuple[int, int, int]]] = {}
    for src, tgt, d, w in syn:
        out_syn.setdefault(src, []).append((tgt, d, w))
    due: dict[tuple[int, int], int] = {}
    spikes = []
    for s in range(steps):
        fired = []
        for i in range(spec.neurons):
            u = due.pop((s, i), 0)
            if ref[i] > 0:
                ref[i] -= 1
                continue
            x = v_inf[i] + (v[i] - v_inf[i]) * decay + p.j_mv * u
            if x >= p.theta_mv:
                v[i], ref[i] = p.v_reset_mv, p.t_ref_steps
                fired.append(i)
            else:
                v[i] = x
        for i in fired:
            spikes.append((s, i))
            for tgt, d, w in out_syn.get(i, []):
                due[(s + d, tgt)] = due.get((s + d, tgt), 0) + w
    return spikes


def test_serial_reference_matches_brute_force() -> None:
    spec = NetworkSpec(neurons=60, fanout=8, areas=2, delay_min=1, delay_local_max=5, delay_long_min=6,
                       delay_max=15, seed=5)
    steps = 1500
    res = simulate_serial(spec, steps)
    expect = brute_force(spec, steps)
    assert len(expect) > 100
    assert list(zip(res.spike_steps.tolist(), res.spike_ids.tolist())) == expect
    assert res.rate_hz == pytest.approx(len(expect) / (60 * 0.15))


def test_recurrent_input_matters() -> None:
    # The same neurons without synapses fire differently: the check above exercises delivery.
    steps = 2000
    a = simulate_serial(SMALL, steps)
    b = simulate_serial(NetworkSpec(**{**SMALL.__dict__, "fanout": 0}), steps)
    assert a.spikes > 0 and b.spikes > 0
    assert not np.array_equal(a.spike_ids, b.spike_ids) or not np.array_equal(a.spike_steps, b.spike_steps)


# ------------------------------------------------------ windows and routing, ranks simulated in-process
def _in_process(spec: NetworkSpec, nprocs: int, steps: int, window: int) -> list[tuple[int, int]]:
    """P LocalSims in lockstep windows, spikes routed with ``destinations`` (a BSP run without MPI)."""
    owners = block_owner
    sims = []
    for r in range(nprocs):
        lo, hi = block_range(spec.neurons, nprocs, r)
        everything = whole_network(spec)
        incoming = everything[owners(everything["tgt"], spec.neurons, nprocs) == r]
        sims.append(LocalSim(build_local(spec, r, nprocs, outgoing(spec, lo, hi), incoming), window))
    inbox: list[list[np.ndarray]] = [[] for _ in range(nprocs)]
    while sims[0].now < steps:
        t1 = min(steps, sims[0].now + window)
        outgoing_now = []
        for r, sim in enumerate(sims):
            for batch in inbox[r]:
                sim.receive(batch)
            inbox[r] = []
            spikes = sim.advance(t1)
            idx, ranks = sim.destinations(spikes)
            outgoing_now.append((spikes, idx, ranks))
        for spikes, idx, ranks in outgoing_now:
            for q in range(nprocs):
                inbox[q].append(spikes[idx[ranks == q]])
    pairs = []
    for sim in sims:
        st, ids = sim.fired()
        pairs += list(zip(st.tolist(), ids.tolist()))
    return sorted(pairs)


@pytest.mark.parametrize("nprocs,window", [(1, 7), (1, 64), (2, 12), (3, 2), (4, 2)])
def test_windowed_ranks_reproduce_the_serial_spike_trains(nprocs: int, window: int) -> None:
    # 2 ranks on 4 areas: blocks align with areas, the cross-rank lookahead is delay_long_min = 12.
    steps = 1200
    ref = simulate_serial(SMALL, steps)
    got = _in_process(SMALL, nprocs, steps, window)
    assert len(got) > 500
    assert got == list(zip(ref.spike_steps.tolist(), ref.spike_ids.tolist()))


def test_a_window_beyond_the_lookahead_is_detected() -> None:
    # 3 ranks: a rank boundary cuts an area, so some cross-rank delays are 2 steps; windows of 12
    # deliver spikes too late, which must raise rather than give wrong spike trains.
    with pytest.raises(CausalityError):
        _in_process(SMALL, 3, 600, 12)
