"""FA-BSP mailboxes vs plain-BSP bulk exchange vs one message per update, and overlap.

    mpiexec -n 2 python -m hpcbsp.bench fabsp [--quick] [--updates N] [--repeat R]

Side by side in one run, on the same ranks:

1. histogram and index-gather throughput (updates or reads per second per rank) in the three
   modes of ``hpcbsp.apps.irregular.histogram`` / ``index_gather``: FA-BSP mailboxes, plain BSP (one bulk
   exchange), naive (one MPI message per update, with a smaller N) and rma (one passive-target
   MPI_Accumulate or MPI_Get per update on a window MPI allocated, the honest one-at-a-time
   baseline on MPI, like bale's AGP; issued from a C loop, ``hpcbsp.apps.irregular.rma``, whose
   line says so, or from Python where the MPI functions are not found; ``--rma-updates``); the ratios
   FA-BSP/BSP (target >= 1.0) and FA-BSP/rma (target >= 5, issue 20; it replaces the old
   FA-BSP/naive >= 50, still printed); at 2 ranks, FA-BSP against bale's best tuned C figures
   from issue 20 (fixed numbers measured on another day: see ``BALE_TUNED``; target >= 1.0);
2. overlap: a histogram whose every chunk of updates costs some local computation.  Measured
   alone: compute only (T_comp), FA-BSP communication only (T_comm), and both interleaved
   (T_both: compute a chunk, send it, compute the next, ...).  The fraction of communication
   hidden behind compute is ``(T_comp + T_comm - T_both) / T_comm``, and of what could be hidden
   ``(T_comp + T_comm - T_both) / min(T_comp, T_comm)``; by default (``--work-rounds 0``) the
   compute is sized to take about T_comm, measured first, so that all of the communication
   could be hidden (with a fixed small compute, at most T_comp / T_comm of it can be); the
   plain-BSP program (compute everything, then one exchange) is timed too.  Measured balanced
   and with rank 0 computing ``--imbalance`` times as much: with one thread per rank and
   every rank busy there is no idle core to hide communication behind; with imbalance, the
   ranks that finish early handle the busy rank's records while it still computes.

3. memory: the histogram's mailbox with each routing (direct, 2d, 3d; records hop through a
   grid of ranks), its peers and the buffers it held, measured on these ranks; then the buffers
   per rank of one mailbox computed for P up to 100,000 by the sizing code the mailboxes use;
   each routing's rate over direct's, medians of ``--repeat`` interleaved runs (issue 33's
   target for 2d: >= 0.8x on one node).  At 2
   ranks every route is one hop and records travel bare (8 B/record for the histogram's int64);
   at 3 ranks and more a routed record carries its destination (12 B), and some pass through
   another rank: the bytes the busiest rank moved (its ledger, in + out) against direct's
   busiest say how much more a relaying rank carries (at 3 ranks, rank 0 relays the 1 <-> 2
   traffic of the 2 x 2 grid: twice the records and, at 12 B, 3x the bytes; moving records is
   the work here, so that bounds 2d at about 0.5x direct on one node, docs/performance.md).

4. link (``--sections link``; on by default with ``--link-rate``): histogram and index-gather,
   FA-BSP and plain BSP, with what they moved: payload bytes per update (the ledger's bytes out
   of every rank, over every update, local ones included) and the bytes that left each host on
   its network interface (``--iface``, default eth0, the emulated nodes' link; read from
   ``/proc/net/dev``, the node's own namespace; headers included), the busiest host's bytes per second in and out, and that rate
   against ``--link-rate`` (the rate each host's link is shaped to, in each direction).  Across
   the emulated cluster of docs/cluster.md; on one host no link is crossed and none is read.

5. combine (``--sections combine``): routing by node and combining, side by side: histogram
   (uniform keys, and Zipf-distributed ones with ``--skew``, where combining pays most) in four
   variants, direct and by node, each without and with ``combine="sum"`` ((key, count) records,
   :mod:`hpcbsp.fabsp.combining`), and index-gather (requests and replies: nothing to combine)
   direct and by node; interleaved, ``--repeat`` rounds.  For each: updates/s per rank (median,
   and over direct's), the MPI messages per rank and per pair of nodes (each app is one
   superstep, so per superstep; counted by the mailboxes' buffers, :attr:`Aggregator.messages`),
   how many pairs of ranks carried the messages between two nodes (routing by node: one per
   node pair and direction), records per update on the wire (every hop), payload bytes per
   update, and on emulated nodes the bytes their links sent per update.

Every time is the slowest rank's, best of ``--repeat`` runs; every run's result is checked
against the apps' serial oracles (exit status 1 if one fails).  Absolute figures depend on the
machine and its load; the ratios are what the run is for.
"""
from __future__ import annotations

import argparse
import time

import hpcbsp

from ...runtime import BSP
from ...util.args.parser import OneLineParser
from ...util.args.types import nonnegative_int, positive_int
from ...util.args.vocabulary import add_n, add_repeats, add_seed, add_skew
from ...util.progress import Progress
from .. import measuring
from .common import say
from .links import combine, link, link_rate
from .local import auto_rounds, memory, overlap, throughput

__all__ = ["SECTIONS", "main"]

#: The sections of the run, in order (``--sections``).
SECTIONS = ("throughput", "overlap", "memory", "link", "combine")


def _bench(bsp: BSP, args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    say(bsp, f"FA-BSP benchmark on {bsp.nprocs} rank(s): {args.updates:,} updates per rank "
              f"(naive: {args.naive_updates:,}, rma: {args.rma_updates:,}), table {args.table:,} per rank, best of {args.repeat}")
    if bsp.nprocs == 1:
        say(bsp, "  (one rank: every update is local; run under `mpiexec -n 2` for meaningful ratios)")
    ok = True
    show = Progress("bench fabsp", len(args.sections), unit="section", enabled=bsp.pid == 0)
    if "throughput" in args.sections:
        say(bsp, "1. throughput")
        ok = throughput(bsp, args)
        show(1)
    if "overlap" in args.sections:
        rounds = args.work_rounds or auto_rounds(bsp, args)
        say(bsp, f"2. overlap: {len(range(0, args.updates, args.chunk))} chunks of {args.chunk:,} "
                  f"updates, each after {rounds} x sin() of {args.work_size:,} values"
                  + ("" if args.work_rounds else " (as long as the communication: --work-rounds 0)"))
        for imbalance in sorted({1, args.imbalance}):
            ok = overlap(bsp, args, imbalance, rounds) and ok
        show(sum(s in args.sections for s in ("throughput", "overlap")))
    if "memory" in args.sections:
        say(bsp, "3. memory per rank by mailbox routing (records hop through a grid of ranks with 2d/3d)")
        ok = memory(bsp, args) and ok
        show(sum(s in args.sections for s in ("throughput", "overlap", "memory")))
    if "link" in args.sections:
        say(bsp, "4. link: bytes per update, and the busiest host's rate against the link's")
        ok = link(bsp, args) and ok
        show(sum(s in args.sections for s in ("throughput", "overlap", "memory", "link")))
    if "combine" in args.sections:
        say(bsp, "5. combine: direct vs by node, without and with combining (median of interleaved runs)")
        ok = combine(bsp, args) and ok
    say(bsp, f"done in {time.perf_counter() - t0:.1f} s")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.bench fabsp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, one repetition (a few seconds; for tests)")
    add_n(parser, "updates / reads for FA-BSP and BSP", per="per rank", default=None, dest="updates",
          shown_default="5,000,000; quick: 200,000", old=("--updates",))
    parser.add_argument("--naive-updates", type=positive_int, default=None,
                        help="per rank for the naive mode (default 50,000; quick: 5,000)")
    parser.add_argument("--rma-updates", type=positive_int, default=None,
                        help="per rank for the rma mode (default 500,000; quick: 5,000)")
    parser.add_argument("--table", type=positive_int, default=10_000,
                        help="table entries per rank (default 10,000)")
    add_repeats(parser, "runs per measurement, best kept", default=None, shown_default="3; quick: 1",
                dest="repeat", old=("--repeat",))
    parser.add_argument("--chunk", type=positive_int, default=1 << 16,
                        help="updates per send in the FA-BSP runs (default 65,536)")
    parser.add_argument("--work-size", type=positive_int, default=1 << 15,
                        help="overlap run: values per sin() of the local work (default 32,768)")
    parser.add_argument("--work-rounds", type=nonnegative_int, default=0,
                        help="overlap run: sin() calls per chunk (default 0: as many as make the "
                             "compute take about as long as the FA-BSP communication alone)")
    parser.add_argument("--imbalance", type=positive_int, default=3,
                        help="overlap run: also measure with rank 0 computing this many times as "
                             "much as the others (default 3; 1: balanced only)")
    add_seed(parser, "the keys and indices")
    parser.add_argument("--link-rate", type=link_rate, default=None, metavar="RATE",
                        help="the rate each host's link is shaped to (100mbit, 1gbit, ...): section 4 "
                             "reports the busiest host's rate against it (and runs by default)")
    parser.add_argument("--iface", default="eth0", metavar="NAME",
                        help="section 4: the network interface between the hosts (default eth0)")
    add_skew(parser, "section 5: also histogram keys drawn Zipf with exponent S > 1", default=1.2)
    parser.add_argument("--sections", default=None, metavar="LIST",
                        help=f"comma-separated, of {', '.join(SECTIONS)} (default: the first three, "
                             "and link with --link-rate)")
    try:
        args = parser.parse_args(argv)
        chosen = (args.sections or ",".join(SECTIONS[:3] + (("link",) if args.link_rate else ()))).split(",")
        if not set(chosen) <= set(SECTIONS):
            parser.error(f"--sections: {args.sections!r} names none of {', '.join(SECTIONS)}"
                         if not set(chosen) & set(SECTIONS) else
                         f"--sections: unknown {', '.join(sorted(set(chosen) - set(SECTIONS)))} "
                         f"(of {', '.join(SECTIONS)})")
        args.sections = tuple(chosen)
    except SystemExit as exc:
        return int(exc.code or 0)
    quick = args.quick
    args.updates = args.updates or (200_000 if quick else 5_000_000)
    args.naive_updates = args.naive_updates or (5_000 if quick else 50_000)
    args.rma_updates = args.rma_updates or (5_000 if quick else 500_000)
    args.repeat = args.repeat or (1 if quick else 3)
    if quick:
        args.chunk = min(args.chunk, 1 << 14)
    measuring()
    return hpcbsp.run(_bench, args)
