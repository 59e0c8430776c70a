"""``python -m hpcbsp.bench elastic --servers 1,4`` (a part of that bench, not a bench of its own): push+pull rounds through a sharded
parameter server, one line per number of server ranks.

    mpiexec -n 8 python -m hpcbsp.bench elastic --servers 1,4 [--workers W] [--params P] [--iters K]

For each S of ``--servers``, ``W`` workers (default: the ranks left by the largest S) push a
float32 gradient of ``P`` values and pull the weights through a server of S shards
(:mod:`hpcbsp.elastic.shards`; ASP, every push applied and answered at once), ``K`` round trips
each, the shards one per node where the job spans nodes (the ranks of neither role sit the
round out).  The shard counts alternate within each of ``--repeats`` rounds (side by side), and
the median per S is printed:

    servers S: X rounds per second per worker, Y x servers 1; busiest server link: A MiB in + B MiB out per round (measured C + D);
        each server holds E weights + F held gradients + G receive buffers = H  (one line)

A round is one push+pull of every worker.  The bytes are counted (:func:`shard_figures`: each
worker sends every shard a 16-byte header and its slice of the gradient, and receives a header
and the slice of the weights) and, where ``--iface`` exists (the emulated nodes' eth0), measured
on the busiest server's interface.  With ``--link-rate`` the rate the links allow is printed
too: where one server's link is the bottleneck, S shards approach S times its rounds.  The line
ends with the buffers the busiest server holds for the run
(:func:`~hpcbsp.elastic.keyranges.shard_memory`; ASP holds no gradient, so its rows stay untouched).
"""
from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcbsp.elastic.keyranges import key_ranges, server_ranks, servers_problem, shard_memory
from hpcbsp.elastic.policies import make_policy
from hpcbsp.elastic.server import serve
from hpcbsp.elastic.wire import HEADER_BYTES
from hpcbsp.elastic.worker import work
from hpcbsp.elastic.world import World, launch_world
from hpcbsp.util.args.types import positive_int
from hpcbsp.util.launcher import launcher_size

from . import measuring
from .fabsp.links import link_rate, nic_bytes

__all__ = ["server_counts", "ShardFigures", "shard_figures", "check", "bench_shards", "report", "add_options",
           "run_servers"]

MIB = 2.0 ** 20



def server_counts(text: str) -> list[int]:
    """argparse type: ``--servers``, comma-separated numbers of server ranks (each >= 1)."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers "
                                         "(say 1,4)") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every number of servers must be at least 1")
    return counts


@dataclass(frozen=True)
class ShardFigures:
    """One shard count's figures (see :func:`shard_figures`)."""

    rounds_per_s: float       #: push+pull round trips per second, per worker
    server_in: int            #: bytes into the busiest server per round (every worker once)
    server_out: int           #: bytes out of it per round
    worker_out: int           #: bytes out of one worker per round (its push, to every shard)
    worker_in: int            #: bytes into one worker per round
    link_bound: float | None  #: rounds per second per worker that the links allow (None: no rate)


def shard_figures(servers: int, workers: int, params: int, round_trips: int, seconds: float,
                  itemsize: int = 4, grad_itemsize: int = 4, link_bits: float | None = None) -> ShardFigures:
    """The figures of a run from its counts: ``round_trips`` push+pulls of ``workers`` workers
    in all, in ``seconds`` (the leader's clock); ``params`` weights of ``itemsize`` bytes
    (gradients of ``grad_itemsize``) split into ``servers`` key ranges
    (:func:`~hpcbsp.elastic.keyranges.key_ranges`: the first is the longest, its server the
    busiest), each message after a 16-byte header.  ``link_bits``: each link's rate per
    direction in bit/s; the bound is the slower of a server's link (every worker's round through
    it, in and out at once) and a worker's: its push, then at least the last shard's reply (the
    worker sends the shards their slices one after the other, and each replies as its slice is
    in, while the next ones travel: :mod:`hpcbsp.elastic.worker`)."""
    longest = max(k.stop - k.start for k in key_ranges(params, servers))
    server_in = workers * (HEADER_BYTES + grad_itemsize * longest)
    server_out = workers * (HEADER_BYTES + itemsize * longest)
    worker_out = servers * HEADER_BYTES + grad_itemsize * params
    worker_in = servers * HEADER_BYTES + itemsize * params
    rate = round_trips / workers / seconds
    bound = None
    if link_bits is not None:
        bound = link_bits / 8 / max(server_in, server_out, worker_out + worker_in / servers)
    return ShardFigures(rate, server_in, server_out, worker_out, worker_in, bound)


def check(servers: list[int], workers: int | None, ranks: int) -> str | None:
    """Why the shard counts cannot run on ``ranks`` ranks with ``workers`` workers (None: they can)."""
    for s in servers:
        problem = servers_problem(s, ranks)
        if problem is not None:
            return problem
    if workers is not None and max(servers) + workers > ranks:
        return (f"--workers {workers} and --servers {max(servers)} need {max(servers) + workers} ranks; "
                f"this job has {ranks}")
    return None


def _one(comm: MPI.Comm, servers: int, workers: int, params: int, iters: int, timeout: float,
         iface: str) -> tuple[tuple[int, float] | None, tuple[int, int] | None]:
    """One measurement: (the leader's round trips and seconds, None elsewhere; this server's
    interface bytes (tx, rx) during it, or None)."""
    order = server_ranks(comm.allgather(MPI.Get_processor_name()), servers)
    order += [r for r in range(comm.Get_size()) if r not in order][:workers]
    me = comm.Get_rank()
    part = comm.Split(0 if me in order else MPI.UNDEFINED, order.index(me) if me in order else 0)
    if part == MPI.COMM_NULL:
        return None, None
    try:
        rank = part.Get_rank()
        part.Barrier()
        if rank < servers:
            before = nic_bytes(iface)
            res = serve(part, make_policy("asp"), np.zeros(params, dtype=np.float32), 1e-6,
                        max_updates=workers * iters, timeout=timeout, servers=servers, transport="messages")
            after = nic_bytes(iface)
            moved = None if before is None or after is None else (after[0] - before[0], after[1] - before[1])
            return (None if res is None else (res.log.updates, res.log.duration_s)), moved
        grad = np.full(params, 1e-3, dtype=np.float32)
        work(part, lambda weights: grad, params, dtype=np.float32, timeout=timeout, servers=servers,
             transport="messages")
        return None, None
    finally:
        part.Free()


def bench_shards(world: World, counts: list[int], workers: int, params: int, iters: int, rounds: int,
                 iface: str) -> dict[int, dict[str, list[Any]]]:
    """Every shard count once per round, alternating; rank 0's result: per S, per round, the
    round trips and seconds of the run and the busiest server's interface bytes."""
    comm = world.comm
    per: dict[int, dict[str, list[Any]]] = {s: {"runs": [], "nic": []} for s in counts}
    for _ in range(rounds):
        for s in counts:
            comm.Barrier()
            took, moved = _one(comm, s, workers, params, iters, world.timeout, iface)
            took_all = comm.gather(took, root=0)
            moved_all = comm.gather(moved, root=0)
            if took_all is not None and moved_all is not None:  # (rank 0)
                per[s]["runs"].extend(t for t in took_all if t is not None)
                nic = [m for m in moved_all if m is not None]
                per[s]["nic"].append(max(nic, key=lambda m: m[0] + m[1]) if nic else None)
    return per


def report(per: dict[int, dict[str, list[Any]]], workers: int, params: int, iters: int,
           link_bits: float | None, nodes: bool = True) -> list[str]:
    """The lines printed: one per shard count (medians over the rounds); ``nodes``: the servers
    are on nodes of their own, whose interfaces' bytes are theirs."""
    lines, base = [], None
    for s, got in per.items():
        figures = [shard_figures(s, workers, params, trips, secs, link_bits=link_bits)
                   for trips, secs in got["runs"]]
        rate = statistics.median(f.rounds_per_s for f in figures)
        base = rate if base is None else base
        f = figures[0]
        line = (f"servers {s}: {rate:.2f} rounds per second per worker, {rate / base:.2f}x servers "
                f"{next(iter(per))}; busiest server link: {f.server_in / MIB:.2f} MiB in + "
                f"{f.server_out / MIB:.2f} MiB out per round")
        measured = [m for m in got["nic"] if m is not None] if nodes else []
        if measured:
            tx = statistics.median(m[0] for m in measured) / iters
            rx = statistics.median(m[1] for m in measured) / iters
            line += f" (measured on its interface: {rx / MIB:.2f} in + {tx / MIB:.2f} out)"
        if f.link_bound is not None:
            line += f"; the links allow {f.link_bound:.2f}"
        lines.append(line + f"; each server holds {shard_memory(params, s, workers, 4, 4).text()}")
    return lines


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of the sharded comparison (``--servers`` turns it on)."""
    parser.add_argument("--servers", type=server_counts, default=None, metavar="S,...",
                        help="instead of the comparisons above: push+pull rounds through a server of "
                             "S shards, for each S listed (say 1,4), one line each")
    parser.add_argument("--workers", type=positive_int, default=None,
                        help="with --servers: workers (default: the ranks the largest S leaves)")
    parser.add_argument("--link-rate", type=link_rate, default=None, metavar="RATE",
                        help="with --servers: each link's rate (100mbit, ...), to print what the links allow")
    parser.add_argument("--iface", default="eth0", metavar="NAME",
                        help="with --servers: the interface whose bytes are measured (default eth0, the "
                             "emulated nodes' link; none where it does not exist)")


def run_servers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``bench elastic --servers``: checks (a bad value: one line, exit 2), runs, prints."""
    ranks = launcher_size()
    problem = check(args.servers, args.workers, ranks)
    if problem is not None:
        parser.error(problem)
    workers = args.workers if args.workers is not None else ranks - max(args.servers)
    measuring()
    per = launch_world(bench_shards, args.servers, workers, args.params, args.iters, args.rounds, args.iface)
    if MPI.COMM_WORLD.Get_rank() == 0:
        hosts = len(set(MPI.COMM_WORLD.allgather(MPI.Get_processor_name())))
        print(f"ranks: {ranks} on {hosts} host{'s' if hosts > 1 else ''}; {workers} workers; model: "
              f"{args.params:,} float32 parameters ({4 * args.params / MIB:.2f} MiB); {args.rounds} "
              f"alternating rounds of {args.iters} round trips per worker (ASP)")
        for line in report(per, workers, args.params, args.iters, args.link_rate, nodes=hosts >= ranks):
            print(line)
        print("(a round: one push+pull of every worker; figures count only on a quiet machine)")
    else:
        MPI.COMM_WORLD.allgather(MPI.Get_processor_name())
    return 0
