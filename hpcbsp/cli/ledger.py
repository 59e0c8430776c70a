"""``hpcbsp ledger merge DIR -o OUT``: a streamed ledger's per-rank files merged into one file.

``bsp.ledger.stream(DIR)`` (the apps' ``--ledger PATH`` streams into ``PATH.ranks``) writes every
rank's superstep records into ``DIR`` as the run goes; this command, run once after the job on
any machine that sees ``DIR``, writes them as ``bsp.ledger.save`` does: ``.json`` or ``.csv``
(which ``hpcbsp-cost ledger`` reads) or ``.trace.json`` (Perfetto).  It reads one rank at a time
and writes record by record, so its memory does not grow with the number of supersteps.  A
missing or damaged stream is one line and exit status 2.
"""
from __future__ import annotations

import sys

from ..runtime.errors import BadInput
from ..runtime.superstep.ledgerfiles import merge
from ..util.args.checks import LEDGER_SUFFIXES, check_outputs
from ..util.args.parser import OneLineParser
from ..util.text import plural


def main(argv: list[str]) -> int:
    """``hpcbsp ledger ...`` (``argv``: what follows ``ledger``); the exit status."""
    parser = OneLineParser(prog="hpcbsp ledger", check_settings=False,
                           description="Work with the superstep ledger's files.")
    sub = parser.add_subparsers(dest="command", metavar="merge", required=True)
    m = sub.add_parser("merge", help="merge a streamed ledger (bsp.ledger.stream(DIR), the apps' --ledger) into one file",
                       description="Merge the per-rank files a streaming ledger wrote into DIR into one file, "
                                   "as bsp.ledger.save writes it (.json and .csv for hpcbsp-cost ledger, "
                                   ".trace.json for Perfetto).")
    m.add_argument("directory", metavar="DIR", help="the folder bsp.ledger.stream wrote (an app's --ledger PATH: PATH.ranks)")
    m.add_argument("-o", "--out", required=True, metavar="OUT", help="the merged file: .json, .csv or .trace.json")
    args = parser.parse_args(argv)
    check_outputs(m, [(args.out, "--out file", LEDGER_SUFFIXES)])
    try:
        nprocs, count = merge(args.directory, args.out)
    except BadInput as exc:
        print(f"hpcbsp ledger merge: {exc}", file=sys.stderr)
        return 2
    print(f"{args.out}: {plural(count, 'record')} of {plural(nprocs, 'rank')}")
    return 0
