"""Checkpoint/restart: same and different rank counts, damaged files, atomicity, no hangs."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import time

import numpy as np
import pytest
from mpi_helpers import run_mpi

import hpcbsp
from hpcbsp import BadInput, BSPError, UsageError
from hpcbsp.apps.heat import reference
from hpcbsp.runtime.api.distribution import block_range
from hpcbsp.runtime.api.partition import Block, Explicit, Grid, grid, partitioning

HEAT = ["-m", "hpcbsp.apps.heat", "--n", "600", "--steps", "60"]


def _rod(path):
    return np.load(path)


def test_kill_a_rank_then_restart_on_2_and_4_ranks(tmp_path):
    ck = str(tmp_path / "ck")
    t0 = time.monotonic()
    res = run_mpi(3, HEAT + ["--checkpoint", ck, "--every", "10", "--die-at", "35"], timeout=60)
    assert not res.timed_out and time.monotonic() - t0 < 30, "the job must end soon after a rank dies"
    assert res.returncode != 0
    assert res.stderr.count("died without a report") == 1 and "[hpcbsp] rank 1/3 (pid" in res.stderr
    meta = json.loads(open(os.path.join(ck, "meta.json")).read())
    assert meta["nprocs"] == 3 and meta["superstep"] == 30  # the last checkpoint before the death
    expected = reference(600, 60, 0.25)
    for nprocs in (2, 4):
        out = str(tmp_path / f"rod{nprocs}.npy")
        res = run_mpi(nprocs, HEAT + ["--checkpoint", ck, "--restart", "--out", out], timeout=60)
        assert res.returncode == 0, res.output
        assert f"restarted from {ck} at step 30 (saved on 3 ranks, now {nprocs})" in res.stdout
        np.testing.assert_array_equal(_rod(out), expected)  # bit-identical to the uninterrupted run


def _damage_and_restore(tmp_path, damage, match):
    ck = str(tmp_path / "ck")
    assert run_mpi(2, HEAT + ["--checkpoint", ck, "--every", "30"], timeout=60).returncode == 0
    damage(ck)
    res = run_mpi(2, HEAT + ["--checkpoint", ck, "--restart"], timeout=60)
    assert res.returncode != 0 and not res.timed_out
    assert "Traceback" not in res.stderr, res.stderr
    assert match in res.stderr, res.stderr
    assert res.stderr.count("[hpcbsp] error:") == 1


def test_truncated_file(tmp_path):
    def truncate(ck):
        path = os.path.join(ck, "rank1.bin")
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) // 2])
    _damage_and_restore(tmp_path, truncate, "rank1.bin does not match its checksum")


def test_flipped_bytes(tmp_path):
    def flip(ck):
        path = os.path.join(ck, "rank0.bin")
        data = bytearray(open(path, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(path, "wb").write(bytes(data))
    _damage_and_restore(tmp_path, flip, "rank0.bin does not match its checksum")


def test_damaged_meta_and_wrong_program_and_missing(tmp_path):
    _damage_and_restore(tmp_path, lambda ck: open(os.path.join(ck, "meta.json"), "w").write('{"form'),
                        "meta.json is not valid JSON")


def test_checkpoint_of_another_program(tmp_path):
    ck = str(tmp_path / "ck")
    assert run_mpi(2, HEAT + ["--checkpoint", ck, "--every", "30"], timeout=60).returncode == 0
    meta_path = os.path.join(ck, "meta.json")
    meta = json.load(open(meta_path))
    meta["program"] = "someone.else"
    json.dump(meta, open(meta_path, "w"))
    # The app refuses it before the work (a usage error: exit 2), with or without --restart:
    # neither resuming from it nor overwriting it would be right.
    for more in (["--restart"], ["--every", "30"]):
        res = run_mpi(2, HEAT + ["--checkpoint", ck, *more], timeout=60)
        assert res.returncode == 2 and not res.timed_out and res.stdout == "", res.output
        assert res.stderr.count("holds a checkpoint of program 'someone.else', not of "
                                "'hpcbsp.apps.heat'") == 1 and "Traceback" not in res.stderr
    assert json.load(open(meta_path)) == meta
    # The library's restore says the same.
    with hpcbsp.BSP() as bsp:
        bsp.coarray(600, name="u")
        with pytest.raises(BSPError, match="written by program 'someone.else', not 'hpcbsp.apps.heat'"):
            bsp.restore(ck, program="hpcbsp.apps.heat")


def test_missing_rank_file(tmp_path):
    _damage_and_restore(tmp_path, lambda ck: os.remove(os.path.join(ck, "rank1.bin")),
                        "rank1.bin is missing")


def test_one_rank_checkpoint_roundtrip_and_errors(tmp_path):
    path = str(tmp_path / "c")
    with hpcbsp.BSP() as bsp:
        x = bsp.coarray(5, dtype=np.int32, name="x")
        x.local[:] = np.arange(5)
        bsp.sync()
        bsp.checkpoint(path, program="t", it=np.int64(7), v=np.arange(3.0))
        x.local[:] = 0
        ck = bsp.restore(path, program="t")
        np.testing.assert_array_equal(x.local, np.arange(5))
        assert ck.superstep == 1 and int(ck.state["it"]) == 7
        np.testing.assert_array_equal(ck.state["v"], np.arange(3.0))
        with pytest.raises(BadInput, match="not found"):
            bsp.restore(str(tmp_path / "nope"), program="t")
        with pytest.raises(BSPError, match="Python objects"):
            bsp.checkpoint(path, program="t", bad=np.array([{}], dtype=object))
        x.put(0, [1])
        with pytest.raises(UsageError, match="call sync"):
            bsp.checkpoint(path, program="t")
        bsp.sync()


def test_interrupted_swap_falls_back_to_old(tmp_path):
    path = str(tmp_path / "c")
    with hpcbsp.BSP() as bsp:
        x = bsp.coarray(2, name="x")
        x.local[:] = [1.0, 2.0]
        bsp.checkpoint(path, program="t")
        os.rename(path, path + ".old")  # as if the save stopped between its two renames
        x.local[:] = 0
        bsp.restore(path, program="t")
        np.testing.assert_array_equal(x.local, [1.0, 2.0])


@pytest.mark.mpi(min_size=2)
def test_failed_save_keeps_previous_checkpoint(tmp_path_factory):
    from mpi4py import MPI
    base = MPI.COMM_WORLD.bcast(str(tmp_path_factory.mktemp("ck")) if MPI.COMM_WORLD.rank == 0 else None)
    path = os.path.join(base, "c")
    with hpcbsp.BSP() as bsp:
        n = 10
        lo, hi = block_range(n, bsp.nprocs, bsp.pid)
        x = bsp.coarray(hi - lo, name="x")
        x.local[:] = np.arange(lo, hi)
        bsp.checkpoint(path, program="t", step=np.int64(1))
        x.local[:] = -1
        # Replicated state that differs between ranks: the save must fail everywhere...
        with pytest.raises(BadInput, match="differs between ranks"):
            bsp.checkpoint(path, program="t", step=np.int64(bsp.pid))
        # ...and the first checkpoint is still there and intact.
        ck = bsp.restore(path, program="t")
        assert int(ck.state["step"]) == 1
        np.testing.assert_array_equal(x.local, np.arange(lo, hi))
        assert not os.path.exists(path + ".tmp")


def _shared_dir(tmp_path_factory, name: str) -> str:
    from mpi4py import MPI
    return MPI.COMM_WORLD.bcast(str(tmp_path_factory.mktemp(name)) if MPI.COMM_WORLD.rank == 0 else None)


@pytest.mark.mpi(min_size=2)
def test_restore_redistributes_by_layout_within_the_same_job(tmp_path_factory):
    """Saved with a block layout, restored into another layout on the same ranks (each rank the
    block its mirror rank had, uneven parts).  Oracle: element g holds 10 g, wherever it is."""
    path = os.path.join(_shared_dir(tmp_path_factory, "rd"), "c")
    n = 23
    with hpcbsp.BSP() as bsp:
        x = bsp.coarray(dtype=np.int64, name="x", layout=Block(n, bsp.nprocs))
        x.local[:] = x.layout.global_indices(bsp.pid) * 10
        bsp.checkpoint(path, program="t")
    with hpcbsp.BSP() as bsp:
        p = bsp.nprocs
        mirrored = Explicit(p - 1 - Block(n, p).owner(np.arange(n)), p)
        x = bsp.coarray(dtype=np.int64, name="x", layout=mirrored)
        bsp.restore(path, program="t")
        np.testing.assert_array_equal(x.local, mirrored.global_indices(bsp.pid) * 10)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("saved_kind, restored_kind", [("cyclic", "cyclic"), ("block-cyclic", "block"),
                                                       ("grid", "grid")])
def test_a_checkpoint_restores_onto_fewer_ranks_by_its_layouts(tmp_path_factory, saved_kind, restored_kind):
    """Saved on every rank of the job, restored on one rank fewer (a communicator of the first
    p - 1 ranks).  Oracle: element g (or (i, j)) holds its own global number times 10, so any
    permutation shows (concatenating the parts of a cyclic array in rank order would permute it)."""
    from mpi4py import MPI
    path = os.path.join(_shared_dir(tmp_path_factory, "fewer"), "c")
    n, shape = 29, (7, 5)

    def layout(kind: str, p: int):
        if kind == "grid":
            return grid(shape, p, ("cyclic", "block-cyclic"), (1, 2))
        return partitioning(kind, n, p, block=3)

    def expected(lay, pid: int) -> np.ndarray:
        if isinstance(lay, Grid):
            rows, cols = lay.global_indices(pid)
            return (rows[:, None] * shape[1] + cols[None, :]).reshape(-1) * 10
        return lay.global_indices(pid) * 10

    with hpcbsp.BSP() as bsp:
        x = bsp.coarray(dtype=np.int64, name="x", layout=layout(saved_kind, bsp.nprocs))
        x.flat[:] = expected(x.layout, bsp.pid)  # a grid's part is 2-D: its local shape
        bsp.checkpoint(path, program="t")
    world = MPI.COMM_WORLD
    fewer = world.Split(0 if world.rank < world.size - 1 else MPI.UNDEFINED, world.rank)
    if fewer != MPI.COMM_NULL:
        with hpcbsp.BSP(fewer) as bsp:
            x = bsp.coarray(dtype=np.int64, name="x", layout=layout(restored_kind, bsp.nprocs))
            ck = bsp.restore(path, program="t")
            assert ck.nprocs == world.size
            assert x.local.shape == (x.layout.local_shape(bsp.pid) if isinstance(x.layout, Grid)
                                     else (x.layout.local_size(bsp.pid),))
            np.testing.assert_array_equal(x.flat, expected(x.layout, bsp.pid))
        fewer.Free()
    world.Barrier()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("side", ["saved", "restored"])
def test_a_coarray_without_a_layout_is_refused_on_another_rank_count(tmp_path_factory, side):
    from mpi4py import MPI
    path = os.path.join(_shared_dir(tmp_path_factory, "nolayout"), "c")
    n = 12
    with hpcbsp.BSP() as bsp:
        lay = Block(n, bsp.nprocs)
        bsp.coarray(dtype=np.int64, name="x", layout=lay if side == "restored" else None,
                    n=lay.local_size(bsp.pid))
        bsp.checkpoint(path, program="t")
    world = MPI.COMM_WORLD
    fewer = world.Split(0 if world.rank < world.size - 1 else MPI.UNDEFINED, world.rank)
    if fewer != MPI.COMM_NULL:
        with hpcbsp.BSP(fewer) as bsp:
            lay = Block(n, bsp.nprocs)
            bsp.coarray(dtype=np.int64, name="x", layout=lay if side == "saved" else None,
                        n=lay.local_size(bsp.pid))
            with pytest.raises(BSPError, match=r"coarray 'x' was saved on \d rank\(s\) .* restored on \d, and "
                               + ("it was saved without a layout" if side == "saved"
                                  else "it is registered here without a layout")):
                bsp.restore(path, program="t")
        fewer.Free()
    world.Barrier()


def test_sync_timeout_names_the_late_rank():
    t0 = time.monotonic()
    res = run_mpi(3, [os.path.join(os.path.dirname(__file__), "programs", "late_rank.py")], timeout=60)
    assert not res.timed_out and time.monotonic() - t0 < 30
    assert res.returncode != 0
    assert f"ranks not arrived: 2 (on {socket.gethostname()})" in res.stderr


def test_histogram_killed_mid_run_resumes_with_exact_counters(tmp_path):
    """A rank dies in round 4 of 6; the restart from the round-4 checkpoint ends with exactly
    the counters of the serial oracle (np.bincount of every rank's regenerated updates)."""
    ck = str(tmp_path / "hist")
    base = ["-m", "hpcbsp.apps.irregular.histogram", "-n", "30000", "-T", "200", "--rounds", "6",
            "--checkpoint", ck, "--every", "2"]
    dead = run_mpi(3, base + ["--die-at", "4"], timeout=60)
    assert dead.returncode != 0 and not dead.timed_out
    for mode in ("fabsp", "bsp"):
        shutil.copytree(ck, ck + mode)
        res = run_mpi(3, base[:-4] + ["--checkpoint", ck + mode, "--restart", "--mode", mode], timeout=60)
        assert res.returncode == 0, res.output
        assert "restarted from" in res.stdout and "after round 4 of 6" in res.stdout
        assert "check against the serial oracle: OK" in res.stdout
        assert "rounds 5..6" in res.stdout


@pytest.mark.parametrize("nprocs", [2, 3])
def test_a_sync_with_its_own_timeout_names_the_late_rank(nprocs):
    """``bsp.sync(label, timeout=2)`` on a context without a timeout: the ranks that arrived
    name the one that did not (the last rank, asleep for 60 s), and no other, and the job ends
    long before the sleeper would wake up."""
    t0 = time.monotonic()
    res = run_mpi(nprocs, [os.path.join(os.path.dirname(__file__), "programs", "late_rank_call_timeout.py")],
                  timeout=60)
    elapsed = time.monotonic() - t0
    assert not res.timed_out and elapsed < 30, f"took {elapsed:.1f} s:\n{res.output}"
    assert res.returncode != 0
    late = nprocs - 1
    named = re.findall(r"ranks not arrived: (.*)\); they are", res.stderr)
    assert named, res.output
    # Each names the late rank, and only it, with its host (all ranks run on this one).
    host = socket.gethostname()
    assert all(n == f"{late} (on {host})" for n in named), res.stderr
    assert "sync at superstep 1 timed out" in res.stderr
