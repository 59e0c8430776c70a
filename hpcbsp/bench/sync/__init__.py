"""Empty sync vs Barrier, put throughput vs hand-written Alltoallv, waiting that yields vs spinning.

    mpiexec -n 2 python -m hpcbsp.bench sync [--iters N] [--mib M] [--rounds R] [--nap-ms W] [--lateness-only]

Both sides of each comparison are measured alternately in the same run (R rounds, medians), since
shared machines are noisy.  One module per measurement, each stating what it times:

- ``control``: the empty sync against ``Barrier``, with its control step compiled and through
  mpi4py's Python calls (``HPCBSP_COMPILED_SYNC=0``, :mod:`hpcbsp.runtime.superstep.native`),
  and its floor (issue 30's target, <= 1.25x): this MPI's fastest allreduce of one integer
  through mpi4py, blocking or persistent, with the same allreduce from C and the control
  record's blocking ``MPI_Allreduce`` (``HPCBSP_CONTROL_COLLECTIVE``) for reference;
- ``puts``: every rank sends M MiB, one put per other rank, against packing the same bytes and
  one ``Alltoallv``, put and ``hpput`` in rounds that alternate with the baseline, each block
  after a warm-up; a small superstep's fixed cost (an ``hpput`` of 64 KiB to every other rank:
  the bulk exchange, :func:`hpcbsp.runtime.superstep.exchange.bulk_exchange`) against a bare
  ``Alltoallv``;
- ``fine``: the same words as single-element puts to random ranks and offsets (one
  ``put_elements`` call) against the vectorised puts, the floor of moving them as messages, and
  one ``put`` call per word;
- ``lateness``: the empty sync with the lateness watch on against off (``$HPCBSP_LATENESS``);
  ``--lateness-only`` runs this section alone;
- ``waits``: ``wait="spin"`` against ``wait="yield"``: the empty sync's latency, and the CPU the
  other ranks use while the last rank arrives W ms late (``--nap-ms``).

``report`` prints the rows on rank 0; every ratio is the quotient of the figures beside it.
"""
from __future__ import annotations

from typing import Any

from mpi4py import MPI

import hpcbsp
from hpcbsp.bench import measuring
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import positive_float
from hpcbsp.util.args.vocabulary import add_iters, add_repeats
from hpcbsp.util.progress import Progress

from . import control, fine, puts, report
from .lateness import lateness_cost
from .waits import wait_modes


def bench(bsp: "hpcbsp.BSP", iters: int, mib: float, rounds: int) -> dict[str, Any]:
    """Every measurement but the wait modes', in this order, on ``bsp``'s ranks (collective): the
    empty sync and its floors, the put rounds, the small superstep, the element puts against the
    vectorised ones, one put per word, the element puts' parts; then the puts' check."""
    comm = bsp.comm.Dup()  # the baseline's own communicator
    show = Progress("bench sync", 6, unit="part", enabled=bsp.pid == 0)
    r = control.empty_sync(bsp, comm, iters, rounds)
    show(1, "empty sync")
    load = puts.Puts(bsp, comm, mib)
    elements = fine.ElementPuts(load)
    r.update(puts.throughput(load, iters, rounds))
    show(2, "put rounds")
    r.update(puts.small_superstep(load, iters, rounds))
    show(3, "small superstep")
    r.update(fine.against_vectorised(elements, iters, rounds))
    show(4, "element puts")
    r.update(fine.one_by_one(elements, rounds))
    show(5, "one put per word")
    r.update(fine.parts(elements, rounds))
    load.check()  # the element puts overwrote some slots: the check is of the vectorised puts
    comm.Free()
    return {**r, **control.how_it_runs(bsp), "elements_transport": bsp.elements_transport}


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.bench sync", description=__doc__.split("\n\n")[0])
    add_iters(parser, "empty syncs per round", default=2000)
    parser.add_argument("--mib", type=positive_float, default=8.0, help="MiB sent per rank (default 8)")
    add_repeats(parser, "alternating rounds, medians reported", default=7, dest="rounds", old=("--rounds",))
    parser.add_argument("--nap-ms", type=positive_float, default=20.0,
                        help="how late the last rank arrives in the wait-mode row (default 20 ms)")
    parser.add_argument("--quick", action="store_true", help="a short run (200 iterations, 3 rounds)")
    parser.add_argument("--lateness-only", action="store_true",
                        help="only the lateness watch's cost (the empty sync with it on against off)")
    args = parser.parse_args(argv)
    if args.quick:
        args.iters, args.rounds = 200, 3
    if args.iters < 1 or args.rounds < 1 or not args.nap_ms > 0:
        parser.error("--iters and --rounds must be >= 1 and --nap-ms > 0")
    measuring()
    late = hpcbsp.run(lateness_cost, args.iters, args.rounds)
    if args.lateness_only:
        if MPI.COMM_WORLD.Get_rank() == 0:
            report.lateness(late, args.rounds)
        return 0
    r = hpcbsp.run(bench, args.iters, args.mib, args.rounds)
    w = hpcbsp.run(wait_modes, args.iters, args.rounds, args.nap_ms / 1e3) if MPI.COMM_WORLD.Get_size() > 1 else None
    if MPI.COMM_WORLD.Get_rank() == 0:
        p = MPI.COMM_WORLD.Get_size()
        report.control(r, args.rounds, p)
        report.throughput(r, p)
        report.fine(r, args.rounds, fine.SAMPLE)
        report.lateness(late, args.rounds)
        if w is not None:
            report.waits(w, args.rounds, args.nap_ms)
        if p == 1:
            print("note: with one rank nothing crosses ranks; run under mpiexec -n 2")
    return 0

