"""Property tests: command lines given bad input exit with status 2 and one clear line, never a
traceback.  Each CLI's ``main(argv)`` runs in-process (fast); a few whole-process checks confirm
the console scripts behave the same."""
from __future__ import annotations

import contextlib
import importlib
import io
import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# "module [subcommand]" with main(argv) -> (options that take a value, flags)
CLIS = {
    "hpcbsp.apps.heat": (["--n", "--steps", "--alpha", "--every", "--checkpoint"], ["--restart", "--check"]),
    "hpcbsp.apps.demo": (["--n"], []),
    "hpcbsp.apps.bsf.jacobi": (["--n", "--max-iter"], []),
    "hpcbsp.apps.bsf.cimmino": (["--n", "--max-iter"], []),
    "hpcbsp.cli.info": ([], ["--json"]),
    "hpcbsp.apps.irregular.histogram": (["-n", "-T", "--mode", "--rounds", "--every", "--checkpoint", "--seed",
                               "--chunk", "--skew"], ["--restart", "--no-check", "--combine"]),
    "hpcbsp.apps.snn.__main__": (["--mode", "--neurons", "--fanout", "--delay-min", "--time-ms", "--dt",
                                  "--seed", "--superstep", "--window"], ["--json", "--quiet"]),
    "hpcbsp.apps.elastic.train": (["--policy", "--R", "--s", "--s-lower", "--s-upper", "--slowdown",
                              "--workers", "--backup", "--checkpoint", "--checkpoint-every"],
                             ["--simulate", "--restart"]),
    "hpcbsp.cli.cost bsf": (["--latency", "--t-c", "--t-map", "--t-a", "--t-p", "--list-length",
                             "--comm", "--granularity", "--workers"], ["--json"]),
    "hpcbsp.cli.cost fit": (["--runs", "--list-length", "--granularity", "--comm", "-o"], ["--json"]),
    "hpcbsp.cli.cost predict": (["--workers"], ["--json"]),
    "hpcbsp.cli.cost validate": (["--runs"], ["--json"]),
    "hpcbsp.cli.cost plot": (["--runs", "-o"], ["--json"]),
    "hpcbsp.cli.cost ledger": (["--profile"], ["--json"]),
}

BAD_VALUES = ["abc", "-5", "-1", "", "1e9x", "nan", "--", "0.0.1", "١", "-0"]


def call(module: str, argv: list[str]) -> tuple[int, str]:
    module, *sub = module.split()
    argv = sub + argv
    main = importlib.import_module(module).main
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return code, err.getvalue()


@st.composite
def bad_argv(draw, module: str) -> list[str]:
    valued, flags = CLIS[module]
    argv: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["valued", "unknown", "positional"] + (["flag"] if flags else [])))
        if kind == "valued" and valued:
            argv += [draw(st.sampled_from(valued)), draw(st.sampled_from(BAD_VALUES))]
        elif kind == "flag":
            argv.append(draw(st.sampled_from(flags)))
        elif kind == "unknown":
            # "--zz..." is no option and no abbreviation of one (argparse accepts "--h" for --help)
            argv.append("--zz" + draw(st.text("abcdefghij-", max_size=8)))
        else:
            argv.append(draw(st.text("xyz0123", min_size=1, max_size=5)))
    # Always at least one thing that is wrong: an unknown option at the end.
    return argv + ["--definitely-not-an-option"]


@pytest.mark.parametrize("module", sorted(CLIS))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_bad_input_exits_2_without_traceback(module, data):
    argv = data.draw(bad_argv(module))
    code, err = call(module, argv)
    assert code == 2, (argv, err)
    assert "Traceback" not in err
    assert "error:" in err


@pytest.mark.parametrize("argv,needle", [
    (["--rounds", "0"], "argument --rounds: '0' is not a positive integer"),
    (["--every", "2"], "need --checkpoint"),
    (["--mode", "naive", "--rounds", "3"], "fabsp or bsp"),
    (["--skew", "nan"], "argument --skew: 'nan' is not a number (a finite value is needed)"),
    (["--skew", "0.5"], "argument --skew: '0.5' must be > 1 (a Zipf exponent), or 0 for uniform keys"),
])
def test_histogram_restart_option_errors(argv, needle):
    code, err = call("hpcbsp.apps.irregular.histogram", argv)
    assert code == 2 and needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("argv,needle", [
    (["--simulate", "--R", "0"], "R"),
    (["--simulate", "--policy", "nosuch"], "nosuch"),
    (["--simulate", "--s-lower", "5", "--s-upper", "2"], "s_L"),
    (["--simulate", "--workers", "4", "--slowdown", "1,2"], "slowdown"),
    (["--simulate", "--restart"], "--restart needs --checkpoint"),
    (["--simulate", "--checkpoint", "ck", "--checkpoint-every", "0"], "--checkpoint-every must be positive"),
    (["--simulate", "--checkpoint", "ck", "--checkpoint-every", "nan"], "--checkpoint-every must be positive"),
])
def test_elastic_semantic_errors(argv, needle):
    code, err = call("hpcbsp.apps.elastic.train", argv)
    assert code == 2 and needle in err and "Traceback" not in err, err


@pytest.mark.parametrize("argv,needle", [
    (["--n", "2"], "--n must be at least 3"),
    (["--alpha", "0.9"], "--alpha must be in (0, 0.5]"),
    (["--every", "5"], "need --checkpoint"),
])
def test_heat_semantic_errors(argv, needle):
    code, err = call("hpcbsp.apps.heat", argv)
    assert code == 2 and needle in err


def test_console_scripts_exit_2():
    bindir = sys.executable.rsplit("/", 1)[0]
    for cmd in ([f"{bindir}/hpcbsp", "frobnicate"], [f"{bindir}/hpcbsp", "run"],
                [f"{bindir}/hpcbsp", "info", "--bad"], [sys.executable, "-m", "hpcbsp", "nope.py"]):
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert res.returncode == 2, (cmd, res.stderr)
        assert "Traceback" not in res.stderr


@pytest.mark.parametrize("module,argv", [
    ("hpcbsp.apps.heat", ["--out", "/proc/no/heat.npy"]),
    ("hpcbsp.apps.snn.__main__", ["--mode", "serial", "--raster", "/proc/no/r.png"]),
    ("hpcbsp.cli.cost bsf", ["--latency", "1e-5", "--t-c", "1e-4", "--t-map", "1", "--t-a", "1e-6",
                             "--t-p", "1e-3", "--list-length", "100", "-o", "/proc/no/m.json"]),
])
def test_unwritable_output_is_refused_before_any_work(module, argv):
    code, err = call(module, argv)
    assert code == 2 and "cannot" in err and "/proc/no" in err and "Traceback" not in err, err


MODEL_ARGS = {"latency": 1e-5, "t_c": 1e-4, "t_map": 1.0, "t_a": 1e-6, "t_p": 1e-3, "list_length": 100,
              "t_0": -0.005, "order_share": 0.25}


def test_missing_output_folders_are_created(tmp_path):
    """An output path in folders that do not exist yet: the folders are made, the file in them is
    the whole result (the model of the parameters given), and nothing else is left there (the
    write check's probe file is removed).  Oracle: the command line's own values."""
    out = tmp_path / "new" / "deeper" / "model.json"
    argv = [a for key, value in MODEL_ARGS.items() for a in (f"--{key.replace('_', '-')}", str(value))]
    code, err = call("hpcbsp.cli.cost bsf", argv + ["-o", str(out)])
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["deeper", "model.json", "new"]
    model = json.loads(out.read_text())
    assert model["format"] == "hpcbsp-bsf-model/1" and model["params"] == MODEL_ARGS


def test_missing_ledger_folders_are_created_by_an_app(tmp_path):
    """The same for an app's --ledger (checked and made before the run by hpcbsp.util.args):
    the ledger holds this run's supersteps (the labels of classic.py's three syncs, then its two
    error allreduces), and the new folder holds nothing else."""
    ledger = tmp_path / "runs" / "a" / "ledger.json"
    code, err = call("hpcbsp.apps.classic", ["--n", "12", "--ledger", str(ledger)])
    assert code == 0, err
    assert sorted(p.name for p in ledger.parent.iterdir()) == ["ledger.json"]
    records = json.loads(ledger.read_text())["records"]
    assert [(r["rank"], r["label"]) for r in records] == [
        (0, "inprod"), (0, "prefix"), (0, "fan-out x"), (0, "allreduce:max"), (0, "allreduce:max")]
