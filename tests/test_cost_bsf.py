"""The BSF model: T(K) term by term, a(1) = 1, K_max closed form vs brute-force argmax, hand cases."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcbsp.cost.errors import CostInputError
from hpcbsp.farm.model import BSFModel
from hpcbsp.farm.params import BSFParams
from hpcbsp.farm.terms import plateau_starts


def t_by_hand(p: BSFParams, k: int, comm: str, gran: str) -> float:
    """The BSF iteration time written out term by term (independent of model.basis).

    Linear: K one-by-one exchanges of 2L + t_c.  Tree: the binomial tree over K + 1 ranks has
    D = bit_length(K) = ⌈log2(K + 1)⌉ levels; 2·D supersteps of L per worker, the order down D
    levels and K results into the master (φ the order's share of t_c).
    """
    length = p.list_length
    share = (math.ceil(length / k) if gran == "ceil" else length / k)  # elements on the slowest worker
    if comm == "linear":
        exchange = k * (2 * p.latency + p.t_c)
    else:
        levels = int(k).bit_length()
        exchange = 2 * levels * k * p.latency + (p.order_share * levels + (1 - p.order_share) * k) * p.t_c
    return (exchange + p.t_0 + p.t_map * share / length + (share - 1) * p.t_a
            + (k - 1) * p.t_a + p.t_p)


params_st = st.builds(
    BSFParams,
    latency=st.floats(1e-7, 1e-3), t_c=st.floats(1e-7, 1e-2), t_map=st.floats(1e-3, 10.0),
    t_a=st.floats(0.0, 1e-5), t_p=st.floats(0.0, 1e-2), list_length=st.integers(1, 5000),
    t_0=st.floats(-1e-4, 1e-3), order_share=st.floats(0.0, 1.0))


@given(params_st, st.sampled_from(["linear", "tree"]), st.sampled_from(["continuous", "ceil"]))
@settings(max_examples=60, deadline=None)
def test_time_matches_the_formula_and_speedup_at_one_is_one(p, comm, gran):
    model = BSFModel(p, comm, gran)
    ks = [1, 2, 3, 7, 16, min(p.list_length, 100)]
    np.testing.assert_allclose(model.time(ks), [t_by_hand(p, k, comm, gran) for k in ks], rtol=1e-12)
    assert model.speedup([1])[0] == 1.0  # exactly
    np.testing.assert_allclose(model.efficiency(ks), model.speedup(ks) / np.array(ks), rtol=1e-15)


@given(params_st, st.sampled_from(["linear", "tree"]))
@settings(max_examples=60, deadline=None)
def test_closed_form_equals_brute_force_argmax(p, comm):
    model = BSFModel(p, comm, "continuous")
    limit = 100_000
    brute_k = np.arange(1, min(limit, p.list_length) + 1)
    brute_t = np.array([t_by_hand(p, int(k), comm, "continuous") for k in brute_k]) if brute_k.size < 3000 \
        else model.time(brute_k)
    best = int(brute_k[np.argmin(brute_t)])
    expected = None if best == brute_k[-1] and brute_k.size > 1 else best
    closed = model.k_max_closed(limit)
    numeric = model.k_max_numeric(limit)
    assert numeric == expected
    if closed != numeric:
        # Only a floating tie between floor and ceil of K_BSF may separate them.
        assert closed is not None and numeric is not None and abs(closed - numeric) == 1
        t = model.time([closed, numeric])
        assert abs(t[0] - t[1]) <= 1e-12 * t[1]


@given(params_st, st.sampled_from(["linear", "tree"]))
@settings(max_examples=40, deadline=None)
def test_ceil_argmax_equals_search_over_every_k(p, comm):
    model = BSFModel(p, comm, "ceil")
    k = np.arange(1, p.list_length + 1)
    t = np.array([t_by_hand(p, int(kk), comm, "ceil") for kk in k]) if k.size < 3000 else model.time(k)
    best = int(k[np.argmin(t)])
    assert model.k_max_numeric() == (None if best == p.list_length and p.list_length > 1 else best)


def test_plateau_starts_are_the_first_k_of_each_ceil_value():
    for length in (1, 2, 7, 10, 97, 1000, 4099):
        k = np.arange(1, length + 1)
        values = np.ceil(length / k)
        firsts = k[np.r_[True, values[1:] != values[:-1]]]
        starts = plateau_starts(length, length)
        assert set(firsts) <= set(starts)
        assert set(np.ceil(length / starts)) == set(values)


def test_hand_computed_linear_case():
    # T(K) = K + 100/K (exchange 1 s, t_Map 100 s): K_max = 10, a(10) = 101/20.
    model = BSFModel(BSFParams(0.0, 1.0, 100.0, 0.0, 0.0, 100))
    assert model.k_bsf() == pytest.approx(10.0)
    assert model.k_max_closed() == model.k_max_numeric() == 10
    assert model.speedup([10])[0] == pytest.approx(101 / 20)
    assert model.efficiency([10])[0] == pytest.approx(101 / 200)


def test_hand_computed_tree_case():
    # L = 0, t_c = 1, φ = 0.5, t_Map = 100: T(K) = 0.5·D + 0.5·K + 100/K with D = ⌈log2(K + 1)⌉:
    # T(13) = 2 + 6.5 + 7.692308 = 16.192308 (D = 4), T(14) = 2 + 7 + 7.142857 = 16.142857,
    # T(15) = 2 + 7.5 + 6.666667 = 16.166667, T(16) = 2.5 + 8 + 6.25 = 16.75 (D = 5): K_max = 14.
    model = BSFModel(BSFParams(0.0, 1.0, 100.0, 0.0, 0.0, 1000), comm="tree")
    np.testing.assert_allclose(model.time([13, 14, 15, 16]), [16.192308, 16.142857, 16.166667, 16.75], atol=1e-6)
    assert model.k_max() == model.k_max_closed() == model.k_max_numeric() == 14
    assert model.k_bsf() == 14.0
    # With L = 0.01 each of the 2·D supersteps costs 0.01 per worker, 2·4·K·0.01 at D = 4:
    # T(12) = 0.96 + 2 + 6 + 8.333333 = 17.293333, T(13) = 1.04 + 16.192308 = 17.232308,
    # T(14) = 1.12 + 16.142857 = 17.262857: K_max = 13.
    slow = BSFModel(BSFParams(0.01, 1.0, 100.0, 0.0, 0.0, 1000), comm="tree")
    np.testing.assert_allclose(slow.time([12, 13, 14]), [17.293333, 17.232308, 17.262857], atol=1e-6)
    assert slow.k_max() == 13


def test_t_0_shifts_time_not_the_linear_boundary():
    # t_0 = -0.5 per iteration: T(K) = K + 100/K - 0.5, the boundary stays sqrt(100/1) = 10.
    base = BSFParams(0.0, 1.0, 100.0, 0.0, 0.0, 100)
    model = BSFModel(BSFParams(0.0, 1.0, 100.0, 0.0, 0.0, 100, t_0=-0.5))
    np.testing.assert_allclose(model.time([1, 10]), [100.5, 19.5], rtol=1e-12)
    assert model.k_bsf() == pytest.approx(10.0) and model.k_max() == BSFModel(base).k_max() == 10
    assert model.speedup([10])[0] == pytest.approx(100.5 / 19.5)


def test_note_table_values():
    # The worked cases of shared/notes/bsf.md §5.6 B (computed there with numpy over K = 1..1e5).
    cases = [((1e-5, 1e-4, 1.0, 1e-5, 1e-3, 1000), 88.1432, 88, 42.311),
             ((2e-5, 5e-4, 10.0, 1e-6, 0.0, 10000), 136.0249, 136, 68.017),
             ((1.5e-6, 2e-5, 0.05, 2e-7, 1e-4, 100000), 54.9294, 55, 26.478)]
    for values, k_bsf, k_int, a_max in cases:
        model = BSFModel(BSFParams(*values))
        assert model.k_bsf() == pytest.approx(k_bsf, abs=1e-4)
        assert model.k_max_closed() == model.k_max_numeric() == k_int
        assert model.speedup([k_int])[0] == pytest.approx(a_max, abs=1e-3)


def test_usl_equivalence():
    p = BSFParams(1e-5, 1e-4, 1.0, 1e-5, 1e-3, 1000)
    agg = BSFModel(p).aggregate()
    t1 = agg["A"] + agg["B"] + agg["C"]
    kappa, sigma = agg["A"] / t1, (agg["A"] + agg["C"]) / t1
    assert math.sqrt((1 - sigma) / kappa) == pytest.approx(BSFModel(p).k_bsf())
    k = np.arange(1, 200)
    usl = k / (1 + sigma * (k - 1) + kappa * k * (k - 1))
    np.testing.assert_allclose(BSFModel(p).speedup(k), usl, rtol=1e-12)


def test_no_communication_means_no_turnover():
    model = BSFModel(BSFParams(0.0, 0.0, 1.0, 0.0, 1e-3, None))
    assert model.k_bsf() is None
    assert model.k_max() is None and model.k_max_numeric(10_000) is None
    # Amdahl's law with serial part t_p.
    assert model.speedup([100])[0] == pytest.approx(1.001 / (0.01 + 1e-3))


def test_k_beyond_list_length_is_not_a_boundary():
    # K_BSF = sqrt(1000/1e-6) is far past l = 50: the speedup still rises at K = l.
    model = BSFModel(BSFParams(0.0, 1e-6, 1000.0, 0.0, 0.0, 50))
    assert model.k_max_closed() is None and model.k_max_numeric() is None


@pytest.mark.parametrize("kwargs, message", [
    ({"latency": -1.0}, "latency"),
    ({"t_map": float("nan")}, "t_map"),
    ({"list_length": 0}, "list_length must be an integer >= 1"),
    ({"t_a": 1e-6, "list_length": None}, "list length"),
])
def test_bad_parameters_are_refused(kwargs, message):
    values = {"latency": 0.0, "t_c": 1e-3, "t_map": 1.0, "t_a": 0.0, "t_p": 0.0, "list_length": 10, **kwargs}
    with pytest.raises(CostInputError, match=message):
        BSFParams(**values)


def test_bad_forms_are_refused():
    p = BSFParams(0.0, 1e-3, 1.0, 0.0, 0.0, None)
    with pytest.raises(CostInputError, match="ceil"):
        BSFModel(p, granularity="ceil")
    with pytest.raises(CostInputError, match="communication"):
        BSFModel(p, comm="ring")
