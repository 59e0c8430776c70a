"""A net under every command line: generated arguments, boundary values, files and folders.

Each command (every app, ``hpcbsp``, every ``hpcbsp-cost`` subcommand, ``hpcbsp.apps.elastic.train``,
the benchmarks' argument parsing) is driven with arguments drawn by hypothesis from its own
options, mixing sensible values with boundaries (0, 1, negative, huge, NaN, text, a missing
file, an existing file or folder where the other is wanted).  The oracle is the project's
rule for bad input, checked independently of each command's code:

* the exit status is 0, 1 or 2 (never a crash status, never a signal);
* no ``Traceback`` in stdout or stderr;
* the command ends within its bound (a subprocess timeout);
* nothing in the working folder is written, changed or removed except the output paths the
  command was given (and their parent folders) and its documented default output folder:
  a snapshot of a temporary working folder (names and contents) is compared before and after.

Whole programs run in subprocesses on one process each (small sizes keep them quick; a huge size
must be refused before the work).  ``hpcbsp-cost`` subcommands that do not start MPI, and the
benchmarks' parsers (with ``--help`` last, so parsing is all that runs), run in-process.
``HPCBSP_CLI_NET_EXAMPLES`` sets the examples per command (default 3; raise it to hunt).
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mpi_helpers import clean_env

pytestmark = pytest.mark.serial_only  # launches its own processes: runs in the serial pass, not once per rank

EXAMPLES = int(os.environ.get("HPCBSP_CLI_NET_EXAMPLES", "3"))
TIMEOUT = 90  # seconds per command: every generated run is small or refused at once
BIN = Path(sys.executable).parent

# -- values ------------------------------------------------------------------------------------

BAD_NUMBERS = ["0", "-1", "nan", "inf", "-inf", "abc", "", "1e400", "١", "2.5", "99999999999999999999999"]
# A size: small ones run; a huge one must be refused before the work (it cannot fit in memory).
SIZE = st.one_of(st.integers(1, 40).map(str), st.sampled_from(BAD_NUMBERS + ["1e15", "10**9", "1_0", "1e1"]))
# An amount of work (steps, iterations): small, or invalid.
COUNT = st.one_of(st.integers(0, 12).map(str), st.sampled_from(BAD_NUMBERS))
REAL = st.sampled_from(["0", "1", "-1", "0.5", "0.25", "1e-12", "1e-300", "1e300", "nan", "inf", "abc", "0.1"])
SEED = st.sampled_from(["0", "1", "-1", "123456789012345678901234567890", "abc", "1e3", "nan"])
FLAG = st.just(None)
# A list length for the cost model: any size is valid (work O(min(sqrt(l), 10^6))), so the net keeps
# to small ones and invalid ones to stay quick.
LIST_LENGTH = st.one_of(st.integers(1, 5000).map(str), st.sampled_from(BAD_NUMBERS + ["1_0", "1e3"]))


def out_file(*suffixes: str) -> st.SearchStrategy[str]:
    """An output file name: new (maybe in new folders), existing, a folder, a wrong ending."""
    good = [f"new{s}" for s in suffixes] + [f"made/deeper/new{s}" for s in suffixes]
    return st.sampled_from(good + ["existing.txt", "existing_dir", "new.wrong", "existing_dir/keep.txt",
                                   "missing_parent_is_file/existing.txt/x.json"])


OUT_DIR = st.sampled_from(["newdir", "made/deeper/dir", "existing_dir", "existing.txt", "existing.txt/sub"])
IN_FILE = st.sampled_from(["model.json", "runs.csv", "existing.txt", "existing_dir", "missing.json",
                           "garbage.json", "empty.csv"])

# Options that name outputs (their values may be written).
OUTPUT_OPTIONS = {"--out", "-o", "--output", "--ledger", "--raster", "--spikes", "--out-dir", "--checkpoint"}


def ledger() -> st.SearchStrategy[str]:
    return out_file(".json", ".csv")


COMMON = {"--seed": SEED, "--ledger": ledger(), "--json": FLAG, "--quiet": FLAG}
IRREGULAR = {**COMMON, "--mode": st.sampled_from(["fabsp", "bsp", "naive", "other"]), "--buffer": COUNT,
             "--max-pending": COUNT, "--chunk": COUNT, "--no-check": FLAG,
             "--routing": st.sampled_from(["auto", "direct", "2d", "3d", "4d", ""])}
FARM = {**COMMON, "--n": SIZE, "--eps": REAL, "--max-iter": COUNT, "--out": out_file(".npy"),
        "--checkpoint": OUT_DIR, "--every": COUNT, "--restart": FLAG}

# command -> (argv prefix, base arguments that keep a run small, options and their values,
#             default output folder the command documents)
PROGRAMS: dict[str, tuple[list[str], list[str], dict[str, st.SearchStrategy], str | None]] = {
    "heat": (["-m", "hpcbsp.apps.heat"], ["--n", "40", "--steps", "5"],
             {**COMMON, "--n": SIZE, "--steps": COUNT, "--alpha": REAL, "--checkpoint": OUT_DIR, "--every": COUNT,
              "--restart": FLAG, "--out": out_file(".npy"), "--check": FLAG}, None),
    "jacobi": (["-m", "hpcbsp.apps.bsf.jacobi"], ["--n", "30"], FARM, None),
    "cimmino": (["-m", "hpcbsp.apps.bsf.cimmino"], ["--n", "30"], {**FARM, "--relaxation": REAL}, None),
    "demo": (["-m", "hpcbsp.apps.demo"], ["--n", "30"], {**COMMON, "--n": SIZE, "--out-dir": OUT_DIR},
             "runs"),
    "classic": (["-m", "hpcbsp.apps.classic"], ["--n", "20"], {**COMMON, "--n": SIZE}, None),
    "rowjacobi": (["-m", "hpcbsp.apps.rowjacobi"], ["--n", "30"],
                  {**COMMON, "--n": SIZE, "--format": st.sampled_from(["dense", "csr", "x"]), "--per-row": COUNT,
                   "--eps": REAL, "--max-iter": COUNT}, None),
    "histogram": (["-m", "hpcbsp.apps.irregular.histogram"], ["--n", "500", "-T", "50"],
                  {**IRREGULAR, "--n": SIZE, "-n": SIZE, "-T": SIZE, "--rounds": COUNT, "--checkpoint": OUT_DIR,
                   "--every": COUNT, "--restart": FLAG}, None),
    "index_gather": (["-m", "hpcbsp.apps.irregular.index_gather"], ["--n", "500", "-T", "50"],
                     {**IRREGULAR, "--n": SIZE, "--reads": SIZE, "-T": SIZE}, None),
    "bfs": (["-m", "hpcbsp.apps.irregular.bfs"], ["--n", "100"],
            {**IRREGULAR, "--n": SIZE, "--degree": REAL, "--source": COUNT}, None),
    "triangles": (["-m", "hpcbsp.apps.irregular.triangles"], ["--n", "100", "--degree", "4"],
                  {**IRREGULAR, "--graph": st.sampled_from(["er", "rmat"]), "--n": SIZE, "--degree": REAL,
                   "--scale": st.sampled_from(["0", "1", "4", "40", "63", "64", "1000", "-1", "nan", "abc"]),
                   "--edge-factor": st.sampled_from(["1", "2", "0", "-1", "1e9", "abc"]), "--chunk-rows": COUNT},
                  None),
    "toposort": (["-m", "hpcbsp.apps.irregular.toposort"], ["--n", "200"],
                 {**IRREGULAR, "--n": SIZE, "--degree": REAL}, None),
    "snn": (["-m", "hpcbsp.apps.snn"], ["--mode", "serial", "--n", "120", "--fanout", "10", "--time-ms", "10"],
            {**COMMON, "--mode": st.sampled_from(["serial", "bsp", "async", "x"]), "--n": SIZE, "--neurons": SIZE,
             "--fanout": COUNT, "--areas": COUNT, "--inter-area": REAL, "--delay-min": COUNT,
             "--delay-max": st.sampled_from(["30", "0", "-1", "1e9", "abc"]), "--time-ms": REAL, "--dt": REAL,
             "--superstep": st.sampled_from(["global", "cross", "x"]), "--window": COUNT,
             "--raster": out_file(".png", ".svg"), "--spikes": out_file(".npz", ".csv")}, None),
    "elastic.train": (["-m", "hpcbsp.apps.elastic.train"],
                      ["--simulate", "--dataset", "generated", "--duration", "0.3", "--no-plot", "--policy", "bsp"],
                      {"--policy": st.sampled_from(["bsp", "asp,ssp", "all", "nosuch", ""]), "--R": COUNT,
                       "--s": COUNT, "--backup": COUNT, "--workers": COUNT, "--base-delay": REAL,
                       "--jitter": REAL, "--stall-prob": REAL, "--duration": st.sampled_from(["0.2", "0", "-1", "nan"]),
                       "--eval-every": REAL, "--repeats": st.sampled_from(["1", "2", "0", "-1"]), "--seed": SEED,
                       "--slowdown": st.sampled_from(["1,2", "1,1,1.5,3", "0", "x", "1,-1"]),
                       "--out-dir": OUT_DIR, "--out": OUT_DIR, "--checkpoint": OUT_DIR,
                       "--checkpoint-every": REAL, "--restart": FLAG, "--quiet": FLAG}, "runs"),
}

# -- the working folder ------------------------------------------------------------------------

MODEL = {"latency": 1e-5, "t_c": 1e-4, "t_map": 1.0, "t_a": 1e-6, "t_p": 1e-3, "list_length": 100}


def make_workdir(path: Path) -> None:
    """Files a user might have: the command must leave every one alone unless told to write it."""
    (path / "existing.txt").write_text("draft\n")
    (path / "existing_dir").mkdir()
    (path / "existing_dir" / "keep.txt").write_text("keep me\n")
    (path / "garbage.json").write_text("{not json")
    (path / "empty.csv").write_text("")
    (path / "runs.csv").write_text("workers,seconds\n" + "".join(
        f"{k},{1.0 / k + 1e-3 * k:.6f}\n" for k in (1, 2, 3, 4, 6, 8) for _ in range(2)))
    from hpcbsp.cli.cost import main as cost_main

    with contextlib.redirect_stdout(io.StringIO()):
        assert cost_main(["bsf", *[a for k, v in MODEL.items() for a in (f"--{k.replace('_', '-')}", str(v))],
                          "-o", str(path / "model.json")]) == 0


def snapshot(path: Path) -> dict[str, str]:
    """Every file and folder under ``path``: name -> content hash ('dir' for folders)."""
    out = {}
    for root, dirs, files in os.walk(path):
        for d in dirs:
            out[os.path.relpath(os.path.join(root, d), path)] = "dir"
        for f in files:
            full = os.path.join(root, f)
            with open(full, "rb") as fh:
                out[os.path.relpath(full, path)] = hashlib.sha1(fh.read()).hexdigest()
    return out


def allowed(rel: str, outputs: list[str], default_dir: str | None) -> bool:
    """May a command given ``outputs`` have touched ``rel``?"""
    rel = os.path.normpath(rel)
    for out in outputs + ([default_dir] if default_dir else []):
        out = os.path.normpath(out)
        if rel == out or rel.startswith(out + os.sep):  # the output itself, or inside it
            return True
        if out.startswith(rel + os.sep):                 # a parent folder made for it
            return True
        # np.save / savefig may add their own ending to a name without it
        if rel.startswith(out + ".") and os.sep not in rel[len(out):]:
            return True
    return False


def check_untouched(before: dict[str, str], after: dict[str, str], argv: list[str], default_dir: str | None
                    ) -> None:
    outputs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a in OUTPUT_OPTIONS]
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    stray = [k for k in changed if not allowed(k, outputs, default_dir)]
    assert not stray, f"{argv}: wrote, changed or removed {stray} (outputs given: {outputs})"


def env() -> dict[str, str]:
    e = clean_env()
    e["PYTHONUNBUFFERED"] = "1"
    e["MPLBACKEND"] = "Agg"
    return e


def run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, env=env(),
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"did not end within {TIMEOUT} s: {' '.join(cmd)}")


def assert_clean(proc: subprocess.CompletedProcess, what: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 1, 2), f"{what}: exit status {proc.returncode}\n{out[-3000:]}"
    assert "Traceback" not in out, f"{what}:\n{out[-3000:]}"
    if proc.returncode == 2:  # a usage error is one line on stderr naming the problem
        assert proc.stderr.strip(), f"{what}: exit 2 without a message"


@st.composite
def argv_for(draw, options: dict[str, st.SearchStrategy]) -> list[str]:
    names = sorted(options)
    argv: list[str] = []
    for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=4)):
        value = draw(options[name])
        argv += [name] if value is None else [name, value]
    return argv


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    make_workdir(tmp_path)
    return tmp_path


def _fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cwd")
    make_workdir(path)
    return path


@pytest.mark.parametrize("command", sorted(PROGRAMS))
@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_program_command_lines(command, data, tmp_path_factory):
    prefix, base, options, default_dir = PROGRAMS[command]
    argv = base + data.draw(argv_for(options), label="argv")
    cwd = _fresh(tmp_path_factory)
    before = snapshot(cwd)
    proc = run([sys.executable, *prefix, *argv], cwd)
    assert_clean(proc, f"{command} {' '.join(argv)}")
    check_untouched(before, snapshot(cwd), argv, default_dir)


# -- the cases the issue reported, each with the answer the project requires -------------------

REPORTED = [
    # (argv after python, exit status, a phrase of the one-line error)
    (["-m", "hpcbsp.apps.bsf.jacobi", "--n", "30", "--ledger", "x.txt"], 2, ".json or .csv"),
    (["-m", "hpcbsp.apps.snn", "--mode", "serial", "--n", "100", "--raster", "r.txt"], 2, ".png"),
    (["-m", "hpcbsp.apps.demo", "--n", "30", "--out-dir", "existing.txt"], 2, "not a folder"),
    (["-m", "hpcbsp.apps.elastic.train", "--simulate", "--dataset", "generated", "--out", "existing.txt"], 2,
     "not a folder"),
    (["-m", "hpcbsp.apps.irregular.triangles", "--graph", "rmat", "--scale", "40"], 2, "memory"),
    (["-m", "hpcbsp", "run", "existing_dir"], 2, "folder"),
    (["-m", "hpcbsp.apps.irregular.histogram", "--n", "-n", "1000"], 2, "--n"),
    (["-m", "hpcbsp.apps.classic", "--n", "10"], 0, ""),
    # found by this net: seeds beyond int64 (recorded in checkpoints) and negative ones (numpy)
    (["-m", "hpcbsp.apps.irregular.histogram", "--n", "100", "-T", "10", "--rounds", "2", "--seed", "1" + "0" * 30], 2,
     "not a seed"),
    (["-m", "hpcbsp.apps.irregular.bfs", "--n", "50", "--seed", "-1"], 2, "not a seed"),
    (["-m", "hpcbsp.apps.bsf.system"], 2, "hpcbsp.apps.bsf.jacobi"),
    (["-m", "hpcbsp.apps.elastic.train", "--simulate", "--dataset", "generated", "--duration", "1",
      "--base-delay", "0"], 2, "--base-delay"),
    # found by this net: a virtual clock with (near) zero-length iterations never ends
    (["-m", "hpcbsp.apps.elastic.train", "--simulate", "--dataset", "generated", "--jitter", "1e300"], 2, "--jitter"),
    (["-m", "hpcbsp.apps.elastic.train", "--simulate", "--dataset", "generated", "--change-at", "0.1",
      "--change-factor", "1e-300"], 2, "--change-factor"),
]


@pytest.mark.parametrize("argv,status,phrase", REPORTED)
def test_reported_cases(argv, status, phrase, workdir):
    before = snapshot(workdir)
    proc = run([sys.executable, *argv], workdir)
    assert_clean(proc, " ".join(argv))
    assert proc.returncode == status, proc.stdout + proc.stderr
    if status == 2:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and phrase in lines[0], proc.stderr
    check_untouched(before, snapshot(workdir), argv, None)


# -- hpcbsp --------------------------------------------------------------------------------------

HPCBSP_CASES = [
    ([], 2), (["--version"], 0), (["--help"], 0), (["apps"], 0), (["apps", "x"], 2), (["run"], 2),
    (["run", "--help"], 0), (["run", "existing_dir"], 2), (["run", "missing.py"], 2), (["existing_dir"], 2),
    (["frobnicate"], 2), (["-m"], 2), (["-m", "no.such.module"], 2), (["run", "-m", "hpcbsp.nosuch"], 2),
    (["-m", "hpcbsp.apps.classic", "--n", "5"], 0), (["run", "-m", "hpcbsp.apps.heat", "--n", "x"], 2),
    (["script_without_suffix", "a", "b"], 0), (["run", "script_without_suffix"], 0), (["--bogus"], 2),
    (["info", "--bogus"], 2),
]


@pytest.mark.parametrize("argv,status", HPCBSP_CASES)
def test_hpcbsp_command_line(argv, status, workdir):
    (workdir / "script_without_suffix").write_text("import sys\nprint('args', sys.argv[1:])\n")
    before = snapshot(workdir)
    proc = run([str(BIN / "hpcbsp"), *argv], workdir)
    assert_clean(proc, f"hpcbsp {' '.join(argv)}")
    assert proc.returncode == status, proc.stdout + proc.stderr
    check_untouched(before, snapshot(workdir), argv, None)
    if argv and argv[-1] == "b":
        assert "args ['a', 'b']" in proc.stdout  # a script without .py runs with its arguments


def test_hpcbsp_apps_lists_every_app(workdir):
    proc = run([str(BIN / "hpcbsp"), "apps"], workdir)
    listed = {line.split()[0] for line in proc.stdout.splitlines()[1:] if line.strip()}
    apps_dir = Path(__file__).resolve().parents[1] / "hpcbsp" / "apps"
    # Oracle: the modules that define main(), found by reading the files here (a family's
    # sub-package lists its apps as FAMILY.NAME).
    expected = {p.relative_to(apps_dir).with_suffix("").as_posix().replace("/", ".")
                for p in apps_dir.glob("**/*.py")
                if "\ndef main(" in p.read_text() and not p.parent.joinpath("__main__.py").exists()} | {"snn"}
    assert {"irregular.histogram", "bsf.jacobi", "lu"} <= expected
    assert listed == expected, proc.stdout


def test_versions_agree(workdir):
    from importlib.metadata import version

    want = version("hpcbsp")
    assert run([str(BIN / "hpcbsp"), "--version"], workdir).stdout.split()[-1] == want
    assert run([str(BIN / "hpcbsp-cost"), "--version"], workdir).stdout.split()[-1] == want


# -- hpcbsp-cost (in-process: these subcommands start no MPI) ------------------------------------

COST = {
    "bsf": (["--latency", "1e-5", "--t-c", "1e-4", "--t-map", "1", "--t-a", "1e-6", "--t-p", "1e-3",
             "--list-length", "100"],
            {"--latency": REAL, "--t-c": REAL, "--t-map": REAL, "--t-a": REAL, "--t-p": REAL,
             "--list-length": LIST_LENGTH, "--comm": st.sampled_from(["linear", "tree", "x"]),
             "--granularity": st.sampled_from(["continuous", "ceil", "x"]),
             "--workers": st.sampled_from(["1,2,4", "1-16", "0", "1,2,4,...,1000000", "x", ""]),
             "-o": out_file(".json"), "--json": FLAG}),
    "fit": (["--runs", "runs.csv", "-o", "fitted.json", "--bootstrap", "5"],
            {"--runs": IN_FILE, "--list-length": LIST_LENGTH, "--bootstrap": st.sampled_from(["0", "1", "5", "-5", "nan"]),
             "--seed": SEED, "-o": out_file(".json"), "--json": FLAG}),
    "predict": (["model.json"], {"--workers": st.sampled_from(["1,2,4", "1-64", "0", "-1", "x"]),
                                 "--json": FLAG}),
    "validate": (["model.json", "--runs", "runs.csv"],
                 {"--runs": IN_FILE, "--max-mape": REAL, "--json": FLAG}),
    "plot": (["model.json", "-o", "plot.png"],
             {"--runs": IN_FILE, "--max-workers": SIZE, "-o": out_file(".png", ".svg", ".pdf"), "--json": FLAG}),
    "ledger": (["garbage.json", "--profile", "model.json"],
               {"--profile": IN_FILE, "--limit": COUNT, "--json": FLAG}),
}


def call_cost(argv: list[str]) -> tuple[int, str]:
    from hpcbsp.cli.cost import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("sub", sorted(COST))
@settings(max_examples=3 * EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_cost_command_lines(sub, data, tmp_path_factory, monkeypatch):
    base, options = COST[sub]
    argv = [sub, *base, *data.draw(argv_for(options), label="argv")]
    cwd = _fresh(tmp_path_factory)
    monkeypatch.chdir(cwd)
    before = snapshot(cwd)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no nan tables from 0/0
        code, out = call_cost(argv)
    assert code in (0, 1, 2), (argv, out)
    assert "Traceback" not in out, (argv, out)
    echoed = out
    for value in argv:  # an error message may quote the input; a computed nan is what must not appear
        echoed = echoed.replace(repr(value), "")
    assert not re.search(r"\bnan\b", echoed, re.IGNORECASE), (argv, out)
    check_untouched(before, snapshot(cwd), argv, None)


@pytest.mark.parametrize("argv,status,phrase", [
    (["bsf", "--latency", "0", "--t-c", "0", "--t-map", "0", "--t-a", "0", "--t-p", "0", "--list-length", "1"],
     2, "--t-map"),
    (["fit", "--runs", "runs.csv", "-o", "m.json", "--bootstrap", "-5"], 2, "--bootstrap"),
    (["plot", "model.json", "-o", "x"], 2, ".png"),
    (["validate", "model.json", "--runs", "runs.csv", "--max-mape", "0"], 1, "exceeds --max-mape"),
    (["validate", "model.json", "--runs", "runs.csv", "--max-mape", "1e9"], 0, "within --max-mape"),
    (["calibrate", "--timeout", "0", "--", "python", "-c", "pass"], 2, "--timeout"),
])
def test_cost_reported_cases(argv, status, phrase, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    code, out = call_cost(argv)
    assert code == status and phrase in out, (argv, code, out)


def test_validate_max_mape_judges_the_computed_mape(workdir, monkeypatch):
    """Oracle: the MAPE recomputed here from the model's formula and the runs file."""
    monkeypatch.chdir(workdir)
    from hpcbsp.farm.model import BSFModel
    from hpcbsp.farm.params import BSFParams

    model = BSFModel(BSFParams(**MODEL))
    rows = [line.split(",") for line in (workdir / "runs.csv").read_text().splitlines()[1:]]
    ape = [100 * abs(float(model.time(int(k))[0]) - float(t)) / float(t) for k, t in rows]
    mape = sum(ape) / len(ape)
    code_low, _ = call_cost(["validate", "model.json", "--runs", "runs.csv", "--max-mape", f"{mape * 0.99:.6g}"])
    code_high, _ = call_cost(["validate", "model.json", "--runs", "runs.csv", "--max-mape", f"{mape * 1.01:.6g}"])
    assert (code_low, code_high) == (1, 0)
    code, out = call_cost(["validate", "model.json", "--runs", "runs.csv", "--max-mape", "0", "--json"])
    doc = json.loads(out[:out.rindex("}") + 1])
    assert code == 1 and doc["passed"] is False and abs(doc["mape"] - mape) < 1e-6 * mape


# -- the benchmarks' argument parsing (in-process; --help last, so nothing but parsing runs) ------

BENCH = {
    "kernels": {"--n": SIZE, "--repeats": COUNT, "--repeat": COUNT, "--nprocs": SIZE, "--table": SIZE,
                "--seed": SEED, "--quick": FLAG, "--fsum": FLAG, "--only": st.sampled_from(["sum", "x"])},
    "fabsp": {"--updates": SIZE, "--naive-updates": SIZE, "--rma-updates": SIZE, "--table": SIZE, "--repeats": COUNT, "--chunk": SIZE,
              "--seed": SEED, "--quick": FLAG, "--imbalance": COUNT},
    "snn": {"--n": SIZE, "--neurons": SIZE, "--fanout": COUNT, "--time-ms": REAL, "--repeats": COUNT,
            "--rounds": COUNT, "--quick": FLAG, "--json": FLAG},
    "sync": {"--iters": COUNT, "--mib": REAL, "--repeats": COUNT, "--rounds": COUNT, "--quick": FLAG},
    "zipline": {"--repeats": COUNT, "--n": st.sampled_from(["10,100", "0", "x"]), "--R": st.sampled_from(["15", "x"]),
                "--quick": FLAG, "--no-baseline": FLAG},
}
# bench fabsp's options for runs across nodes (issue 33, item 1)
BENCH["fabsp"].update({"--link-rate": st.sampled_from(["100mbit", "1gbit", "2e6", "0", "fast"]),
                       "--sections": st.sampled_from(["link", "overlap,link", "memory,x", "", "x"]),
                       "--iface": st.sampled_from(["eth0", "lo"])})


@pytest.mark.parametrize("bench", sorted(BENCH))
@settings(max_examples=5 * EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_benchmark_argument_parsing(bench, data):
    import importlib

    main = importlib.import_module(f"hpcbsp.bench.{bench}").main
    argv = data.draw(argv_for(BENCH[bench]), label="argv") + ["--help"]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)  # (a benchmark may turn argparse's exit into its return value)
        except SystemExit as exc:
            code = exc.code
    assert code in (0, 2), (argv, err.getvalue())
    assert "Traceback" not in err.getvalue()
    if code == 2:
        assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
