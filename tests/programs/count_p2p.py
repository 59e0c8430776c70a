"""Counts the point-to-point MPI calls of one kind of superstep, per rank, under the PMPI shim
``tests/programs/p2pcount.c`` (loaded with ``LD_PRELOAD``; without it the counts are absent).

``python count_p2p.py WHAT K``: ``K`` supersteps of ``WHAT`` after one untimed warm-up of each:
``collectives`` (``reduce_scatter`` then ``allgather_blocks`` of 1000 float64, each a superstep)
or ``timed-sync`` (an empty sync on a context with a 30 s timeout).  Rank 0 prints one JSON line:
``{"p", "what", "k", "sends", "recvs", "us"}``, the lists per rank of the calls made during the
``K`` supersteps and the mean time of one (microseconds, rank 0's clock).
"""
import ctypes
import json
import sys
import time

import numpy as np

import hpcbsp


def counts() -> tuple[int, int] | None:
    lib = ctypes.CDLL(None)
    try:
        sends, recvs = lib.hpcbsp_p2p_sends, lib.hpcbsp_p2p_recvs
    except AttributeError:  # not under the shim
        return None
    sends.restype = recvs.restype = ctypes.c_long
    return int(sends()), int(recvs())


def main() -> None:
    what, k = sys.argv[1], int(sys.argv[2])
    with hpcbsp.BSP(timeout=30.0 if what == "timed-sync" else None) as bsp:
        x = np.arange(1000, dtype=np.float64) * (bsp.pid + 1)
        buf = np.empty_like(x)

        def step() -> None:
            if what == "collectives":
                bsp.reduce_scatter(x, out=buf)
                bsp.allgather_blocks(buf)
            else:
                bsp.sync()

        step()
        before = counts()
        t0 = time.perf_counter()
        for _ in range(k):
            step()
        us = (time.perf_counter() - t0) / k * 1e6
        after = counts()
        delta = None if before is None or after is None else [a - b for a, b in zip(after, before)]
        everyone = bsp.gather_all(delta)
        if bsp.pid == 0:
            print(json.dumps({"p": bsp.nprocs, "what": what, "k": k, "us": us,
                              "sends": [d[0] if d else None for d in everyone],
                              "recvs": [d[1] if d else None for d in everyone]}))


if __name__ == "__main__":
    main()
