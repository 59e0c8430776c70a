"""Synchronisation policies: registry, options, and each policy's invariant on recorded decisions."""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.elastic.policies import (
    BSP,
    DSSP,
    REGISTRY,
    SSP,
    Backup,
    Decision,
    ElasticBSP,
    PolicyError,
    PolicyOptions,
    SyncPolicy,
    make_policy,
)
from hpcbsp.elastic.policies.dssp import extra_iterations
from hpcbsp.elastic.simulator import simulate
from hpcbsp.elastic.timing import TimingModel

pytestmark = pytest.mark.serial_only

NOISY = TimingModel(base_s=0.01, slowdown=(1.0, 1.0, 2.0, 5.0), jitter=0.3, seed=3)


class Recorded:
    """Wraps a policy; keeps every (worker, time, decision) the server received."""

    def __init__(self, policy: SyncPolicy):
        self.policy = policy
        self.events: list[tuple[int, float, Decision]] = []
        inner = policy.on_push

        def on_push(worker: int, now: float) -> Decision:
            decision = inner(worker, now)
            self.events.append((worker, now, decision))
            return decision

        policy.on_push = on_push  # type: ignore[method-assign]


def _run(policy: SyncPolicy, timing: TimingModel = NOISY, duration: float = 2.0) -> tuple[Recorded, object]:
    rec = Recorded(policy)
    result = simulate(policy, timing, duration=duration)
    return rec, result


def _replay_counts(events, n):
    """Yield (counts after the push, decision) along the recorded run."""
    counts = np.zeros(n, dtype=np.int64)
    for worker, _, decision in events:
        counts[worker] += 1
        yield counts, decision


# --- registry and options -------------------------------------------------------------------

def test_registry_has_the_six_policies_and_the_allreduce_baseline_by_name() -> None:
    assert set(REGISTRY) == {"bsp", "asp", "ssp", "dssp", "elastic", "backup", "allreduce"}
    for name in REGISTRY:
        assert make_policy(name).name == name


def test_unknown_policy_name_is_a_clear_error() -> None:
    with pytest.raises(PolicyError, match=r"unknown policy 'elasticbsp'; choose from: bsp, asp"):
        make_policy("elasticbsp")


@pytest.mark.parametrize("kwargs, message", [
    ({"R": 0}, "R must be at least 1"),
    ({"s_lower": 5, "s_upper": 2}, "s_L must not exceed s_U"),
    ({"s": -1}, "s must be at least 0"),
    ({"backup": -1}, "backup workers must be at least 0"),
    ({"window": 0}, "window must be at least 1"),
])
def test_bad_options_are_rejected(kwargs: dict, message: str) -> None:
    with pytest.raises(PolicyError, match=message):
        PolicyOptions(**kwargs)


def test_backup_needs_fewer_backups_than_workers() -> None:
    with pytest.raises(PolicyError, match="must be fewer than the 2 workers"):
        Backup(2).reset(2, 0.0)


def test_options_reach_the_policies() -> None:
    opts = PolicyOptions(R=7, s=2, s_lower=1, s_upper=4, backup=3)
    assert make_policy("elastic", opts).describe() == "elastic(R=7)"
    assert make_policy("ssp", opts).describe() == "ssp(s=2)"
    assert make_policy("dssp", opts).describe() == "dssp(s_L=1,s_U=4)"
    assert make_policy("backup", opts).describe() == "backup(b=3)"


# --- BSP and ASP by hand ----------------------------------------------------------------------

def test_bsp_releases_everyone_once_all_have_pushed() -> None:
    p = BSP()
    p.reset(3, 0.0)
    assert p.on_push(2, 1.0) == Decision()
    assert p.on_push(0, 2.0) == Decision()
    assert p.on_push(1, 3.0) == Decision(apply=(0, 1, 2), release=(0, 1, 2))
    assert p.on_push(1, 4.0) == Decision()


def test_asp_applies_and_releases_each_push() -> None:
    p = make_policy("asp")
    p.reset(4, 0.0)
    assert p.on_push(3, 0.5) == Decision(apply=(3,), release=(3,))


# --- SSP ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("s", [0, 1, 3])
def test_ssp_never_releases_a_worker_more_than_s_ahead(s: int) -> None:
    rec, _ = _run(SSP(s))
    gaps = []
    for counts, decision in _replay_counts(rec.events, 4):
        assert len(decision.apply) == 1  # every gradient applied on arrival
        gaps.extend(counts[w] - counts.min() for w in decision.release)
    assert len(gaps) > 100
    # The bound holds, and binds: workers 5x faster than the slowest run right up to it.
    assert max(gaps) == s


def test_ssp_zero_releases_exactly_like_bsp() -> None:
    timing = TimingModel(base_s=0.01, slowdown=(1.0, 1.5, 4.0), jitter=0.2, seed=9)
    ssp, _ = _run(SSP(0), timing)
    bsp, _ = _run(BSP(), timing)
    assert [(w, t, set(d.release)) for w, t, d in ssp.events] == \
           [(w, t, set(d.release)) for w, t, d in bsp.events]


# --- backup workers -------------------------------------------------------------------------

def test_backup_zero_is_bsp() -> None:
    a, _ = _run(Backup(0))
    b, _ = _run(BSP())
    assert [(w, t, d) for w, t, d in a.events] == [(w, t, d) for w, t, d in b.events]


def test_backup_applies_exactly_n_minus_b_gradients_per_step_and_drops_late_ones() -> None:
    rec, result = _run(Backup(1))
    steps = [d for _, _, d in rec.events if d.apply]
    assert steps and all(len(d.apply) == 3 for d in steps)
    assert all(d.release == d.apply for d in steps)
    # Every dropped push is answered at once (the worker restarts on fresh weights).
    drops = [(w, d) for w, _, d in rec.events if d.drop]
    assert all(d.drop == (w,) and d.release == (w,) for w, d in drops)
    # The 5x-slower worker is late for every step after the first: none of its gradients count
    # (the lognormal jitter cannot make it beat three workers at least 2.5x faster).
    log = result.log
    assert log.applied[3] <= 1 and log.dropped[3] >= log.pushes[3] - 2
    assert log.applied.sum() == 3 * len(steps)


# --- DSSP -------------------------------------------------------------------------------------

@pytest.mark.parametrize("s_lower, s_upper", [(0, 4), (1, 6), (3, 15)])
def test_dssp_releases_within_s_upper_and_grants_extra_iterations(s_lower: int, s_upper: int) -> None:
    policy = DSSP(s_lower, s_upper)
    rec, _ = _run(policy)
    over_lower = 0
    for counts, decision in _replay_counts(rec.events, 4):
        for w in decision.release:
            gap = counts[w] - counts.min()
            assert gap <= s_upper
            over_lower += gap > s_lower
    assert policy.stats["grants"] > 0 and over_lower > 0


def test_dssp_with_equal_bounds_is_ssp() -> None:
    a, _ = _run(DSSP(2, 2))
    b, _ = _run(SSP(2))
    assert [(w, t, d) for w, t, d in a.events] == [(w, t, d) for w, t, d in b.events]


def test_dssp_controller_picks_the_closest_pair_by_brute_force() -> None:
    rng = np.random.default_rng(5)
    for _ in range(300):
        now, i_fast = rng.uniform(0, 10), rng.uniform(0.1, 2.0)
        slow_start, i_slow = now - rng.uniform(0, 3), rng.uniform(1.0, 8.0)
        r_cap = int(rng.integers(1, 12))
        fast = now + np.arange(r_cap + 1) * i_fast
        slow = slow_start + np.arange(1, r_cap + 2) * i_slow
        gaps = np.abs(fast[:, None] - slow[None, :]).min(axis=1)
        assert extra_iterations(now, i_fast, slow_start, i_slow, r_cap) == int(np.argmin(gaps))


def test_dssp_controller_by_hand_and_without_history() -> None:
    # Fast worker pushes at 5.4 every 2 s; the slow one started at 3.4 and takes 3.4 s:
    # fast 5.4, 7.4, 9.4, 11.4, 13.4 | slow 6.8, 10.2, 13.6, ... -> closest 13.4 vs 13.6: r* = 4.
    assert extra_iterations(5.4, 2.0, 3.4, 3.4, 5) == 4
    assert extra_iterations(5.4, float("nan"), 3.4, 3.4, 5) == 0
    assert extra_iterations(5.4, 2.0, 3.4, 3.4, 0) == 0


# --- ElasticBSP -------------------------------------------------------------------------------

def test_elastic_supersteps_follow_zipline_and_release_everyone_together() -> None:
    R = 6
    policy = ElasticBSP(R)
    rec, _ = _run(policy)
    n = 4
    since_barrier = np.zeros(n, dtype=np.int64)
    waiting = np.zeros(n, dtype=bool)
    barriers = 0
    for worker, _, decision in rec.events:
        since_barrier[worker] += 1
        waiting[worker] = True
        assert decision.apply == (worker,)
        if len(decision.release) == n:
            assert waiting.all()  # a barrier: everyone had arrived
            assert np.all(since_barrier <= R)
            since_barrier[:] = 0
            barriers += 1
        else:
            assert decision.release in ((), (worker,))
        waiting[list(decision.release)] = False
    assert barriers == policy.stats["barriers"] > 3


def test_elastic_on_exact_rates_runs_3_3_2_1_iterations_without_waiting() -> None:
    timing = TimingModel(base_s=0.25, slowdown=(1.0, 1.0, 1.5, 3.0), jitter=0.0)
    policy = ElasticBSP(10)
    rec, result = _run(policy, timing, duration=7.6)
    np.testing.assert_array_equal(policy.last_counts, [3, 3, 2, 1])
    # Only the first (monitoring) barrier at 0.75 s makes anyone wait: 0.5, 0.5, 0.375, 0.
    np.testing.assert_allclose(result.log.wait_s, [0.5, 0.5, 0.375, 0.0], atol=1e-12)
    assert policy.stats["mean_predicted_spread"] == 0.0


def test_intervals_exclude_waiting_and_ignore_a_single_stall() -> None:
    from hpcbsp.elastic.policies.intervals import IntervalTracker

    tr = IntervalTracker(2, window=3, now=0.0)
    for start, end in [(0.0, 1.0), (5.0, 6.0), (6.0, 16.0)]:  # held 1..5; then a 10 s stall
        tr.released(0, start)
        tr.pushed(0, end)
    assert tr.estimate(0) == 1.0  # median of 1, 1, 10 (a mean would say 4)
    assert np.isnan(tr.estimate(1)) and not tr.known(1)
    latest = IntervalTracker(1, window=1, now=0.0)
    latest.pushed(0, 2.0)
    latest.released(0, 2.0)
    latest.pushed(0, 5.0)
    assert latest.estimate(0) == 3.0
    np.testing.assert_array_equal(tr.estimate(), [1.0, np.nan])
