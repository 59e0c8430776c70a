"""``hpcbsp report LEDGER [--out DIR] [--profile PROFILE.json] [--model MODEL.json]``: what a saved
ledger says about a run.

Prints the late supersteps (``superstep 5 (step5): rank 2 arrived last, +40 ms``; the rule:
:mod:`hpcbsp.runtime.superstep.lateness`) and writes ``DIR/report.html``, one self-contained
page with the figures (:mod:`hpcbsp.report`).  A missing or bad ledger or profile is one line
and exit status 2.
"""
from __future__ import annotations

import argparse
import sys

from ..cost.errors import CostInputError
from ..util.args.checks import check_out_dir
from ..util.args.parser import OneLineParser

EPILOG = """examples:
  mpiexec -n 3 python -m hpcbsp.apps.heat --n 200000 --steps 20 --ledger run.json
  hpcbsp report run.json --out report/            # the text on stdout, report/report.html
  hpcbsp report run.json.ranks --out report/      # a stream folder directly (bsp.ledger.stream(DIR), or
                                                  # the PATH.ranks that a stopped --ledger PATH run left)
  hpcbsp report run.json --out report/ --profile profile.json   # the BSP prediction per superstep
  hpcbsp report farm.json --out report/ --model model.json       # a BSF model against a farm's iterations
"""


def main(argv: list[str]) -> int:
    """``hpcbsp report ...`` (``argv``: what follows ``report``); the exit status."""
    parser = OneLineParser(
        prog="hpcbsp report", check_settings=False, epilog=EPILOG,
        description="Name the supersteps where one rank arrived late at the sync (its work beyond the median of the "
                    "other ranks' by more than 10 % of the median work and 1 ms) and write one HTML page with "
                    "figures: a timeline per rank (work, wait, exchange), the lateness per superstep and rank, "
                    "the bytes between rank pairs and, with --profile or --model, the BSP or BSF prediction against the "
                    "measured time.")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("ledger", metavar="LEDGER",
                        help="a ledger: .json or .csv from bsp.ledger.save or hpcbsp ledger merge, "
                             "or the folder bsp.ledger.stream(DIR) wrote")
    parser.add_argument("--out", metavar="DIR", help="write DIR/report.html (default: the text only)")
    parser.add_argument("--profile", metavar="PROFILE.json",
                        help="a machine profile (hpcbsp-cost probe) for the predicted cost per superstep")
    parser.add_argument("--model", metavar="MODEL.json",
                        help="a BSF model (hpcbsp-cost fit) for the predicted time per iteration of a farm's run")
    args = parser.parse_args(argv)
    check_out_dir(parser, args.out, "--out folder")
    from ..cost.modelfile import load_model
    from ..cost.profile import load_profile
    from ..report.analysis import farm_iterations, load, text

    try:
        profile = load_profile(args.profile) if args.profile else None
        model = load_model(args.model) if args.model else None
        run = load(args.ledger)
        if model is not None:
            farm_iterations(run)  # (a ledger of no farm: said before the text)
    except CostInputError as exc:
        print(f"hpcbsp report: {exc}", file=sys.stderr)
        return 2
    print(text(run))
    if args.out is not None:
        from ..report.page import write

        try:
            path = write(run, args.out, profile, model)
        except CostInputError as exc:
            print(f"hpcbsp report: {exc}", file=sys.stderr)
            return 2
        print(f"page: {path}")
    return 0
