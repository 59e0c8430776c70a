"""Every consumer of the BSF model computes the same T(K) from the same parameters.

The model has one home, :mod:`hpcbsp.farm.model`.  Its consumers are the farm's own timings
(parameters out of measured iterations), the white-box model of one run (``model_from_farm``,
the demo's path), the calibration's model (``model_from_reports``, the bench's and
``hpcbsp-cost calibrate``'s path), the prediction document (``predict --json``), and the command
line (``hpcbsp-cost bsf`` and ``hpcbsp-cost predict``).  The oracle is the BSF iteration time
written out term by term here, for the ceil split the farm uses:

    T(K) = λ(K)·L + v(K)·t_c + t_0 + t_Map·⌈l/K⌉/l + (⌈l/K⌉ − 1)·t_a + (K − 1)·t_a + t_p

with λ = 2K, v = K (linear) and, for the binomial tree over K + 1 ranks with D = bit_length(K)
levels, λ = 2·D·K, v = φ·D + (1 − φ)·K.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from hpcbsp.cost.calibrate import model_from_reports
from hpcbsp.cost.farmmodel import model_from_farm
from hpcbsp.cost.modelfile import save_model
from hpcbsp.cost.predict import prediction
from hpcbsp.farm.model import BSFModel
from hpcbsp.farm.params import BSFParams
from hpcbsp.farm.timings import summarise

P = BSFParams(latency=3e-5, t_c=4e-4, t_map=0.05, t_a=2e-7, t_p=6e-5, list_length=200, order_share=0.4)
#: With a constant per iteration, which only a calibration over several K can tell from t_c.
P0 = replace(P, t_0=-2e-4)
WORKERS = [1, 2, 3, 5, 8, 13, 21, 34, 55]


def oracle(k: int, comm: str, p: BSFParams = P) -> float:
    """T(K) by hand, ceil split (see the module docstring)."""
    length = p.list_length
    assert length
    share = math.ceil(length / k)
    if comm == "linear":
        exchange = k * (2 * p.latency + p.t_c)
    else:
        levels = k.bit_length()
        exchange = 2 * levels * k * p.latency + (p.order_share * levels + (1 - p.order_share) * k) * p.t_c
    return (exchange + p.t_0 + p.t_map * share / length + (share - 1) * p.t_a
            + (k - 1) * p.t_a + p.t_p)


def farm_report(k: int, comm: str, iterations: int = 6, p: BSFParams = P) -> dict:
    """A farm report whose iterations follow the oracle exactly (what the skeleton would record)."""
    length = p.list_length
    assert length
    samples = {"seconds": [oracle(k, comm, p)] * iterations, "map_s": [p.t_map] * iterations,
               "fold_s": [(length - k) * p.t_a] * iterations, "master_fold_s": [(k - 1) * p.t_a] * iterations,
               "compute_s": [p.t_p] * iterations}
    t = summarise(samples, workers=k, list_length=length, iterations=iterations, total_s=1.0,
                  superstep_s=k * p.latency, exchange=comm, order_share=p.order_share)
    return {**t.as_dict(), "nprocs": k + 1}


def expected(comm: str, p: BSFParams = P) -> np.ndarray:
    return np.array([oracle(k, comm, p) for k in WORKERS])


@pytest.mark.parametrize("comm", ["linear", "tree"])
def test_the_model_itself(comm):
    np.testing.assert_allclose(BSFModel(P, comm, "ceil").time(WORKERS), expected(comm), rtol=1e-12)


@pytest.mark.parametrize("comm", ["linear", "tree"])
@pytest.mark.parametrize("k", [2, 3])
def test_the_farm_timings_give_back_the_parameters(comm, k):
    got = BSFParams.from_dict(farm_report(k, comm))
    for name in ("t_c", "t_map", "t_a", "t_p"):
        assert getattr(got, name) == pytest.approx(getattr(P, name), rel=1e-9), name


@pytest.mark.parametrize("comm", ["linear", "tree"])
def test_one_run_model_and_its_prediction(comm):
    cm = model_from_farm(farm_report(3, comm), n_boot=0, granularity="ceil")
    assert cm.model.comm == comm
    np.testing.assert_allclose(cm.model.time(WORKERS), expected(comm), rtol=1e-9)
    doc = prediction(cm, WORKERS)
    np.testing.assert_allclose([pt["seconds"] for pt in doc["points"]], expected(comm), rtol=1e-9)


@pytest.mark.parametrize("comm", ["linear", "tree"])
def test_calibration_model_from_reports(comm):
    ks = [1, 2, 3]
    by_k = {k: [farm_report(k, comm)] for k in ks}
    cm, method, components = model_from_reports(by_k, P.list_length, n_boot=0)
    for model in (cm.model, components.model):
        assert model.comm == comm
        np.testing.assert_allclose(BSFModel(model.params, comm, "ceil").time(WORKERS), expected(comm),
                                   rtol=1e-6, err_msg=method)


@pytest.mark.parametrize("comm", ["linear", "tree"])
def test_calibration_over_several_k_separates_t_0_from_t_c(comm):
    # Runs at K = 1, 2, 3 of a program with t_0 = -0.2 ms: the line through the exchange's
    # medians gives t_c and t_0 back; one K alone cannot (t_0 = 0, and T(55) is missed).
    by_k = {k: [farm_report(k, comm, p=P0), farm_report(k, comm, p=P0)] for k in (1, 2, 3)}
    cm, _, components = model_from_reports(by_k, P0.list_length, n_boot=0)
    assert (cm.model.params.t_c, cm.model.params.t_0) == pytest.approx((P0.t_c, P0.t_0), rel=1e-6)
    np.testing.assert_allclose(BSFModel(cm.model.params, comm, "ceil").time(WORKERS), expected(comm, P0), rtol=1e-6)
    assert components.model.params.t_0 == 0.0
    far = BSFModel(components.model.params, comm, "ceil").time([55])[0]
    assert abs(far - oracle(55, comm, P0)) > 1e-3 * oracle(55, comm, P0)


@pytest.mark.parametrize("comm", ["linear", "tree"])
def test_a_disturbed_run_does_not_move_the_line(comm):
    # One of the two runs at K = 2 had every iteration 0.3 s slower (a busy machine): interference
    # only adds time, so the least run median at each K is taken and the model is unchanged.
    by_k = {k: [farm_report(k, comm, p=P0), farm_report(k, comm, p=P0)] for k in (1, 2, 3)}
    slow = farm_report(2, comm, p=P0)
    slow["samples"] = {**slow["samples"], "seconds": [t + 0.3 for t in slow["samples"]["seconds"]]}
    by_k[2][1] = slow
    cm, _, _ = model_from_reports(by_k, P0.list_length, n_boot=0)
    assert (cm.model.params.t_c, cm.model.params.t_0) == pytest.approx((P0.t_c, P0.t_0), rel=1e-6)


def _cli(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "hpcbsp.cli.cost", *args, "--json"], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("comm", ["linear", "tree"])
def test_the_command_lines(comm, tmp_path):
    workers = ",".join(map(str, WORKERS))
    doc = _cli("bsf", "--latency", repr(P.latency), "--t-c", repr(P.t_c), "--t-map", repr(P.t_map),
               "--t-a", repr(P.t_a), "--t-p", repr(P.t_p), "--list-length", str(P.list_length),
               "--order-share", repr(P.order_share),
               "--comm", comm, "--granularity", "ceil", "--workers", workers)
    points = doc["points"] if "points" in doc else doc["prediction"]["points"]
    np.testing.assert_allclose([pt["seconds"] for pt in points], expected(comm), rtol=1e-9)
    cm = model_from_farm(farm_report(2, comm), n_boot=0, granularity="ceil")
    path = tmp_path / "MODEL.json"
    save_model(str(path), cm)
    doc = _cli("predict", str(path), "--workers", workers)
    np.testing.assert_allclose([pt["seconds"] for pt in doc["points"]], expected(comm), rtol=1e-9)
