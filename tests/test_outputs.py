"""Output paths are checked by writing there, before the work (hpcbsp/util/outputs.py): the
check holds for root too, for whom permission bits allow everything (issue 31's audit ran as
root: an output folder under /proc passed the old permission check and failed after the run).

Oracle: the file system itself (nothing can be created under /proc; a file cannot hold a
folder), and the files the checks leave (none but the folders an output file needs).
"""
from __future__ import annotations

import contextlib
import importlib
import io

import pytest

from hpcbsp.util.outputs import OutputError, prepare_dir, prepare_output, prepare_parent


def test_nothing_can_be_written_under_proc_whoever_asks():
    with pytest.raises(OutputError, match=r"^cannot create the folder for the report /proc/no/r\.json: "):
        prepare_output("/proc/no/r.json", "the report")
    with pytest.raises(OutputError, match=r"^cannot write the report /proc/r\.json: "):
        prepare_output("/proc/r.json", "the report")
    with pytest.raises(OutputError, match=r"^cannot write --out-dir /proc/no/dir: "):
        prepare_dir("/proc/no/dir", "--out-dir")


def test_a_file_in_the_way_and_a_folder_for_a_file_are_refused(tmp_path):
    (tmp_path / "file").write_text("keep")
    with pytest.raises(OutputError, match=r"is a folder; give a file name"):
        prepare_output(tmp_path, "--out file")
    with pytest.raises(OutputError, match=r"exists and is not a folder"):
        prepare_dir(tmp_path / "file", "--out-dir")
    with pytest.raises(OutputError, match=r"cannot create --out-dir .*: .*file is a file"):
        prepare_dir(tmp_path / "file" / "sub", "--out-dir")
    assert (tmp_path / "file").read_text() == "keep"


def test_the_checks_leave_only_the_folders_an_output_needs(tmp_path):
    prepare_output(tmp_path / "a" / "b" / "out.json")
    prepare_parent(tmp_path / "c" / "ck")
    prepare_dir(tmp_path / "d" / "e")  # a folder is not made: the probe goes to tmp_path
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == ["a", "a/b", "c"]


@pytest.mark.parametrize("module,argv,what", [
    ("hpcbsp.apps.demo", ["--n", "10", "--out-dir", "/proc/no/demo"], "--out-dir"),
    ("hpcbsp.apps.elastic.paper", ["run", "--dry-run", "--out", "/proc/no/paper"], "--out"),
])
def test_an_app_refuses_an_output_folder_it_cannot_write_before_the_work(module, argv, what):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        with pytest.raises(SystemExit) as info:
            importlib.import_module(module).main(argv)
    assert info.value.code == 2 and out.getvalue() == "", out.getvalue()
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and f"cannot write {what} /proc/no/" in lines[0], err.getvalue()
