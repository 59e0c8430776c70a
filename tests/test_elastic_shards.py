"""The sharded parameter server (hpcbsp.elastic.shards, keyranges) and ``bench elastic --servers``.

Oracles: numpy's ``array_split`` for the key ranges; hand-made host lists for the placement;
hand-computed bytes and rates for the bench's arithmetic; the single server for the sharded runs
(tests/programs/shards_vs_single.py: at 2 and 3 server ranks, every policy's weights bit for
bit those of the single-server coordinator replaying the same pushes, and BSP's those of the
single server itself); the uninterrupted run's state for a checkpoint of a sharded run.
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from mpi_helpers import run_mpi

from hpcbsp.bench.elastic import shard_figures, shards
from hpcbsp.elastic.coordinator import Coordinator
from hpcbsp.elastic.keyranges import key_ranges, server_ranks, servers_problem, worker_pieces
from hpcbsp.elastic.policies import make_policy
from hpcbsp.elastic.policies.base import Decision
from hpcbsp.elastic.shards import PUSH, Follow, decode, encode

pytestmark = pytest.mark.serial_only

PROGRAMS = Path(__file__).parent / "programs"


@pytest.mark.parametrize("size, servers", [(10, 1), (10, 3), (262144, 4), (7, 7), (1_000_003, 5)])
def test_key_ranges_are_numpys_array_split(size: int, servers: int) -> None:
    ranges = key_ranges(size, servers)
    expect = np.array_split(np.arange(size), servers)
    assert [list(range(size))[r] for r in ranges] == [e.tolist() for e in expect]


@pytest.mark.parametrize("size, itemsize, servers", [(10, 8, 3), (600_000, 4, 2), (3 * 262144 + 5, 4, 3)])
def test_a_workers_reply_pieces_cover_the_weights_once_in_order_each_within_its_shard(size, itemsize, servers) -> None:
    ranges, got = worker_pieces(size, itemsize, servers)
    assert ranges == key_ranges(size, servers)
    flat = np.concatenate([np.arange(size)[p] for _, p in got])
    assert flat.tolist() == list(range(size))
    for shard, piece in got:
        assert ranges[shard].start <= piece.start and piece.stop <= ranges[shard].stop
        assert (piece.stop - piece.start) * itemsize <= 1 << 20


def test_servers_sit_one_per_node_then_on_the_lowest_ranks_left() -> None:
    hosts = ["a", "a", "b", "b", "c", "c"]
    assert server_ranks(hosts, 1) == [0]
    assert server_ranks(hosts, 2) == [0, 2]
    assert server_ranks(hosts, 3) == [0, 2, 4]
    assert server_ranks(hosts, 4) == [0, 2, 4, 1]
    assert server_ranks(["n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8"], 4) == [0, 1, 2, 3]


def test_servers_problem_names_the_value_and_what_to_do() -> None:
    assert servers_problem(1, 2) is None and servers_problem(4, 8) is None and servers_problem(7, 8) is None
    assert "at least 1" in servers_problem(0, 8)  # type: ignore[operator]
    assert servers_problem(8, 8) == ("--servers 8 needs at least 9 ranks (8 servers and a worker); this job "
                                     "has 8: start more ranks or give fewer servers")


def test_the_leaders_message_carries_a_decision_whole() -> None:
    d = Decision(apply=(2, 0), drop=(1,), release=(0, 2, 3))
    msg = encode(PUSH, 4, 3, 1.25, d)
    assert msg.size == 6 + 3 * 4
    assert decode(msg) == (PUSH, 3, 1.25, d)
    assert decode(encode(PUSH, 4, 1, 2.5, None)) == (PUSH, 1, 2.5, None)
    assert decode(encode(PUSH, 2, 0, 0.0, Decision())) == (PUSH, 0, 0.0, Decision())


def test_shards_following_the_decisions_make_the_single_coordinators_weights_bit_for_bit() -> None:
    """In one process: SSP's single coordinator, and 3 shard coordinators told its decisions."""
    n, size = 3, 1001
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal(size)
    whole = Coordinator(make_policy("ssp"), n, w0, 0.1, 0.0, lr_decay=0.01)
    told: list[tuple[int, float, Decision | None]] = []
    ranges = key_ranges(size, 3)
    shards = [whole.key_range(r, Follow()) for r in ranges]
    pushes = [(w, 0.1 * t) for t, w in enumerate([0, 1, 0, 0, 2, 1, 0, 0, 2, 2, 1, 0])]
    for w, t in pushes:
        grad = rng.standard_normal(size)
        whole.push(w, grad, t, tell=lambda *d: told.append(d))
        _, _, decision = told[-1]
        for shard, r in zip(shards, ranges):
            assert isinstance(shard.policy, Follow) and decision is not None
            shard.policy.next = decision
            shard.push(w, grad[r].copy(), t)
    assert whole.weights is not None
    joined = np.concatenate([s.weights for s in shards])
    assert np.array_equal(joined.view(np.int64), whole.weights.view(np.int64))
    assert [s.version for s in shards] == [whole.version] * 3
    # and put back together (a checkpoint), the shards' held gradients are the whole one's
    held = np.concatenate([s.held() for s in shards], axis=1)
    back = whole.with_arrays(joined, held)
    assert np.array_equal(back.held(), whole.held()) and back.version == whole.version


def test_the_bench_arithmetic_on_a_hand_computed_case() -> None:
    # 4 workers, 262144 float32 weights: one server takes 4 x (16 + 4 x 262144) = 4194368 bytes
    # in per round (and as many out); 4 shards 4 x (16 + 4 x 65536) = 1048640 each; a worker
    # sends S x 16 + 1048576 and receives as many, the last shard's reply (1/S) after its push.
    one = shard_figures(1, 4, 262144, 60, 5.0, link_bits=100e6)
    assert one.rounds_per_s == 3.0  # 60 round trips / 4 workers / 5 s
    assert (one.server_in, one.server_out, one.worker_out, one.worker_in) == (4194368, 4194368, 1048592, 1048592)
    assert one.link_bound == pytest.approx(12.5e6 / 4194368)  # the server's link: 2.98
    four = shard_figures(4, 4, 262144, 80, 2.0, link_bits=100e6)
    assert four.rounds_per_s == 10.0
    assert (four.server_in, four.worker_out, four.worker_in) == (1048640, 1048640, 1048640)
    assert four.link_bound == pytest.approx(12.5e6 / (1048640 + 262160))  # the worker's link: 9.54
    # the busiest of 3 shards of 10 float64 weights holds 4; float16 gradients: 2 bytes in
    odd = shard_figures(3, 2, 10, 1, 1.0, itemsize=8, grad_itemsize=2)
    assert (odd.server_in, odd.server_out, odd.link_bound, odd.rounds_per_s) == (2 * (16 + 8), 2 * (16 + 32), None, 0.5)


def test_the_bench_line_ends_with_what_each_server_holds() -> None:
    # 262144 float32 weights, 4 workers: one server holds 1 MiB of weights and 4 x 1 MiB each of
    # held rows and receive buffers; each of 4 shards a quarter of each.
    per = {1: {"runs": [(60, 5.0)], "nic": [None]}, 4: {"runs": [(80, 2.0)], "nic": [None]}}
    one, four = shards.report(per, 4, 262144, 20, None)
    assert one.startswith("servers 1: 3.00 rounds per second per worker, 1.00x servers 1;")
    assert one.endswith("; each server holds 1.0 MiB weights + 4.0 MiB held gradients + 4.0 MiB receive "
                        "buffers = 9.0 MiB")
    assert four.endswith("; each server holds 256.0 KiB weights + 1.0 MiB held gradients + 1.0 MiB receive "
                         "buffers = 2.2 MiB")  # (2.25 MiB)


def test_every_policy_at_2_and_3_server_ranks_equals_the_single_server_bit_for_bit() -> None:
    res = run_mpi(5, [str(PROGRAMS / "shards_vs_single.py")], timeout=300)
    assert not res.timed_out and res.returncode == 0, res.output[-3000:]
    for policy in ("bsp", "asp", "ssp", "dssp", "backup", "elastic"):
        for servers in (1, 2, 3):
            assert f"{policy} servers={servers}: updates 10 (oracle 10), weights identical" in res.stdout
    assert "bsp: weights of 1, 2 and 3 servers identical" in res.stdout
    assert res.stdout.rstrip().endswith("ALL OK")


TRAIN = ["-m", "hpcbsp.apps.elastic.train"]


@pytest.mark.parametrize("value, says", [("0", "'0' is not a positive integer"),
                                          ("1.5", "'1.5' is not a positive integer"),
                                          ("two", "'two' is not a positive integer")])
def test_bad_servers_values_are_one_line_and_exit_2(value: str, says: str) -> None:
    import subprocess

    for prog in (TRAIN, ["-m", "hpcbsp.bench", "elastic"]):
        res = subprocess.run([sys.executable, *prog, "--servers", value], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2 and res.stdout == ""
        line, = res.stderr.strip().splitlines()
        assert "--servers" in line and (says in line or "comma-separated list of integers" in line
                                         or "at least 1" in line), line


def test_more_servers_than_ranks_minus_one_is_refused_before_any_work() -> None:
    for prog in (TRAIN + ["--duration", "1"], ["-m", "hpcbsp.bench", "elastic"]):
        res = run_mpi(3, [*prog, "--servers", "3"], timeout=120)
        assert not res.timed_out and res.returncode == 2, res.output[-2000:]
        line, = res.stderr.strip().splitlines()
        assert "--servers 3 needs at least 4 ranks (3 servers and a worker); this job has 3" in line


def _saved_state(ck: Path) -> Any:
    """The state the run saved in ``ck`` (read back outside the job, with the settings it recorded)."""
    from mpi4py import MPI

    from hpcbsp.apps.elastic.resume import CheckpointPlan
    from hpcbsp.runtime.api.context import BSP

    with BSP(MPI.COMM_SELF) as bsp:
        state = bsp.restore(str(ck / "mpi-ssp-r0"), program="hpcbsp.elastic.train").state
    return CheckpointPlan(ck).load(ck / "mpi-ssp-r0", json.loads(state["config"].tobytes().decode()))


def test_a_sharded_runs_checkpoint_restores_into_the_same_and_another_number_of_servers(tmp_path: Path) -> None:
    out, ck = tmp_path / "out", tmp_path / "ck"
    args = [*TRAIN, "--policy", "ssp", "--dataset", "generated", "--duration", "3", "--eval-every", "0.2",
            "--no-plot", "--out", str(out), "--checkpoint-every", "0.4"]
    dead = run_mpi(4, [*args, "--checkpoint", str(ck), "--servers", "2", "--die-after-saves", "3"], timeout=120)
    assert not dead.timed_out and dead.returncode != 0
    # The checkpoint of the sharded run is the whole model's state, as the single server saves it.
    params = int(dead.stdout.split("model softmax: ")[1].split()[0].replace(",", ""))
    # The start line's memory per server, by hand: the longer key range, float64 weights, and per
    # worker (2) a held row and a receive buffer of float64 values.
    keys = -(-params // 2)
    assert (f"servers: 2 ranks, one key range each (at most {keys:,} parameters), one per node as far as the job "
            f"has nodes; each holds {8 * keys} B weights + {16 * keys} B held gradients + {16 * keys} B receive "
            f"buffers = {40 * keys / 1024:.1f} KiB (the leader {8 * params} B more while it gathers") in dead.stdout, \
        dead.stdout[:2000]
    assert 1024 <= 40 * keys < 1024 ** 2  # (the KiB above)
    saved = _saved_state(ck)
    assert not saved["done"] and 1.0 <= saved["elapsed"] < 3.0
    assert saved["coord"].weights.size == params and saved["coord"].held().shape == (2, params)
    shutil.copytree(ck, tmp_path / "ck1")
    for ranks, servers, where in ((4, 2, ck), (3, 1, tmp_path / "ck1")):
        res = run_mpi(ranks, [*args, "--checkpoint", str(where), "--restart", "--servers", str(servers)],
                      timeout=120)
        assert not res.timed_out and res.returncode == 0, res.output[-2000:]
        assert "resumed from its checkpoint at" in res.stdout
        run = json.loads((out / "summary.json").read_text())["runs"][0]
        assert run["resumed_at"] == pytest.approx(saved["elapsed"])
        assert run["duration_s"] == pytest.approx(3.0, abs=0.5)  # the rest of the duration
        assert run["updates"] > saved["coord"].log.updates
