"""Across nodes: the probe's g and l beside bare Sendrecv, and put beside pack+Alltoallv.

    mpiexec -f HOSTS ... -n 4 python -m hpcbsp.bench nodes [--quick] [--mib M] [--rounds R]

Meant for ranks on several nodes (see docs/cluster.md for emulated ones: `mpiexec -f
/run/hpcbsp-slurm/hosts -launcher rsh -launcher-exec /run/hpcbsp-slurm/rsh`, or `srun -N 4`).
It prints where the ranks run (hosts, ranks per host, the MPI transport settings), then

* g and l between the nodes: ``hpcbsp-cost probe``'s superstep fit (blocks to every other rank)
  beside a bare mpi4py ``Sendrecv`` exchange of the same message sizes around a ring, fitted the
  same way (t = l + g·h, h the bytes out of each rank);
* the buffered put of M MiB per rank against hand-packed ``Alltoallv`` (the ``sync`` benchmark's
  measurement, both sides alternately in the same run), with the ratio;
* on the local emulated cluster, the bytes that crossed the nodes' links during the run, so
  that a run that went through shared memory shows itself.

Figures mean something only on a quiet machine: each rank of an emulated node shares the
machine's cores with all the others.
"""
from __future__ import annotations

import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

import hpcbsp
from hpcbsp.bench import measuring
from hpcbsp.cost.probe import fit_line, probe
from hpcbsp.runtime.launch import machine_id, transport_advice, transport_settings
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import positive_float
from hpcbsp.util.args.vocabulary import add_repeats

from .sync import bench as sync_bench


def _link_bytes() -> int | None:
    """Bytes through the local cluster's node links so far (None when there are none)."""
    stats = sorted(Path("/sys/class/net").glob("hpcbsp-v*/statistics"))
    if not stats:
        return None
    return sum(int((s / "rx_bytes").read_text()) + int((s / "tx_bytes").read_text()) for s in stats)


def raw_sendrecv(comm: MPI.Comm, sizes: list[int], repeats: int) -> list[list[float]]:
    """Seconds per ring ``Sendrecv`` (to rank+1, from rank-1) of each size in bytes, max over ranks.

    h-relation: ``size`` bytes out of and into every rank, one message each way."""
    p, me = comm.Get_size(), comm.Get_rank()
    out: list[list[float]] = []
    for size in sizes:
        send = np.ones(size, dtype=np.uint8)
        recv = np.empty(size, dtype=np.uint8)
        times = []
        for _ in range(repeats):
            comm.Barrier()
            t0 = time.perf_counter()
            comm.Sendrecv(send, dest=(me + 1) % p, recvbuf=recv, source=(me - 1) % p)
            times.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        out.append(times)
    return out


def measure(bsp: "hpcbsp.BSP", mib: float, rounds: int, quick: bool) -> dict[str, Any] | None:
    comm = bsp.comm.Dup()
    hosts = comm.gather(socket.gethostname(), root=0)
    machines = comm.gather(machine_id(), root=0)
    before = _link_bytes() if bsp.pid == 0 else None
    repeats = 5 if quick else 20
    profile = probe(bsp, max_h=64 if quick else 256, repeats=repeats,
                    max_block_words=1 << 14 if quick else 1 << 17)
    sizes = [int(s) for s in np.geomspace(512, (1 << 17 if quick else 1 << 20), 7)]
    raw = raw_sendrecv(comm, sizes, repeats)
    puts = sync_bench(bsp, 200 if quick else 2000, mib, rounds)
    after = _link_bytes() if bsp.pid == 0 else None
    comm.Free()
    if bsp.pid != 0:
        return None
    g_raw, l_raw = fit_line(np.array(sizes, dtype=float), np.array([statistics.median(t) for t in raw]))
    assert profile is not None  # rank 0 gets the profile
    blocks = next(r for r in profile["regimes"] if r["name"] == "blocks")
    return {"hosts": hosts, "machines": machines, "transport": transport_settings(),
            "probe_g": blocks["g"], "probe_l": blocks["l"], "probe_l_empty": profile["l_empty"],
            "raw_g": g_raw, "raw_l": l_raw, "puts": puts,
            "link_bytes": None if before is None or after is None else after - before}


def main(argv: list[str]) -> int:
    parser = OneLineParser(prog="python -m hpcbsp.bench nodes", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=positive_float, default=8.0, help="MiB put by each rank (default 8)")
    add_repeats(parser, "alternating rounds of put/Alltoallv", default=5, dest="rounds", old=("--rounds",))
    parser.add_argument("--quick", action="store_true", help="a short run (fewer sizes and repeats)")
    args = parser.parse_args(argv)
    if MPI.COMM_WORLD.Get_size() < 2:
        print("hpcbsp.bench nodes: needs at least 2 ranks, on several nodes: see docs/cluster.md",
              file=sys.stderr)
        return 2
    measuring()
    r = hpcbsp.run(measure, args.mib, args.rounds, args.quick)
    if r is None:
        return 0
    hosts: list[str] = r["hosts"]
    per_host = {h: hosts.count(h) for h in sorted(set(hosts))}
    print(f"ranks: {len(hosts)} on {len(per_host)} host(s): "
          + ", ".join(f"{h} ({n})" for h, n in per_host.items()))
    print(f"transport: {r['transport'] or 'chosen by the MPI library'}")
    advice = transport_advice(hosts, r["machines"], r["transport"])
    if advice:
        print(f"note: {advice}")
    if len(per_host) == 1:
        print("note: all ranks on one host: these are not inter-node figures")
    print(f"g, l between ranks: probe (superstep, blocks)  g = {r['probe_g'] * 1e9:8.3f} ns/byte  "
          f"l = {r['probe_l'] * 1e6:8.1f} us  (empty sync {r['probe_l_empty'] * 1e6:.1f} us)")
    print(f"                    bare Sendrecv ring         g = {r['raw_g'] * 1e9:8.3f} ns/byte  "
          f"l = {r['raw_l'] * 1e6:8.1f} us   g ratio probe/bare = "
          f"{r['probe_g'] / r['raw_g'] if r['raw_g'] else float('nan'):.2f}x")
    puts = r["puts"]
    gbs = lambda s: puts["bytes"] / s / 1e9  # noqa: E731
    print(f"put {puts['bytes'] / 2**20:.1f} MiB/rank {1e3 * puts['put_s']:8.2f} ms ({gbs(puts['put_s']):.3f} GB/s)   "
          f"pack+Alltoallv {1e3 * puts['alltoallv_s']:8.2f} ms ({gbs(puts['alltoallv_s']):.3f} GB/s)   "
          f"throughput ratio = {puts['alltoallv_s'] / puts['put_s']:.2f}x  (target >= 0.95x)")
    if r["link_bytes"] is not None:
        print(f"bytes through the emulated nodes' links during the run: {r['link_bytes']:,}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
