"""``hpcbsp report LEDGER [--out DIR] [--profile PROFILE.json]``: what a saved ledger says about a run.

Prints the late supersteps (``superstep 5 (step5): rank 2 arrived last, +40 ms``; the rule:
:mod:`hpcbsp.runtime.superstep.lateness`) and writes ``DIR/report.html``, one self-contained
page with the figures (:mod:`hpcbsp.report`).  A missing or bad ledger or profile is one line
and exit status 2.
"""
from __future__ import annotations

import sys

from ..cost.errors import CostInputError
from ..util.args.checks import check_out_dir
from ..util.args.parser import OneLineParser

EPILOG = """examples:
  mpiexec -n 3 python -m hpcbsp.apps.heat --n 200000 --steps 20 --ledger run.json
  hpcbsp report run.json --out report/            # the text on stdout, report/report.html
  hpcbsp report run.json.ranks --out report/      # a stream folder (bsp.ledger.stream(DIR)) directly
  hpcbsp report run.json --profile profile.json   # with the BSP prediction per superstep (hpcbsp-cost probe)
"""


def main(argv: list[str]) -> int:
    """``hpcbsp report ...`` (``argv``: what follows ``report``); the exit status."""
    parser = OneLineParser(
        prog="hpcbsp report", check_settings=False, epilog=EPILOG,
        description="Name the supersteps where one rank arrived late at the sync (its work beyond the median of the "
                    "other ranks' by more than 10 %% of the median work and 1 ms) and write one HTML page with "
                    "figures: a timeline per rank (work, wait, exchange), the lateness per superstep and rank, "
                    "the bytes each rank moved and, with --profile, the BSP prediction against the measured time.")
    parser.formatter_class = __import__("argparse").RawDescriptionHelpFormatter
    parser.add_argument("ledger", metavar="LEDGER",
                        help="a ledger: .json or .csv from bsp.ledger.save or hpcbsp ledger merge, "
                             "or the folder bsp.ledger.stream(DIR) wrote")
    parser.add_argument("--out", metavar="DIR", help="write DIR/report.html (default: the text only)")
    parser.add_argument("--profile", metavar="PROFILE.json",
                        help="a machine profile (hpcbsp-cost probe) for the predicted cost per superstep")
    args = parser.parse_args(argv)
    check_out_dir(parser, args.out, "--out folder")
    from ..cost.profile import load_profile
    from ..report.analysis import load, text

    try:
        profile = load_profile(args.profile) if args.profile else None
        run = load(args.ledger)
    except CostInputError as exc:
        print(f"hpcbsp report: {exc}", file=sys.stderr)
        return 2
    print(text(run))
    if args.out is not None:
        from ..report.page import write

        try:
            path = write(run, args.out, profile)
        except CostInputError as exc:
            print(f"hpcbsp report: {exc}", file=sys.stderr)
            return 2
        print(f"page: {path}")
    return 0
