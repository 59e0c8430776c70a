"""The command line of the irregular apps (histogram, index_gather, triangles, bfs):
``--mode fabsp|bsp|naive`` (and ``rma`` for the table apps), the mailbox tuning options and the
shared options of :mod:`hpcbsp.util.args`, each rejecting a bad value with one line and exit
status 2; and the driver of the table apps, with the call of their implementation of a mode
(:func:`run_mode`).
"""
from __future__ import annotations

import argparse
from typing import Any, Callable

import numpy as np

from ...runtime import BSP
from ...runtime import run as run_bsp
from ...util.args.checks import check_memory, check_outputs, ledger_output
from ...util.args.parser import OneLineParser
from ...util.args.types import positive_int
from ...util.args.vocabulary import add_common_options, add_n
from ...util.choices import ROUTING_CHOICES
from ...util.launcher import launcher_size
from .report import Outcome, report

MODES = ("fabsp", "bsp", "naive")
#: The table apps (histogram, index_gather) also have the one-sided baseline (:mod:`.rma`).
TABLE_MODES = MODES + ("rma",)


def app_parser(prog: str, doc: str, modes: tuple[str, ...] = MODES) -> argparse.ArgumentParser:
    """The options every irregular app has; the app adds its own."""
    parser = OneLineParser(
        prog=f"python -m hpcbsp.apps.irregular.{prog}", description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    said = {"fabsp": "fabsp: mailboxes with handlers, aggregated and overlapped (default)",
            "bsp": "bsp: plain BSP, bulk exchanges in supersteps",
            "naive": "naive: one MPI message per record (use a much smaller size; raw MPI, so the "
                     "ledger does not count it)",
            "rma": "rma: one passive-target MPI RMA operation (Accumulate or Get) per record, the "
                   "one-sided baseline (use a much smaller size; raw MPI too)"}
    parser.add_argument("--mode", choices=modes, default="fabsp",
                        help="; ".join(said[m] for m in modes))
    parser.add_argument("--buffer", type=positive_int, default=None,
                        help="fabsp: records per destination buffer (default: about 64 KiB)")
    parser.add_argument("--max-pending", type=positive_int, default=16,
                        help="fabsp: messages in flight per mailbox (default 16)")
    parser.add_argument("--routing", choices=ROUTING_CHOICES, default=None,
                        help="fabsp: how mailbox records travel: direct (a buffer per rank), 2d "
                             "or 3d (hop through a grid of ranks: about 2 sqrt(P) or 3 cbrt(P) "
                             "buffers per rank), auto (by P: direct up to 256 ranks); default "
                             "$HPCBSP_ROUTING, else auto")
    parser.add_argument("--chunk", type=positive_int, default=1 << 16,
                        help="fabsp: records generated and sent per step of local work, with "
                             "bsp.progress() in between (default 65536)")
    parser.add_argument("--no-check", action="store_true", help="skip the serial oracle check")
    add_common_options(parser)
    return parser


def check_app_outputs(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The output paths every irregular app has, checked before the run."""
    check_outputs(parser, [ledger_output(args.ledger)])


def run_app(app: Callable[[BSP, argparse.Namespace], int], args: argparse.Namespace) -> int:
    """``hpcbsp.run(app, args)`` with ``--ledger PATH`` streamed from the context's start: every
    superstep's record goes to ``PATH.ranks`` as the run goes, and :func:`.report.report` merges
    them into ``PATH`` (so the file is complete however long the run; memory stays bounded)."""
    def body(bsp: BSP, args: argparse.Namespace) -> int:
        if args.ledger:
            bsp.ledger.stream_for(args.ledger)
        return app(bsp, args)

    return run_bsp(body, args)


def mailbox_options(args: argparse.Namespace) -> dict[str, int | str]:
    """The ``bsp.mailbox`` keyword arguments the command line chose."""
    kw: dict[str, int | str] = {"max_pending": args.max_pending}
    if args.buffer is not None:
        kw["buffer"] = args.buffer
    if args.routing is not None:
        kw["routing"] = args.routing
    return kw


def table_app_main(argv: list[str] | None, app: str, doc: str, unit: str,
                   defaults: tuple[int, int, int], run: Callable[..., "Outcome"],
                   extra: Callable[[argparse.ArgumentParser], Callable[[argparse.Namespace], dict]]
                   | None = None) -> int:
    """The command line of the table apps (histogram, index_gather): ``-n`` and ``-T``.

    ``defaults`` are (N per rank, N per rank in naive mode, table entries per rank); ``run`` is
    the app's ``run_*(bsp, mode, n, table, seed, chunk, check, **kw)``.  ``extra(parser)`` may
    add an app's own options and return a function that turns the parsed arguments into more
    keyword arguments for ``run`` (checking them with ``parser.error``).
    """
    n_default, n_naive, table_default = defaults
    parser = app_parser(app, doc, TABLE_MODES)
    add_n(parser, unit, per="per rank", default=None,
          shown_default=f"{n_default:,}; {n_naive:,} with --mode naive or rma", old=("-n", f"--{unit}"))
    parser.add_argument("-T", "--table", type=positive_int, default=table_default,
                        help=f"table entries per rank (default {table_default:,})")
    extra_kw = extra(parser) if extra is not None else (lambda args: {})
    args = parser.parse_args(argv)
    app_kw = extra_kw(args)
    check_app_outputs(parser, args)
    n = args.n or (n_naive if args.mode in ("naive", "rma") else n_default)
    # Per rank: the indices and offsets drawn (int64, a few copies) and the table; the oracle
    # holds the whole table (T times the ranks: the launcher says how many).
    check_memory(parser, 6 * 8.0 * n + 8.0 * args.table * (2 + launcher_size()),
                 f"--n {n} -T {args.table}", "use a smaller --n or -T")

    def app_main(bsp: BSP, args: argparse.Namespace) -> int:
        n = args.n or (n_naive if args.mode in ("naive", "rma") else n_default)
        kw = dict(mailbox_options(args) if args.mode == "fabsp" else {}, **app_kw)
        out = run(bsp, args.mode, n, args.table, args.seed, args.chunk, not args.no_check, **kw)
        return report(bsp, app, args.mode, out, args, unit=unit)

    return run_app(app_main, args)


def run_mode(mode: str, modes: dict[str, Callable[..., tuple[np.ndarray, float]]], *args: Any,
             **fabsp_kw: Any) -> tuple[np.ndarray, float]:
    """``modes[mode](*args)``: a table app's implementation of ``mode``, all of them called with
    the same arguments (the context, the owners and offsets, the table) and returning the
    rank's result and its seconds, the fabsp mode with its own keyword arguments ``fabsp_kw`` too
    (the chunk, the mailbox's options); a ``ValueError`` for a mode the app does not have."""
    run = modes.get(mode)
    if run is None:
        raise ValueError(f"unknown mode {mode!r}")
    return run(*args, **fabsp_kw) if mode == "fabsp" else run(*args)


if __name__ == "__main__":
    import sys

    from ...util.args.parser import not_a_program

    sys.exit(not_a_program("hpcbsp.apps.irregular.cli", "run python -m hpcbsp.apps.irregular.histogram, "
                           "index_gather, bfs, triangles or toposort (--help for options)"))
