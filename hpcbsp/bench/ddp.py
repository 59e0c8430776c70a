"""hpcbsp's allreduce trainer against torch's DistributedDataParallel (gloo), side by side.

    mpiexec -n 3 python -m hpcbsp.bench ddp [--steps K] [--repeats R] [--hidden H] [--depth D]
                                            [--batch B] [--bucket-mb M] [--sum S] [--link-rate RATE]
                                            [--phases]

Rank 0 is the allreduce trainer's evaluator (it only waits here); ranks ``1..n`` are the
workers of both trainers.  The model is the student MLP of ``--dataset teacher`` (64 inputs,
``--depth`` hidden layers of ``--hidden`` ReLU units, 10 classes: 1,126,410 float32 parameters
at the defaults 1024 and 2), each worker on its own shard, ``--batch`` samples a step, SGD.

* **hpcbsp**: :func:`hpcbsp.elastic.allreduce.run_allreduce` for ``K`` steps with its default
  bucketed sum (buckets of ``--bucket-mb``, the first 1 MiB, started from the backward pass's
  hooks, on ``MPI.Iallreduce``; ``--sum sharded``: the sharded reduce-scatter step instead;
  ``--sum factors``: the bucketed sum with the large Linear layers' weights summed from their
  sufficient factors, :mod:`hpcbsp.elastic.torch.factors`),
  timed by rank 0 from the start barrier to worker 0's last step.
* **DDP**: ``torch.nn.parallel.DistributedDataParallel`` on the same module, data and batch, on
  a gloo process group of the workers (rendezvous ``env://``, ``MASTER_ADDR`` worker 0's
  address, found through MPI), ``bucket_cap_mb`` the same; ``K`` steps of zero_grad, forward,
  backward, ``optimizer.step``, timed by worker 0 from a barrier.

Each round runs both (in alternating order) and prints steps per second and the ratio
hpcbsp / DDP within the round; the medians and every round follow.  Then the ceiling: one bare
``MPI.Allreduce`` and one bare gloo ``all_reduce`` of the whole gradient with no compute
(medians of 10; steps per second at most ``1 / that``), and with ``--link-rate`` the line-rate bound of a ring
allreduce (:func:`ring_seconds`).  ``--phases``: then ``K`` more steps of hpcbsp's bucketed
trainer with a clock read between the phases of each step, and the ceiling of any schedule
that keeps the result (``hpcbsp/bench/_ddp_phases.py``).  Meaningful only on a quiet machine
with a core per rank.
"""
from __future__ import annotations

import os
import socket
import statistics
import sys
import time
from typing import Any

import numpy as np
from mpi4py import MPI

from hpcbsp.bench import measuring
from hpcbsp.bench._ddp_phases import PHASES, ceiling_s, measure_phases, phase_lines  # noqa: F401  (--phases)
from hpcbsp.bench.fabsp.links import link_rate
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import positive_int
from hpcbsp.util.args.vocabulary import add_repeats

FEATURES, CLASSES, SAMPLES = 64, 10, 8000


def ring_seconds(nbytes: int, workers: int, rate_bits: float) -> float:
    """Seconds a ring (or reduce-scatter + allgather) allreduce of ``nbytes`` needs at least on
    links of ``rate_bits`` bit/s each way: every rank sends ``2 (n-1)/n · nbytes`` (0 alone)."""
    return 2 * (workers - 1) / workers * nbytes * 8 / rate_bits if workers > 1 else 0.0


def steps_per_s(steps: int, seconds: float) -> float:
    """``steps / seconds`` (inf for no time)."""
    return steps / seconds if seconds > 0 else float("inf")


def round_ratios(ours: list[float], theirs: list[float]) -> list[float]:
    """The ratio of each round's rates, ours / theirs (above 1: ours faster)."""
    return [a / b for a, b in zip(ours, theirs)]


def _idle(comm: MPI.Comm) -> None:
    """Rank 0 while the workers run DDP: a barrier it sleeps through (no busy poll on a core
    the workers need)."""
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.005)


def _setup(workers: MPI.Comm | None, hidden: int, depth: int) -> tuple[Any, Any, Any]:
    """The data of this worker's shard (worker 0's on rank 0) and a fresh (seeded) student
    network."""
    import torch

    from hpcbsp.elastic.data import make_teacher, shard
    from hpcbsp.elastic.torch import build_net

    data = make_teacher(n_samples=SAMPLES, n_features=FEATURES, n_classes=CLASSES, seed=0)
    part = shard(len(data.y_train), 1, 0)[0] if workers is None else \
        shard(len(data.y_train), workers.Get_size(), 0)[workers.Get_rank()]
    torch.manual_seed(0)
    net, _ = build_net("student", FEATURES, CLASSES, hidden=hidden, depth=depth)
    return data.X_train[part], data.y_train[part], net


def _hpcbsp_round(comm: MPI.Comm, workers: MPI.Comm | None, args: Any) -> float:
    """Steps per second of the allreduce trainer (on rank 0; 0 elsewhere)."""
    from hpcbsp.elastic.allreduce import run_allreduce
    from hpcbsp.elastic.data import MinibatchGradient
    from hpcbsp.elastic.torch import TorchModel

    if workers is None:
        model = TorchModel(_setup(None, args.hidden, args.depth)[2],
                           n_features=FEATURES, n_classes=CLASSES)
        res = run_allreduce(comm, None, model.get_weights(), 0.05, max_updates=args.steps, timeout=120.0)
        return steps_per_s(args.steps, res.log.duration_s)  # type: ignore[union-attr]
    X, y, net = _setup(workers, args.hidden, args.depth)
    model = TorchModel(net, n_features=FEATURES, n_classes=CLASSES)
    grad = MinibatchGradient(model, X, y, args.batch, seed=workers.Get_rank())
    run_allreduce(comm, grad, model.get_weights(), 0.05, max_updates=args.steps, timeout=120.0,
                  gradients=model, bucket_bytes=None if args.sum == "sharded" else int(args.bucket_mb * 2**20),
                  factor_rows=args.batch if args.sum == "factors" else 0)
    return 0.0


def _ddp_round(comm: MPI.Comm, workers: MPI.Comm | None, args: Any) -> float:
    """Steps per second of DDP (on worker 0; 0 elsewhere)."""
    if workers is None:
        _idle(comm)
        return 0.0
    import torch
    from torch.nn.parallel import DistributedDataParallel

    X, y, net = _setup(workers, args.hidden, args.depth)
    ddp = DistributedDataParallel(net, bucket_cap_mb=args.bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    rng = np.random.default_rng(workers.Get_rank())
    Xt, yt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32)), torch.from_numpy(y.astype(np.int64))
    workers.Barrier()
    tic = time.perf_counter()
    for _ in range(args.steps):
        idx = torch.from_numpy(rng.choice(len(yt), size=args.batch, replace=False))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(Xt[idx]), yt[idx]).backward()
        opt.step()
    took = time.perf_counter() - tic
    _idle(comm)
    return steps_per_s(args.steps, took)


def _phases(comm: MPI.Comm, workers: MPI.Comm | None, args: Any) -> Any:
    """Every worker's phases of ``--steps`` bucketed steps (``_ddp_phases.py``), on rank 0."""
    from hpcbsp.elastic.data import MinibatchGradient
    from hpcbsp.elastic.torch import TorchModel

    rows = None
    if workers is not None:
        X, y, net = _setup(workers, args.hidden, args.depth)
        model = TorchModel(net, n_features=FEATURES, n_classes=CLASSES)
        grad = MinibatchGradient(model, X, y, args.batch, seed=workers.Get_rank())
        rows = measure_phases(workers, model, grad, args.steps, int(args.bucket_mb * 2**20))
    _idle(comm)
    got = comm.gather(rows, root=0)
    return np.concatenate([r for r in got if r is not None]) if got else None


def _ceiling(workers: MPI.Comm, params: int, iters: int = 10) -> tuple[float, float]:
    """Seconds of one bare MPI.Allreduce and one bare gloo all_reduce of ``params`` float32 (the
    median of ``iters``, the slowest worker's: a spike of the shared machine is not the link)."""
    import torch
    import torch.distributed as dist

    buf = np.ones(params, dtype=np.float32)
    t = torch.ones(params)
    out = []
    for run in (lambda: workers.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM), lambda: dist.all_reduce(t)):
        run()
        workers.Barrier()
        took = []
        for _ in range(iters):
            tic = time.perf_counter()
            run()
            took.append(time.perf_counter() - tic)
        out.append(workers.allreduce(statistics.median(took), op=MPI.MAX))
    return out[0], out[1]


def _gloo(workers: MPI.Comm) -> None:
    """A gloo process group of the workers, rendezvous at worker 0's address (env://)."""
    import torch.distributed as dist

    hosts = workers.allgather(MPI.Get_processor_name())
    addr = "127.0.0.1" if len(set(hosts)) == 1 else socket.gethostbyname(hosts[0])
    port = 0
    if workers.Get_rank() == 0:
        with socket.socket() as s:
            s.bind((addr, 0))
            port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR=addr, MASTER_PORT=str(workers.bcast(port, root=0)))  # (for env://)
    dist.init_process_group("gloo", init_method="env://", rank=workers.Get_rank(),
                            world_size=workers.Get_size())


def bench(comm: MPI.Comm, args: Any) -> dict[str, Any] | None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    rank = comm.Get_rank()
    split = comm.Split(MPI.UNDEFINED if rank == 0 else 1, rank)
    workers = None if split == MPI.COMM_NULL else split
    if workers is not None:
        _gloo(workers)
    ours, theirs = [], []
    try:
        for r in range(args.repeats):
            order = (_hpcbsp_round, _ddp_round) if r % 2 == 0 else (_ddp_round, _hpcbsp_round)
            got = {}
            for way in order:
                comm.Barrier()
                got[way] = comm.allreduce(way(comm, workers, args), op=MPI.MAX)
            ours.append(got[_hpcbsp_round])
            theirs.append(got[_ddp_round])
        params = sum(p.numel() for p in _setup(workers, args.hidden, args.depth)[2].parameters())
        bare = _ceiling(workers, params) if workers is not None else (0.0, 0.0)
        bare = (comm.allreduce(bare[0], op=MPI.MAX), comm.allreduce(bare[1], op=MPI.MAX))
        phases = _phases(comm, workers, args) if args.phases else None
    finally:
        if workers is not None:
            dist.destroy_process_group()
            workers.Free()
    hosts = comm.allgather(MPI.Get_processor_name())
    return {"ours": ours, "theirs": theirs, "params": params, "bare": bare, "phases": phases,
            "hosts": len(set(hosts[1:]))} if rank == 0 else None


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.bench ddp", description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=positive_int, default=200, help="training steps per trainer and round (default 200)")
    add_repeats(parser, "alternating rounds", default=3)
    parser.add_argument("--hidden", type=positive_int, default=1024, help="hidden units per layer (default 1024)")
    parser.add_argument("--depth", type=positive_int, default=2, help="hidden layers (default 2)")
    parser.add_argument("--batch", type=positive_int, default=64, help="samples per step and worker (default 64)")
    parser.add_argument("--bucket-mb", type=positive_int, default=25, help="bucket size in MiB, both trainers (default 25)")
    parser.add_argument("--sum", choices=("bucketed", "sharded", "factors"), default="bucketed",
                        help="hpcbsp's sum: bucketed (the default), the sharded reduce-scatter step, or "
                             "bucketed with the large layers' sufficient factors allgathered")
    parser.add_argument("--link-rate", type=link_rate, default=None, metavar="RATE",
                        help="the rate the workers' links are shaped to (1gbit...): prints the ring's line-rate bound")
    parser.add_argument("--phases", action="store_true",
                        help="then --steps more bucketed steps, timed phase by phase, and the ceiling they allow")
    args = parser.parse_args(argv)
    if MPI.COMM_WORLD.Get_size() < 2:
        print("python -m hpcbsp.bench ddp: needs an evaluator and workers: run under mpiexec -n 3 "
              "(2 workers) or more", file=sys.stderr)
        return 2
    measuring()
    r = bench(MPI.COMM_WORLD, args)
    if r is not None:
        n, nbytes = MPI.COMM_WORLD.Get_size() - 1, 4 * r["params"]
        print(f"workers: {n} on {r['hosts']} host(s)  model: student MLP, {r['params']:,} float32 parameters "
              f"({nbytes / 1e6:.2f} MB), batch {args.batch}; {args.repeats} alternating rounds of {args.steps} steps")
        ratios = round_ratios(r["ours"], r["theirs"])
        print(f"hpcbsp allreduce ({args.sum}) {statistics.median(r['ours']):7.1f} steps/s   DDP (gloo) "
              f"{statistics.median(r['theirs']):7.1f} steps/s   ratio = {statistics.median(ratios):.2f}x "
              f"({min(ratios):.2f}-{max(ratios):.2f})  (target >= 1.2x across nodes, >= 1.0x on one)")
        print("every round: " + "  ".join(f"{a:.1f}/{b:.1f} = {a / b:.2f}x" for a, b in zip(r["ours"], r["theirs"])))
        mpi_s, gloo_s = r["bare"]
        print(f"ceiling, no compute: bare MPI.Allreduce {1e3 * mpi_s:.1f} ms ({steps_per_s(1, mpi_s):.1f}/s), "
              f"bare gloo all_reduce {1e3 * gloo_s:.1f} ms ({steps_per_s(1, gloo_s):.1f}/s)")
        if args.link_rate:
            s = ring_seconds(nbytes, n, args.link_rate)
            print(f"line-rate bound at {args.link_rate / 1e9:g} Gbit/s: {1e3 * s:.1f} ms per allreduce "
                  f"({steps_per_s(1, s):.1f} steps/s); hpcbsp at {statistics.median(r['ours']) * s:.0%} of it"
                  + (" (the whole gradient's bytes: --sum factors sends fewer)" if args.sum == "factors" else ""))
        if r["phases"] is not None:
            print("\n".join(phase_lines(r["phases"], mpi_s, statistics.median(r["theirs"]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
