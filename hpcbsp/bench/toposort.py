"""toposort: FA-BSP mailboxes against plain-BSP levels, side by side (issue 33, item 5).

    mpiexec -n 2 python -m hpcbsp.bench toposort [--n N] [--large N] [--degree D] [--repeats R]

bale's toposort (``hpcbsp.apps.irregular.toposort``) in its two modes, alternately (fabsp,
bsp, fabsp, ...; R runs each) in one BSP context on the same ranks, at two sizes: the app's
default (``--n``, 20,000 rows per rank) and a larger one (``--large``, 100,000 rows per rank;
0: none), on the same matrix for both modes.  A run's time is the slowest rank's, of the app's
timed part (transpose, column lists, elimination, placing); the phases are printed as rank
0's medians.  The ratio is BSP's median time over FA-BSP's: FA-BSP's speed relative to BSP
(target >= 1.0, at least as fast).  Every run's permutations are checked by the app's oracle
(exit status 1 if one fails).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import hpcbsp

from ..apps.irregular.toposort import PHASES, run_toposort
from ..runtime import BSP
from ..util.args.parser import OneLineParser
from ..util.args.types import nonnegative_int, positive_float
from ..util.args.vocabulary import add_n, add_repeats, add_seed
from ..util.progress import Progress
from . import measuring

#: Issue 33, item 5: FA-BSP at least as fast as BSP.
TARGET = 1.0
MODES = ("fabsp", "bsp")


def _say(bsp: BSP, text: str) -> None:
    if bsp.pid == 0:
        print(text, flush=True)


def _size(bsp: BSP, n: int, args: argparse.Namespace) -> bool:
    times: dict[str, list[float]] = {m: [] for m in MODES}
    phases: dict[str, dict[str, list[float]]] = {m: {k: [] for k in PHASES} for m in MODES}
    ok, detail = True, ""
    show = Progress(f"bench toposort n={n}", args.repeats, unit="repeat", enabled=bsp.pid == 0)
    for done in range(args.repeats):
        show(done)
        for mode in MODES:
            mine: dict[str, float] = {}
            out = run_toposort(bsp, mode, n, args.degree, args.seed, True, phases=mine)
            times[mode].append(float(bsp.allreduce(out.seconds, op="max")))
            ok = ok and bool(bsp.allreduce(0 if out.ok is False else 1, op="min"))
            for k in PHASES:
                phases[mode][k].append(mine.get(k, 0.0))
            detail = out.detail.split("; ")[0]
    _say(bsp, f"  {detail}, degree {args.degree:g}, {args.repeats} alternating runs per mode")
    for mode in MODES:
        t = times[mode]
        split = ", ".join(f"{k} {1e3 * statistics.median(phases[mode][k]):.1f}" for k in PHASES)
        _say(bsp, f"  {mode:<6} median {statistics.median(t):8.4f} s  best {min(t):8.4f} s  "
                  f"(rank 0 ms: {split})  {'' if ok else 'CHECK FAILED'}")
    ratio = statistics.median(times["bsp"]) / statistics.median(times["fabsp"])
    _say(bsp, f"  FA-BSP / BSP speed = {ratio:.2f}x (BSP's median time over FA-BSP's; best runs "
              f"{min(times['bsp']) / min(times['fabsp']):.2f}x; target >= {TARGET:.1f}x: "
              f"{'met' if ratio >= TARGET else 'NOT met'})")
    return ok


def _bench(bsp: BSP, args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    _say(bsp, f"toposort on {bsp.nprocs} rank(s): FA-BSP vs BSP")
    ok = True
    for per_rank in [args.n] + ([args.large] if args.large else []):
        ok = _size(bsp, per_rank * bsp.nprocs, args) and ok
    _say(bsp, f"done in {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.bench toposort", description=__doc__.split("\n\n")[0])
    add_n(parser, "rows of the default size", per="per rank", default=20_000)
    parser.add_argument("--large", type=nonnegative_int, default=100_000,
                        help="rows per rank of the larger size (default 100,000; 0: none)")
    parser.add_argument("--degree", type=positive_float, default=8.0,
                        help="nonzeros per row above the diagonal, times two (default 8, the app's)")
    add_repeats(parser, "alternating runs per mode and size", default=5)
    add_seed(parser, "the matrix")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    measuring()
    return hpcbsp.run(_bench, args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
