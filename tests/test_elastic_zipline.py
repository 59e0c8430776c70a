"""ZipLine against brute force (all R**n sets) and against the textbook heap solver."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from hpcbsp.bench import zipline as bench_zipline
from hpcbsp.elastic.zipline import SyncSet, predict_end_times, zipline
from hpcbsp.elastic.zipline_reference import brute_force, heap_smallest_range

pytestmark = pytest.mark.serial_only


def _random_instance(rng: np.random.Generator, n: int, R: int, integer: bool) -> np.ndarray:
    if integer:  # few distinct values: many ties within and across rows
        return np.sort(rng.integers(0, 3 * R, size=(n, R)).astype(np.float64), axis=1)
    start = rng.uniform(0.0, 5.0, size=(n, 1))
    return start + np.cumsum(rng.uniform(0.1, 4.0, size=(n, R)), axis=1)


def _spread_of(m: np.ndarray, counts: np.ndarray) -> float:
    chosen = m[np.arange(m.shape[0]), counts - 1]
    return float(chosen.max() - chosen.min())


@pytest.mark.parametrize("integer", [False, True], ids=["real", "integer-ties"])
def test_zipline_equals_brute_force_on_small_random_instances(integer: bool) -> None:
    rng = np.random.default_rng(6 + integer)
    for _ in range(400):
        n, R = int(rng.integers(1, 5)), int(rng.integers(1, 6))
        m = _random_instance(rng, n, R, integer)
        got, want = zipline(m), brute_force(m)
        assert got.spread == want.spread
        assert got.barrier == want.barrier
        np.testing.assert_array_equal(got.counts, want.counts)


def test_zipline_matches_heap_solver_on_large_instances() -> None:
    rng = np.random.default_rng(11)
    for n, R in [(200, 30), (57, 101), (600, 12)]:
        m = _random_instance(rng, n, R, integer=False)
        got, ref = zipline(m), heap_smallest_range(m)
        assert got.spread == pytest.approx(ref.spread, abs=0.0)
        assert _spread_of(m, got.counts) == got.spread
        assert got.barrier == m[np.arange(n), got.counts - 1].max()
        assert np.all((got.counts >= 1) & (got.counts <= R))


def test_canonical_set_takes_the_earliest_barrier_and_the_most_iterations() -> None:
    # Hand-made: spread 1 is reachable at barrier 4 ({3,4}) and at barrier 8 ({7,8}); the
    # earliest wins. Row 0 also has 3.5 <= 4, so it runs 2 iterations (3 and 3.5 both fit).
    m = np.array([[3.0, 3.5, 7.0], [4.0, 8.0, 12.0]])
    got = zipline(m)
    assert (got.spread, got.barrier) == (0.5, 4.0)
    np.testing.assert_array_equal(got.counts, [2, 1])
    np.testing.assert_array_equal(got.waits(m), [0.5, 0.0])


def test_constant_rates_align_at_their_least_common_multiple() -> None:
    # Intervals 20, 20, 30, 60 from a common start meet exactly at 60: counts 3, 3, 2, 1.
    m = predict_end_times(np.zeros(4), [20.0, 20.0, 30.0, 60.0], R=10)
    got = zipline(m)
    assert got.spread == 0.0 and got.barrier == 60.0
    np.testing.assert_array_equal(got.counts, [3, 3, 2, 1])


def test_identical_rows_synchronise_after_one_iteration() -> None:
    m = np.tile(np.arange(1.0, 9.0), (50, 1))
    got = zipline(m)
    assert got.spread == 0.0 and got.barrier == 1.0
    assert np.all(got.counts == 1)


def test_single_worker_and_single_column() -> None:
    got = zipline([[2.0, 5.0, 9.0]])
    assert (got.spread, got.barrier, got.counts.tolist()) == (0.0, 2.0, [1])
    col = np.array([[4.0], [1.0], [2.5]])
    got = zipline(col)
    assert got.spread == 3.0 and got.barrier == 4.0
    np.testing.assert_array_equal(got.counts, [1, 1, 1])


def test_predict_end_times_is_start_plus_multiples_of_the_interval() -> None:
    m = predict_end_times([1.0, 10.0], [2.0, 0.5], R=3)
    np.testing.assert_array_equal(m, [[3.0, 5.0, 7.0], [10.5, 11.0, 11.5]])
    with pytest.raises(ValueError, match="R must be at least 1"):
        predict_end_times([0.0], [1.0], R=0)


@pytest.mark.parametrize("bad, message", [
    (np.zeros((0, 3)), "n >= 1"),
    (np.zeros((2, 0)), "R >= 1"),
    (np.array([[1.0, np.nan]]), "finite"),
    (np.array([[2.0, 1.0]]), "non-decreasing"),
    (np.zeros(4), "n x R"),
])
def test_bad_matrices_are_rejected(bad: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        zipline(bad)


def test_brute_force_oracle_checks_every_set() -> None:
    # The oracle itself, on a case small enough to enumerate by hand in the test.
    m = np.array([[0.0, 10.0], [4.0, 11.0], [9.0, 12.0]])
    spreads = {c: _spread_of(m, np.array(c)) for c in itertools.product([1, 2], repeat=3)}
    assert min(spreads.values()) == 2.0  # {10, 11, 9} (barrier 11) and {10, 11, 12} (barrier 12)
    for solver in (brute_force, zipline):
        got = solver(m)
        assert isinstance(got, SyncSet)
        assert (got.spread, got.barrier, got.counts.tolist()) == (2.0, 11.0, [2, 2, 1])


def test_benchmark_quick_run_checks_spreads(capsys: pytest.CaptureFixture[str]) -> None:
    status = bench_zipline.main(["--n", "20,40", "--R", "5", "--repeats", "1"])
    out = capsys.readouterr().out
    assert status == 0
    assert out.count(" yes") == 6  # 2 sizes x 3 cases, spreads equal to the heap solver's


def test_benchmark_bad_option_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        bench_zipline.main(["--n", "0"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "at least 1" in err[0]
