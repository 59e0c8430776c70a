"""A checkpoint never replaces or removes what hpcbsp did not write (issue 14, item 1).

The oracle is the user's files themselves: every byte under the test folder that the test put
there is read before and compared after each save, failed save and restore; a save that is
allowed restores to the values written (numpy arange, computed independently of the runtime).
The same scenarios run on one rank and, marked ``mpi``, under ``mpiexec -n 2`` and ``-n 3``;
the command lines that take ``--checkpoint`` are checked to refuse such a path before any work.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from mpi_helpers import run_mpi

import hpcbsp
from hpcbsp import BSPError
from hpcbsp.runtime.api import checkpoint as ckpt
from hpcbsp.runtime.api.distribution import block_range

N = 11  # elements of the test coarray, split over the ranks


def _snapshot(root: str) -> dict[str, bytes | None]:
    """Every file and folder under ``root`` (folders as None), with its bytes."""
    out: dict[str, bytes | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root)] = None
        for f in filenames:
            with open(os.path.join(dirpath, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dirpath, f), root)] = fh.read()
    return out


def _user_files(path: str, what: str) -> None:
    """Put the user's data at ``path``: a folder with a file in it, or a file."""
    if what == "folder":
        os.makedirs(path)
        with open(os.path.join(path, "thesis.tex"), "w") as fh:
            fh.write("\\documentclass{article} draft\n")
    else:
        with open(path, "wb") as fh:
            fh.write(b"user data \x00\x01\x02")


def _barrier(bsp: "hpcbsp.BSP") -> None:
    bsp.comm.Barrier()


def _save_values(bsp: "hpcbsp.BSP", x, path: str, step: int) -> None:
    """Save the global array arange(N) * step (each rank its block) and the step."""
    lo, hi = block_range(N, bsp.nprocs, bsp.pid)
    x.local[:] = np.arange(lo, hi) * step
    bsp.checkpoint(path, program="t", step=np.int64(step))


def _scenarios(base: str) -> None:
    """Run on every rank of the job; ``base`` is an empty folder all ranks see."""
    path = os.path.join(base, "ck")
    with hpcbsp.BSP() as bsp:
        if bsp.pid == 0:  # a file of the user's beside the checkpoint, checked throughout
            _user_files(os.path.join(base, "beside.dat"), "file")
        lo, hi = block_range(N, bsp.nprocs, bsp.pid)
        x = bsp.coarray(hi - lo, dtype=np.int64, name="x")

        # 1. A folder of the user's, then a file of the user's, at PATH: save and restore refuse
        #    on every rank; nothing under base changes (no PATH.tmp appears either).
        for what in ("folder", "file"):
            if bsp.pid == 0:
                _user_files(path, what)
            _barrier(bsp)
            before = _snapshot(base)
            with pytest.raises(BSPError, match="is not an hpcbsp checkpoint"):
                _save_values(bsp, x, path, 1)
            with pytest.raises(BSPError, match="not an hpcbsp checkpoint"):
                bsp.restore(path, program="t")
            assert not ckpt.exists(path)
            assert _snapshot(base) == before
            _barrier(bsp)
            if bsp.pid == 0:
                (os.remove if what == "file" else lambda p: (os.remove(os.path.join(p, "thesis.tex")),
                                                             os.rmdir(p)))(path)
            _barrier(bsp)

        # 2. A good checkpoint, then the user's PATH.tmp / PATH.old: every later save is refused
        #    and leaves both the user's files and the checkpoint as they were; restore still works.
        _save_values(bsp, x, path, 2)
        for suffix, what in ((".tmp", "file"), (".tmp", "folder"), (".old", "folder"), (".old", "file")):
            if bsp.pid == 0:
                _user_files(path + suffix, what)
            _barrier(bsp)
            before = _snapshot(base)
            with pytest.raises(BSPError, match=f"move {path}{suffix} away"):
                _save_values(bsp, x, path, 3)
            # A failed save (state that differs between ranks) with the user's file in the way.
            if bsp.nprocs > 1:
                with pytest.raises(BSPError):
                    bsp.checkpoint(path, program="t", step=np.int64(bsp.pid))
            x.local[:] = -1
            ck = bsp.restore(path, program="t")
            assert int(ck.state["step"]) == 2
            np.testing.assert_array_equal(x.local, np.arange(lo, hi) * 2)
            assert _snapshot(base) == before
            _barrier(bsp)
            if bsp.pid == 0:
                target = path + suffix
                if what == "file":
                    os.remove(target)
                else:
                    os.remove(os.path.join(target, "thesis.tex"))
                    os.rmdir(target)
            _barrier(bsp)

        # 3. A file of the user's put into the checkpoint folder: the swap would delete it, so
        #    the save is refused.
        if bsp.pid == 0:
            with open(os.path.join(path, "notes.txt"), "w") as fh:
                fh.write("mine")
        _barrier(bsp)
        before = _snapshot(base)
        with pytest.raises(BSPError, match=r"also holds what hpcbsp did not write \(notes.txt\)"):
            _save_values(bsp, x, path, 4)
        assert _snapshot(base) == before
        _barrier(bsp)
        if bsp.pid == 0:
            os.remove(os.path.join(path, "notes.txt"))
        _barrier(bsp)

        # 4. What is hpcbsp's own is replaced as before: a checkpoint of the same program, the
        #    marked PATH.tmp of an interrupted save, PATH.old of an interrupted swap, an older
        #    checkpoint without the marker, and an empty folder.
        _save_values(bsp, x, path, 5)
        if bsp.pid == 0:
            os.rename(path, path + ".old")  # as if the save stopped between its two renames
            os.makedirs(path + ".tmp")
            with open(os.path.join(path + ".tmp", ckpt.MARKER), "w") as fh:
                fh.write("x")
            with open(os.path.join(path + ".tmp", "rank0.npz"), "wb") as fh:
                fh.write(b"half")  # half written
        _barrier(bsp)
        assert ckpt.exists(path)
        assert int(bsp.restore(path, program="t").state["step"]) == 5  # read from PATH.old
        _save_values(bsp, x, path, 6)
        assert sorted(os.listdir(base)) == ["beside.dat", "ck"]
        if bsp.pid == 0:
            os.remove(os.path.join(path, ckpt.MARKER))  # a checkpoint written before the marker
        _barrier(bsp)
        assert ckpt.exists(path)
        _save_values(bsp, x, path, 7)
        x.local[:] = 0
        assert int(bsp.restore(path, program="t").state["step"]) == 7
        np.testing.assert_array_equal(x.local, np.arange(lo, hi) * 7)
        with pytest.raises(BSPError, match="holds a checkpoint of program 't', not of 'other'"):
            bsp.checkpoint(path, program="other")

        empty = os.path.join(base, "empty")
        if bsp.pid == 0:
            os.makedirs(empty)
        _barrier(bsp)
        assert not ckpt.exists(empty)
        bsp.checkpoint(empty, program="t", step=np.int64(8))
        assert int(bsp.restore(empty, program="t").state["step"]) == 8


def test_user_files_survive_save_failed_save_and_restore_on_one_rank(tmp_path):
    _scenarios(str(tmp_path))


@pytest.mark.mpi(min_size=2)
def test_user_files_survive_save_failed_save_and_restore_on_all_ranks(tmp_path_factory):
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    base = comm.bcast(str(tmp_path_factory.mktemp("safe")) if comm.rank == 0 else None)
    _scenarios(base)


def test_check_target_names_the_path_and_reads_nothing_it_need_not(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "thesis.tex").write_text("draft")
    with pytest.raises(BSPError, match=r"r exists and is not an hpcbsp checkpoint \(it holds thesis.tex\)"):
        ckpt.check_target(tmp_path / "r")
    ckpt.check_target(tmp_path / "new")      # absent: fine
    (tmp_path / "e").mkdir()
    ckpt.check_target(tmp_path / "e", "p")   # empty: fine
    os.symlink(tmp_path / "e", tmp_path / "link")
    with pytest.raises(BSPError, match="is a symbolic link"):
        ckpt.check_target(tmp_path / "link")


# ------------------------------------------------------------------ the command lines
APPS = {
    "heat": ["-m", "hpcbsp.apps.heat", "--n", "50", "--steps", "4", "--every", "2"],
    "jacobi": ["-m", "hpcbsp.apps.bsf.jacobi", "--n", "40", "--every", "5"],
    "cimmino": ["-m", "hpcbsp.apps.bsf.cimmino", "--n", "40", "--every", "5"],
    "histogram": ["-m", "hpcbsp.apps.irregular.histogram", "-n", "2000", "-T", "50", "--rounds", "2",
                  "--every", "1"],
    "elastic": ["-m", "hpcbsp.apps.elastic.train", "--simulate", "--policy", "asp", "--dataset",
                "generated", "--duration", "0.5", "--no-plot", "--restart"],
}


def _cli_case(app: str, tmp_path, what: str) -> tuple[list[str], str]:
    """The app's command with --checkpoint at the user's data; returns it and the folder."""
    user = str(tmp_path / "r")
    target = user
    if app == "elastic":  # its checkpoints are one folder per run inside DIR
        os.makedirs(user)
        target = os.path.join(user, "simulated-asp-r0")
    _user_files(target, what)
    args = APPS[app] + ["--checkpoint", user]
    if app == "elastic":
        args += ["--out", str(tmp_path / "out")]
    return args, str(tmp_path)


@pytest.mark.parametrize("app", sorted(APPS))
@pytest.mark.parametrize("what", ["folder", "file"])
def test_cli_refuses_a_checkpoint_path_that_is_not_a_checkpoint(app, what, tmp_path):
    args, root = _cli_case(app, tmp_path, what)
    before = _snapshot(root)
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120,
                          cwd=root)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "not an hpcbsp checkpoint" in proc.stderr
    assert proc.stdout == ""  # refused before the work
    assert _snapshot(root) == before


@pytest.mark.parametrize("app", ["jacobi", "heat"])
def test_cli_refuses_under_mpiexec_too(app, tmp_path):
    """The issue's command: mpiexec -n 2 ... jacobi --checkpoint r with r/thesis.tex."""
    args, root = _cli_case(app, tmp_path, "folder")
    before = _snapshot(root)
    res = run_mpi(2, args, timeout=60, cwd=root)
    assert res.returncode == 2 and not res.timed_out, res.output
    assert res.stderr.count("not an hpcbsp checkpoint") == 1 and "Traceback" not in res.stderr
    assert _snapshot(root) == before


def test_cli_still_writes_and_restarts_from_its_own_checkpoint(tmp_path):
    """The check lets hpcbsp's own checkpoints through: heat --every, then --restart."""
    ck = str(tmp_path / "ck")
    os.makedirs(ck)  # an empty folder made beforehand is fine
    base = [sys.executable, "-m", "hpcbsp.apps.heat", "--n", "50", "--steps", "4", "--checkpoint", ck]
    subprocess.run(base + ["--every", "2"], check=True, capture_output=True, timeout=120)
    proc = subprocess.run(base + ["--restart", "--steps", "6"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "restarted from" in proc.stdout, proc.stderr
