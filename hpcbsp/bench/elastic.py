"""Parameter-server push+pull vs raw Send/Recv, and an allreduce step vs bare MPI.Allreduce.

    mpiexec -n 2 python -m hpcbsp.bench elastic [--params P] [--iters K] [--repeats R] [--grad-dtype D]
    mpiexec -n 8 python -m hpcbsp.bench elastic --servers 1,4 [--workers W] [--link-rate R]  (hpcbsp/bench/_elastic_shards.py)

Two comparisons, each measured side by side in alternating rounds, on a float32
model of ``P`` parameters (default 1,048,576: 4 MiB each way):

* **push+pull**: one worker (rank 1) pushes a gradient to the server (rank 0) and waits for
  the weights, through :func:`hpcbsp.elastic.server.serve` and :func:`hpcbsp.elastic.worker.work`
  with the ASP policy (every push applied, ``weights -= lr * g``, and answered at once): the whole round trip a worker
  sees, timed between its first and its last call of the gradient function (the run's set-up
  and teardown are not round trips).  Baseline: rank 1 ``Send``s the same bytes (16-byte header + ``4 P``) to rank 0 and
  ``Recv``s as many back, raw mpi4py.  Ratio = baseline time / server time (target >= 0.8x).
  With ``--grad-dtype bfloat16`` (or ``float16``) the gradients travel in 2 bytes a value, as
  ``train.py --grad-dtype`` sends them, while the baseline still moves float32 both ways: the
  ratio then says what the compression gains (at most 4/3 where the link is the bottleneck: 6
  bytes a parameter per round trip instead of 8) net of its encoding and decoding.  On one
  node such gradients go through the shared window's 16-bit slots (:mod:`hpcbsp.elastic.transport`),
  and two more rows, measured in the same rounds, compare them with the same push+pull with
  the gradients as messages (``$HPCBSP_SLOT_MEMORY_SHARE`` too small for the slots, so the
  server's fall-back: the message path of the gradients, the weights still in the window) and
  with float32 gradients through float32 slots.  Ratio = the other's time / the slots' time.
  Ranks other than 0 and 1 sit the comparison out.
* **allreduce step**: one step of the allreduce baseline
  (:func:`hpcbsp.elastic.allreduce.allreduce_step`: ``bsp.reduce_scatter`` of ``P + 1`` values,
  ``w -= lr/n * sum`` on this rank's block, ``bsp.allgather_blocks`` of the new weights; nothing
  allocated) against a bare ``MPI.Allreduce`` of the same buffer into a preallocated one.
  Ratio = bare time / step time (target >= 0.9x); ``bsp.allreduce`` of the buffer alone (control
  step, ledger, the library's reduction) is shown too.

Each round also classifies the machine's **placement** of the two ranks' cores (ranks 0 and 1,
on one node): rank 0 updates a shared window of ``P`` float32 values right after rank 1 has
copied it, 10 times with ordinary stores and 10 times with non-temporal ones, alternated
(:mod:`hpcbsp.elastic.transport`).  Where ordinary stores take at least twice as long as
non-temporal ones the round is ``slow`` (on the project's 2-vCPU VM, in stretches of minutes:
about 1.7 ms against 0.3 ms for 4 MiB), where they take no longer ``fast`` (about 0.2 ms),
else ``between``.  The class of each round is printed with the medians.

Each ratio is taken within a round (the two ways measured minutes apart would see this
machine's speed drift); the median over the rounds is printed with their range, and then every
round's ratio, in order, so that a bimodal result cannot hide behind a median.  Figures are
meaningful only on a quiet machine with at least as many cores as ranks.
"""
from __future__ import annotations

import io
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcbsp.bench import _elastic_shards as shards
from hpcbsp.bench import measuring
from hpcbsp.bench._elastic_shards import ShardFigures, shard_figures  # noqa: F401  (--servers' arithmetic)
from hpcbsp.elastic.allreduce import allreduce_step
from hpcbsp.elastic.policies import make_policy
from hpcbsp.elastic.server import serve
from hpcbsp.elastic.slots import SLOT_SHARE_ENV
from hpcbsp.elastic.transport import open_transport
from hpcbsp.elastic.wire import FORMATS, HEADER_BYTES
from hpcbsp.elastic.worker import work
from hpcbsp.elastic.world import World, launch_world
from hpcbsp.kernels.update import sgd_step
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import positive_int
from hpcbsp.util.args.vocabulary import add_iters, add_repeats
from hpcbsp.util.progress import Progress


@contextmanager
def _gradients_as_messages() -> Iterator[None]:
    """The server's fall-back to gradients as messages (a slot share no window fits), its line
    on stderr kept out of the bench's output."""
    old = os.environ.get(SLOT_SHARE_ENV)
    os.environ[SLOT_SHARE_ENV] = "1e-12"
    said = io.StringIO()
    try:
        with redirect_stderr(said):
            yield
    finally:
        if old is None:
            del os.environ[SLOT_SHARE_ENV]
        else:
            os.environ[SLOT_SHARE_ENV] = old
        sys.stderr.write("".join(line for line in said.getvalue().splitlines(keepends=True)
                                 if "gradients as messages" not in line))


def _server_round(comm: MPI.Comm, grad: np.ndarray, w0: np.ndarray, iters: int,
                  timeout: float, grad_format: str | None, slots: bool = True) -> float | None:
    """Seconds per push+pull through the server, as worker 1 sees it (None on other ranks);
    ``slots`` False: the gradients as messages even where the window could hold them."""
    if not slots:
        with _gradients_as_messages():
            return _server_round(comm, grad, w0, iters, timeout, grad_format)
    rank = comm.Get_rank()
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    if pair == MPI.COMM_NULL:
        return None
    try:
        if rank == 0:
            serve(pair, make_policy("asp"), w0, 1e-6, max_updates=iters + 1, timeout=timeout,
                  grad_format=grad_format)
            return None
        calls: list[float] = []

        def grad_fn(weights: np.ndarray) -> np.ndarray:
            calls.append(time.perf_counter())  # the first after the first reply, the last after
            return grad                        # the iters-th: iters round trips in between
        work(pair, grad_fn, grad.size, dtype=np.float32, timeout=timeout, grad_format=grad_format)
        return (calls[-1] - calls[0]) / iters
    finally:
        pair.Free()


SLOW = 2.0  # a placement is slow where ordinary stores take this many times the non-temporal ones


def _placement(comm: MPI.Comm, params: int, reps: int = 10) -> tuple[float, float] | None:
    """Median seconds of rank 0's update of a new shared window of ``params`` float32 values
    right after rank 1 copied it, with ordinary and with non-temporal stores (see the module
    docstring); None on other ranks, and where ranks 0 and 1 share no node."""
    rank = comm.Get_rank()
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    if pair == MPI.COMM_NULL:
        return None
    try:
        shared = open_transport(pair, "auto", None, params, np.dtype(np.float32))
        if shared is None:
            return None
        with shared:
            g = np.ones(params, dtype=np.float32)
            copy = np.empty(params, dtype=np.float32)
            if rank == 0:
                shared.array[:] = 0.0  # (the pages' first touch, before any timing)
            took: tuple[list[float], list[float]] = ([], [])
            for i in range(2 * reps + 2):  # (the first two are not timed)
                streaming = bool(i % 2)
                shared.sync()
                pair.Barrier()
                shared.sync()
                if rank == 1:
                    np.copyto(copy, shared.array)
                shared.sync()
                pair.Barrier()
                shared.sync()
                if rank == 0:
                    tic = time.perf_counter()
                    sgd_step(shared.array, g, 1e-6, streaming=streaming)
                    if i >= 2:
                        took[streaming].append(time.perf_counter() - tic)
        return (statistics.median(took[0]), statistics.median(took[1])) if rank == 0 else None
    finally:
        pair.Free()


def placement_class(ordinary: float, streaming: float) -> str:
    """``slow``, ``between`` or ``fast`` (see the module docstring)."""
    return "slow" if ordinary >= SLOW * streaming else "fast" if ordinary <= streaming else "between"


def _raw_round(comm: MPI.Comm, nbytes: int, iters: int) -> float | None:
    rank = comm.Get_rank()
    if rank > 1:
        return None
    buf = np.zeros(nbytes, dtype=np.uint8)
    back = np.zeros(nbytes, dtype=np.uint8)
    if rank == 0:
        for _ in range(iters):
            comm.Recv(buf, source=1, tag=1)
            comm.Send(back, dest=1, tag=2)
        return None
    tic = time.perf_counter()
    for _ in range(iters):
        comm.Send(buf, dest=0, tag=1)
        comm.Recv(back, source=0, tag=2)
    return (time.perf_counter() - tic) / iters


def _max(comm: MPI.Comm, value: float | None) -> float:
    return comm.allreduce(value if value is not None else 0.0, op=MPI.MAX)


def bench(world: World, params: int, iters: int, rounds: int, grad_format: str | None = None) -> dict[str, Any]:
    bsp, comm = world.bsp, world.comm  # (comm: the baselines' and the server's own communicator)
    rng = np.random.default_rng(bsp.pid)
    grad = rng.standard_normal(params).astype(np.float32)
    w0 = np.zeros(params, dtype=np.float32)
    nbytes = HEADER_BYTES + 4 * params
    server, raw, step, bare, reduce_only, ordinary, streaming = [], [], [], [], [], [], []
    messages, plain = [], []  # (16-bit gradients: as messages, and float32 ones, both via the server)
    sixteen = grad_format in ("float16", "bfloat16")
    buf = np.zeros(params + 1, dtype=np.float32)
    buf[:params] = grad
    out = np.empty_like(buf)
    total = np.empty_like(buf)
    w, nxt = np.zeros_like(buf), np.zeros_like(buf)
    scale = 1e-6 / bsp.nprocs
    show = Progress("bench elastic", rounds, unit="round", enabled=bsp.pid == 0)
    for done in range(rounds):
        show(done)
        if bsp.nprocs > 1:
            probe = _placement(comm, params)
            if comm.allreduce(probe is not None, op=MPI.LOR):  # (ranks 0 and 1 on one node)
                ordinary.append(_max(comm, probe[0] if probe is not None else None))
                streaming.append(_max(comm, probe[1] if probe is not None else None))
            comm.Barrier()
            server.append(_max(comm, _server_round(comm, grad, w0, iters, world.timeout, grad_format)))
            comm.Barrier()
            if sixteen:
                messages.append(_max(comm, _server_round(comm, grad, w0, iters, world.timeout, grad_format, False)))
                comm.Barrier()
                plain.append(_max(comm, _server_round(comm, grad, w0, iters, world.timeout, None)))
                comm.Barrier()
            raw.append(_max(comm, _raw_round(comm, nbytes, iters)))
        comm.Barrier()
        tic = time.perf_counter()
        for _ in range(iters):
            if not allreduce_step(bsp, buf, w, nxt, scale):
                w, nxt = nxt, w
        step.append(_max(comm, (time.perf_counter() - tic) / iters))
        comm.Barrier()
        tic = time.perf_counter()
        for _ in range(iters):
            comm.Allreduce(buf, out, op=MPI.SUM)
        bare.append(_max(comm, (time.perf_counter() - tic) / iters))
        comm.Barrier()
        tic = time.perf_counter()
        for _ in range(iters):
            bsp.allreduce(buf, out=total)
        reduce_only.append(_max(comm, (time.perf_counter() - tic) / iters))
    return {"server_s": server, "raw_s": raw, "step_s": step, "bare_s": bare, "reduce_s": reduce_only,
            "ordinary_s": ordinary, "streaming_s": streaming, "bytes": nbytes, "messages_s": messages,
            "plain_s": plain, "hosts": comm.allgather(MPI.Get_processor_name())}


def _row(name: str, ours: list[float], base_name: str, base: list[float], target: str) -> str:
    """One comparison: medians of the times, and the median (range) of the per-round ratios."""
    ratios = [b / o for b, o in zip(base, ours)]
    return (f"{name:20s} {1e3 * statistics.median(ours):8.3f} ms   {base_name} "
            f"{1e3 * statistics.median(base):8.3f} ms   ratio = {statistics.median(ratios):.2f}x "
            f"({min(ratios):.2f}-{max(ratios):.2f} over the rounds)  {target}\n"
            f"{'':20s} every round: " + " ".join(f"{r:.2f}x" for r in ratios))


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.bench elastic", description=__doc__.split("\n\n")[0])
    parser.add_argument("--params", type=positive_int, default=1 << 20, help="float32 parameters (default 1048576)")
    add_iters(parser, "round trips or steps per round", default=50)
    add_repeats(parser, "alternating rounds, medians reported", default=5, dest="rounds", old=("--rounds",))
    parser.add_argument("--grad-dtype", choices=FORMATS, default=None,
                        help="gradients on the wire in the push+pull, as train.py --grad-dtype (default: "
                             "float32, as the weights); the baseline stays float32")
    parser.add_argument("--quick", action="store_true", help="a short run (10 iterations, 2 rounds)")
    shards.add_options(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.iters, args.rounds = 10, 2
    if args.servers is not None:  # the sharded server's rounds instead (hpcbsp/bench/_elastic_shards.py)
        return shards.run_servers(parser, args)
    measuring()
    # (one rank measures the allreduce step alone; a second adds the server)
    r = launch_world(bench, args.params, args.iters, args.rounds, args.grad_dtype, min_ranks=1)
    if MPI.COMM_WORLD.Get_rank() == 0:
        p = MPI.COMM_WORLD.Get_size()
        mib = r["bytes"] / 2**20
        hosts = len(set(r["hosts"]))
        print(f"ranks: {p} on {hosts} host{'s' if hosts > 1 else ''}  model: {args.params:,} float32 parameters "
              f"({mib:.2f} MiB per message); {args.rounds} alternating rounds of {args.iters}"
              + (f"; gradients pushed as {args.grad_dtype}" if args.grad_dtype else ""))
        if p > 1:
            print(_row("push+pull via server", r["server_s"], "raw Send/Recv ", r["raw_s"], "(target >= 0.8x)"))
            if r["messages_s"]:
                fmt = args.grad_dtype
                print(_row(f"{fmt} vs messages", r["server_s"], f"{fmt} messages", r["messages_s"],
                           f"(slots: the row above; {fmt} gradients as messages, the weights in the window)"))
                print(_row(f"{fmt} vs float32", r["server_s"], "float32 slots", r["plain_s"],
                           "(float32 gradients through float32 slots)"))
            if r["ordinary_s"]:
                print(f"{'':20s} placement, every round: " + " ".join(
                    f"{placement_class(o, n)} ({1e3 * o:.3f}/{1e3 * n:.3f} ms)"
                    for o, n in zip(r["ordinary_s"], r["streaming_s"])))
                print(f"{'':20s} (rank 0's update of the window just read by rank 1, ordinary/non-temporal "
                      f"stores: slow where ordinary >= {SLOW:g}x)")
        else:
            print("push+pull: needs 2 ranks (server + worker): run under mpiexec -n 2")
        print(_row("allreduce step", r["step_s"], "bare Allreduce", r["bare_s"], "(target >= 0.9x)"))
        print(_row("bsp.allreduce alone", r["reduce_s"], "bare Allreduce", r["bare_s"],
                   "(one superstep, no update: for comparison)"))
        print("(figures count only on a quiet machine with a core per rank)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
