"""python -m hpcbsp.bench detector: the simulation's figures at small N against a brute-force
count made from the members' phases alone (not from the protocol's counters)."""
from __future__ import annotations

import math
import random
import re
import subprocess
import sys

import pytest

from hpcbsp.bench import detector
from hpcbsp.runtime.failure.protocol import K


def phases(sim: detector.Sim) -> dict[int, float]:
    """Each member's first tick, as the simulation scheduled it."""
    return {who: at for at, kind, _, who, _ in sim.queue if kind == detector._TICK}


@pytest.mark.parametrize("n", [2, 5, 8])
def test_datagrams_per_node_are_the_heartbeats_counted_by_hand(n):
    sim = detector.Sim(n, 1.0, 10.0, 0.0, random.Random(n))
    first = phases(sim)
    seconds = 20.0
    sim.run(seconds)
    # Every member ticks at phase + m (m = 0, 1, ...) up to 20 s and beats to min(K, n - 1) observers.
    ticks = sum(math.floor(seconds - p) + 1 for p in first.values())
    assert sim.sent() == ticks * min(K, n - 1)
    assert all(m.verdict is None for m in sim.members)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_frozen_node_is_given_up_at_the_tick_counted_by_hand_and_all_know_within_milliseconds(seed):
    n, period, timeout = 8, 1.0, 10.0
    rng = random.Random(seed)
    sim = detector.Sim(n, period, timeout, 0.0, rng)
    first = phases(sim)
    at = 2.5
    sim.run(at)
    f = rng.randrange(n)
    sim.frozen.add(f)
    sim.run(40.0, stop_when_all_know=True)
    # f's last beat left at its last tick before the freeze and reached its nearest observer
    # 0.1-0.5 ms later; the observer gives f up at its first tick more than 10 s after that.
    last = first[f] + math.floor(at - first[f])
    speaker = (f - 1) % n
    tick = first[speaker] + math.floor(last + timeout - first[speaker]) + 1
    if tick - (last + timeout) < 5e-4:  # (within the delivery's spread: either tick could be it)
        pytest.skip("the observer's tick falls within the delivery's spread")
    assert sim.members[speaker].verdict is not None and sim.members[speaker].verdict.speaker == speaker
    assert sim.known[speaker] == pytest.approx(tick)
    others = [sim.known[i] for i in range(n) if i != f]
    assert len(others) == n - 1 and all(tick <= t <= tick + 0.01 for t in others)


def test_percentile_is_the_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert detector.percentile(values, 0.5) == 50.0 and detector.percentile(values, 0.99) == 99.0
    assert detector.percentile([3.0], 0.99) == 3.0


def test_the_command_prints_one_line_per_case_and_refuses_bad_input():
    res = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "detector", "--nodes", "6", "--seconds", "15",
                          "--failures", "1", "--loss", "0.01"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert re.search(r"^nodes 6: 2\.00 datagrams per node per second, detection p50 \d+\.\d\d s p99 \d+\.\d\d s, "
                     r"false positives 0 \(loss 1%\)$", res.stdout, re.M), res.stdout
    for bad in (["--loss", "1.5"], ["--nodes", "1"], ["--stall", "-2"]):
        res = subprocess.run([sys.executable, "-m", "hpcbsp.bench", "detector", *bad], capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 2 and len(res.stderr.strip().splitlines()) == 1, (bad, res.stderr)
