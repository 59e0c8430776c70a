"""A checkpoint's files: saved on P ranks, restored on P', each rank reading only what it needs.

Oracles: the restored arrays equal a numpy formula of the global index (``3 g + 1``, ``0.5 g``,
tests/programs/checkpoint_parts.py); the files a rank opens equal the saved ranks whose block
overlaps its new block, computed here from the block split's own arithmetic (the first n mod p
ranks hold one element more), and rank 0 alone opens the metadata.  Damaged or missing files end
the restart with one line naming the file (exit status not 0, no traceback).
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from mpi_helpers import run_mpi

from hpcbsp.apps.heat import reference
from hpcbsp.runtime.api.checkpoint.parts import files_of

PROGRAM = os.path.join(os.path.dirname(__file__), "programs", "checkpoint_parts.py")
N = 23
METADATA = {"meta.json", "index.npy", "state.npz"}


def _bounds(n: int, p: int) -> list[tuple[int, int]]:
    """The block split of n over p, written out: the first n % p ranks hold one more."""
    base, extra = divmod(n, p)
    starts = [r * base + min(r, extra) for r in range(p + 1)]
    return [(starts[r], starts[r + 1]) for r in range(p)]


def _overlapping(n: int, saved: int, now: int, rank: int) -> set[int]:
    lo, hi = _bounds(n, now)[rank]
    return {k for k, (a, b) in enumerate(_bounds(n, saved)) if max(a, lo) < min(b, hi)}


def _save(path: str, p: int, kind: str = "block", per_node: bool = False, nodes: str | None = None) -> None:
    res = run_mpi(p, [PROGRAM, "save", path, str(N), kind, *(["--per-node"] if per_node else []),
                      *(["--nodes", nodes] if nodes else [])], timeout=90)
    assert res.returncode == 0 and not res.timed_out, res.output


def _restore(path: str, p: int, kind: str = "block") -> dict[int, set[str]]:
    """Restore on p ranks (the program checks the data); the files each rank opened."""
    res = run_mpi(p, [PROGRAM, "restore", path, str(N), kind], timeout=90)
    assert res.returncode == 0 and not res.timed_out, res.output
    assert sorted(line for line in res.stdout.splitlines() if line.endswith(" OK")) == \
        sorted(f"rank {r} OK" for r in range(p)), res.output
    opened = {}
    for line in res.stdout.splitlines():
        if " opened: " in line:
            rank, names = line.removeprefix("rank ").split(" opened: ")
            opened[int(rank)] = set(filter(None, names.split(",")))
    assert sorted(opened) == list(range(p)), res.output
    return opened


@pytest.mark.parametrize("saved, now", [(2, 3), (3, 2), (3, 1), (3, 3), (1, 2)])
def test_a_restore_reads_only_the_saved_parts_that_overlap(tmp_path, saved, now):
    path = str(tmp_path / "ck")
    _save(path, saved)
    assert sorted(os.listdir(path)) == sorted(METADATA | {f"rank{r}.bin" for r in range(saved)}
                                              | {".hpcbsp-checkpoint"})
    opened = _restore(path, now)
    for rank, names in opened.items():
        expected = {f"rank{k}.bin" for k in _overlapping(N, saved, now, rank)}
        assert names == expected | (METADATA if rank == 0 else set()), (rank, names)


def test_a_cyclic_array_restores_onto_more_ranks_from_every_part(tmp_path):
    path = str(tmp_path / "ck")
    _save(path, 2, "cyclic")
    opened = _restore(path, 3, "cyclic")
    assert all({"rank0.bin", "rank1.bin"} <= names for names in opened.values())


@pytest.mark.parametrize("now", [2, 3])
def test_one_file_per_node_round_trips(tmp_path, now):
    """Saved per node on 3 ranks of this one machine: one data file, which every rank reads."""
    path = str(tmp_path / "ck")
    _save(path, 3, per_node=True)
    assert sorted(os.listdir(path)) == sorted(METADATA | {"node0.bin", ".hpcbsp-checkpoint"})
    meta = json.loads(open(os.path.join(path, "meta.json")).read())
    assert meta["per_node"] is True and meta["files"] == 1 and meta["nprocs"] == 3
    index = np.load(os.path.join(path, "index.npy"))
    # x (8 bytes) and y (8 bytes) of each rank's block, one rank after the other
    sizes = [b - a for a, b in _bounds(N, 3)]
    assert index["file"].tolist() == [0, 0, 0] and index["nbytes"].tolist() == [16 * s for s in sizes]
    assert index["offset"].tolist() == [0, 16 * sizes[0], 16 * (sizes[0] + sizes[1])]
    assert os.path.getsize(os.path.join(path, "node0.bin")) == 16 * N
    opened = _restore(path, now)
    for rank, names in opened.items():
        assert names == {"node0.bin"} | (METADATA if rank == 0 else set())


def test_ranks_on_two_nodes_write_two_files_and_a_restore_opens_those_it_needs(tmp_path):
    """Ranks 0 and 1 on one node, rank 2 on another (the table given to the save): node0.bin holds
    ranks 0 and 1, node1.bin rank 2.  Restored on 2 ranks: rank 0 (elements 0..11) needs saved
    ranks 0 and 1, both in node0.bin; rank 1 (12..22) needs saved ranks 1 and 2, in both files."""
    path = str(tmp_path / "ck")
    _save(path, 3, per_node=True, nodes="0,0,2")
    assert sorted(os.listdir(path)) == sorted(METADATA | {"node0.bin", "node1.bin", ".hpcbsp-checkpoint"})
    index = np.load(os.path.join(path, "index.npy"))
    sizes = [b - a for a, b in _bounds(N, 3)]
    assert index["file"].tolist() == [0, 0, 1] and index["offset"].tolist() == [0, 16 * sizes[0], 0]
    assert os.path.getsize(os.path.join(path, "node1.bin")) == 16 * sizes[2]
    opened = _restore(path, 2)
    assert opened == {0: {"node0.bin"} | METADATA, 1: {"node0.bin", "node1.bin"}}
    assert _restore(path, 3) == {0: {"node0.bin"} | METADATA, 1: {"node0.bin"}, 2: {"node1.bin"}}


def test_heat_saved_per_node_restarts_on_another_rank_count_bit_identical(tmp_path):
    ck, out = str(tmp_path / "ck"), str(tmp_path / "rod.npy")
    heat = ["-m", "hpcbsp.apps.heat", "--n", "300", "--steps", "20", "--checkpoint", ck]
    res = run_mpi(3, heat + ["--every", "10", "--per-node", "--steps", "10"], timeout=90)
    assert res.returncode == 0, res.output
    assert sorted(os.listdir(ck)) == sorted(METADATA | {"node0.bin", ".hpcbsp-checkpoint"})
    res = run_mpi(2, heat + ["--restart", "--out", out], timeout=90)
    assert res.returncode == 0 and "restarted from" in res.stdout and "at step 10" in res.stdout, res.output
    np.testing.assert_array_equal(np.load(out), reference(300, 20, 0.25))


def test_heat_per_node_without_saves_is_refused_in_one_line(tmp_path):
    """--per-node alone, or with --restart but no --every (which writes nothing): exit 2, one line
    naming --per-node, before any work; the checkpoint there stays as it was."""
    ck = str(tmp_path / "ck")
    heat = [sys.executable, "-m", "hpcbsp.apps.heat", "--n", "50", "--steps", "2"]
    subprocess.run(heat + ["--checkpoint", ck, "--every", "2"], check=True, capture_output=True, timeout=120)
    before = open(os.path.join(ck, "meta.json")).read()
    for more in ([], ["--checkpoint", ck, "--restart"]):
        proc = subprocess.run(heat + ["--per-node", *more], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "--per-node" in proc.stderr, proc.stderr
    assert open(os.path.join(ck, "meta.json")).read() == before


def _version_1(path: str, p: int) -> None:
    """A checkpoint as hpcbsp before issue 44 wrote it (format version 1), written out here:
    rank{r}.npz with the block of x = 3 g + 1 and y = 0.5 g, the state in rank0.npz, and
    meta.json with every rank's sizes and every file's BLAKE2b-16 checksum."""
    os.makedirs(path)
    bounds = _bounds(N, p)
    sums = {}
    for r, (lo, hi) in enumerate(bounds):
        g = np.arange(lo, hi)
        arrays = {"coarray:x": 3 * g + 1, "coarray:y": 0.5 * g}
        if r == 0:
            arrays.update({"state:step": np.int64(7), "state:v": np.arange(4.0)})
        fpath = os.path.join(path, f"rank{r}.npz")
        np.savez(fpath, **arrays)
        sums[f"rank{r}.npz"] = hashlib.blake2b(open(fpath, "rb").read(), digest_size=16).hexdigest()
    layout = {"kind": "block", "n": N, "p": p}
    sizes = [hi - lo for lo, hi in bounds]
    meta = {"format": "hpcbsp-checkpoint", "version": 1, "program": "parts", "superstep": 1, "nprocs": p,
            "coarrays": {"x": {"dtype": "<i8", "sizes": sizes, "layout": layout},
                         "y": {"dtype": "<f8", "sizes": sizes, "layout": layout}},
            "state": {"step": {"dtype": "<i8", "shape": []}, "v": {"dtype": "<f8", "shape": [4]}},
            "checksums": sums}
    open(os.path.join(path, "meta.json"), "w").write(json.dumps(meta))
    open(os.path.join(path, ".hpcbsp-checkpoint"), "w").write("hpcbsp-checkpoint 1\n")


@pytest.mark.parametrize("now", [2, 3])
def test_a_checkpoint_of_format_1_restores_and_the_next_save_replaces_it(tmp_path, now):
    path = str(tmp_path / "ck")
    _version_1(path, 3)
    opened = _restore(path, now)
    for rank, names in opened.items():
        expected = {f"rank{k}.npz" for k in _overlapping(N, 3, now, rank)}
        assert names == expected | ({"meta.json", "rank0.npz"} if rank == 0 else set()), (rank, names)
    _save(path, now)  # a save replaces it with format 2
    assert json.loads(open(os.path.join(path, "meta.json")).read())["version"] == 2
    assert not any(name.endswith(".npz") and name != "state.npz" for name in os.listdir(path))
    _restore(path, now)


def test_files_of_numbers_the_nodes_by_their_lowest_rank():
    assert files_of([0, 1, 2]) == [0, 1, 2]
    assert files_of([0, 0, 2, 2, 4]) == [0, 0, 1, 1, 2]
    assert files_of([0, 1, 0, 1]) == [0, 1, 0, 1]  # ranks placed round-robin on two nodes


def _flip(name: str):
    def damage(ck: str) -> None:
        fpath = os.path.join(ck, name)
        data = bytearray(open(fpath, "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(fpath, "wb").write(bytes(data))
    return damage


def _newer_format(ck: str) -> None:
    meta_path = os.path.join(ck, "meta.json")
    meta = json.load(open(meta_path))
    meta["version"] = 3
    json.dump(meta, open(meta_path, "w"))


@pytest.mark.parametrize("damage, says", [
    (lambda ck: os.remove(os.path.join(ck, "index.npy")), "index.npy is missing"),
    (_flip("index.npy"), "index.npy does not match its checksum"),
    (_flip("state.npz"), "state.npz does not match its checksum"),
    (lambda ck: os.remove(os.path.join(ck, "rank2.bin")), "rank2.bin is missing"),
    (_flip("rank2.bin"), "rank2.bin does not match its checksum (rank 2's part"),
    (_newer_format, "has format version 3; this hpcbsp reads versions 1 and 2"),
])
def test_a_damaged_checkpoint_is_one_line(tmp_path, damage, says):
    ck = str(tmp_path / "ck")
    heat = ["-m", "hpcbsp.apps.heat", "--n", "60", "--steps", "4", "--checkpoint", ck]
    assert run_mpi(3, heat + ["--every", "2"], timeout=90).returncode == 0
    damage(ck)
    res = run_mpi(2, heat + ["--restart"], timeout=90)
    assert res.returncode != 0 and not res.timed_out
    assert "Traceback" not in res.stderr, res.stderr
    assert says in res.stderr and res.stderr.count("[hpcbsp] error:") == 1, res.stderr
