"""``hpcbsp-cost suggest``: the worker count whose runs narrow the K_max interval most per second.

Oracles: a model of two bootstrap replicates whose K_max (10 and 20) and T(K) are worked out by
hand, so that the width after a measurement is 10 (both replicates stay) or 0 (one is ruled out);
the same case's expected width integrated on a fine grid of the noise (numpy), independent of the
strata the module uses; ``np.percentile``'s order statistics for the interval with equal weights;
and a simulated farm (the BSF model with 5 % noise per run) whose true K_max is the closed form.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from hpcbsp.cli.cost import main
from hpcbsp.cost.errors import CostInputError
from hpcbsp.cost.fit import fit_runs
from hpcbsp.cost.modelfile import CalibratedModel, save_model
from hpcbsp.cost.runs import Runs
from hpcbsp.cost.suggest import expected_widths, suggest, weighted_interval
from hpcbsp.farm.model import BSFModel
from hpcbsp.farm.params import BSFParams

# T_b(K) = A_b·K + 1/K: A = 0.01 gives K_max = sqrt(1/0.01) = 10, A = 0.0025 gives 20.
POINT = BSFModel(BSFParams(0.0, 0.005, 1.0, 0.0, 0.0, None))
TWO = CalibratedModel(POINT, np.array([[0.01, 1.0, 0.0, 0.0], [0.0025, 1.0, 0.0, 0.0]]), "hand",
                      {"iterations_per_run": 10})


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_two_replicates_by_hand():
    # K = 1: T = 1.01 or 1.0025 (0.75 % apart) under 5 % noise: neither replicate is ruled out, the
    # width stays 20 - 10.  K = 20: T = 0.25 or 0.1: the measurement tells them apart, width 0.
    lo, hi, width, now = expected_widths(TWO, np.array([1.0, 20.0]), noise=0.05, repeats=1, cap=1000.0)
    assert now == 10.0
    assert width[0] == 10.0 and (lo[0], hi[0]) == (10.0, 20.0)
    assert width[1] == pytest.approx(0.0, abs=1e-9)
    doc = suggest(TWO, noise=0.05, repeats=2, workers=[1, 5, 20])
    assert doc["k"] == 20 and doc["width_now"] == 10.0 and doc["interval_now"] == [10, 20]
    # Its cost: T(20) of the point model (0.005·20 + 1/20 = 0.15 s) x 10 iterations x 2 runs.
    assert doc["cost_s"] == pytest.approx(0.15 * 10 * 2)


def test_expected_width_matches_a_fine_integral():
    """At K = 5 (T = 0.25 or 0.2125, 16 % apart) with 6 % noise a measurement sometimes rules a
    replicate out: the width is 10 x P(both keep >= 2.5 % of the weight), integrated here on a
    grid of 200,001 noise values, each replicate the truth half of the time."""
    k, sigma = 5.0, 0.06
    t = np.array([0.01 * k + 1 / k, 0.0025 * k + 1 / k])
    eps = np.linspace(-8, 8, 200_001)
    density = np.exp(-eps ** 2 / 2) / np.sqrt(2 * np.pi) * (eps[1] - eps[0])
    kept = 0.0
    for truth in (0, 1):
        y = t[truth] * (1 + sigma * eps)
        lik = np.exp(-0.5 * ((y[:, None] - t) / (sigma * t)) ** 2) / (sigma * t)
        w = lik / lik.sum(axis=1, keepdims=True)
        kept += 0.5 * float(density @ (w.min(axis=1) >= 0.025))
    _, _, width, _ = expected_widths(TWO, np.array([k]), noise=sigma, repeats=1, cap=1000.0)
    assert 1.0 < 10 * kept < 9.0  # a case between the two extremes
    # 16 strata per truth: each edge of the kept region misplaces at most one stratum (1/16).
    assert width[0] == pytest.approx(10 * kept, abs=10 * 2 / 16)


@pytest.mark.parametrize("n", [2, 37, 200])
def test_equal_weights_give_the_models_own_interval(n):
    values = np.random.default_rng(n).integers(1, 60, n).astype(float)
    lo, hi = weighted_interval(values, np.ones(n))
    assert (lo, hi) == (np.percentile(values, 2.5, method="lower"), np.percentile(values, 97.5, method="higher"))


def test_the_budget_leaves_out_costlier_runs():
    # Two runs of 10 iterations: K = 1 costs 1.005 s x 20 = 20.1 s, K = 5 0.225 s x 20 = 4.5 s,
    # K = 20 0.15 s x 20 = 3 s; within 2 s none fits, and the message names the cheapest.
    with pytest.raises(CostInputError, match=r"no run fits --budget 2 s: the cheapest, K = 20, takes ~3 s per run"):
        suggest(TWO, noise=0.05, repeats=2, workers=[1, 5, 20], budget=2.0)
    # One run: K = 5 costs 2.25 s, K = 20 1.5 s; a budget of 2 s leaves K = 20 only.
    doc = suggest(TWO, noise=0.10, repeats=1, workers=[5, 20], budget=2.0)
    assert doc["k"] == 20 and doc["cost_s"] == pytest.approx(1.5)
    assert [c["within_budget"] for c in doc["candidates"]] == [False, True]


def test_no_turnover_explores_the_largest_affordable_k():
    flat = CalibratedModel(BSFModel(BSFParams(0.0, 0.0, 1.0, 0.0, 0.01, None)),
                           np.array([[0.0, 1.0, 0.0, 0.01], [0.0, 0.9, 0.0, 0.012]]), "hand", {})
    doc = suggest(flat, noise=0.05, max_workers=64)
    assert doc["explore"] and doc["k"] == 64 and doc["interval_now"] == [None, None]


def test_cli_suggest_text_and_json(tmp_path, capsys):
    path = tmp_path / "MODEL.json"
    save_model(path, TWO)
    code, out, err = run_cli(capsys, "suggest", str(path), "--noise", "0.05", "--max-workers", "20")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].startswith("measure next: K = ")
    assert lines[1].startswith("K_max 95% interval now [10, 20] (width 10); expected after 2 runs at K = ")
    code, out, _ = run_cli(capsys, "suggest", str(path), "--noise", "0.05", "--max-workers", "20", "--json")
    doc = json.loads(out)
    assert code == 0 and lines[0] == f"measure next: K = {doc['k']}" and doc["width_after"] < 1.0


@pytest.mark.parametrize("argv,message", [
    (["--budget", "-1"], "argument --budget: a time must be"),
    (["--budget", "0"], "argument --budget: a time must be > 0"),
    (["--noise", "2"], "argument --noise:"),
])
def test_bad_arguments_exit_2(tmp_path, capsys, argv, message):
    path = tmp_path / "MODEL.json"
    save_model(path, TWO)
    code, out, err = run_cli(capsys, "suggest", str(path), *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize("content,message", [
    (None, "cannot read model file"),
    ('{"format": 3', "is not valid JSON"),
    ('{"format": "x"}', "is not an hpcbsp BSF model"),
    ("NOBOOT", "has no bootstrap replicates"),
])
def test_bad_model_files_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "MODEL.json"
    if content == "NOBOOT":
        save_model(path, CalibratedModel(POINT))
    elif content is not None:
        path.write_text(content)
    code, out, err = run_cli(capsys, "suggest", str(path))
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and message in err, err


# -- a simulated farm: suggest against a doubling sweep ---------------------------------------------

FARM = BSFModel(BSFParams(0.0, 0.002, 3.0, 0.0, 0.01, None))  # K_max = sqrt(3/0.002) = 38.7 -> 39
NOISE = 0.05


def _runs_to_neighbourhood(seed: int, strategy: str, limit: int = 6) -> int | None:
    """Runs (2 repeats each) after K = 1, 2, 3 until the fitted K_max is within 20 % of the truth."""
    rng = np.random.default_rng(seed)
    rows: list[tuple[int, float]] = []

    def measure(k: int) -> None:
        rows.extend((k, float(FARM.time([k])[0] * (1 + NOISE * rng.standard_normal()))) for _ in range(2))

    for k in (1, 2, 3):
        measure(k)
    nxt = 4
    for n in range(limit + 1):
        cm = fit_runs(Runs.from_arrays(*zip(*rows)), n_boot=100, seed=0)
        found = cm.model.k_max()
        if found is not None and abs(found - FARM.k_max()) <= 0.2 * FARM.k_max():
            return n
        if strategy == "suggest":
            k = suggest(cm, repeats=2, max_workers=256)["k"]
        else:
            k, nxt = min(nxt, 256), nxt * 2
        measure(k)
    return None


@pytest.mark.slow
def test_suggested_runs_reach_k_max_sooner_than_doubling():
    """Measured on this simulated farm (8 seeds, numbers in docs/cost-models.md): suggest needed
    1-2 runs, doubling 2-8 (median 6).  Here 4 seeds: suggest's worst is at most 2 runs and its
    total is less than half of doubling's (a doubling sweep that never gets there counts 7)."""
    assert FARM.k_max() == 39
    found = {s: [_runs_to_neighbourhood(seed, s) for seed in range(4)] for s in ("suggest", "double")}
    count = {s: [7 if n is None else n for n in v] for s, v in found.items()}
    assert max(count["suggest"]) <= 2, found
    assert 2 * sum(count["suggest"]) < sum(count["double"]), found
