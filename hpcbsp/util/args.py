"""Shared command-line plumbing: one parser class, one set of argument types, one vocabulary.

Every hpcbsp command line (the apps, ``hpcbsp``, ``hpcbsp-cost``, ``hpcbsp.apps.elastic.train``, the
benchmarks) builds its parser from here, so that the same thing is spelt and checked the same
way everywhere (docs/cli.md lists the vocabulary):

* :class:`OneLineParser` reports a usage error as one line naming the program and exits 2; it
  never accepts an abbreviated option (``--n`` must not silently mean ``--no-check``).  Once the
  arguments are parsed it checks the ``HPCBSP_*`` environment variables (:func:`settings_ok`):
  a bad value is one line and exit 2 before any work, an unknown name a warning.
* The argument types (:func:`positive_int`, :func:`nonnegative_int`, :func:`integer`,
  :func:`positive_float`, :func:`nonnegative_float`, :func:`seconds`, :func:`fraction`, :func:`seed`) reject
  NaN, infinities, non-ASCII digits and out-of-range values with a message naming the value.
* :data:`VOCABULARY` is the one list of the shared options (``--n``, ``--iters``, ``--repeats``,
  ``--seed``, ``--ledger``, ``--json``, ``--quiet``, ``--checkpoint``, ``--every``,
  ``--restart``): spelling, value name, type and meaning.  A program adds them with
  :func:`add_n`, :func:`add_iters`, :func:`add_repeats`, :func:`add_seed`, :func:`add_ledger`,
  :func:`add_json`, :func:`add_quiet`, :func:`add_checkpoint` (or :func:`add_common_options` for
  the four every app has), so that each help starts with the same meaning and each value gets the
  same check; a command that starts MPI jobs of its own places them with :func:`add_placement`;
  :func:`check_outputs` with :func:`ledger_output` and :func:`check_checkpoint` check them before
  the work.  :func:`add_alias` keeps an old spelling as a hidden, deprecated alias.  (A Perfetto
  trace is ``--ledger RUN.trace.json``: there is no second option for it.)
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, NoReturn

from . import settings
from .jobcommand import LAUNCHES
from .launcher import launcher_rank


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line naming the program, and exits 2.

    Abbreviated long options are refused (``allow_abbrev=False``).  Under mpiexec every rank
    parses the same arguments; only rank 0 prints the error, so the user sees it once.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if launcher_rank() == 0:
            sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        """argparse's, then the check of the environment (:func:`settings_ok`; exit 2 if bad)."""
        namespace = super().parse_args(*args, **kwargs)
        if not settings_ok():
            sys.exit(2)
        return namespace


def settings_ok() -> bool:
    """Check every ``HPCBSP_*`` variable set (:func:`hpcbsp.util.settings.check`), as a command
    does before its work: False after one line ``[hpcbsp] error: ...`` for a bad value (rank 0
    prints it; every rank returns False, and the command exits 2); a warning for each name that
    is not hpcbsp's."""
    try:
        warnings = settings.check()
    except settings.SettingError as exc:
        if launcher_rank() == 0:
            sys.stderr.write(f"[hpcbsp] error: {exc}\n")
            sys.stderr.flush()
        return False
    settings.warn(warnings)
    return True


# -- argument types --------------------------------------------------------------------------------

def _number(text: str, kind: str) -> float:
    """``text`` as a finite float; ``1_000`` and ``1e6`` accepted, other scripts' digits not."""
    clean = text.strip().replace("_", "")
    try:
        if not clean.isascii():
            raise ValueError(text)
        value = float(clean)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {kind} (a finite value is needed)")
    return value


def integer(text: str) -> int:
    """argparse type: an integer that fits in int64 (``1e6`` and ``1_000_000`` accepted; ``2.5`` is
    not): the programs keep counts, sizes and seeds in int64 arrays."""
    clean = text.strip().replace("_", "")
    if clean.isascii() and clean.lstrip("+-").isdigit():
        value = int(clean)
    else:
        number = _number(text, "an integer")
        if number != int(number):
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer")
        value = int(number)
    if not -2**63 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range (an int64: from -2**63 to 2**63 - 1)")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = integer(text)
    except argparse.ArgumentTypeError as exc:
        if "out of range" in str(exc):
            raise
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer (it must be >= 1)")
    return value


def nonnegative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    value = integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def seed(text: str) -> int:
    """argparse type: a random seed, an integer in [0, 2**63) (numpy's generators take no negative
    seed, and programs record their seed as an int64)."""
    try:
        value = integer(text)
    except argparse.ArgumentTypeError:
        value = -1
    if not 0 <= value < 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a seed (an integer from 0 to 2**63 - 1)")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = _number(text, "a number")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
    return value


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    value = _number(text, "a number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def finite_float(text: str) -> float:
    """argparse type: any finite number."""
    return _number(text, "a number")


def zipf_exponent(text: str) -> float:
    """argparse type: a Zipf exponent S > 1, or 0 for uniform keys."""
    value = _number(text, "a number")
    if value != 0 and value <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be > 1 (a Zipf exponent), or 0 for uniform keys")
    return value


def seconds(text: str) -> float:
    """argparse type: a finite duration in seconds, >= 0 (fractions kept: ``0.5`` is half a second)."""
    value = _number(text, "a number of seconds")
    if value < 0:
        raise argparse.ArgumentTypeError(f"a time must be a finite number >= 0, got {text!r}")
    return value


def positive_seconds(text: str) -> float:
    """argparse type: a finite duration in seconds, > 0."""
    value = seconds(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a time must be > 0 seconds, got {text!r}")
    return value


def fraction(text: str) -> float:
    """argparse type: a probability in [0, 1]."""
    value = _number(text, "a number")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must lie in [0, 1]")
    return value


# -- the shared vocabulary ---------------------------------------------------------------------

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
    saying); check it before the run with :func:`check_outputs` and :func:`ledger_output`."""
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
    them with :func:`check_checkpoint` (which sets an ``--every`` not given to 0)."""
    _add(parser, "--checkpoint", checkpoint_help)
    if unit is not None:
        _add(parser, "--every", f"K counts {unit}")
    _add(parser, "--restart", restart_help)


def check_checkpoint(parser: argparse.ArgumentParser, args: argparse.Namespace,
                     check_target: Callable[[str], Any], errors: tuple[type[Exception], ...]) -> None:
    """The checks of :func:`add_checkpoint`'s options, before any work (each a usage error: one
    line, exit 2):

    * ``--every K`` (K > 0) and ``--restart`` need ``--checkpoint``;
    * ``--checkpoint`` needs ``--every K`` (K > 0) or ``--restart``: with neither, no checkpoint
      would be written or read (``--checkpoint DIR --restart`` alone resumes from DIR and writes
      no further checkpoints);
    * ``check_target(path)`` (raising one of ``errors``, whose text says why) refuses a folder
      that is not this program's checkpoint, and where checkpoints will be written, the place
      must take them (its missing parent folders are made, :func:`.outputs.prepare_parent`).

    Afterwards ``args.every`` is an int (0 where it was not given)."""
    every = getattr(args, "every", None)
    if not hasattr(args, "every"):  # (a program without --every)
        if args.restart and not args.checkpoint:
            parser.error("--restart needs --checkpoint DIR")
    elif (every or args.restart) and not args.checkpoint:
        parser.error("--every and --restart need --checkpoint DIR")
    elif args.checkpoint and not every and not args.restart:
        given = "with --every 0" if every == 0 else "without --every K"
        parser.error(f"--checkpoint DIR {given} would write no checkpoint: add --every K (a checkpoint "
                     "every K steps or iterations), or --restart to resume from DIR")
    if hasattr(args, "every") and every is None:
        args.every = 0
    if args.checkpoint:
        try:
            check_target(args.checkpoint)
        except errors as exc:
            parser.error(str(exc))
        if getattr(args, "every", 1):  # (a program without --every writes by its own option)
            from .outputs import OutputError, prepare_parent

            try:
                prepare_parent(args.checkpoint, "--checkpoint folder")
            except OutputError as exc:
                parser.error(str(exc))


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


#: File name endings the ledger can be saved as (``bsp.ledger.save``).
LEDGER_SUFFIXES = (".json", ".csv")


def ledger_output(path: str | None) -> tuple[str | None, str, tuple[str, ...]]:
    """``--ledger PATH`` as an entry of :func:`check_outputs`'s list."""
    return path, "--ledger file", LEDGER_SUFFIXES


def check_outputs(parser: argparse.ArgumentParser, outputs: list[tuple[str | None, str, tuple[str, ...]]]) -> None:
    """Check output paths before any work: ``(path, what, suffixes)``; suffixes ``()``: any.

    A wrong extension, a folder where a file is wanted, or an unwritable place is a usage error
    (one line, exit 2) now, not a traceback after the run.
    """
    from .outputs import OutputError, prepare_output

    for path, what, suffixes in outputs:
        if not path:
            continue
        if suffixes and not path.lower().endswith(suffixes):
            endings = suffixes[0] if len(suffixes) == 1 else f"{', '.join(suffixes[:-1])} or {suffixes[-1]}"
            parser.error(f"{what} {path!r}: use a file name ending in {endings}")
        try:
            prepare_output(path, what)
        except OutputError as exc:
            parser.error(str(exc))


def check_out_dir(parser: argparse.ArgumentParser, path: str | os.PathLike[str] | None, what: str) -> None:
    """Check an output folder before any work: it may exist (as a folder) or be creatable."""
    from .outputs import OutputError, prepare_dir

    if path is None:
        return
    try:
        prepare_dir(path, what)
    except OutputError as exc:
        parser.error(str(exc))


def plural(count: int, noun: str, plural_form: str | None = None) -> str:
    """``1 rank``, ``2 ranks`` (``plural_form`` for irregular nouns)."""
    return f"{count:,} {noun if count == 1 else (plural_form or noun + 's')}"


def physical_memory() -> int | None:
    """Bytes of physical memory on this node, or None where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(parser: argparse.ArgumentParser, nbytes: float, what: str, hint: str) -> None:
    """Refuse, before the work, a size whose arrays could not fit in this node's memory.

    ``nbytes`` is the estimated need on one process (``what`` describes it); ``hint`` says which
    option to make smaller.  A usage error (one line, exit 2) instead of a ``MemoryError``.
    """
    total = physical_memory()
    if total is not None and nbytes > total:
        parser.error(f"{what} needs about {_bytes(nbytes)} of memory per process, more than this "
                     f"node's {_bytes(total)}: {hint}")


def _bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:,.0f} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"


def not_a_program(module: str, instead: str) -> int:
    """For ``python -m`` of a library module: one line saying what to run instead; status 2."""
    sys.stderr.write(f"{module} is a library module, not a program: {instead}\n")
    return 2
