"""The ``HPCBSP_*`` environment variables (issue 31): one declaration each, in
``hpcbsp/util/envvars.py``, and every one checked before any work (``hpcbsp/util/settings.py``).

Oracles: the values each variable allows as docs/environment.md states them, restated by hand in
:data:`CASES` (independently of the parsers); the source text of hpcbsp/, slurm/ and the
Makefile (which names the code reads); the readers' own lists of choices; and the exit status,
stdout, stderr and files of fresh processes (a program that started its work prints its result
on stdout, and an app that got as far as its own checks makes its ``--ledger`` folder).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from mpi_helpers import clean_env, run_mpi

from hpcbsp.util import settings
from hpcbsp.util.envvars import SETTINGS
from hpcbsp.util.settings import SettingError, check, markdown_table, value

REPO = Path(__file__).resolve().parents[1]
SERIAL = pytest.mark.serial_only  # starts processes of its own: runs in the serial pass

#: name -> (good values with what they mean, bad values); "" is unset, i.e. the default.
CASES: dict[str, tuple[list[tuple[str, object]], list[str]]] = {
    "HPCBSP_SYNC_TIMEOUT": ([("30", 30.0), (" 2.5 ", 2.5), ("", None)], ["soon", "0", "-1", "nan", "inf"]),
    "HPCBSP_ABORT_GRACE": ([("2", 2.0), ("", 10.0)], ["bogus", "0", "-3"]),
    "HPCBSP_COMPILED_SYNC": ([("0", False), ("1", True), ("", True)], ["maybe", "yes", "2"]),
    "HPCBSP_CONTROL_COLLECTIVE": ([("Blocking", "blocking"), ("persistent", "persistent"), ("", "auto")],
                                  ["nonblocking", "1"]),
    "HPCBSP_DEATHWATCH": ([("0", False), ("1", True), ("", True)], ["nah", "off"]),
    "HPCBSP_HEARTBEAT_TIMEOUT": ([("0", 0.0), ("30", 30.0), (" 2.5 ", 2.5), ("", 10.0)], ["soon", "-1", "0.01", "inf"]),
    "HPCBSP_HEARTBEAT_PERIOD": ([("0.5", 0.5), ("", 1.0)], ["0", "often", "-1", "0.001"]),
    "HPCBSP_LARGE_PUT_BYTES": ([("1", 1), ("65536", 65536), ("", 65536)], ["abc", "0", "1.5", "-1"]),
    "HPCBSP_LEDGER_WINDOW": ([("1", 1), (" 500 ", 500), ("", 10_000)], ["0", "-5", "1e3", "window", str(2**40 + 1)]),
    "HPCBSP_LATENESS": ([("off", 0.0), ("OFF", 0.0), (" 20 ", 0.02), ("0", 0.0), ("2.5", 0.0025), ("", 0.0)],
                        ["-1", "nan", "inf", "soon", "20ms"]),
    "HPCBSP_MAILBOX_BYTES": ([("1", 1), ("2147483647", 2**31 - 1), ("", None)],
                             ["99999999999999999999", "2147483648", "0", "big"]),
    "HPCBSP_ROUTING": ([("2d", "2d"), (" Direct ", "direct"), ("3d", "3d"), ("", "auto")], ["5d", "grid"]),
    "HPCBSP_WAIT": ([("Yield", "yield"), ("spin", "spin"), ("", "auto")], ["bogus", "nap"]),
    "HPCBSP_ELEMENTS_TRANSPORT": ([(" Messages ", "messages"), ("", "auto")], ["zz", "carrier-pigeon"]),
    "HPCBSP_PS_TRANSPORT": ([("messages", "messages"), ("auto", "auto"), ("", "auto")], ["zz"]),
    "HPCBSP_SLOT_MEMORY_SHARE": ([("0.5", 0.5), (" 1 ", 1.0), ("1e-12", 1e-12), ("", 0.25)],
                                 ["half", "0", "1.5", "-0.1", "nan"]),
    "HPCBSP_FARM_EXCHANGE": ([("tree", "tree"), ("linear", "linear"), ("", "linear")], ["ring"]),
    "HPCBSP_FARM_EMULATE": ([("measure", (None, None)), ("t_map=0.5, t_a=1e-6", (0.5, 1e-6)),
                             ("t_map=0", (0.0, None)), ("off", None), ("0", None), ("", None)],
                            ["x", "t_map=-1", "t_a=1", "t_map=nan", "t_map=1,speed=2"]),
    # (a good value needs a folder of the test's own: test_a_report_path_is_checked_for_writing)
    "HPCBSP_FARM_REPORT": ([("", None)], ["/proc/no/report.jsonl", "/"]),
    "HPCBSP_PROGRESS": ([("1", True), ("0", False), ("", None)], ["yes", "always"]),
}
PACKAGE = sorted(name for name, s in SETTINGS.items() if s.python)


def test_every_variable_the_package_reads_has_cases():
    assert sorted(CASES) == PACKAGE


@pytest.mark.parametrize("name", PACKAGE)
def test_good_values_mean_what_the_docs_say(name):
    for text, expect in CASES[name][0]:
        assert value(name, {name: text} if text else {}) == expect, (name, text)


@pytest.mark.parametrize("name", PACKAGE)
def test_a_bad_value_is_one_line_naming_the_variable_its_value_and_the_fix(name):
    allowed = SETTINGS[name].allowed.replace("`", "")
    for text in CASES[name][1]:
        with pytest.raises(SettingError) as info:
            value(name, {name: text})
        line = str(info.value)
        assert "\n" not in line
        assert line.startswith(f"environment variable {name}={text!r} is not {allowed}"), line
        assert line.endswith(": correct it or unset it (docs/environment.md)"), line
        with pytest.raises(SettingError):  # the check of the whole environment finds it too
            check({"HPCBSP_WAIT": "spin", name: text})


def test_a_report_path_is_checked_for_writing(tmp_path):
    """A report in folders that do not exist yet is fine (they are made, as the report needs
    them); a folder, or a place where nothing can be created, is refused with the reason."""
    new = tmp_path / "a" / "b" / "report.jsonl"
    assert value("HPCBSP_FARM_REPORT", {"HPCBSP_FARM_REPORT": str(new)}) == str(new)
    assert new.parent.is_dir() and list(new.parent.iterdir()) == []  # the probe file is gone
    with pytest.raises(SettingError, match=r"\(it is a folder\)"):
        value("HPCBSP_FARM_REPORT", {"HPCBSP_FARM_REPORT": str(tmp_path)})
    (tmp_path / "file").write_text("")
    with pytest.raises(SettingError, match=r"its folder cannot be created"):
        value("HPCBSP_FARM_REPORT", {"HPCBSP_FARM_REPORT": str(tmp_path / "file" / "r.jsonl")})


def test_unknown_names_get_a_warning_with_the_closest_known_name():
    warnings = check({"HPCBSP_SYNC_TIMOUT": "10", "HPCBSP_ROUTNG": "2d", "HPCBSP_QQQQ": "1",
                      "HPCBSP_VENV": "/x", "HPCBSP_CHECKPOINT": "ck", "OTHER_SYNC_TIMOUT": "1"})
    assert warnings == [
        "HPCBSP_QQQQ is not a variable of hpcbsp's and is ignored; the known ones are in docs/environment.md",
        "HPCBSP_ROUTNG is not a variable of hpcbsp's and is ignored; did you mean HPCBSP_ROUTING?",
        "HPCBSP_SYNC_TIMOUT is not a variable of hpcbsp's and is ignored; did you mean HPCBSP_SYNC_TIMEOUT?",
    ]  # the scripts' own variables (HPCBSP_VENV, HPCBSP_CHECKPOINT) and other prefixes are no typo


def test_warnings_are_printed_once_per_process_on_rank_0(capsys):
    settings.warn(["HPCBSP_A is not a test's"], rank=1)
    assert capsys.readouterr().err == ""
    settings.warn(["HPCBSP_B is not a test's"], rank=0)
    settings.warn(["HPCBSP_B is not a test's"], rank=0)
    assert capsys.readouterr().err == "[hpcbsp] warning: HPCBSP_B is not a test's\n"


# -- one declaration, one table, and the code agrees ------------------------------------------

def _doc_table() -> str:
    text = (REPO / "docs" / "environment.md").read_text()
    m = re.search(r"<!-- settings table: .*? -->\n(.*?)\n<!-- end of settings table -->", text, re.S)
    assert m, "docs/environment.md lost its settings table's markers"
    return m.group(1)


def test_the_docs_table_is_the_declarations():
    """docs/environment.md's table is markdown_table() (the one declaration), row for row."""
    assert _doc_table() == markdown_table(), (
        "docs/environment.md's settings table differs from hpcbsp/util/envvars.py; regenerate it with "
        "python -c \"from hpcbsp.util.settings import markdown_table; print(markdown_table())\"")


def _names_in(paths: list[Path]) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in paths:
        for name in re.findall(r"\bHPCBSP_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()):
            found.setdefault(name, str(path.relative_to(REPO)))
    return found


def test_every_name_the_code_mentions_is_declared():
    """Every HPCBSP_* name in the package, the Slurm scripts and the Makefile is declared, so
    that no variable is read without its parser, and none is warned about as a typo.  (The
    module that checks them is left out: its docstring shows a typo.)"""
    paths = [p for p in (REPO / "hpcbsp").rglob("*.py") if p.name != "settings.py"] + \
        [p for p in (REPO / "slurm").iterdir() if p.is_file()] + [REPO / "Makefile"]
    undeclared = {n: where for n, where in _names_in(paths).items() if n not in SETTINGS}
    assert not undeclared, f"not declared in hpcbsp/util/envvars.py: {undeclared}"


def test_every_declared_variable_is_read_where_the_table_says():
    """A declaration names its reader; the reader names the variable (none is stale)."""
    for s in SETTINGS.values():
        first = re.search(r"`([^`]+)`", s.read_by)
        assert first, s.name
        where = first.group(1)
        if s.python:
            path = REPO / "hpcbsp" / where
        else:
            matches = sorted(REPO.glob(where))
            assert matches, (s.name, where)
            path = matches[0]
        assert s.name in path.read_text(), f"{s.name}: not named in {path.relative_to(REPO)}"


def test_the_choices_are_the_readers_own():
    from hpcbsp.elastic.transport import TRANSPORTS
    from hpcbsp.fabsp.routing import ROUTINGS
    from hpcbsp.farm.skeleton import EXCHANGES
    from hpcbsp.runtime.superstep.waiting import WAIT_MODES

    readers = {"HPCBSP_ROUTING": {"auto", *ROUTINGS}, "HPCBSP_WAIT": set(WAIT_MODES),
               "HPCBSP_PS_TRANSPORT": set(TRANSPORTS), "HPCBSP_FARM_EXCHANGE": set(EXCHANGES),
               "HPCBSP_ELEMENTS_TRANSPORT": {"auto", "messages"}}
    for name, choices in readers.items():
        shown = set(re.findall(r"`([^`]+)`", SETTINGS[name].allowed))
        assert shown == choices, name
        for word in choices:
            assert value(name, {name: word}) == word
        with pytest.raises(SettingError):
            value(name, {name: "none-of-" + "-".join(sorted(choices))})


# -- before any work: an app, serially and under mpiexec ---------------------------------------

HEAT = ["-m", "hpcbsp.apps.heat", "--n", "50", "--steps", "2", "--quiet"]
FIRST_BAD = [(name, CASES[name][1][0]) for name in PACKAGE]


def _expect_refused(returncode: int, stdout: str, stderr: str, name: str, text: str, ledger: Path) -> None:
    lines = stderr.strip().splitlines()
    assert returncode == 2, (returncode, stderr)
    assert stdout == "", "the app started its work"
    assert not ledger.parent.exists(), "the app got as far as its own checks (it made the --ledger folder)"
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"[hpcbsp] error: environment variable {name}={text!r} is not "), lines[0]
    assert lines[0].endswith("correct it or unset it (docs/environment.md)"), lines[0]


@SERIAL
@pytest.mark.parametrize("name,text", FIRST_BAD)
def test_an_app_refuses_a_bad_value_before_any_work(name, text, tmp_path):
    ledger = tmp_path / "runs" / "ledger.json"
    proc = subprocess.run([sys.executable, *HEAT, "--ledger", str(ledger)], capture_output=True, text=True,
                          timeout=120, env=clean_env(**{name: text}), stdin=subprocess.DEVNULL)
    _expect_refused(proc.returncode, proc.stdout, proc.stderr, name, text, ledger)


@SERIAL
@pytest.mark.parametrize("name,text", FIRST_BAD)
def test_an_app_refuses_a_bad_value_on_every_rank_in_one_line(name, text, tmp_path):
    ledger = tmp_path / "runs" / "ledger.json"
    res = run_mpi(2, [*HEAT, "--ledger", str(ledger)], timeout=90, env={name: text})
    assert not res.timed_out
    _expect_refused(res.returncode, res.stdout, res.program_stderr, name, text, ledger)  # (not mpiexec's own block)


@SERIAL
def test_a_misspelt_name_is_a_warning_once_and_the_run_goes_on(tmp_path):
    expected = ("[hpcbsp] warning: HPCBSP_SYNC_TIMOUT is not a variable of hpcbsp's and is ignored; "
                "did you mean HPCBSP_SYNC_TIMEOUT?")
    proc = subprocess.run([sys.executable, *HEAT], capture_output=True, text=True, timeout=120,
                          env=clean_env(HPCBSP_SYNC_TIMOUT="10"), stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and "heat: n=50 steps=2" in proc.stdout, proc.stderr
    assert proc.stderr.strip().splitlines() == [expected]
    res = run_mpi(2, HEAT, timeout=90, env={"HPCBSP_SYNC_TIMOUT": "10"})  # parsed and started on 2 ranks
    assert res.returncode == 0 and "heat: n=50 steps=2 on 2 ranks" in res.stdout, res.output
    assert res.stderr.strip().splitlines() == [expected]


@SERIAL
def test_hpcbsp_run_refuses_a_bad_value_before_the_program_starts(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("print('the program ran')\n")
    proc = subprocess.run([sys.executable, "-m", "hpcbsp", "run", str(script)], capture_output=True, text=True,
                          timeout=120, env=clean_env(HPCBSP_ROUTING="5d"), stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "[hpcbsp] error: environment variable HPCBSP_ROUTING='5d' is not one of auto, direct, 2d, 3d, node: "
        "correct it or unset it (docs/environment.md)"]


# -- a program that makes its own context: refused when the context starts --------------------

PROGRAM = """
import hpcbsp

def prog(bsp):
    print("computing on rank", bsp.pid, flush=True)

hpcbsp.run(prog)
"""


@SERIAL
@pytest.mark.parametrize("name,text", [("HPCBSP_FARM_EXCHANGE", "ring"), ("HPCBSP_MAILBOX_BYTES", "1e30"),
                                       ("HPCBSP_DEATHWATCH", "nah")])
def test_a_context_refuses_a_bad_value_before_the_program_computes(name, text):
    """Variables that the program's own calls would never read (no farm, no mailbox) are
    checked all the same when its context starts."""
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120,
                          env=clean_env(**{name: text}), stdin=subprocess.DEVNULL)
    res = run_mpi(2, ["-c", PROGRAM], timeout=90, env={name: text})
    for code, out, err in ((proc.returncode, proc.stdout, proc.stderr), (res.returncode, res.stdout, res.stderr)):
        assert code != 0 and "computing" not in out, out + err
        assert "Traceback" not in err and err.count("[hpcbsp] error: ") == 1, err
        assert f"environment variable {name}={text!r} is not" in err, err


def test_a_context_refuses_it_in_process(monkeypatch):
    import hpcbsp
    from hpcbsp import BadInput

    monkeypatch.setenv("HPCBSP_PS_TRANSPORT", "zz")
    with pytest.raises(BadInput, match=r"^environment variable HPCBSP_PS_TRANSPORT='zz' is not one of auto, "
                                       r"messages: correct it or unset it \(docs/environment.md\)$"):
        hpcbsp.BSP()
    monkeypatch.setenv("HPCBSP_PS_TRANSPORT", "messages")
    with hpcbsp.BSP() as bsp:  # a good value: the context starts
        assert bsp.nprocs >= 1


def test_no_variable_is_read_at_import():
    """A bad value cannot break ``import hpcbsp`` (before any check could report it in one line):
    a fresh interpreter imports everything with every variable bad."""
    env = clean_env(**{name: bad[0] for name, (_, bad) in CASES.items()})
    code = "import hpcbsp, hpcbsp.farm, hpcbsp.elastic, hpcbsp.fabsp; print('imported')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0 and proc.stdout.strip() == "imported", proc.stderr
