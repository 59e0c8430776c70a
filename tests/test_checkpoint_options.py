"""``--checkpoint DIR`` needs ``--every K`` (issue 31): alone it wrote no checkpoint at all, and
said nothing.  Now every app with these options (heat, jacobi, cimmino, histogram) refuses it
before the work, in one line naming the fix, and a place where checkpoints cannot be written is
refused before the work too.

Oracle: the rule as docs/cli.md states it (``--checkpoint`` needs ``--every K`` with K > 0, or
``--restart``; ``--restart`` alone needs a checkpoint in DIR to resume from), the exit status and
stderr of the command, and the files it leaves: a refused command leaves DIR absent; an accepted
one writes DIR's checkpoint, or with ``--restart`` alone resumes and writes nothing further.
"""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import os

import pytest
from mpi_helpers import run_mpi

#: Every app with --every (grep add_checkpoint with a unit), with small arguments.
APPS = {
    "hpcbsp.apps.heat": ["--n", "50", "--steps", "4"],
    "hpcbsp.apps.bsf.jacobi": ["--n", "20"],
    "hpcbsp.apps.bsf.cimmino": ["--n", "20"],
    "hpcbsp.apps.irregular.histogram": ["-n", "200", "-T", "16", "--rounds", "4", "--mode", "bsp"],
}
SERIAL = pytest.mark.serial_only


def call(module: str, argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            code = importlib.import_module(module).main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


def test_the_apps_are_every_app_with_every():
    """The list above is every app whose parser has --every (so none is left out)."""
    import subprocess

    found = subprocess.run(["grep", "-rl", "add_checkpoint(parser, \"", "hpcbsp/apps"], capture_output=True,
                           text=True, cwd=os.path.join(os.path.dirname(__file__), "..")).stdout.split()
    modules = {p[:-3].replace("/", ".") for p in found}
    # bsf/system.py builds the parser of jacobi and cimmino
    expected = {m for m in APPS if not m.startswith("hpcbsp.apps.bsf.")} | {"hpcbsp.apps.bsf.system"}
    assert modules == expected


@pytest.mark.parametrize("module", sorted(APPS))
def test_checkpoint_without_every_is_refused_before_the_work(module, tmp_path):
    ck = tmp_path / "ck"
    code, out, err = call(module, [*APPS[module], "--checkpoint", str(ck)])
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "--checkpoint DIR without --every K would write no checkpoint: add --every K" in lines[0]
    assert "or --restart to resume from DIR" in lines[0]
    assert out == "" and not ck.exists()


@pytest.mark.parametrize("module", sorted(APPS))
def test_every_0_without_restart_is_refused(module, tmp_path):
    ck = tmp_path / "ck"
    code, _, err = call(module, [*APPS[module], "--checkpoint", str(ck), "--every", "0"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "--checkpoint DIR with --every 0 would write no checkpoint: add --every K" in err
    assert not ck.exists()


@pytest.mark.parametrize("module", sorted(APPS))
def test_an_unwritable_checkpoint_place_is_refused_before_the_work(module):
    code, out, err = call(module, [*APPS[module], "--checkpoint", "/proc/no/ck", "--every", "2"])
    assert code == 2 and "cannot create the folder for --checkpoint folder /proc/no/ck" in err, err
    assert out == ""


@pytest.mark.parametrize("module", sorted(APPS))
@pytest.mark.parametrize("every", [[], ["--every", "0"]])
def test_restart_alone_needs_a_checkpoint_to_resume_from(module, every, tmp_path):
    """--restart without --every K in a folder with no checkpoint would start afresh and write
    nothing (issue 47, C.6): refused before the work, naming the folder and the fix."""
    ck = tmp_path / "new"
    code, out, err = call(module, [*APPS[module], "--checkpoint", str(ck), *every, "--restart"])
    assert code == 2 and out == "", out + err
    assert len(err.strip().splitlines()) == 1, err
    assert f"--restart: there is no checkpoint in {ck} to restart from; give the folder that holds one, " \
           "or add --every K to start afresh and write checkpoints there" in err, err
    assert not ck.exists()


def test_restart_alone_resumes_and_writes_nothing_further(tmp_path):
    """With a checkpoint there, --restart alone resumes from it (heat: 4 steps saved, 6 asked)
    and writes no checkpoint of its own: meta.json still says superstep 4."""
    ck = tmp_path / "ck"
    heat = ["--n", "50", "--quiet", "--checkpoint", str(ck)]
    assert call("hpcbsp.apps.heat", [*heat, "--steps", "4", "--every", "2"])[0] == 0
    code, out, err = call("hpcbsp.apps.heat", [*heat, "--steps", "6", "--restart"])
    assert code == 0, out + err
    assert f"restarted from {ck} at step 4" in out, out
    assert json.loads((ck / "meta.json").read_text())["superstep"] == 4


@pytest.mark.parametrize("module", sorted(APPS))
def test_a_checkpoint_under_a_file_names_the_file(module, tmp_path, monkeypatch):
    """--checkpoint afile.txt/sub (issue 47, C.7): one line naming afile.txt as a file, not a
    folder ("File exists" before), with --every or --restart; nothing is made."""
    (tmp_path / "afile.txt").write_text("notes\n")
    monkeypatch.chdir(tmp_path)
    for more in (["--every", "2"], ["--restart"]):
        for path in ("afile.txt/sub", "afile.txt/sub/deeper"):
            code, out, err = call(module, [*APPS[module], "--checkpoint", path, *more])
            assert code == 2 and out == "", out + err
            assert err.count("\n") == 1 and f"--checkpoint {path}: afile.txt is a file, not a folder" in err, err
    assert (tmp_path / "afile.txt").read_text() == "notes\n"


def test_with_every_the_checkpoint_is_written(tmp_path):
    """The positive case of the rule: heat --checkpoint DIR --every 2 over 4 steps leaves the
    checkpoint of step 4 (its meta.json's superstep: 4 steps, one halo sync each)."""
    ck = tmp_path / "new" / "ck"  # in a folder that does not exist yet: made before the work
    code, out, err = call("hpcbsp.apps.heat", [*APPS["hpcbsp.apps.heat"], "--checkpoint", str(ck), "--every", "2"])
    assert code == 0, out + err
    meta = json.loads((ck / "meta.json").read_text())
    assert meta["program"] == "hpcbsp.apps.heat" and meta["superstep"] == 4


@SERIAL
def test_refused_once_on_every_rank(tmp_path):
    ck = tmp_path / "ck"
    res = run_mpi(2, ["-m", "hpcbsp.apps.heat", *APPS["hpcbsp.apps.heat"], "--checkpoint", str(ck)], timeout=90)
    assert res.returncode == 2 and res.stdout == "", res.output
    lines = res.program_stderr.strip().splitlines()  # (Open MPI's mpiexec adds a block of its own)
    assert len(lines) == 1 and "add --every K" in lines[0], res.stderr
    assert not ck.exists()
