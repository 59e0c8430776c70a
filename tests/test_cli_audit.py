"""The rough edges a new-user audit of the command lines found (issue 47, C.3 to C.8, C.10, and a
closed stdout), each run as a user runs it: a subprocess, with a timeout.

Bad input gets one line on stderr naming what is wrong and what to do, exit 2, before the work;
``hpcbsp info`` shows a bad ``HPCBSP_*`` value instead of refusing to run; a reader that closes
stdout ends a command quietly.  (``hpcbsp supervise``'s edges: tests/test_supervise_edges.py.)

Oracles: hand-written model files and values with the message each must get, the file system
after the command, hand-rendered docstrings, and the commands' exit status, stdout and stderr.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import clean_env

from hpcbsp.util.text import plain

pytestmark = pytest.mark.serial_only  # starts its own processes

PYTHON = sys.executable
BIN = Path(PYTHON).parent
TIMEOUT = 120


def run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd, env=clean_env(**env),
                          stdin=subprocess.DEVNULL)


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line of a refusal (exit 2, nothing on stdout)."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == "", proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# -- C.3: the benchmarks' banner comes after the arguments are checked --------------------------

def test_bench_help_and_usage_errors_come_before_the_banner(tmp_path):
    helped = run([PYTHON, "-m", "hpcbsp.bench", "bsf", "--help"], tmp_path)
    assert helped.returncode == 0 and helped.stdout.startswith("usage: python -m hpcbsp.bench bsf"), helped.stdout
    assert "measuring hpcbsp from" not in helped.stdout + helped.stderr
    line = one_line(run([PYTHON, "-m", "hpcbsp.bench", "bsf", "--bogus"], tmp_path))
    assert line.startswith("python -m hpcbsp.bench bsf: error: unrecognized arguments: --bogus"), line
    line = one_line(run([PYTHON, "-m", "hpcbsp.bench", "bsf", "--n", "5", "--workers", "1-9"], tmp_path))
    assert "--n (5) must be at least the largest K (9)" in line, line


def test_bench_banner_is_the_first_line_of_a_run(tmp_path):
    ran = run([PYTHON, "-m", "hpcbsp.bench", "kernels", "--n", "1000", "--repeats", "1", "--only", "dot"], tmp_path)
    assert ran.returncode == 0, ran.stderr
    first, second = ran.stdout.splitlines()[:2]
    assert first.startswith("measuring hpcbsp from "), ran.stdout
    assert second.startswith("kernels benchmark: n = 1,000 elements"), ran.stdout


# -- C.4: a model file's bad parameter is named with its file -----------------------------------

MODEL = {"format": "hpcbsp-bsf-model/1", "comm": "linear", "granularity": "continuous",
         "params": {"latency": 1e-05, "t_c": 1e-06, "t_map": 1.0, "t_a": 1e-06, "t_p": 1e-06, "list_length": 1000}}


@pytest.mark.parametrize("name, value, says", [
    ("t_map", -1, "BSF parameter t_map must be a finite number >= 0, got -1.0"),
    ("latency", -1e-6, "BSF parameter latency must be a finite number >= 0, got -1e-06"),
    ("list_length", 0, "BSF parameter list_length must be an integer >= 1 (> 0), got 0"),
    ("list_length", 2.5, "BSF parameter list_length must be a whole number of elements (an integer >= 1), got 2.5"),
    ("order_share", 2, "BSF parameter order_share must be within [0, 1], got 2.0"),
    ("t_p", "fast", "BSF parameter t_p is not a number: 'fast'"),
])
def test_predict_names_the_file_and_the_parameter(tmp_path, name, value, says):
    model = json.loads(json.dumps(MODEL))
    model["params"][name] = value
    (tmp_path / "model.json").write_text(json.dumps(model))
    line = one_line(run([str(BIN / "hpcbsp-cost"), "predict", "model.json", "--workers", "1,2"], tmp_path))
    assert line == f"hpcbsp-cost predict: error: model.json: {says}", line


# -- C.5: worker counts are exact integers of a sane size ---------------------------------------

@pytest.mark.parametrize("workers, says", [
    ("1,1e30", "worker count '1e30' in '1,1e30' is too large: at most 2,147,483,646"),
    ("1,2,4,...,1e22", "worker count '1e22' in '1,2,4,...,1e22' is too large"),
    ("1,2.5", "worker counts are integers, got '2.5' in '1,2.5'"),
])
def test_absurd_and_fractional_worker_counts_are_refused(tmp_path, workers, says):
    (tmp_path / "model.json").write_text(json.dumps(MODEL))
    for argv in ([str(BIN / "hpcbsp-cost"), "predict", "model.json", "--workers", workers],
                 [PYTHON, "-m", "hpcbsp.bench", "bsf", "--workers", workers]):
        line = one_line(run(argv, tmp_path))
        assert f"argument --workers: {says}" in line, line
        assert "1000000000000000019884624838656" not in line


def test_a_worker_count_with_an_exponent_is_exact(tmp_path):
    (tmp_path / "model.json").write_text(json.dumps(MODEL))
    ran = run([str(BIN / "hpcbsp-cost"), "predict", "model.json", "--workers", "1e3", "--json"], tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert [point["workers"] for point in json.loads(ran.stdout)["points"]] == [1000]


# -- C.6, C.7: --checkpoint mistakes, said in one line before the work -------------------------

HEAT = [PYTHON, "-m", "hpcbsp.apps.heat", "--n", "50", "--steps", "4", "--quiet"]


def test_restart_from_a_folder_without_a_checkpoint_is_refused(tmp_path):
    line = one_line(run([*HEAT, "--checkpoint", "NEW", "--restart"], tmp_path))
    assert line.endswith("error: --restart: there is no checkpoint in NEW to restart from; give the folder that "
                         "holds one, or add --every K to start afresh and write checkpoints there "
                         "(see python -m hpcbsp.apps.heat --help)"), line
    assert not (tmp_path / "NEW").exists()
    # with --every the same command starts afresh and writes there (what hpcbsp supervise relies on)
    ran = run([*HEAT, "--checkpoint", "NEW", "--restart", "--every", "2"], tmp_path)
    assert ran.returncode == 0 and (tmp_path / "NEW" / "meta.json").exists(), ran.stderr


def test_a_checkpoint_path_under_a_file_names_the_file(tmp_path):
    (tmp_path / "afile.txt").write_text("notes\n")
    line = one_line(run([*HEAT, "--checkpoint", "afile.txt/sub", "--every", "2"], tmp_path))
    assert "error: --checkpoint afile.txt/sub: afile.txt is a file, not a folder" in line, line
    assert "File exists" not in line and (tmp_path / "afile.txt").read_text() == "notes\n"


# -- C.8: `hpcbsp apps` in plain text ---------------------------------------------------------

@pytest.mark.parametrize("marked, shown", [
    ("``make run``: hpcbsp in one minute", "make run: hpcbsp in one minute"),
    (":mod:`hpcbsp.farm` and :func:`~hpcbsp.runtime.api.runner.run`", "hpcbsp.farm and run"),
    (":ref:`the guide <guide>`, `Perfetto <https://perfetto.dev>`_", "the guide, Perfetto"),
    ("(Bisseling, *Parallel Scientific Computation*, ch. 3) **now**", "(Bisseling, Parallel Scientific Computation, ch. 3) now"),
    ("n = 2^m, A * x, --mode bsp|async", "n = 2^m, A * x, --mode bsp|async"),
    ("``*args`` and ``:mod:``", "*args and :mod:"),
])
def test_plain_removes_the_markup_only(marked, shown):
    assert plain(marked) == shown


def test_hpcbsp_apps_shows_plain_text(tmp_path):
    ran = run([str(BIN / "hpcbsp"), "apps"], tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert "`" not in ran.stdout and ":mod:" not in ran.stdout and "*Parallel" not in ran.stdout, ran.stdout
    demo = next(line for line in ran.stdout.splitlines() if line.split()[:1] == ["demo"])
    assert demo.split(None, 1)[1] == "make run: hpcbsp in one minute, on 2 ranks.", demo  # hpcbsp/apps/demo.py


# -- C.10: hpcbsp info shows a bad HPCBSP_* value; other commands refuse it ---------------------

def test_info_shows_a_bad_setting_and_runs(tmp_path):
    ran = run([str(BIN / "hpcbsp"), "info"], tmp_path, HPCBSP_SYNC_TIMEOUT="soon", HPCBSP_WAIT="yield",
              HPCBSP_SYNC_TIMOUT="3")
    assert ran.returncode == 0, ran.stderr
    shown = ran.stdout[ran.stdout.index("hpcbsp_settings"):]
    assert "HPCBSP_SYNC_TIMEOUT='soon'  INVALID: is not a positive number of seconds; every other hpcbsp " \
           "command refuses to run with it (exit 2)" in shown, shown
    assert "HPCBSP_WAIT='yield'\n" in shown
    assert "HPCBSP_SYNC_TIMOUT='3'  UNKNOWN: not a variable of hpcbsp's, ignored; did you mean " \
           "HPCBSP_SYNC_TIMEOUT?" in shown, shown
    doc = json.loads(run([str(BIN / "hpcbsp"), "info", "--json"], tmp_path, HPCBSP_WAIT="sometimes").stdout)
    assert doc["hpcbsp_settings"] == {"HPCBSP_WAIT": {"value": "sometimes",
                                                       "problem": "invalid: is not one of auto, spin, yield"}}
    line = one_line(run([str(BIN / "hpcbsp"), "run", "-m", "hpcbsp.apps.heat"], tmp_path, HPCBSP_SYNC_TIMEOUT="soon"))
    assert line.startswith("[hpcbsp] error: environment variable HPCBSP_SYNC_TIMEOUT='soon' is not"), line


def test_info_still_refuses_a_bad_option(tmp_path):
    line = one_line(run([str(BIN / "hpcbsp"), "info", "--bogus"], tmp_path))
    assert line.startswith("hpcbsp info: error: unrecognized arguments: --bogus"), line


# -- a closed stdout: quiet, status 141 ------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["hpcbsp", "--help"], ["hpcbsp", "apps"], ["hpcbsp", "--version"], ["hpcbsp", "supervise", "--help"],
    ["hpcbsp-cost", "--help"], ["hpcbsp-cost", "predict", "model.json", "--workers", "1-500"],
    ["-m", "hpcbsp.apps.heat", "--help"], ["-m", "hpcbsp.bench", "--help"], ["-m", "hpcbsp.bench", "bsf", "--help"],
])
@pytest.mark.parametrize("unbuffered", ["1", ""])
def test_a_closed_stdout_ends_a_command_quietly(tmp_path, argv, unbuffered):
    """stdout is a pipe whose reader has gone before the command writes (``| head`` that has read
    its lines): status 141 (128 + SIGPIPE), nothing on stderr; buffered or not."""
    (tmp_path / "model.json").write_text(json.dumps(MODEL))
    cmd = [PYTHON, *argv] if argv[0] == "-m" else [str(BIN / argv[0]), *argv[1:]]
    env = clean_env(PYTHONUNBUFFERED=unbuffered)
    if not unbuffered:
        env.pop("PYTHONUNBUFFERED")
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(cmd, stdout=write, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT, cwd=tmp_path,
                              env=env, stdin=subprocess.DEVNULL)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, ""), proc.stderr
