"""The virtual-clock simulator and the coordinator: exact timings, protocol checks, scale."""
from __future__ import annotations

import time

import numpy as np
import pytest

from hpcbsp.elastic.coordinator import Coordinator, ProtocolError
from hpcbsp.elastic.policies import BSP, Decision, PolicyOptions, SyncPolicy, make_policy
from hpcbsp.elastic.runlog import staleness_summary
from hpcbsp.elastic.simulator import simulate
from hpcbsp.elastic.timing import TimingModel

pytestmark = pytest.mark.serial_only

# Binary fractions keep every simulated time exact, so the hand-computed oracles are exact too.
EXACT = TimingModel(base_s=0.25, slowdown=(1.0, 1.0, 1.5, 3.0), jitter=0.0)


def test_bsp_waits_for_the_slowest_every_step() -> None:
    res = simulate(BSP(), EXACT, duration=7.6)
    # Steps end every 0.75 s: 10 by 7.5 s. Each step workers 0, 1, 2 wait 0.5, 0.5, 0.375; at
    # the stop (7.6 s) those that pushed at 7.75 / 7.875 have not; nobody waits then.
    assert res.log.updates == 10
    np.testing.assert_allclose(res.log.wait_s, [5.0, 5.0, 3.75, 0.0])
    assert res.policy_stats["barriers"] == 10
    assert staleness_summary(res.log.staleness)["max"] == 0


def test_asp_never_waits_and_applies_every_push_before_the_stop() -> None:
    res = simulate(make_policy("asp"), EXACT, duration=7.6)
    # Worker i pushes every 0.25 * slowdown s; pushes after 7.6 s are answered "stop".
    expected = [int(7.6 // d) for d in (0.25, 0.25, 0.375, 0.75)]
    np.testing.assert_array_equal(res.log.applied, expected)
    np.testing.assert_array_equal(res.log.pushes, np.array(expected) + 1)
    assert res.log.wait_s.sum() == 0.0
    assert res.log.updates == sum(expected)


def test_speed_change_and_stalls_follow_the_timing_model() -> None:
    timing = TimingModel(base_s=0.25, slowdown=(1.0, 1.0), jitter=0.0, change_at=2.0,
                         change_worker=0, change_factor=2.0)
    res = simulate(make_policy("asp"), timing, duration=5.0)
    # Worker 0: 8 iterations of 0.25 s up to 2.0 s, then 0.5 s each: ends 2.5 .. 4.5 (5 more).
    np.testing.assert_array_equal(res.log.applied, [13, 19])
    stalled = TimingModel(base_s=0.25, slowdown=(1.0,), jitter=0.0, stall_prob=1.0, stall_factor=3.0)
    assert stalled.worker(0).next(0.0) == 0.75
    draws = TimingModel(base_s=1.0, slowdown=(1.0,), jitter=0.0, stall_prob=0.05, stall_factor=10.0).worker(0)
    n_stalls = sum(draws.next(0.0) == 10.0 for _ in range(4000))
    assert abs(n_stalls - 200) < 4 * np.sqrt(4000 * 0.05 * 0.95)


def test_timing_model_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="positive"):
        TimingModel(slowdown=(1.0, 0.0))
    with pytest.raises(ValueError, match="stall probability"):
        TimingModel(stall_prob=1.5)
    with pytest.raises(ValueError, match="must be in 0..1"):
        TimingModel(slowdown=(1.0, 1.0), change_worker=2)


def test_bsp_training_matches_gradient_descent_in_closed_form() -> None:
    target = np.array([1.0, -2.0, 3.0])
    w0 = np.zeros(3)
    res = simulate(BSP(), EXACT, duration=100.0, weights=w0, lr=0.1,
                   grad_fn=lambda worker, w: w - target, max_updates=25)
    # Every worker computes on the same weights, so each update is w <- w - lr (w - target).
    np.testing.assert_allclose(res.weights, target + 0.9 ** 25 * (w0 - target), rtol=1e-12)
    assert res.log.updates == 25


def test_asp_training_sees_stale_weights() -> None:
    # Gradient = the version the worker computed on, so the applied values reveal staleness:
    # the final weight is the sum of the versions, which differs from sum(range(updates)).
    seen = []

    def grad(worker: int, w: np.ndarray) -> np.ndarray:
        seen.append(w[0])
        return np.array([-1.0])  # w increases by 1 per update: w = version

    res = simulate(make_policy("asp"), EXACT, duration=3.0, weights=np.zeros(1), lr=1.0, grad_fn=grad)
    assert res.weights[0] == res.log.updates
    stale = res.log.staleness.values()
    assert stale.max() > 0 and stale.min() == 0


def test_simulated_evaluations_are_on_schedule() -> None:
    res = simulate(BSP(), EXACT, duration=2.0, weights=np.zeros(1), lr=0.1,
                   grad_fn=lambda w, x: x - 1.0, eval_fn=lambda w: (float(w[0]), 0.0), eval_every=0.5)
    times = [p[0] for p in res.log.curve]
    assert times == [0.0, 0.5, 1.0, 1.5, 2.0]
    # At 1.0 s one BSP step (at 0.75 s) has been applied: w = 0.1.
    assert res.log.curve[2][1] == pytest.approx(0.1)


def test_thousand_workers_simulate_in_seconds() -> None:
    rng = np.random.default_rng(0)
    timing = TimingModel(base_s=0.01, slowdown=tuple(rng.choice([1.0, 1.5, 3.0], size=1000)), jitter=0.1)
    for name in ("asp", "elastic", "ssp"):
        tic = time.perf_counter()
        res = simulate(make_policy(name, PolicyOptions(R=10)), timing, duration=0.3)
        assert time.perf_counter() - tic < 20
        # Every gradient is applied on arrival, except a last push answered "stop" (ASP: every
        # worker is computing at the stop; the others may be waiting and never push again).
        extra = res.log.pushes - res.log.applied
        assert res.log.updates == res.log.applied.sum() > 1000
        assert set(extra.tolist()) == ({1} if name == "asp" else {0, 1})


class _Stuck(SyncPolicy):
    name = "stuck"

    @classmethod
    def from_options(cls, options):
        return cls()

    def start(self, n_workers, now):
        pass

    def on_push(self, worker, now):
        return Decision(apply=(worker,))


class _Confused(_Stuck):
    def on_push(self, worker, now):
        return Decision(apply=(worker,), release=(worker, (worker + 1) % self.n_workers))


def test_a_policy_that_never_releases_is_reported() -> None:
    with pytest.raises(ProtocolError, match="left every worker waiting"):
        simulate(_Stuck(), EXACT, duration=1.0)


def test_coordinator_rejects_protocol_violations() -> None:
    coord = Coordinator(_Confused(), 2, None, 0.0)
    with pytest.raises(ProtocolError, match="not waiting"):
        coord.push(0, None, 1.0)
    coord = Coordinator(BSP(), 2, None, 0.0)
    coord.push(0, None, 1.0)
    with pytest.raises(ProtocolError, match="should be waiting"):
        coord.push(0, None, 2.0)
    with pytest.raises(ProtocolError, match="unknown worker"):
        coord.push(5, None, 2.0)


def test_a_gradient_of_the_wrong_shape_is_refused_before_anything_changes() -> None:
    coord = Coordinator(make_policy("asp"), 2, np.ones(4, dtype=np.float32), 0.5)
    with pytest.raises(ProtocolError, match=r"gradient of shape \(3,\); the weights have shape \(4,\)"):
        coord.push(0, np.ones(3, dtype=np.float32), 1.0)
    assert coord.log.pushes[0] == 0 and coord.version == 0  # nothing was recorded
    out = coord.push(0, np.ones(4, dtype=np.float32), 1.0)  # ASP: applied from the array itself
    assert out.release == (0,) and coord.weights.tolist() == [0.5] * 4  # 1 - 0.5 * 1, by hand


def test_reaching_max_updates_stops_instead_of_releasing() -> None:
    coord = Coordinator(BSP(), 3, None, 0.0, max_updates=2)
    for w in range(3):
        out = coord.push(w, None, 1.0 + w)
    assert out.release == (0, 1, 2) and not coord.stopping
    coord.push(1, None, 4.0)
    coord.push(0, None, 5.0)
    out = coord.push(2, None, 6.0)  # the second update: everyone is told to stop, not released
    assert out.stop == (0, 1, 2) and out.release == () and coord.finished
    np.testing.assert_allclose(coord.log.wait_s, [2.0 + 1.0, 1.0 + 2.0, 0.0])


def test_staleness_summary_statistics() -> None:
    values = [0, 0, 1, 3, 3, 3, 9]
    s = staleness_summary(values)
    assert s["count"] == 7 and s["max"] == 9 and s["median"] == 3.0
    assert s["mean"] == pytest.approx(np.mean(values))
    assert s["histogram"] == {0: 2, 1: 1, 3: 3, 9: 1}
    assert staleness_summary([]) == {"count": 0}


@pytest.mark.parametrize("seed", range(6))
def test_the_staleness_histogram_summarises_as_numpy_does_on_the_values(seed) -> None:
    """A run log's staleness is a histogram (memory by the largest value, not by the updates):
    its values, count and summary equal numpy's own on the list of every value (the oracle)."""
    from hpcbsp.elastic.runlog import Staleness

    rng = np.random.default_rng(seed)
    values: list[int] = []
    kept = Staleness()
    for _ in range(int(rng.integers(1, 30))):
        batch = rng.integers(0, int(rng.integers(1, 50)), int(rng.integers(0, 40))).tolist()
        kept.extend(batch)
        values += batch
    if not values:
        return
    v = np.array(values)
    assert len(kept) == v.size and kept.values().tolist() == sorted(values)
    s = staleness_summary(kept)
    assert s == staleness_summary(values)
    assert (s["count"], s["max"]) == (v.size, v.max())
    assert (s["mean"], s["median"], s["p95"]) == (float(v.mean()), float(np.median(v)), float(np.percentile(v, 95)))
    with pytest.raises(ValueError):
        kept.extend([-1])


def test_an_asp_push_is_applied_as_lr_times_the_gradient_and_leaves_it_unchanged() -> None:
    # ASP applies a push alone and at once: weights -= lr * g (scaled as it arrives), with the
    # caller's gradient untouched; a server holding weights refuses a push without a gradient.
    # Oracle: numpy's w - fl(lr * g), element by element.
    w0 = np.linspace(-1, 1, 7, dtype=np.float32)
    g = np.arange(7, dtype=np.float32) / 3
    kept = g.copy()
    coord = Coordinator(make_policy("asp"), 2, w0, 0.1)
    coord.push(1, g, 1.0)
    np.testing.assert_array_equal(coord.weights, w0 - np.float32(0.1) * g)
    np.testing.assert_array_equal(g, kept)
    with pytest.raises(ProtocolError, match="pushed no gradient"):
        coord.push(0, None, 2.0)
