"""Shared command-line plumbing: one parser class, one set of argument types, one vocabulary.

Every hpcbsp command line (the apps, ``hpcbsp``, ``hpcbsp-cost``, ``hpcbsp.apps.elastic.train``, the
benchmarks) builds its parser from here, so that the same thing is spelt and checked the same
way everywhere (docs/cli.md lists the vocabulary).  One module per concept:

* :mod:`.parser`: :class:`OneLineParser` (a usage error is one line naming the program, exit 2;
  no abbreviated options; the ``HPCBSP_*`` variables checked once the arguments are parsed,
  :func:`settings_ok`), :func:`quiet_pipe` (a closed stdout ends a command quietly) and
  :func:`not_a_program`;
* :mod:`.types`: the argparse types (:func:`positive_int`, :func:`nonnegative_int`,
  :func:`integer`, :func:`positive_float`, :func:`nonnegative_float`, :func:`seconds`,
  :func:`fraction`, :func:`seed`, ...), which refuse NaN, infinities, non-ASCII digits, inexact
  integers and out-of-range values with a message naming the value;
* :mod:`.vocabulary`: :data:`VOCABULARY`, the shared options (``--n``, ``--seed``, ``--ledger``,
  ``--checkpoint``, ...) and the ``add_*`` functions that put them on a parser;
* :mod:`.checks`: the checks of the values against the world before any work
  (:func:`check_outputs`, :func:`check_out_dir`, :func:`check_checkpoint`, :func:`check_memory`).

The modules of hpcbsp import each name from its module; this package re-exports them all for
programs of one's own (``from hpcbsp.util.args import OneLineParser, add_n``).
"""
from __future__ import annotations

from ..text import plural  # (moved to hpcbsp.util.text; kept importable from here)
from .checks import (
    LEDGER_SUFFIXES,
    check_checkpoint,
    check_memory,
    check_out_dir,
    check_outputs,
    ledger_output,
    physical_memory,
)
from .parser import OneLineParser, not_a_program, quiet_pipe, settings_ok
from .types import (
    finite_float,
    fraction,
    integer,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
    positive_seconds,
    seconds,
    seed,
    zipf_exponent,
)
from .vocabulary import (
    VOCABULARY,
    SharedOption,
    add_alias,
    add_checkpoint,
    add_common_options,
    add_iters,
    add_json,
    add_ledger,
    add_n,
    add_placement,
    add_quiet,
    add_repeats,
    add_seed,
    add_skew,
)

__all__ = ["LEDGER_SUFFIXES", "VOCABULARY", "OneLineParser", "SharedOption", "add_alias", "add_checkpoint",
           "add_common_options", "add_iters", "add_json", "add_ledger", "add_n", "add_placement", "add_quiet",
           "add_repeats", "add_seed", "add_skew", "check_checkpoint", "check_memory", "check_out_dir", "check_outputs",
           "finite_float", "fraction", "integer", "ledger_output", "nonnegative_float", "nonnegative_int",
           "not_a_program", "physical_memory", "plural", "positive_float", "positive_int", "positive_seconds",
           "quiet_pipe", "seconds", "seed", "settings_ok", "zipf_exponent"]
