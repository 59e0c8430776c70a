"""The BSP probe (mpiexec -n 2 and -n 3): full h-relations as the ledger counts them, and its profile."""
from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

import hpcbsp
from hpcbsp.cost.errors import CostInputError
from hpcbsp.cost.probe import fit_line, probe
from hpcbsp.cost.profile import profile_from_dict

mpi = pytest.mark.mpi(min_size=2)


@mpi
def test_probe_h_relations_and_profile():
    with hpcbsp.BSP() as bsp:
        profile = probe(bsp, max_h=12, repeats=2, max_block_words=512)
        words = [(r.bytes_out, r.bytes_in, r.msgs_out, r.msgs_in) for r in bsp.ledger if r.label == "probe:words"]
        blocks = [(r.bytes_out, r.bytes_in, r.msgs_out) for r in bsp.ledger if r.label == "probe:blocks"]
        local = [(r.bytes_out, r.bytes_in, r.msgs_out, r.records) for r in bsp.ledger if r.label == "probe:local"]
        p = bsp.nprocs
    # The local syncs: one word put to the rank itself, nothing between ranks.
    assert local == [(0, 0, 0, 1)] * 3  # warm-up + 2 repeats
    # Every rank sends and receives exactly h single words: a full h-relation (bspbench).
    hs = sorted({int(h) for h in np.linspace(p, 12, 8)})
    expected_words = [(8 * h, 8 * h, h, h) for h in hs for _ in range(3)]  # warm-up + 2 repeats
    assert sorted(words) == sorted(expected_words)
    assert all(out == inn and msgs == p - 1 for out, inn, msgs in blocks)
    if MPI.COMM_WORLD.Get_rank() != 0:
        assert profile is None
        return
    prof = profile_from_dict(profile)
    assert prof.nprocs == p and prof.r_flops > 0 and prof.l_empty > 0 and prof.l_local is not None and prof.l_local > 0
    assert [r.name for r in prof.regimes] == ["words", "blocks"]
    assert all(r.g >= 0 for r in prof.regimes)
    assert profile["regimes"][0]["h_bytes"] == [8.0 * h for h in hs]


def test_fit_line_recovers_a_line():
    h = np.array([8.0, 80.0, 800.0, 8000.0])
    g, l = fit_line(h, 3e-5 + 2e-9 * h)
    assert g == pytest.approx(2e-9) and l == pytest.approx(3e-5)
    g, l = fit_line(h, np.array([5.0, 4.0, 3.0, 2.0]))  # falling times: noise, not a negative g
    # the constant with the least relative squared error: sum(1/t) / sum(1/t^2), by hand
    assert g == 0.0 and l == pytest.approx((1/5 + 1/4 + 1/3 + 1/2) / (1/25 + 1/16 + 1/9 + 1/4))


def test_fit_line_weighs_every_size_alike():
    # A line through small h, and a largest block 3x slower than that line says: an absolute fit
    # lets that one point pull l far up; the relative fit keeps the small sizes within 20 %
    # (oracle: the line the small points lie on, by hand).
    h = np.array([512.0, 2048.0, 8192.0, 32768.0, 131072.0, 1048576.0])
    t = 2e-5 + 1e-9 * h
    t[-1] *= 3
    g, l = fit_line(h, t)
    assert np.all(np.abs((l + g * h[:-1]) - t[:-1]) / t[:-1] < 0.2)
    design = np.column_stack([h, np.ones_like(h)])
    g_abs, l_abs = np.linalg.lstsq(design, t, rcond=None)[0]  # the absolute fit, for contrast
    assert abs((l_abs + g_abs * h[0]) / t[0] - 1) > 1  # off by more than 100 %


def test_probe_refuses_one_rank():
    if MPI.COMM_WORLD.Get_size() != 1:
        pytest.skip("checks the one-rank refusal")
    with pytest.raises(CostInputError, match="at least 2 ranks"):
        hpcbsp.run(probe, max_h=4, repeats=1)
