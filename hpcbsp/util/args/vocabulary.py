"""The shared options: one spelling, value name, type and meaning for each, wherever it appears.

:data:`VOCABULARY` is the one list of the shared options (``--n``, ``--iters``, ``--repeats``,
``--seed``, ``--ledger``, ``--json``, ``--quiet``, ``--checkpoint``, ``--every``, ``--restart``):
spelling, value name, type and meaning (docs/cli.md's table; tests/test_cli_options.py holds
every program's ``--help`` to it).  A program adds them with :func:`add_n`, :func:`add_iters`,
:func:`add_repeats`, :func:`add_seed`, :func:`add_ledger`, :func:`add_json`, :func:`add_quiet`,
:func:`add_checkpoint` (or :func:`add_common_options` for the four every app has), so that each
help starts with the same meaning and each value gets the same check (:mod:`.types`); the
values are checked against the world before the work by :mod:`.checks`.  A command that starts
MPI jobs of its own places them with :func:`add_placement`.  :func:`add_alias` keeps an old
spelling as a hidden, deprecated alias.  (A Perfetto trace is ``--ledger RUN.trace.json``: there
is no second option for it.)
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Callable

from ..choices import LAUNCHES
from .types import nonnegative_int, positive_int, seed, zipf_exponent

__all__ = ["VOCABULARY", "SharedOption", "add_alias", "add_checkpoint", "add_common_options", "add_iters",
           "add_json", "add_ledger", "add_n", "add_placement", "add_quiet", "add_repeats", "add_seed", "add_skew"]


def add_alias(parser: argparse.ArgumentParser | Any, *names: str, dest: str,
              type: Callable[[str], Any] | None = None, action: str | None = None) -> None:
    """Accept ``names`` as hidden, deprecated spellings of the option stored in ``dest``."""
    kw: dict[str, Any] = {"dest": dest, "help": argparse.SUPPRESS, "default": argparse.SUPPRESS}
    if action is not None:
        kw["action"] = action
    else:
        kw["type"] = type
    parser.add_argument(*names, **kw)


@dataclass(frozen=True)
class SharedOption:
    """One option of the shared vocabulary: its spelling, value name, type and meaning.

    ``meaning`` is the wording of docs/cli.md's table; every program's help for the option starts
    with it (a colon and the program's own detail may follow), and tests/test_cli_options.py
    holds the programs and the table to it.
    """

    option: str
    metavar: str | None           #: None: a flag
    meaning: str
    type: Callable[[str], Any] | None = None


#: The shared options, by spelling (docs/cli.md, "The shared options").
VOCABULARY: dict[str, SharedOption] = {o.option: o for o in (
    SharedOption("--n", "N", "the problem size", positive_int),
    SharedOption("--iters", "K", "iterations of the measured loop", positive_int),
    SharedOption("--repeats", "R", "repetitions of a measurement", positive_int),
    SharedOption("--seed", "S", "random seed, an integer from 0 to 2**63 - 1", seed),
    SharedOption("--ledger", "PATH", "save the superstep ledger of every rank, .json or .csv "
                                     "(Perfetto: .trace.json); checked before the run"),
    SharedOption("--json", None, "rank 0 prints one JSON object instead of the text report"),
    SharedOption("--quiet", None, "no progress lines on stderr"),
    SharedOption("--checkpoint", "DIR", "checkpoint directory; refused before the run unless it is "
                                        "new or holds this program's checkpoint"),
    SharedOption("--every", "K", "write a checkpoint every K steps or iterations (0: never); "
                                 "--checkpoint needs it unless --restart", nonnegative_int),
    SharedOption("--restart", None, "resume from --checkpoint DIR if it holds a checkpoint"),
)}


def _help(option: str, detail: str | None = None, default: Any = None) -> str:
    """The help of a shared option: its meaning, then ``: detail`` and ``(default ...)``."""
    text = VOCABULARY[option].meaning
    if detail:
        text += f": {detail}"
    if default is not None:
        text += f" (default {default:,})" if isinstance(default, int) else f" (default {default})"
    return text


def _add(parser: argparse.ArgumentParser | Any, option: str, detail: str | None = None, *,
         default: Any = None, shown_default: Any = None, dest: str | None = None) -> None:
    spec = VOCABULARY[option]
    kw: dict[str, Any] = {"help": _help(option, detail, default if shown_default is None else shown_default)}
    if dest is not None:
        kw["dest"] = dest
    if spec.metavar is None:
        kw["action"] = "store_true"
    else:
        kw.update(metavar=spec.metavar, default=default)
        if spec.type is not None:
            kw["type"] = spec.type
    parser.add_argument(option, **kw)


def add_n(parser: argparse.ArgumentParser | Any, what: str, *, per: str, default: int | None,
          shown_default: str | None = None, dest: str = "n", old: tuple[str, ...] = ()) -> None:
    """``--n N``: the problem size; ``what`` it counts, ``per`` ``"in total"`` or ``"per rank"``.

    ``shown_default`` is the default's wording where it is computed later (``default=None``);
    ``old`` are hidden, deprecated spellings.
    """
    if per not in ("in total", "per rank"):
        raise ValueError(f"add_n: per must be 'in total' or 'per rank', got {per!r}")
    _add(parser, "--n", f"{what}, {per}", default=default, shown_default=shown_default, dest=dest)
    if old:
        add_alias(parser, *old, dest=dest, type=positive_int)


def add_iters(parser: argparse.ArgumentParser | Any, what: str, *, default: int | None,
              shown_default: str | None = None, dest: str = "iters") -> None:
    """``--iters K``: how many times the measured loop runs (``what`` says what one is)."""
    _add(parser, "--iters", what, default=default, shown_default=shown_default, dest=dest)


def add_repeats(parser: argparse.ArgumentParser | Any, what: str, *, default: int | None,
                shown_default: str | None = None, dest: str = "repeats", old: tuple[str, ...] = ()) -> None:
    """``--repeats R``: repetitions of a measurement; ``old`` are hidden, deprecated spellings
    (``--repeat``, ``--rounds``)."""
    _add(parser, "--repeats", what, default=default, shown_default=shown_default, dest=dest)
    if old:
        add_alias(parser, *old, dest=dest, type=positive_int)


def add_skew(parser: argparse.ArgumentParser | Any, what: str, *, default: float = 0.0) -> None:
    """``--skew S``: keys drawn Zipf with exponent S > 1 instead of uniform ones (0); ``what``
    says where (the help ends with the default)."""
    parser.add_argument("--skew", type=zipf_exponent, default=default, metavar="S",
                        help=f"{what} (default {'0: uniform' if not default else f'{default:g}; 0: uniform only'})")


def add_seed(parser: argparse.ArgumentParser | Any, what: str | None = None) -> None:
    """``--seed S``, default 0 everywhere; ``what`` says what it seeds."""
    _add(parser, "--seed", what, default=0)


def add_ledger(parser: argparse.ArgumentParser | Any, what: str | None = None) -> None:
    """``--ledger PATH`` (``what``: which supersteps it holds in this program, where that needs
    saying); check it before the run with :func:`.checks.check_outputs` and
    :func:`.checks.ledger_output`."""
    _add(parser, "--ledger", what)


def add_json(parser: argparse.ArgumentParser | Any, what: str | None = None) -> None:
    """``--json``: rank 0 prints one JSON object instead of the text report (``what``: what the
    object holds, where that needs saying)."""
    _add(parser, "--json", what)


def add_quiet(parser: argparse.ArgumentParser | Any) -> None:
    """``--quiet``: no progress lines on stderr (stdout carries only the result anyway)."""
    _add(parser, "--quiet")


def add_placement(parser: argparse.ArgumentParser | Any, jobs: str = "the job") -> None:
    """``--hosts FILE`` and ``--launch mpiexec|srun``: where a command that starts MPI jobs of its
    own puts their ranks (``jobs`` names them in the help); the caller turns them into a command
    line with :func:`hpcbsp.util.jobcommand.job_command`, which checks the file before any launch.
    docs/cli.md's table has the same wording."""
    parser.add_argument("--hosts", metavar="FILE", default=None,
                        help=f"one rank of {jobs} on each host of FILE (one host a line, host or host:slots; "
                             "mpiexec -f FILE -ppn 1, or Open MPI's equivalent; the emulated cluster's "
                             "/run/hpcbsp-slurm/hosts goes through its launcher); default: every rank on this machine")
    parser.add_argument("--launch", choices=LAUNCHES, default="mpiexec",
                        help=f"start {jobs} with mpiexec (default) or srun (one task per node of the Slurm "
                             "allocation this runs in)")


def add_checkpoint(parser: argparse.ArgumentParser | Any, unit: str | None, *,
                   checkpoint_help: str | None = None, restart_help: str | None = None) -> None:
    """``--checkpoint DIR``, ``--every K`` (``unit``: what K counts, e.g. ``"steps"``; None: no
    ``--every``, the program says when it saves in an option of its own) and ``--restart``;
    ``checkpoint_help`` and ``restart_help`` are the program's detail after the meaning.  Check
    them with :func:`.checks.check_checkpoint` (which sets an ``--every`` not given to 0)."""
    _add(parser, "--checkpoint", checkpoint_help)
    if unit is not None:
        _add(parser, "--every", f"K counts {unit}")
    _add(parser, "--restart", restart_help)


def add_common_options(parser: argparse.ArgumentParser | Any, *, with_seed: bool = True, ledger: bool = True,
                       json: bool = True, quiet: bool = True, seed_help: str | None = None) -> None:
    """``--seed`` (``seed_help`` says what it seeds), ``--ledger``, ``--json`` and ``--quiet``:
    the options every app has."""
    if with_seed:
        add_seed(parser, seed_help)
    if ledger:
        add_ledger(parser)
    if json:
        add_json(parser)
    if quiet:
        add_quiet(parser)
