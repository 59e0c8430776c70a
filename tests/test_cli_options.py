"""One option vocabulary: every app's and benchmark's command line spells, types and explains the
shared options as docs/cli.md's table says.

Oracles: docs/cli.md's table "The shared options" (read from the Markdown when the test runs)
and a few values whose parse is known by hand (``1_234`` is 1234, ``0`` is no count, ``-1`` no
seed).  The programs are discovered as ``hpcbsp apps`` and ``python -m hpcbsp.bench`` list them,
so a new app or benchmark is checked without being named here.  Each program's ``main`` runs
in-process until it parses its arguments: the parser it built is taken there (nothing after the
parse runs), and its ``--help`` text and its parsing are checked.
"""
from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path
from typing import Any

import pytest

from hpcbsp.bench.__main__ import available as available_benchmarks
from hpcbsp.cli.main import list_apps
from hpcbsp.util.args.vocabulary import VOCABULARY

REPO = Path(__file__).resolve().parents[1]
CLI_MD = REPO / "docs" / "cli.md"

#: Spellings that are hidden, deprecated aliases (docs/cli.md): never shown by --help.
OLD_SPELLINGS = ("--repeat", "--neurons", "--rows", "--updates", "--reads")


def _app_module(name: str) -> str:
    module = f"hpcbsp.apps.{name}"
    return f"{module}.__main__" if (REPO / "hpcbsp" / "apps" / Path(*name.split("."))).is_dir() else module


PROGRAMS = {f"apps.{name}": _app_module(name) for name, _ in list_apps()}
PROGRAMS.update({f"bench.{name}": f"hpcbsp.bench.{name}" for name in available_benchmarks()})

#: Programs whose options live in a subcommand: the subcommand checked.
SUBCOMMAND = {"apps.elastic.paper": "run"}

#: Known drift, in command lines another change of issue 32 is rewriting.  Strict: when one of
#: them keeps to the vocabulary its test passes, which fails here until its line is removed.
NOT_YET = {
}


def _cases() -> list[Any]:
    return [pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=NOT_YET[name]))
            if name in NOT_YET else name for name in sorted(PROGRAMS)]


def shared_table() -> dict[str, tuple[str | None, str, str]]:
    """docs/cli.md's shared options: option -> (metavar or None, meaning, where)."""
    text = CLI_MD.read_text()
    section = text.split("## The shared options", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, tuple[str | None, str, str]] = {}
    first_table = "| option |" + section.split("| option |", 1)[1].split("\n\n", 1)[0]
    for line in first_table.splitlines():
        m = re.fullmatch(r"\| `(--[\w-]+)(?: ([A-Z]+))?` \| (.+?) \| (.+) \|", line.strip())
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4))
    return rows


class _Parsed(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def parser_of(module: str, monkeypatch: pytest.MonkeyPatch) -> argparse.ArgumentParser:
    """The parser ``module.main`` builds, taken at its first parse (main runs no further)."""
    main = importlib.import_module(module).main

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Parsed(self)

    with monkeypatch.context() as patch:
        patch.setattr(argparse.ArgumentParser, "parse_args", capture)
        try:
            main([])
        except _Parsed as parsed:
            return parsed.parser
    raise AssertionError(f"{module}.main([]) returned without parsing its arguments")


def parse(parser: argparse.ArgumentParser, argv: list[str]) -> dict[str, Any] | int:
    """The parsed namespace as a dict, or the exit status of a refused command line."""
    try:
        return vars(parser.parse_args(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2


def flat_help(parser: argparse.ArgumentParser) -> str:
    return " ".join(parser.format_help().split())


def test_the_docs_table_is_the_vocabulary():
    table = shared_table()
    assert set(table) == set(VOCABULARY), "docs/cli.md's shared options and hpcbsp.util.args.VOCABULARY differ"
    for option, (metavar, meaning, _) in table.items():
        assert (metavar, meaning) == (VOCABULARY[option].metavar, VOCABULARY[option].meaning), option


def test_programs_are_discovered():
    # the families and the single-module apps, and the benchmarks, as `hpcbsp apps` lists them
    assert {"apps.lu", "apps.fft", "apps.spmv", "apps.heat", "apps.snn", "apps.bsf.jacobi",
            "apps.irregular.histogram", "bench.sync", "bench.kernels"} <= set(PROGRAMS)


@pytest.mark.parametrize("program", _cases())
def test_shared_options_mean_and_parse_the_same(program, monkeypatch, capsys):
    parser = parser_of(PROGRAMS[program], monkeypatch)
    if program in SUBCOMMAND:  # private on purpose: argparse keeps its subparsers in a private action
        subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = subs.choices[SUBCOMMAND[program]]
    text = flat_help(parser)
    table = shared_table()
    base = parse(parser, [])
    assert isinstance(base, dict), f"{program}: runs with no arguments, so its defaults must parse"
    problems = []
    for option, (metavar, meaning, where) in table.items():
        shown = re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text.split(" options: ", 1)[-1])
        if re.match(r"every app(?![\w ]*(with|that))", where) and program.startswith("apps."):
            if not shown:
                problems.append(f"{option} is missing (docs/cli.md: {where})")
                continue
        if not shown:
            continue
        head = f"{option} {metavar} {meaning}" if metavar else f"{option} {meaning}"
        if not re.search(rf"{re.escape(head)}(?!\w)", text):
            problems.append(f"{option}: its help does not read {head!r}...")
        spec = VOCABULARY[option]
        if spec.metavar is None:                      # a flag
            got = parse(parser, [option])
            if not isinstance(got, dict) or not [k for k, v in got.items() if v is True and base[k] is not True]:
                problems.append(f"{option}: not a flag that sets True")
            continue
        got = parse(parser, [option, "1_234"])        # every shared value takes this spelling of 1234
        changed = {k: v for k, v in got.items() if v != base.get(k)} if isinstance(got, dict) else got
        if spec.type is not None and changed != {k: 1234 for k in changed} or not changed:
            problems.append(f"{option} 1_234 parsed as {changed!r}, not 1234")
        refused = {"--n": "0", "--iters": "0", "--repeats": "0", "--seed": "-1", "--every": "-1"}.get(option)
        if refused is not None:
            capsys.readouterr()
            status = parse(parser, [option, refused])
            err = capsys.readouterr().err
            if status != 2 or len(err.strip().splitlines()) != 1 or option not in err:
                problems.append(f"{option} {refused}: not refused in one line naming the option (got {status!r})")
        if option == "--seed" and base[next(iter(changed))] != 0:
            problems.append("--seed does not default to 0")
    for old in OLD_SPELLINGS + (("--rounds",) if program.startswith("bench.") else ()):
        if re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", text):
            problems.append(f"{old} is shown by --help; it is an old spelling, to be hidden")
    assert not problems, f"{program} ({PROGRAMS[program]}):\n" + "\n".join(problems)
