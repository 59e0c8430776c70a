"""Parallel radix-2 FFT (hpcbsp.apps.fft) against numpy.fft.fft.

The local radix-2 kernel is checked against numpy for every power-of-two length up to 2^12 and
along any axis; the parallel transform at 1-4 ranks (on 3 ranks it runs on 2 and says so); the
ledger against the hand-computed h-relation of the one redistribution superstep.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from mpi_helpers import run_mpi

import hpcbsp
from hpcbsp.apps.fft import ParallelFFT, bit_reverse_permutation, fft_radix2, random_signal, usable_ranks
from hpcbsp.runtime.api.partition import Cyclic

mpi = pytest.mark.mpi(min_size=2)


def test_bit_reversal_by_hand():
    assert bit_reverse_permutation(8).tolist() == [0, 4, 2, 6, 1, 5, 3, 7]
    assert bit_reverse_permutation(1).tolist() == [0]
    assert sorted(bit_reverse_permutation(64).tolist()) == list(range(64))


@pytest.mark.parametrize("m", range(13))
def test_radix2_kernel_is_numpys_fft(m):
    x = random_signal(2 ** m, seed=m)
    want = np.fft.fft(x)
    np.testing.assert_allclose(fft_radix2(x), want, rtol=0, atol=1e-12 * max(1, np.abs(want).max()) * (m + 1))


def test_radix2_kernel_batches_along_an_axis():
    x = random_signal(8 * 5 * 3, seed=1).reshape(8, 5, 3)
    np.testing.assert_allclose(fft_radix2(x, axis=0), np.fft.fft(x, axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(fft_radix2(x.transpose(1, 2, 0)), np.fft.fft(x.transpose(1, 2, 0)), atol=1e-12)
    with pytest.raises(ValueError, match="length 6 is not a power of two"):
        fft_radix2(np.ones(6))


def test_usable_ranks():
    assert [usable_ranks(16, q) for q in (1, 2, 3, 4, 5, 8)] == [1, 2, 2, 4, 4, 4]
    assert usable_ranks(8, 4) == 2 and usable_ranks(2, 4) == 1 and usable_ranks(1 << 20, 1000) == 512


def transform(bsp, n, seed):
    """Run on the usable ranks as the app does; returns (sub-context or None, this rank's y, oracle)."""
    p = usable_ranks(n, bsp.nprocs)
    sub = bsp.split(0 if bsp.pid < p else None) if p < bsp.nprocs else bsp
    if sub is None:
        return None, None, None
    x = random_signal(n, seed)
    mine = Cyclic(n, p).global_indices(sub.pid)
    y = ParallelFFT(sub, n)(x[mine])
    return sub, y, np.fft.fft(x)[mine]


@pytest.mark.parametrize("n", [1, 2, 4, 64, 1024])
def test_one_rank(n):
    with hpcbsp.BSP() as bsp:
        _, y, want = transform(bsp, n, seed=n)
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-10)
        assert [r.label for r in bsp.ledger] == ["fft:redistribute"]
        assert bsp.ledger[0].bytes_out == bsp.ledger[0].bytes_in == 0   # all to itself


@mpi
@pytest.mark.parametrize("n", [4, 16, 32, 256, 4096])
def test_several_ranks_match_numpy_and_ledger(n):
    with hpcbsp.BSP() as bsp:
        sub, y, want = transform(bsp, n, seed=n + 3)
        if sub is None:
            assert len(bsp.ledger) == 1 and bsp.ledger[0].label == "split"   # an idle rank
            return
        np.testing.assert_allclose(y, want, rtol=0, atol=1e-10)
        p = sub.nprocs
        (rec,) = [r for r in sub.ledger]
        # h-relation: (p-1) n/p^2 complex values of 16 bytes out of and into every rank
        assert rec.label == "fft:redistribute"
        assert rec.bytes_out == rec.bytes_in == 16 * (p - 1) * n // (p * p)
        assert rec.msgs_out == rec.msgs_in == p - 1
        if sub is not bsp:
            sub.close()


def test_bad_size_for_the_ranks():
    with hpcbsp.BSP() as bsp:
        with pytest.raises(ValueError, match="powers of two with p\\^2 <= n, got n = 12"):
            ParallelFFT(bsp, 12)
        with pytest.raises(ValueError, match=r"cyclic part of shape \(3,\), expected \(8,\)"):
            ParallelFFT(bsp, 8)(np.ones(3))


def test_ledger_hand_computed_and_cost_model(tmp_path):
    """n = 16 on 2 ranks: rank s keeps Z_s[k1] for k1 = s (mod 2) and puts the other 4 values
    (64 bytes, one message) to the other rank, in each of the 3 transforms."""
    ledger = tmp_path / "fft.json"
    res = run_mpi(2, ["-m", "hpcbsp.apps.fft", "--n", "16", "--repeats", "3", "--ledger", str(ledger)],
                  timeout=120)
    assert res.returncode == 0, res.output
    assert "fft: n = 16 on 2 rank(s), 3 transform(s)" in res.stdout and "OK" in res.stdout
    records = json.loads(ledger.read_text())["records"]
    assert [(r["rank"], r["label"], r["bytes_out"], r["bytes_in"], r["msgs_out"], r["msgs_in"])
            for r in records] == [(q, "fft:redistribute", 64, 64, 1, 1) for q in (0, 1) for _ in range(3)]


def test_command_line_three_and_four_ranks_and_bad_input():
    res = run_mpi(3, ["-m", "hpcbsp.apps.fft", "--n", "64"], timeout=120)
    assert res.returncode == 0, res.output
    assert "running on 2 of 3 ranks" in res.stdout and "OK" in res.stdout
    res = run_mpi(4, ["-m", "hpcbsp.apps.fft"], timeout=180)
    assert res.returncode == 0, res.output
    assert "fft: n = 1024 on 4 rank(s)" in res.stdout and "OK" in res.stdout
    for args, words in ((["--n", "12"], "--n must be a power of two >= 2"),
                        (["--repeats", "0"], "argument --repeats: '0' is not a positive integer"),
                        (["--repeat", "0"], "argument --repeat: '0' is not a positive integer"),  # the old spelling
                        (["--ledger", "out.txt"], ".json or .csv")):
        bad = run_mpi(1, ["-m", "hpcbsp.apps.fft", *args], timeout=60)
        assert bad.returncode == 2 and "Traceback" not in bad.output, bad.output
        assert words in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_json_is_the_only_output_and_matches_the_run():
    """--json --quiet: stdout is one JSON object, and what it says is the run's (3 ranks: the FFT
    runs on the largest power of two p with p^2 <= n, 2; the old spelling --repeat still works)."""
    res = run_mpi(3, ["-m", "hpcbsp.apps.fft", "--n", "32", "--repeat", "2", "--json", "--quiet"], timeout=120)
    assert res.returncode == 0, res.output
    assert len(res.stdout.strip().splitlines()) == 1, res.stdout
    out = json.loads(res.stdout)
    assert (out["n"], out["ranks"], out["ranks_used"], out["transforms"], out["ok"]) == (32, 3, 2, 2, True)
    rng = np.random.default_rng(0)                       # the app's signal for --seed 0, drawn here
    x = rng.standard_normal(32) + 1j * rng.standard_normal(32)
    assert out["max_abs"] == pytest.approx(float(np.max(np.abs(np.fft.fft(x)))), rel=1e-12)
    assert 0 <= out["max_error"] <= 1e-12 * out["max_abs"] * 5
