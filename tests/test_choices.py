"""Each list of choices is spelt once (``hpcbsp/util/choices.py``): the code that acts on a choice,
the command lines that offer it and the ``HPCBSP_*`` setting that takes it read the same tuple.

Oracles: the tuples of :mod:`hpcbsp.util.choices` (each list written out by hand here, as the
user spells it: a renamed word fails); every command line's ``--help`` text (what the user sees);
the settings' parser and the allowed values docs/environment.md shows; and a scan of every
module of hpcbsp for a literal list of two or more of a list's words (a list spelt again).
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from hpcbsp.util import choices
from hpcbsp.util.envvars import SETTINGS
from hpcbsp.util.settings import SettingError, value

ROOT = Path(__file__).resolve().parents[1] / "hpcbsp"

#: Each list as the user spells it (docs/environment.md, docs/cli.md).
SPELLED = {
    "EXCHANGES": ("linear", "tree"),
    "ROUTINGS": ("direct", "2d", "3d", "node"),
    "ROUTING_CHOICES": ("auto", "direct", "2d", "3d", "node"),
    "WAIT_MODES": ("auto", "spin", "yield"),
    "CONTROL_COLLECTIVES": ("auto", "persistent", "blocking"),
    "TRANSPORTS": ("auto", "messages"),
    "LAUNCHES": ("mpiexec", "srun"),
}


def test_the_user_visible_spellings():
    assert {name: getattr(choices, name) for name in SPELLED} == SPELLED


def test_the_code_reads_the_one_list():
    from hpcbsp.elastic import transport
    from hpcbsp.fabsp import routing
    from hpcbsp.farm import EXCHANGES, skeleton
    from hpcbsp.runtime.superstep import waiting
    from hpcbsp.util import jobcommand

    assert EXCHANGES is skeleton.EXCHANGES is choices.EXCHANGES
    assert waiting.WAIT_MODES is choices.WAIT_MODES
    assert transport.TRANSPORTS is choices.TRANSPORTS
    assert jobcommand.LAUNCHES is choices.LAUNCHES
    assert tuple(routing.ROUTINGS) == choices.ROUTINGS
    assert all(cls.name == name for name, cls in routing.ROUTINGS.items())


#: (setting, its list): each setting allows exactly its list, shown in its order.
SETTING_LISTS = [("HPCBSP_FARM_EXCHANGE", "EXCHANGES"), ("HPCBSP_ROUTING", "ROUTING_CHOICES"),
                 ("HPCBSP_WAIT", "WAIT_MODES"), ("HPCBSP_CONTROL_COLLECTIVE", "CONTROL_COLLECTIVES"),
                 ("HPCBSP_PS_TRANSPORT", "TRANSPORTS"), ("HPCBSP_ELEMENTS_TRANSPORT", "TRANSPORTS")]


@pytest.mark.parametrize("name, listed", SETTING_LISTS)
def test_each_setting_allows_its_list(name, listed):
    words = SPELLED[listed]
    assert tuple(re.findall(r"`([^`]+)`", SETTINGS[name].allowed)) == words
    for word in words:
        assert value(name, {name: word.upper()}) == word
    with pytest.raises(SettingError, match=re.escape(", ".join(f"{w}" for w in words))):
        value(name, {name: "none-of-them"})


def _help(parser, *argv: str) -> None:
    try:
        parser.parse_args([*argv, "--help"])
    except SystemExit:
        pass


def _offered(help_text: str, option: str) -> tuple[str, ...]:
    """The choices ``--help`` shows for ``option`` (``--option {a,b}``)."""
    found = re.search(rf"{re.escape(option)} \{{([^}}]+)\}}", help_text)
    assert found, f"{option} shows no choices in:\n{help_text}"
    return tuple(found.group(1).split(","))


def test_the_command_lines_offer_the_same_lists(capsys):
    from hpcbsp.apps.bsf.system import app_parser as bsf_parser
    from hpcbsp.apps.irregular.cli import app_parser as irregular_parser
    from hpcbsp.cli.cost import build_parser as cost_parser
    from hpcbsp.cli.supervise.options import build_parser as supervise_parser

    def shown(parser, *argv: str) -> str:
        _help(parser, *argv)
        return capsys.readouterr().out

    assert _offered(shown(bsf_parser("jacobi", "", 10, 10)), "--exchange") == SPELLED["EXCHANGES"]
    assert _offered(shown(cost_parser(), "calibrate"), "--exchange") == SPELLED["EXCHANGES"]
    assert _offered(shown(cost_parser(), "calibrate"), "--launch") == SPELLED["LAUNCHES"]
    assert _offered(shown(cost_parser(), "bsf"), "--comm") == SPELLED["EXCHANGES"]
    assert _offered(shown(irregular_parser("histogram", "")), "--routing") == SPELLED["ROUTING_CHOICES"]
    assert _offered(shown(supervise_parser()), "--launch") == SPELLED["LAUNCHES"]


def test_bench_bsf_takes_a_list_of_the_exchanges(capsys):
    from hpcbsp.bench.bsf import parser

    args = parser().parse_args(["--exchanges", ",".join(SPELLED["EXCHANGES"])])
    assert args.exchanges == list(SPELLED["EXCHANGES"])
    with pytest.raises(SystemExit):
        parser().parse_args(["--exchanges", "ring"])
    assert f"choose from {', '.join(SPELLED['EXCHANGES'])}" in capsys.readouterr().err


def _literal_lists(path: Path) -> list[tuple[int, tuple[str, ...]]]:
    """Every tuple, list or set display of two or more string constants in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2 \
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            found.append((node.lineno, tuple(e.value for e in node.elts)))  # type: ignore[attr-defined]
    return found


#: A program's own selection of a list's words, with why it is no copy of the list.
OWN_SELECTIONS = {
}


def test_no_module_spells_a_list_again():
    """A literal of two or more words of one list, anywhere but choices.py, is that list spelt
    again, unless it is a program's own selection named in OWN_SELECTIONS."""
    lists = {name: set(words) for name, words in SPELLED.items()}
    again = []
    for path in sorted(ROOT.rglob("*.py")):
        if path == ROOT / "util" / "choices.py":
            continue
        for line, words in _literal_lists(path):
            if (str(path.relative_to(ROOT.parent)), words) in OWN_SELECTIONS:
                continue
            for name, whole in lists.items():
                if set(words) <= whole and len(set(words)) >= 2:
                    again.append(f"{path.relative_to(ROOT.parent)}:{line}: {words} (choices.{name})")
    assert not again, "choice lists spelt outside hpcbsp/util/choices.py:\n" + "\n".join(again)
