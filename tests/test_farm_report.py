"""The farm's report file (``$HPCBSP_FARM_REPORT``, ``run_farm(report=)``) is checked before the
work, and a report that cannot be written after all never costs the computed result (issue 31:
an unwritable report was found only after the run, which then failed and lost its result).

Oracles: the serial loop of tests/test_farm_skeleton.py (the result that must survive), the
number of Map calls (none before a refusal), and the files and output of the runs.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from mpi_helpers import clean_env, run_mpi
from test_farm_skeleton import serial_reference, weighted_mean_problem

import hpcbsp
from hpcbsp import BadInput
from hpcbsp.farm import BSFProblem, run_farm

JACOBI = ["-m", "hpcbsp.apps.bsf.jacobi", "--n", "20", "--quiet"]
SERIAL = pytest.mark.serial_only


def _counted(problem: BSFProblem, calls: list[int], side_effect=None) -> BSFProblem:
    def map_fn(x: np.ndarray, idx: np.ndarray) -> np.ndarray:
        calls.append(1)
        if side_effect is not None and len(calls) == 1:
            side_effect()
        return problem.map(x, idx)

    return BSFProblem(items=np.arange(problem.list_length), map=map_fn, reduce=problem.reduce,
                      compute=problem.compute, stop=problem.stop)


def test_run_farm_refuses_an_unwritable_report_before_the_map(monkeypatch):
    monkeypatch.delenv("HPCBSP_FARM_REPORT", raising=False)
    calls: list[int] = []
    problem = _counted(weighted_mean_problem(7), calls)
    with pytest.raises(BadInput, match=r"the farm report /proc/no/r\.jsonl.*: give the farm a report file"):
        hpcbsp.run(run_farm, problem, np.array([5.0]), max_iter=50, report="/proc/no/r.jsonl")
    assert calls == [], "the Map ran before the report was checked"


def test_a_report_that_fails_after_the_check_costs_nothing(tmp_path, monkeypatch, capsys):
    """The report's folder is replaced by a file while the farm runs (from inside the Map):
    the append fails, one warning says so, and the result is the serial loop's."""
    monkeypatch.delenv("HPCBSP_FARM_REPORT", raising=False)
    folder = tmp_path / "reports"
    report = folder / "r.jsonl"

    def break_it() -> None:
        shutil.rmtree(folder)
        folder.write_text("in the way")

    calls: list[int] = []
    base = weighted_mean_problem(7)
    result = hpcbsp.run(run_farm, _counted(base, calls, break_it), np.array([5.0]), max_iter=50,
                        report=str(report))
    expected, iterations = serial_reference(base, np.array([5.0]), 50)
    assert result.converged and result.iterations == iterations
    np.testing.assert_allclose(result.x, expected, rtol=1e-12)
    err = capsys.readouterr().err
    assert f"[hpcbsp] warning: the farm's timings could not be appended to {report}" in err, err
    assert "the run's result stands" in err
    assert folder.read_text() == "in the way"


@SERIAL
def test_the_app_refuses_an_unwritable_report_before_any_work():
    bad = {"HPCBSP_FARM_REPORT": "/proc/no/report.jsonl"}
    alone = subprocess.run([sys.executable, *JACOBI], capture_output=True, text=True, timeout=120,
                           env=clean_env(**bad), stdin=subprocess.DEVNULL)
    under = run_mpi(2, JACOBI, timeout=90, env=bad)
    # (under mpiexec, what the program said: Open MPI's mpiexec adds a block of its own)
    for code, out, err in ((alone.returncode, alone.stdout, alone.stderr),
                           (under.returncode, under.stdout, under.program_stderr)):
        assert code == 2 and out == "", out + err
        assert err.strip().splitlines() == [
            "[hpcbsp] error: environment variable HPCBSP_FARM_REPORT='/proc/no/report.jsonl' is not a file that "
            "can be written (its folder cannot be created: No such file or directory): correct it or unset it "
            "(docs/environment.md)"]


@SERIAL
def test_the_app_writes_its_report_into_new_folders(tmp_path):
    report = tmp_path / "new" / "deeper" / "report.jsonl"
    res = run_mpi(2, JACOBI, timeout=90, env={"HPCBSP_FARM_REPORT": str(report)})
    assert res.returncode == 0, res.output
    lines = report.read_text().splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert line["workers"] == 1 and line["nprocs"] == 2 and line["list_length"] == 20
    assert sorted(p.name for p in report.parent.iterdir()) == ["report.jsonl"]  # no probe file left
