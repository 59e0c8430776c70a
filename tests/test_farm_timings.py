"""From a farm run's per-iteration measurements to BSF parameters (and back to T)."""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.cost.errors import CostInputError
from hpcbsp.cost.farmmodel import model_from_farm
from hpcbsp.farm.model import BSFModel
from hpcbsp.farm.params import BSFParams
from hpcbsp.farm.timings import per_iteration_params, summarise


def synthetic_samples(p: BSFParams, k: int, iterations: int, noise: float = 0.0, seed: int = 0):
    """What a farm would record if its iterations followed the model exactly (ceil split)."""
    rng = np.random.default_rng(seed)
    jitter = 1.0 + noise * rng.standard_normal(iterations)
    length = p.list_length
    t = BSFModel(p, "linear", "ceil").time([k])[0] * jitter
    folds_workers = (length - k) * p.t_a  # Σ_j (m_j − 1) ⊕ on the workers
    return {"seconds": t.tolist(), "map_s": [p.t_map] * iterations, "fold_s": [folds_workers] * iterations,
            "master_fold_s": [(k - 1) * p.t_a] * iterations, "compute_s": [p.t_p] * iterations}


@pytest.mark.parametrize("k, length", [(1, 100), (3, 100), (7, 50)])
def test_exact_iterations_give_back_the_parameters(k, length):
    p = BSFParams(latency=2e-5, t_c=3e-4, t_map=0.02, t_a=1e-7, t_p=5e-5, list_length=length)
    samples = synthetic_samples(p, k, 10)
    per = per_iteration_params({kk: np.asarray(v) for kk, v in samples.items()}, k, length, p.latency)
    np.testing.assert_allclose(per["exchange"], 2 * p.latency + p.t_c, rtol=1e-9)
    np.testing.assert_allclose(per["t_a"], p.t_a, rtol=1e-9)
    t = summarise(samples, workers=k, list_length=length, iterations=10, total_s=1.0, superstep_s=k * p.latency)
    assert (t.t_c, t.t_map, t.t_p) == pytest.approx((p.t_c, p.t_map, p.t_p), rel=1e-9)
    # The model from these parameters reproduces the measured T at the measured K.
    model = model_from_farm(t.as_dict(), n_boot=0, granularity="ceil").model
    assert model.time([k])[0] == pytest.approx(t.seconds_per_iteration, rel=1e-9)


@pytest.mark.parametrize("k", [1, 3])
def test_a_disturbed_latency_measurement_is_held_to_what_the_iterations_exchanged(k):
    # The one-byte supersteps timed for L were disturbed: they say 5 times the true L, more than
    # the iterations' whole exchange 2K·L + K·t_c.  Then L is that exchange / 2K (by hand:
    # (2K·L + K·t_c) / 2K = L + t_c / 2), t_c is 0, and the model still gives the measured T at K.
    p = BSFParams(latency=2e-5, t_c=1e-5, t_map=0.02, t_a=1e-7, t_p=5e-5, list_length=100)
    samples = synthetic_samples(p, k, 9)
    t = summarise(samples, workers=k, list_length=100, iterations=9, total_s=1.0, superstep_s=5 * k * p.latency)
    assert t.superstep_s == 5 * k * p.latency
    assert t.latency == pytest.approx(p.latency + p.t_c / 2, rel=1e-9) and t.t_c == 0.0
    model = model_from_farm(t.as_dict(), n_boot=0, granularity="ceil").model
    assert model.time([k])[0] == pytest.approx(t.seconds_per_iteration, rel=1e-9)
    # An undisturbed measurement is taken as it is.
    assert summarise(samples, workers=k, list_length=100, iterations=9, total_s=1.0,
                     superstep_s=k * p.latency).latency == pytest.approx(p.latency, rel=1e-12)


def test_time_below_the_work_clips_the_exchange_at_zero():
    p = BSFParams(latency=1e-5, t_c=0.0, t_map=0.01, t_a=0.0, t_p=0.0, list_length=10)
    samples = synthetic_samples(p, 2, 4)
    samples["seconds"] = [0.001] * 4  # less than the Map alone: clock noise
    per = per_iteration_params({k: np.asarray(v) for k, v in samples.items()}, 2, 10, p.latency)
    assert (per["t_c"] == 0).all() and (per["exchange"] == 2 * p.latency).all()


def test_bootstrap_over_iterations_brackets_the_point_estimate():
    p = BSFParams(latency=2e-5, t_c=3e-4, t_map=0.02, t_a=1e-7, t_p=5e-5, list_length=1000)
    samples = synthetic_samples(p, 1, 40, noise=0.05, seed=4)
    t = summarise(samples, workers=1, list_length=1000, iterations=40, total_s=1.0, superstep_s=p.latency)
    cm = model_from_farm(t.as_dict(), n_boot=100, seed=1)
    lo, hi = cm.k_max_interval()
    assert lo is not None and hi is not None and lo <= cm.model.k_max() <= hi
    assert cm.boot_coefficients.shape == (100, 4)


def test_malformed_report():
    with pytest.raises(CostInputError, match="not a farm report"):
        model_from_farm({"workers": 1})


def test_spread_band_spans_what_single_iterations_measured():
    # Half the iterations see an exchange of 2L + t_c = 1.2e-4 s, half (a busy machine) 1.2e-3 s.
    # By hand (linear, t_a = t_p = 0, t_Map = 0.1 s, K = 1):
    #   quiet: K_BSF = sqrt(0.1/1.2e-4) = 28.87; T(28) = 0.0069314 > T(29) = 0.0069283 → K_max 29
    #   busy:  K_BSF = sqrt(0.1/1.2e-3) = 9.129;  T(9) = 0.021911 < T(10) = 0.022   → K_max 9
    p = BSFParams(latency=1e-5, t_c=1e-4, t_map=0.1, t_a=0.0, t_p=0.0, list_length=100)
    samples = synthetic_samples(p, 1, 20)
    samples["seconds"] = [t + (1.08e-3 if i % 2 else 0.0) for i, t in enumerate(samples["seconds"])]
    t = summarise(samples, workers=1, list_length=100, iterations=20, total_s=1.0, superstep_s=p.latency)
    spread = model_from_farm(t.as_dict(), n_boot=400, seed=3, spread=True)
    assert spread.k_max_interval() == (9, 29)
    assert spread.boot_method == "single iterations (spread)"
    # Iterations that agree give no spread at all.
    calm = summarise(synthetic_samples(p, 1, 20), workers=1, list_length=100, iterations=20, total_s=1.0,
                     superstep_s=p.latency)
    assert model_from_farm(calm.as_dict(), n_boot=100, spread=True).k_max_interval() == (29, 29)


@pytest.mark.parametrize("limit, iterations", [(8, 5), (8, 8), (8, 100), (2, 33), (4096, 3000), (16, 10_000)])
def test_the_samples_stay_bounded_and_evenly_spread(limit, iterations):
    """``Samples`` keeps at most ``limit`` iterations, and they are exactly the iterations that are
    multiples of its stride (the oracle: the full list filtered by hand), the stride the smallest
    power of two that keeps their number below the limit; every iteration while there are fewer."""
    from hpcbsp.farm.timings import SAMPLE_FIELDS, Samples

    samples = Samples(limit)
    rows = [tuple(float(i * 10 + k) for k in range(len(SAMPLE_FIELDS))) for i in range(iterations)]
    for row in rows:
        samples.add(*row)
    stride = 1
    while -(-iterations // stride) >= limit:  # kept count ceil(n / stride) must stay below the limit
        stride *= 2
    assert samples.seen == iterations and samples.stride == stride
    for k, name in enumerate(SAMPLE_FIELDS):
        assert samples.columns[name] == [row[k] for i, row in enumerate(rows) if i % stride == 0]
    assert len(samples.columns["seconds"]) < limit
    if iterations < limit:
        assert samples.columns["seconds"] == [row[0] for row in rows]
