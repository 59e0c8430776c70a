"""SNN simulator under MPI (mpiexec -n 2 and -n 3): both modes give the serial spike trains exactly.

Oracles: the serial numpy reference (itself checked against a brute-force simulation in
test_snn_model.py), computed on every rank; superstep counts and lookaheads computed by brute
force from the whole network and the block distribution.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import hpcbsp
from hpcbsp.apps.snn.async_mode import run_async, simulate_async
from hpcbsp.apps.snn.bsp_mode import DEFAULT_WINDOW_CAP, run_bsp, simulate_bsp
from hpcbsp.apps.snn.network import NetworkSpec, block_owner, build_local, whole_network
from hpcbsp.apps.snn.serial import simulate_serial
from hpcbsp.runtime.api.distribution import block_range

mpi = pytest.mark.mpi(min_size=2)

SPEC = NetworkSpec(neurons=400, fanout=20, areas=4, delay_min=2, delay_local_max=8, delay_long_min=12,
                   delay_max=30, seed=3)
STEPS = 1500


@pytest.fixture
def bsp():
    with hpcbsp.BSP() as ctx:
        yield ctx


@pytest.fixture(scope="module")
def reference():
    return simulate_serial(SPEC, STEPS)


def cross_rank_min_delay(spec: NetworkSpec, nprocs: int) -> int | None:
    syn = whole_network(spec)
    cross = block_owner(syn["src"], spec.neurons, nprocs) != block_owner(syn["tgt"], spec.neurons, nprocs)
    return int(syn["delay"][cross].min()) if cross.any() else None


def same_trains(res, ref) -> bool:
    return np.array_equal(res.spike_steps, ref.spike_steps) and np.array_equal(res.spike_ids, ref.spike_ids)


@mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("rule", ["global", "cross"])
def test_bsp_mode_gives_the_serial_spike_trains(bsp, reference, rule):
    res = run_bsp(bsp, SPEC, STEPS, rule=rule)
    d = SPEC.delay_min if rule == "global" else cross_rank_min_delay(SPEC, bsp.nprocs)
    assert res.interval == d
    assert res.syncs == math.ceil(STEPS / d)
    if bsp.pid == 0:
        assert reference.spikes > 1000
        assert same_trains(res, reference)
        assert res.rate_hz == pytest.approx(reference.rate_hz)
        assert res.ledger is not None
        labels = [r["label"] for r in res.ledger.records]
        assert labels.count("snn") == res.syncs * bsp.nprocs  # one ledger row per rank and superstep
        # the running aggregates count the same supersteps, per label, on every rank
        assert [a.by_label["snn"].count for a in res.ledger.ranks] == [res.syncs] * bsp.nprocs
    else:
        assert res.spike_steps.size == 0


@mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("window", [None, DEFAULT_WINDOW_CAP, 5, 1])
def test_async_mode_gives_the_serial_spike_trains(bsp, reference, window):
    res = run_async(bsp, SPEC, STEPS, window=window)
    lookahead = cross_rank_min_delay(SPEC, bsp.nprocs)
    assert res.interval == lookahead
    # default: half the smallest delay onto another rank (every rank reaches every other here)
    cap = max(1, lookahead // 2) if window is None and bsp.nprocs == 2 else window
    if cap is not None:
        assert res.extra["window_max"] == cap
        assert res.extra["windows_max"] >= math.ceil(STEPS / cap)
    # every window of every rank sends one message to each rank it projects to (here: all others)
    assert res.messages == res.extra["windows_total"] * (bsp.nprocs - 1)
    if bsp.pid == 0:
        assert same_trains(res, reference)
    else:
        assert res.spike_steps.size == 0


@mpi
@pytest.mark.timeout(120)
def test_async_mode_without_synapses_needs_no_messages(bsp):
    spec = NetworkSpec(neurons=90, fanout=0, areas=3, seed=2)
    ref = simulate_serial(spec, 800)
    res = run_async(bsp, spec, 800, window=64)
    bsp_res = run_bsp(bsp, spec, 800, rule="cross")
    assert res.messages == 0 and res.syncs == 0
    assert bsp_res.interval == DEFAULT_WINDOW_CAP and bsp_res.syncs == math.ceil(800 / DEFAULT_WINDOW_CAP)
    if bsp.pid == 0:
        assert ref.spikes > 0 and same_trains(res, ref) and same_trains(bsp_res, ref)


@mpi
@pytest.mark.timeout(120)
def test_async_one_way_connections_let_ranks_run_ahead(bsp):
    # Keep only synapses from a rank onto itself or a lower rank: the top rank has no source rank
    # and runs to the end at once; lower ranks receive spikes from far in their future, which
    # must wait in the pending list.  Oracle: BSP mode on the same network.
    syn = whole_network(SPEC)
    owner = lambda ids: block_owner(ids, SPEC.neurons, bsp.nprocs)  # noqa: E731
    keep = syn[owner(syn["src"]) >= owner(syn["tgt"])]
    lo, hi = block_range(SPEC.neurons, bsp.nprocs, bsp.pid)
    net = build_local(SPEC, bsp.pid, bsp.nprocs, keep[(keep["src"] >= lo) & (keep["src"] < hi)],
                      keep[owner(keep["tgt"]) == bsp.pid])
    assert (bsp.pid == bsp.nprocs - 1) == (not net.lookahead)
    a = simulate_async(bsp, net, STEPS, window=50)
    b = simulate_bsp(bsp, net, STEPS, rule="cross")
    full = run_bsp(bsp, SPEC, STEPS, rule="cross")
    if bsp.pid == 0:
        assert a.spikes > 1000 and same_trains(a, b)
        assert not same_trains(a, full)  # the cut synapses mattered: this is a different network
