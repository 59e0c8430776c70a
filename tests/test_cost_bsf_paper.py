"""farm/model.py against the BSF cost metric, with every expected value worked out by hand.

Oracles (no value below comes from hpcbsp's own code; each is arithmetic written out here):

* the list-based cost metric of Sokolinsky's BSF papers (JPDC 149 (2021), arXiv 2008.03485) as
  the skeleton's Algorithm 2 executes it: T_1 = 2L + t_c + t_Map + (l − 1)·t_a + t_p and
  T_K = K·(2L + t_c) + t_Map/K + (l/K − 1)·t_a + (K − 1)·t_a + t_p, speedup a = T_1/T_K,
  efficiency e = a/K, boundary K_BSF = sqrt((t_Map + l·t_a)/(2L + t_c + t_a));
* the farm's tree form (this project's, not the paper's): D = ⌈log2(K + 1)⌉ levels, 2·D·K
  latencies, φ·D + (1 − φ)·K transfers (tests/test_cost_bsf.py checks it by hand);
* Ezhova's BSF simulator (github.com/ezhova-nadezhda/BSF-simulator, mpiapp.cpp), whose 2017
  formula is printed verbatim by its code: T_K = K·(L + t_s) + t_w/K + K·L + t_r + t_p.

The body of the JPDC paper could not be retrieved where this was written (only its abstract),
so its equation numbers and its published parameter values are not checked here; see
/work/shared/notes/bsf.md §5.7 and docs/performance.md.
"""
from __future__ import annotations

import pytest

from hpcbsp.farm.model import BSFModel
from hpcbsp.farm.params import BSFParams

# L = 1 ms, t_c = 2 ms, t_Map = 0.5 s, t_a = 0.1 ms, t_p = 4 ms, l = 100.
LINEAR = BSFParams(latency=1e-3, t_c=2e-3, t_map=0.5, t_a=1e-4, t_p=4e-3, list_length=100)


def test_linear_iteration_time_by_hand():
    # T_1 = 2L + t_c + t_Map + (l − 1)·t_a + t_p = 0.002 + 0.002 + 0.5 + 99·0.0001 + 0.004 = 0.5179
    # T_5 = 5·0.004 + 0.5/5 + (100/5 − 1)·0.0001 + (5 − 1)·0.0001 + 0.004
    #     = 0.02 + 0.1 + 0.0019 + 0.0004 + 0.004 = 0.1263
    t = BSFModel(LINEAR).time([1, 5])
    assert t[0] == pytest.approx(0.5179, rel=1e-12)
    assert t[1] == pytest.approx(0.1263, rel=1e-12)


def test_linear_boundary_speedup_and_efficiency_by_hand():
    model = BSFModel(LINEAR)
    # K_BSF = sqrt((t_Map + l·t_a)/(2L + t_c + t_a)) = sqrt(0.51/0.0041) = sqrt(124.390...) = 11.15304
    assert model.k_bsf() == pytest.approx(11.15304, abs=1e-5)
    # T = A·K + B/K + C with A = 0.0041, B = 0.51, C = t_p − 2·t_a = 0.0038:
    # T_11 = 0.0451 + 0.046364 + 0.0038 = 0.095264;  T_12 = 0.0492 + 0.0425 + 0.0038 = 0.0955  → K_max = 11
    assert model.k_max() == 11
    # a(11) = 0.5179/0.0952636 = 5.43649;  e(11) = 5.43649/11 = 0.494227
    assert model.speedup([11])[0] == pytest.approx(5.43649, abs=1e-5)
    assert model.efficiency([11])[0] == pytest.approx(0.494227, abs=1e-6)


def test_ceil_share_by_hand():
    # K = 3, l = 100: the slowest worker holds ⌈100/3⌉ = 34 elements:
    # T = 3·0.004 + 0.5·34/100 + (34 − 1)·0.0001 + (3 − 1)·0.0001 + 0.004
    #   = 0.012 + 0.17 + 0.0033 + 0.0002 + 0.004 = 0.1895
    assert BSFModel(LINEAR, granularity="ceil").time([3])[0] == pytest.approx(0.1895, rel=1e-12)


def test_tree_with_the_paper_parameters_by_hand():
    # The farm's tree with LINEAR's parameters (φ = 0.5): D(5) = ⌈log2 6⌉ = 3 levels,
    # T_5 = 2·3·5·0.001 + (0.5·3 + 0.5·5)·0.002 + 0.5/5 + (20 − 1)·0.0001 + 4·0.0001 + 0.004
    #     = 0.03 + 0.008 + 0.1 + 0.0019 + 0.0004 + 0.004 = 0.1443;  T_1 equals the linear T_1.
    t = BSFModel(LINEAR, comm="tree").time([1, 5])
    assert t[0] == pytest.approx(0.5179, rel=1e-12)
    assert t[1] == pytest.approx(0.1443, rel=1e-12)


def test_ezhova_simulator_formula_by_hand():
    # BSF-simulator: T_K = K·(L + t_s) + t_w/K + K·L + t_r + t_p with its defaults L = 2e-5 s,
    # t_w = 1 s, t_p = 0.1 s, and t_s = 1e-3 s, t_r = 0.  It is the linear form with t_c = t_s,
    # t_Map = t_w, t_a = 0 and t_p + t_r for t_p:
    # K_max = sqrt(t_w/(2L + t_s)) = sqrt(1/0.00104) = sqrt(961.538) = 31.0087
    # T_31 = 31·0.00104 + 1/31 + 0.1 = 0.03224 + 0.0322581 + 0.1 = 0.1644981
    # T_1 = 0.00104 + 1 + 0.1 = 1.10104;  a(31) = 1.10104/0.1644981 = 6.69333
    model = BSFModel(BSFParams(latency=2e-5, t_c=1e-3, t_map=1.0, t_a=0.0, t_p=0.1, list_length=None))
    assert model.k_bsf() == pytest.approx(31.0087, abs=1e-4)
    assert model.k_max() == 31
    assert model.time([31])[0] == pytest.approx(0.1644981, abs=1e-7)
    assert model.speedup([31])[0] == pytest.approx(6.69333, abs=1e-5)
