"""PyTorch models on the parameter server: the adapter, the wire formats, the CLI (serial part).

Oracles: torch itself (``torch.cat`` of the parameters and of the ``.grad`` of an untouched copy
of the module after a plain ``backward()``; torch's own bfloat16 conversion), and a plain torch
SGD loop on the averaged gradients for the simulated BSP/allreduce runs.  The multi-rank checks
are in ``test_elastic_torch_mpi.py``.
"""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpcbsp.elastic.data import make_teacher
from hpcbsp.elastic.wire import Wire, bfloat16_bits, bfloat16_values

torch = pytest.importorskip("torch", reason="PyTorch is not installed (extra 'torch'; `make install` "
                                             "installs the pinned CPU build)")
from torch import nn  # noqa: E402

from hpcbsp.elastic.policies import make_policy  # noqa: E402
from hpcbsp.elastic.simulator import simulate  # noqa: E402
from hpcbsp.elastic.timing import TimingModel  # noqa: E402
from hpcbsp.elastic.torch import TorchModel, TorchModelError, build_net, make_torch_model  # noqa: E402

pytestmark = pytest.mark.serial_only  # serial tests and their own MPI jobs: run in the serial pass

TRAIN = [sys.executable, "-m", "hpcbsp.apps.elastic.train"]


def _net(name: str = "cnn", seed: int = 0) -> tuple[nn.Module, tuple[int, ...]]:
    torch.manual_seed(seed)
    return build_net(name, 16, 4, hidden=12, depth=2)


def _data(n: int = 120):
    return make_teacher(n_samples=n, n_features=16, n_classes=4, teacher_hidden=8, seed=3)


# ---------------------------------------------------------------- the adapter

@pytest.mark.parametrize("name", ["cnn", "resnet", "student"])
def test_parameters_and_gradients_round_trip_exactly_through_one_flat_buffer(name: str) -> None:
    net, shape = _net(name)
    reference = copy.deepcopy(net)  # untouched: the oracle
    model = TorchModel(net, input_shape=shape, n_features=16, n_classes=4)
    w = model.get_weights()
    assert w.dtype == np.float32 and w.shape == (model.n_params,)
    assert model.n_params == sum(p.numel() for p in reference.parameters())
    np.testing.assert_array_equal(w, torch.cat([p.detach().flatten() for p in reference.parameters()]).numpy())
    # Every parameter and every .grad is a view into the one flat buffer (no per-tensor copies).
    lo, hi = model.flat.data_ptr(), model.flat.data_ptr() + 4 * model.n_params
    assert all(lo <= p.data_ptr() < hi for p in net.parameters())
    # Weights in: exactly these bits reach the module's parameters.
    w2 = np.random.default_rng(1).standard_normal(model.n_params).astype(np.float32)
    model.set_weights(w2)
    np.testing.assert_array_equal(torch.cat([p.detach().flatten() for p in net.parameters()]).numpy(), w2)
    # Gradients out: the same bits as a plain backward() on the untouched copy.
    data = _data()
    X, y = data.X_train[:10], data.y_train[:10]
    g, loss = model.grad(w2, X, y)
    with torch.no_grad():
        for p, v in zip(reference.parameters(),
                        torch.from_numpy(w2).split([p.numel() for p in reference.parameters()])):
            p.copy_(v.view_as(p))
    xt = torch.from_numpy(X.astype(np.float32)).reshape((-1,) + shape)
    ref_loss = nn.functional.cross_entropy(reference(xt), torch.from_numpy(y))
    ref_loss.backward()
    np.testing.assert_array_equal(g, torch.cat([p.grad.flatten() for p in reference.parameters()]).numpy())
    assert loss == pytest.approx(float(ref_loss.detach()), rel=1e-6)
    assert model.packs == 0  # autograd accumulated into the flat buffer's views
    # A second call starts from zero gradients (no accumulation across calls).
    g_again, _ = model.grad(w2, X, y)
    np.testing.assert_array_equal(g_again, torch.cat([p.grad.flatten() for p in reference.parameters()]).numpy())


def test_a_gradient_replaced_by_its_own_tensor_is_packed_into_the_buffer() -> None:
    net, shape = _net("student")
    reference = copy.deepcopy(net)
    model = TorchModel(net, input_shape=shape, n_classes=4)
    first = next(net.parameters())

    data = _data()
    X, y = data.X_train[:8], data.y_train[:8]
    w = model.get_weights()
    # A hook that rebinds .grad to a tensor of its own during backward.
    handle = first.register_post_accumulate_grad_hook(lambda p: setattr(p, "grad", p.grad.clone()))
    g, _ = model.grad(w, X, y)
    handle.remove()
    assert model.packs == 1
    xt = torch.from_numpy(X.astype(np.float32))
    nn.functional.cross_entropy(reference(xt), torch.from_numpy(y)).backward()
    np.testing.assert_array_equal(g, torch.cat([p.grad.flatten() for p in reference.parameters()]).numpy())


def test_init_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    a = make_torch_model("cnn", 16, 4)
    b = make_torch_model("cnn", 16, 4)
    np.testing.assert_array_equal(a.init(5), b.init(5))
    assert not np.array_equal(a.init(5), a.init(6))


def test_bad_modules_and_data_get_one_clear_error() -> None:
    with pytest.raises(TorchModelError, match="has no parameters"):
        TorchModel(nn.ReLU(), n_features=4)

    class IntParam(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(3, dtype=torch.int64), requires_grad=False)
    with pytest.raises(TorchModelError, match=r"parameter 'w' of IntParam is torch.int64, not floating"):
        TorchModel(IntParam(), n_features=3)
    with pytest.raises(TorchModelError, match="buffer '1.running_mean' of Sequential is floating point.*GroupNorm"):
        TorchModel(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), n_features=4)
    with pytest.raises(TorchModelError, match=r"input_shape \(1, 3, 3\) holds 9 values, not n_features = 16"):
        TorchModel(nn.Linear(16, 2), input_shape=(1, 3, 3), n_features=16)
    model = make_torch_model("cnn", 16, 4)
    w = model.init(0)
    X = np.zeros((5, 16))
    with pytest.raises(TorchModelError, match=r"data of shape \(5, 9\): this model takes rows of 16 values"):
        model.grad(w, np.zeros((5, 9)), np.zeros(5, dtype=np.int64))
    with pytest.raises(TorchModelError, match=r"labels of shape \(4,\)"):
        model.grad(w, X, np.zeros(4, dtype=np.int64))
    with pytest.raises(TorchModelError, match="labels must lie in 0..3, got 0..7"):
        model.grad(w, X, np.array([0, 1, 2, 3, 7]))
    with pytest.raises(TorchModelError, match=r"weights of shape \(3,\)"):
        model.grad(np.zeros(3, np.float32), X, np.zeros(5, dtype=np.int64))
    with pytest.raises(TorchModelError, match="takes square images, but the data's rows hold 20 values"):
        make_torch_model("resnet", 20, 4)


def test_evaluate_is_accuracy_and_loss_of_the_outputs() -> None:
    model = make_torch_model("student", 16, 4, hidden=8)
    data = _data()
    w = model.init(2)
    acc, loss = model.evaluate(w, data.X_test, data.y_test)
    net, _ = build_net("student", 16, 4, hidden=8)  # an independent copy, loaded with w
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(torch.from_numpy(w), net.parameters())
        out = net(torch.from_numpy(data.X_test.astype(np.float32)))
    ref_acc = float(np.mean(out.argmax(dim=1).numpy() == data.y_test))
    ref_loss = float(nn.functional.cross_entropy(out, torch.from_numpy(data.y_test)))
    assert acc == ref_acc and loss == pytest.approx(ref_loss)


# ---------------------------------------------------------------- wire formats

def test_bfloat16_encoding_matches_torch_including_ties_and_specials() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([
        rng.standard_normal(20000).astype(np.float32) * np.float32(10.0) ** rng.integers(-30, 30, 20000),
        np.array([0.0, -0.0, np.inf, -np.inf, 1.0, 3.4e38, 1e-40], dtype=np.float32),
        # exact ties: the lower 16 bits are 0x8000 (round half to even)
        (np.arange(1000, dtype=np.uint32) << np.uint32(16) | np.uint32(0x8000)).view(np.float32)[1:],
    ])
    ours = bfloat16_values(bfloat16_bits(x))
    theirs = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    assert np.isnan(bfloat16_values(bfloat16_bits(np.array([np.nan], np.float32))))[0]


@pytest.mark.parametrize("fmt, torch_dtype", [("float16", "float16"), ("bfloat16", "bfloat16"),
                                               ("float32", "float32")])
def test_wire_payloads_carry_rounded_values(fmt: str, torch_dtype: str) -> None:
    wire = Wire(fmt)
    g = np.random.default_rng(1).standard_normal(1001).astype(np.float32)
    payload = wire.alloc(1, g.size)[0]
    assert wire.nbytes(g.size) == 16 + payload.nbytes == 16 + g.size * {"float16": 2, "bfloat16": 2, "float32": 4}[fmt]
    assert wire.encode(g, payload) is payload
    expected = torch.from_numpy(g).to(getattr(torch, torch_dtype)).to(torch.float32).numpy()
    np.testing.assert_array_equal(wire.decode(payload), expected)
    np.testing.assert_array_equal(wire.roundtrip(g), expected)
    # float32 goes as it is (no copy); the 16-bit formats must be encoded
    assert (wire.as_payload(g) is g) == (fmt == "float32")
    assert wire.as_payload(g[::2]) is None and wire.as_payload(g.reshape(7, 143)) is None


# ---------------------------------------------------------------- simulated runs

def _sgd_oracle(net: nn.Module, shape, batches_per_step, lr: float, decay: float = 0.0) -> np.ndarray:
    """Plain torch: per step k, average the workers' gradients, step lr / (1 + decay k)."""
    params = list(net.parameters())
    for k, batches in enumerate(batches_per_step):
        grads = []
        for X, y in batches:
            net.zero_grad()
            xt = torch.from_numpy(X.astype(np.float32)).reshape((-1,) + shape)
            nn.functional.cross_entropy(net(xt), torch.from_numpy(y)).backward()
            grads.append([p.grad.clone() for p in params])
        with torch.no_grad():
            for i, p in enumerate(params):
                p -= lr / (1 + decay * k) * torch.stack([g[i] for g in grads]).mean(dim=0)
    return torch.cat([p.detach().flatten() for p in params]).numpy()


@pytest.mark.parametrize("decay", [0.0, 0.5])
@pytest.mark.parametrize("policy", ["bsp", "allreduce"])
@pytest.mark.parametrize("n_workers", [2, 3])
def test_simulated_bsp_and_allreduce_equal_sgd_on_the_averaged_gradients(policy: str, n_workers: int,
                                                                         decay: float) -> None:
    net, shape = _net("cnn")
    reference = copy.deepcopy(net)
    model = TorchModel(net, input_shape=shape, n_classes=4)
    data = _data()
    steps, lr, batch = 6, 0.3, 8

    def batch_of(worker: int, step: int):
        idx = np.random.default_rng([worker, step]).choice(len(data.y_train), batch, replace=False)
        return data.X_train[idx], data.y_train[idx]

    calls = [0] * n_workers

    def grad_fn(worker: int, weights: np.ndarray) -> np.ndarray:
        X, y = batch_of(worker, calls[worker])
        calls[worker] += 1
        return model.grad(weights, X, y)[0]

    timing = TimingModel(base_s=0.01, slowdown=tuple(1.0 + k for k in range(n_workers)), jitter=0.2, seed=4)
    res = simulate(make_policy(policy), timing, duration=100.0, weights=model.get_weights(), lr=lr,
                   grad_fn=grad_fn, max_updates=steps, lr_decay=decay)
    assert res.log.updates == steps and res.weights.dtype == np.float32
    expected = _sgd_oracle(reference, shape, [[batch_of(k, t) for k in range(n_workers)]
                                              for t in range(steps)], lr, decay)
    np.testing.assert_allclose(res.weights, expected, rtol=2e-5, atol=2e-6)


# ---------------------------------------------------------------- the CLI

def test_cli_trains_a_cnn_on_the_digits_under_every_policy_and_allreduce(tmp_path: Path) -> None:
    pytest.importorskip("sklearn", reason="the digits dataset needs scikit-learn (extra 'digits')")
    out = tmp_path / "out"
    proc = subprocess.run([*TRAIN, "--simulate", "--model", "cnn", "--dataset", "digits", "--policy", "all",
                           "--duration", "1.5", "--eval-every", "0.5", "--lr", "0.1", "--no-plot",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "model cnn: 38,282 float32 parameters" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    labels = [r["policy"] for r in summary["runs"]]
    assert "allreduce" in labels and "bsp" in labels and len(labels) == 7
    assert summary["config"]["model"]["torch_threads"] == 1
    bsp, allreduce = (next(r for r in summary["runs"] if r["policy"] == p) for p in ("bsp", "allreduce"))
    # On the virtual clock the baseline takes BSP's decisions: the same curve.
    assert bsp["final_accuracy"] == allreduce["final_accuracy"] and bsp["updates"] == allreduce["updates"]
    assert max(r["final_accuracy"] for r in summary["runs"]) > 0.5  # it learns (10 classes: chance 0.1)


def test_cli_gradient_compression_changes_only_the_rounding(tmp_path: Path) -> None:
    finals = {}
    for fmt in ("float32", "bfloat16"):
        out = tmp_path / fmt
        subprocess.run([*TRAIN, "--simulate", "--model", "student", "--dataset", "teacher",
                        "--teacher-dim", "16", "--teacher-samples", "400", "--policy", "bsp",
                        "--duration", "1", "--grad-dtype", fmt, "--no-plot", "--out", str(out)],
                       check=True, capture_output=True, timeout=300)
        finals[fmt] = json.loads((out / "summary.json").read_text())["runs"][0]
    a, b = finals["float32"], finals["bfloat16"]
    assert a["updates"] == b["updates"]  # the same schedule
    assert a["final_loss"] != b["final_loss"]  # the rounding acts ...
    assert abs(a["final_loss"] - b["final_loss"]) < 0.05 * a["final_loss"]  # ... and costs little here


@pytest.mark.parametrize("args, message", [
    (["--model", "cnn", "--dataset", "generated"], "--model cnn takes square images, but the data's rows hold 20 values"),
    (["--model", "student", "--depth", "0"], "argument --depth: '0' is not a positive integer"),
    (["--model", "student", "--dataset", "teacher", "--teacher-samples", "5"], "--n 5 is too few samples: at least 20"),
    (["--grad-dtype", "int8"], "argument --grad-dtype: invalid choice"),
    (["--model", "student", "--device", "gpu0"], "--device 'gpu0' is not a torch device"),
])
def test_cli_bad_torch_options_are_one_line_and_status_2(args: list[str], message: str) -> None:
    proc = subprocess.run([*TRAIN, "--simulate", "--duration", "0.5", "--dataset", "generated", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


CUDA = torch.cuda.is_available()
NO_CUDA_REASON = ("torch here has no CUDA device (torch.cuda.is_available() is False: a CPU build, "
                  "or no GPU on this machine); the refusal of --device cuda is tested instead")


@pytest.mark.skipif(CUDA, reason="this torch has CUDA: --device cuda is accepted here (the runs "
                                 "on the GPU are tested below)")
@pytest.mark.parametrize("mpi", [False, True], ids=["simulated", "mpiexec-2"])
def test_device_cuda_without_cuda_is_one_line_and_status_2_before_any_work(tmp_path: Path, mpi: bool) -> None:
    out = tmp_path / "out"  # prepare_dir makes it at the start of the work: it must not exist after
    args = ["--model", "student", "--dataset", "teacher", "--teacher-dim", "16", "--n", "400",
            "--policy", "bsp", "--duration", "0.5", "--device", "cuda", "--out", str(out)]
    if mpi:
        from mpi_helpers import run_mpi

        res = run_mpi(2, ["-m", "hpcbsp.apps.elastic.train", *args], timeout=120)
        code, err = res.returncode, res.program_stderr  # (Open MPI's mpiexec adds a block of its own)
        assert not res.timed_out
    else:
        proc = subprocess.run([*TRAIN, "--simulate", *args], capture_output=True, text=True, timeout=120)
        code, err = proc.returncode, proc.stderr
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err  # once, from rank 0, under mpiexec too
    assert "--device cuda: this torch build sees no CUDA device" in lines[0] and "use --device cpu" in lines[0]
    assert not out.exists()  # refused before any work


def test_device_other_than_cpu_for_a_numpy_model_is_refused() -> None:
    proc = subprocess.run([*TRAIN, "--simulate", "--model", "softmax", "--device", "cuda", "--duration", "0.5"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "--model softmax computes with numpy on the CPU; --device is for the torch models" in proc.stderr


@pytest.mark.skipif(not CUDA, reason=NO_CUDA_REASON)
def test_device_cuda_trains_as_the_cpu_does(tmp_path: Path) -> None:
    """On a GPU: the simulated BSP run on cuda follows the CPU's within float rounding (the
    same schedule, the same updates; the loss agrees to a few per cent), and a real run under
    mpiexec (server + 2 workers, each worker's model on the GPU) trains and says where."""
    from mpi_helpers import run_mpi

    common = ["--model", "student", "--dataset", "teacher", "--teacher-dim", "16", "--n", "400",
              "--policy", "bsp", "--duration", "1", "--no-plot"]
    finals = {}
    for device in ("cpu", "cuda"):
        out = tmp_path / device
        subprocess.run([*TRAIN, "--simulate", *common, "--device", device, "--out", str(out)],
                       check=True, capture_output=True, timeout=300)
        summary = json.loads((out / "summary.json").read_text())
        assert summary["config"]["model"]["device"].startswith(device)
        finals[device] = summary["runs"][0]
    a, b = finals["cpu"], finals["cuda"]
    assert a["updates"] == b["updates"] > 0
    assert abs(a["final_loss"] - b["final_loss"]) < 0.05 * a["final_loss"]
    out = tmp_path / "mpi"
    res = run_mpi(3, ["-m", "hpcbsp.apps.elastic.train", *common, "--policy", "bsp,allreduce",
                      "--device", "cuda", "--slowdown", "1,1", "--out", str(out)], timeout=300)
    assert not res.timed_out and res.returncode == 0, res.output[-2000:]
    assert "device cuda" in res.stdout
    runs = json.loads((out / "summary.json").read_text())["runs"]
    assert {r["policy"] for r in runs} == {"bsp", "allreduce"} and all(r["updates"] > 0 for r in runs)


def test_simulated_torch_run_killed_and_restarted_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    common = [*TRAIN, "--simulate", "--model", "student", "--dataset", "teacher", "--teacher-dim", "16",
              "--teacher-samples", "400", "--policy", "ssp,allreduce", "--duration", "1.5", "--no-plot"]
    ref, out, ck = tmp_path / "ref", tmp_path / "out", tmp_path / "ck"
    subprocess.run([*common, "--out", str(ref)], check=True, capture_output=True, timeout=300)
    args = [*common, "--out", str(out), "--checkpoint", str(ck), "--checkpoint-every", "0.2"]
    dead = subprocess.run([*args, "--die-after-saves", "4"], capture_output=True, text=True, timeout=300)
    assert dead.returncode == -9, dead.stderr
    resumed = subprocess.run([*args, "--restart"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from its checkpoint at" in resumed.stdout
    assert (out / "curves.csv").read_text() == (ref / "curves.csv").read_text()
    assert (out / "pushes.csv").read_text() == (ref / "pushes.csv").read_text()



def test_mpi_torch_run_writes_every_policy_and_the_allreduce_baseline(tmp_path: Path) -> None:
    from mpi_helpers import run_mpi

    out = tmp_path / "out"
    res = run_mpi(3, ["-m", "hpcbsp.apps.elastic.train", "--model", "student", "--dataset", "teacher",
                      "--teacher-dim", "16", "--teacher-samples", "400", "--policy", "bsp,allreduce",
                      "--duration", "1", "--eval-every", "0.2", "--slowdown", "1,2", "--no-plot",
                      "--out", str(out)], timeout=120)
    assert not res.timed_out and res.returncode == 0, res.output[-2000:]
    assert "torch 2." in res.stdout and "1 thread(s) per rank" in res.stdout
    summary = json.loads((out / "summary.json").read_text())
    runs = {r["policy"]: r for r in summary["runs"]}
    assert set(runs) == {"bsp", "allreduce"}
    for r in runs.values():
        assert r["updates"] > 0 and r["staleness"]["max"] == 0 and 0.8 < r["duration_s"] < 3
    # Real compute, the slower worker sleeping its compute once more (--slowdown 1,2).
    assert summary["config"]["model"]["compute"] == "real"


def test_mpi_torch_run_killed_and_restarted_goes_on_from_the_saved_server_state(tmp_path: Path) -> None:
    from mpi_helpers import run_mpi

    from hpcbsp.apps.elastic.resume import CheckpointPlan

    out, ck = tmp_path / "out", tmp_path / "ck"
    args = ["-m", "hpcbsp.apps.elastic.train", "--model", "cnn", "--dataset", "teacher", "--teacher-dim", "16",
            "--teacher-samples", "400", "--policy", "ssp", "--duration", "3", "--eval-every", "0.1",
            "--no-plot", "--out", str(out), "--checkpoint", str(ck), "--checkpoint-every", "0.4"]
    dead = run_mpi(3, [*args, "--die-after-saves", "3"], timeout=90)
    assert not dead.timed_out and dead.returncode != 0
    from mpi4py import MPI

    from hpcbsp.runtime.api.context import BSP
    with BSP(MPI.COMM_SELF) as bsp:
        state = bsp.restore(str(ck / "mpi-ssp-r0"), program="hpcbsp.elastic.train").state
    saved = CheckpointPlan(ck).load(ck / "mpi-ssp-r0", json.loads(state["config"].tobytes().decode()))
    assert not saved["done"] and saved["coord"].weights.dtype == np.float32
    res = run_mpi(3, [*args, "--restart"], timeout=90)
    assert not res.timed_out and res.returncode == 0, res.output[-2000:]
    assert "resumed from its checkpoint at" in res.stdout
    run = json.loads((out / "summary.json").read_text())["runs"][0]
    assert run["resumed_at"] == pytest.approx(saved["elapsed"])
    assert run["updates"] > saved["coord"].log.updates
