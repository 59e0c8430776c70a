"""Checkpoint and restart of the training example.

Oracle: the uninterrupted run.  A simulated run that is stopped (or SIGKILLed) and resumed must
end with exactly its bits, for every policy; a real MPI run, which depends on wall-clock timing,
must go on from its saved server state for the rest of its duration.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections import defaultdict, deque
from pathlib import Path

import numpy as np
import pytest
from mpi_helpers import run_mpi

from hpcbsp.apps.elastic.experiment import TrainConfig, run_simulated
from hpcbsp.apps.elastic.resume import CheckpointError, CheckpointPlan
from hpcbsp.elastic.data import load_dataset
from hpcbsp.elastic.models import make_model
from hpcbsp.elastic.policies import REGISTRY, PolicyOptions, make_policy
from hpcbsp.elastic.simulator import Simulation
from hpcbsp.elastic.snapshot import SnapshotError, decode, encode
from hpcbsp.elastic.timing import TimingModel

pytestmark = pytest.mark.serial_only

TRAIN = [sys.executable, "-m", "hpcbsp.apps.elastic.train"]
SIM = ["--simulate", "--policy", "all", "--dataset", "generated", "--duration", "2",
       "--stall-prob", "0.05", "--change-at", "0.8", "--no-plot"]


def roundtrip(obj):
    return decode(json.loads(json.dumps(encode(obj))))


# ---------------------------------------------------------------- snapshot encoding
def test_snapshot_round_trips_every_supported_kind_exactly() -> None:
    rng = np.random.default_rng(5)
    rng.normal(size=3)
    counts: defaultdict[int, list[int]] = defaultdict(list)
    counts[3].append(1)
    obj = {"f": [0.1, -0.0, float("inf"), 1e-310], "t": (1, "a", None, True), 7: "int key",
           "a": np.arange(6, dtype=np.int32).reshape(2, 3), "nan": np.array([np.nan, 1.5]),
           "s": np.float64(2.5), "i": np.int64(-3), "d": counts, "q": deque([1, 2], maxlen=4),
           "rng": rng, "big": 2**100}
    back = roundtrip(obj)
    assert back["f"] == obj["f"] and np.signbit(back["f"][1])
    assert back["t"] == obj["t"] and back[7] == "int key" and back["big"] == 2**100
    assert back["a"].dtype == np.int32 and np.array_equal(back["a"], obj["a"])
    assert np.array_equal(back["nan"], obj["nan"], equal_nan=True)
    assert type(back["s"]) is np.float64 and back["s"] == 2.5 and type(back["i"]) is np.int64
    assert back["d"].default_factory is list and back["d"][3] == [1] and back["d"][9] == []
    assert back["q"].maxlen == 4 and list(back["q"]) == [1, 2]
    assert np.array_equal(back["rng"].normal(size=4), rng.normal(size=4))  # same stream onward


def test_a_coordinator_snapshot_leaves_out_how_its_weights_are_updated() -> None:
    """The window's update function (a :class:`WindowStores` of this process) is not state: a
    coordinator holding its weights in a window with a step of its own round-trips with everything
    else equal and its class's default step (the one-pass kernel, checked against numpy's bits)."""
    from hpcbsp.elastic.coordinator import Coordinator
    from hpcbsp.elastic.transport import WindowStores
    from hpcbsp.kernels.update import sgd_step

    coord = Coordinator(make_policy("asp"), 2, np.arange(5, dtype=np.float32), 0.5)
    window = np.zeros(5, dtype=np.float32)
    coord.keep_weights_in(window, WindowStores())
    back = roundtrip(coord)
    assert "_step" not in vars(back) and back._step is sgd_step  # private on purpose: the attribute left out
    assert np.array_equal(back.weights, np.arange(5, dtype=np.float32)) and back.version == coord.version
    assert set(vars(back)) == set(vars(coord)) - {"_step"}


def test_long_numeric_lists_travel_as_exact_columns() -> None:
    rng = np.random.default_rng(1)
    pushes = [(int(w), float(t)) for w, t in zip(rng.integers(0, 8, 500), rng.random(500) * 1e3)]
    staleness = [int(v) for v in rng.integers(0, 40, 500)]
    odd = [1] * 40 + [2.5]               # mixed kinds: element by element
    flags = [True, False] * 20           # bools are not ints here
    huge = [2**70] * 40                  # beyond int64
    data = encode({"p": pushes, "s": staleness, "o": odd, "f": flags, "h": huge})
    assert "__rows__" in json.dumps(data["__dict__"][0]) and "__column__" in json.dumps(data["__dict__"][1])
    back = roundtrip({"p": pushes, "s": staleness, "o": odd, "f": flags, "h": huge})
    assert back == {"p": pushes, "s": staleness, "o": odd, "f": flags, "h": huge}
    assert type(back["p"][0]) is tuple and type(back["p"][0][0]) is int and type(back["f"][0]) is bool


def test_snapshot_refuses_what_it_cannot_restore_faithfully() -> None:
    shared = [1, 2]
    with pytest.raises(SnapshotError, match=r"state\['b'\] is the same object as state\['a'\]"):
        encode({"a": shared, "b": shared})
    base = np.zeros(4)
    with pytest.raises(SnapshotError, match="same object"):
        encode([base, base[1:]])  # a view shares the memory of its base
    with pytest.raises(SnapshotError, match=r"state\[.p.\]: cannot snapshot a \w*Path"):
        encode({"p": Path("x")})
    with pytest.raises(SnapshotError, match="dtype object"):
        encode(np.array([None]))


@pytest.mark.parametrize("data", [
    {"__object__": "os.system", "attrs": {}},          # a class outside the allow-list
    {"__rng__": "system", "state": {"__dict__": []}},  # not a bit generator
    {"__ndarray__": "|O", "shape": [1], "data": ""},   # object dtype: pickle by another name
    {"plain": 1},                                      # untagged
    {"__tuple__": 5},
])
def test_snapshot_decoding_never_builds_unknown_things(data) -> None:
    with pytest.raises(SnapshotError):
        decode(data)


# ---------------------------------------------------------------- simulator, every policy
def _simulation(name: str, data, duration: float = 2.0) -> tuple[Simulation, list]:
    """A simulated run with real training, its mini-batch streams owned by the caller."""
    model = make_model("softmax", data.n_features, data.n_classes, 8)
    timing = TimingModel(stall_prob=0.05, change_at=0.8, seed=3)
    rngs = [np.random.default_rng([4, w]) for w in range(timing.n_workers)]

    def grad(w: int, weights: np.ndarray) -> np.ndarray:
        idx = rngs[w].choice(len(data.y_train), size=16, replace=False)
        return model.grad(weights, data.X_train[idx], data.y_train[idx])[0]

    sim = Simulation(make_policy(name, PolicyOptions(R=6)), timing, duration=duration,
                     weights=model.init(0), lr=0.1, grad_fn=grad,
                     eval_fn=lambda w: model.evaluate(w, data.X_test, data.y_test), eval_every=0.2)
    return sim, rngs


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_simulation_resumed_from_a_snapshot_is_bit_identical(name: str) -> None:
    data = load_dataset("generated", 0)
    ref_sim, _ = _simulation(name, data)
    ref_sim.advance()
    ref = ref_sim.result()

    first, rngs = _simulation(name, data)
    first.advance(until=0.77)  # mid-run: workers computing, some held, evaluations pending
    assert not first.done and first.coord.log.updates > 0
    saved = roundtrip({"sim": first.state(), "rngs": rngs})
    second, rngs2 = _simulation(name, data)  # a fresh process would build exactly this
    second.load(saved["sim"])
    for mine, theirs in zip(rngs2, saved["rngs"]):
        mine.bit_generator.state = theirs.bit_generator.state
    second.advance()
    got = second.result()

    assert np.array_equal(got.weights, ref.weights)
    assert got.log.curve == ref.log.curve and got.log.push_times == ref.log.push_times
    assert got.log.staleness == ref.log.staleness and got.log.updates == ref.log.updates
    for field in ("pushes", "applied", "dropped", "wait_s"):
        assert np.array_equal(getattr(got.log, field), getattr(ref.log, field)), field
    wallclock = {"zipline_seconds"}  # ElasticBSP times its own ZipLine calls
    assert ({k: v for k, v in got.policy_stats.items() if k not in wallclock}
            == {k: v for k, v in ref.policy_stats.items() if k not in wallclock})


def test_run_simulated_saves_and_a_finished_run_is_not_recomputed(tmp_path: Path) -> None:
    data = load_dataset("generated", 0)
    config = TrainConfig(timing=TimingModel(), duration=1.0)
    ref = run_simulated(config, "ssp", data)
    plan = CheckpointPlan(tmp_path, every=0.25)
    run_simulated(config, "ssp", data, checkpoint=plan)
    assert plan.saves >= 4  # 1 virtual second, a save every quarter, and the finished state
    again = run_simulated(config, "ssp", data, checkpoint=CheckpointPlan(tmp_path, 0.25, restart=True))
    assert again.finished_before and again.log.curve == ref.log.curve
    other = TrainConfig(timing=TimingModel(), duration=1.0, lr=0.2)
    with pytest.raises(CheckpointError, match="lr was 0.05, is 0.2 now"):
        run_simulated(other, "ssp", data, checkpoint=CheckpointPlan(tmp_path, 0.25, restart=True))


@pytest.mark.parametrize("base, every", [(0.02, 0.02), (0.1, 0.3)])
def test_save_times_that_round_onto_an_event_still_advance(tmp_path: Path, base: float, every: float) -> None:
    # Without jitter, events fall on multiples of the save interval, where k * every can round
    # down onto the event's time: the run must still advance (it once saved the same state forever).
    data = load_dataset("generated", 0)
    config = TrainConfig(timing=TimingModel(base_s=base, jitter=0.0, slowdown=(1.0, 1.0)),
                         duration=20 * base)
    ref = run_simulated(config, "bsp", data)
    plan = CheckpointPlan(tmp_path, every=every)
    got = run_simulated(config, "bsp", data, checkpoint=plan)
    assert got.log.curve == ref.log.curve and plan.saves <= 25


def test_a_restart_may_change_the_timeout(tmp_path: Path) -> None:
    data = load_dataset("generated", 0)
    config = TrainConfig(timing=TimingModel(), duration=0.5)
    run_simulated(config, "asp", data, checkpoint=CheckpointPlan(tmp_path, 0.25))
    longer = TrainConfig(timing=TimingModel(), duration=0.5, timeout=600.0)
    again = run_simulated(longer, "asp", data, checkpoint=CheckpointPlan(tmp_path, 0.25, restart=True))
    assert again.finished_before


# ---------------------------------------------------------------- the command, killed and resumed
def _files(out: Path) -> dict[str, str]:
    return {name: (out / name).read_text() for name in ("curves.csv", "pushes.csv", "workers.csv")}


def _comparable_summary(out: Path) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    del summary["config"]["argv"]
    for run in summary["runs"]:
        run.pop("resumed_at")
        run["policy_stats"].pop("zipline_seconds", None)
    return summary


def test_simulated_training_killed_and_restarted_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    ref, out, ck = tmp_path / "ref", tmp_path / "out", tmp_path / "ck"
    subprocess.run([*TRAIN, *SIM, "--out", str(ref)], check=True, capture_output=True, timeout=120)
    args = [*TRAIN, *SIM, "--out", str(out), "--checkpoint", str(ck), "--checkpoint-every", "0.3"]
    # Killed (SIGKILL, by itself) in the middle of the third policy: ssp.
    dead = subprocess.run([*args, "--die-after-saves", "17"], capture_output=True, text=True, timeout=120)
    assert dead.returncode == -9, dead.stderr
    assert not (out / "summary.json").exists()
    resumed = subprocess.run([*args, "--restart"], capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("finished before the restart") == 2  # bsp and asp
    assert "ssp(s=3)" in resumed.stdout and "resumed from its checkpoint at" in resumed.stdout
    assert _files(out) == _files(ref)
    assert _comparable_summary(out) == _comparable_summary(ref)


def test_restart_refuses_other_settings_and_damaged_checkpoints(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    args = [*TRAIN, "--simulate", "--policy", "asp", "--dataset", "generated", "--duration", "1",
            "--no-plot", "--out", str(tmp_path / "out"), "--checkpoint", str(ck)]
    subprocess.run(args, check=True, capture_output=True, timeout=120)

    def fails(*more: str) -> str:
        proc = subprocess.run([*args, *more], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        return proc.stderr

    assert "is not empty: add --restart" in fails()
    assert "batch was 16, is 8 now" in fails("--restart", "--batch", "8")
    data = ck / "simulated-asp-r0" / "state.npz"  # the replicated state: the run's snapshot
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert "does not match its checksum" in fails("--restart")


def test_mpi_training_killed_and_restarted_goes_on_from_the_saved_server_state(tmp_path: Path) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    args = ["-m", "hpcbsp.apps.elastic.train", "--policy", "ssp", "--dataset", "generated",
            "--duration", "3", "--eval-every", "0.1", "--no-plot", "--out", str(out),
            "--checkpoint", str(ck), "--checkpoint-every", "0.4"]
    dead = run_mpi(3, [*args, "--die-after-saves", "3"], timeout=60)
    assert not dead.timed_out and dead.returncode != 0
    saved = CheckpointPlan(ck).load(ck / "mpi-ssp-r0", _mpi_settings(ck))
    assert not saved["done"] and 1.0 <= saved["elapsed"] < 3.0
    saved_log = saved["coord"].log

    res = run_mpi(3, [*args, "--restart"], timeout=60)
    assert not res.timed_out and res.returncode == 0, res.output[-2000:]
    assert "resumed from its checkpoint at" in res.stdout
    run = json.loads((out / "summary.json").read_text())["runs"][0]
    assert run["resumed_at"] == pytest.approx(saved["elapsed"])
    assert run["duration_s"] == pytest.approx(3.0, abs=0.5)  # the rest of the duration, not 3 more s
    assert run["updates"] > saved_log.updates
    assert all(after >= before for after, before in zip(run["pushes"], saved_log.pushes))
    with (out / "curves.csv").open() as fh:
        times = [float(row["time_s"]) for row in csv.DictReader(fh)]
    # The curve keeps what was measured before the kill, then goes on from the saved time.
    assert times[:len(saved_log.curve)] == [round(t, 6) for t, *_ in saved_log.curve]
    assert times == sorted(times) and times[-1] > saved["elapsed"]


def _mpi_settings(ck: Path) -> dict:
    """The settings the saved run recorded (read back, to load it outside the job)."""
    from mpi4py import MPI

    from hpcbsp.runtime.api.context import BSP

    with BSP(MPI.COMM_SELF) as bsp:
        state = bsp.restore(str(ck / "mpi-ssp-r0"), program="hpcbsp.elastic.train").state
    return json.loads(state["config"].tobytes().decode())
