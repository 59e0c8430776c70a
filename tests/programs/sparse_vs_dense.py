"""Random sparse supersteps delivered by the sparse consensus and by the dense count exchange,
each checked against a numpy oracle of BSPlib's semantics and against the other.

Every rank draws every rank's records from one seed (so each can compute the oracle): small and
large puts (overlapping ones among them, whose last writer is the highest source rank, then
program order), puts to itself, gets (which read before any put lands) and queue records (in
source and send order).  ``check(bsp, seeds)`` returns how many supersteps each path took (the
caller asserts that both were taken); run as a program it checks seeds 0-5 and rank 0 prints OK.
(``HPCBSP_LARGE_PUT_BYTES`` small, so that large puts are cheap: the caller sets it.)
"""
from __future__ import annotations

import sys

import numpy as np

N = 40  # elements of each rank's part


def draw(seed: int, p: int, sparse_max: int) -> list[list[tuple]]:
    """Every rank's records of one superstep, in program order: ("put", dest, offset, values),
    ("get", src, offset, count), ("send", dest, values, tag)."""
    rng = np.random.default_rng(seed)
    ops: list[list[tuple]] = []
    for r in range(p):
        others = [d for d in range(p) if d != r]
        k = int(rng.integers(0, min(sparse_max, len(others)) + 1))
        dests = [int(d) for d in rng.choice(others, size=k, replace=False)] if k else []
        mine: list[tuple] = []
        for d in dests + ([r] if rng.random() < 0.3 else []):
            for _ in range(int(rng.integers(1, 3))):
                cnt = int(rng.choice([1, 3, 16, 30]))  # 16, 30 x 8 bytes: large puts
                off = int(rng.integers(0, N - cnt + 1))
                mine.append(("put", d, off, rng.standard_normal(cnt)))
            if rng.random() < 0.5:
                mine.append(("send", d, rng.integers(0, 100, size=int(rng.integers(1, 5))), int(rng.integers(0, 9))))
        if dests and rng.random() < 0.5:
            cnt = int(rng.integers(1, 6))
            mine.append(("get", dests[0], int(rng.integers(0, N - cnt + 1)), cnt))
        ops.append(mine)
    return ops


def oracle(ops: list[list[tuple]], me: int, p: int, start: np.ndarray) -> tuple[np.ndarray, list, list]:
    """This rank's part after the superstep, its gets' values, and its queue's (values, tag)s."""
    part = start.copy()
    gets = [start_of(op[1], start, me)[op[2]:op[2] + op[3]].copy() for op in ops[me] if op[0] == "get"]
    queue = []
    for src in range(p):
        for op in ops[src]:
            if op[0] == "put" and op[1] == me:
                part[op[2]:op[2] + op[3].size] = op[3]
            elif op[0] == "send" and op[1] == me:
                queue.append((op[2].tolist(), op[3]))
    return part, gets, queue


def start_of(rank: int, start: np.ndarray, me: int) -> np.ndarray:
    """Rank ``rank``'s part before the superstep (every part starts as its rank's)."""
    return start + (rank - me) * 1000.0


def superstep(bsp, c, q, ops, sparse: bool) -> tuple[np.ndarray, list, list]:
    """Run one drawn superstep with the exchange forced to one path; return what this rank has."""
    bsp._outbox.sparse_max = bsp.nprocs if sparse else -1  # (the test's lever: either exchange)
    futures = []
    for op in ops[bsp.pid]:
        if op[0] == "put":
            c.put(op[1], op[3], offset=op[2])
        elif op[0] == "get":
            futures.append(c.get(op[1], op[2], op[3]))
        else:
            q.send(op[1], op[2], tag=op[3])
    bsp.sync()
    queue = [(m.tolist(), t) for m, t in zip(q.received(), q.tags().tolist())]
    return c.local.copy(), [f.value.copy() for f in futures], queue


def check(bsp, seeds) -> dict[str, int]:
    """Every seed's superstep by both paths, each against the oracle; the paths taken, counted."""
    from hpcbsp.runtime.superstep.exchange import consensus, counts

    taken = {"sparse": 0, "dense": 0}
    real_discover, real_agree = consensus.discover, counts.agree

    def discover(*args, **kw):
        taken["sparse"] += 1
        return real_discover(*args, **kw)

    def agree(*args, **kw):
        taken["dense"] += 1
        return real_agree(*args, **kw)

    consensus.discover, counts.agree = discover, agree
    try:
        p, me = bsp.nprocs, bsp.pid
        c = bsp.coarray(N, np.float64)
        q = bsp.queue(np.int64, ragged=True)
        start = np.arange(N, dtype=np.float64) + me * 1000.0
        for seed in seeds:
            ops = draw(seed, p, sparse_max=2)
            want = oracle(ops, me, p, start)
            results = []
            for sparse in (True, False):
                c.local[:] = start
                bsp.sync()
                results.append(superstep(bsp, c, q, ops, sparse))
            for part, gets, queue in results:
                np.testing.assert_array_equal(part, want[0])
                assert len(gets) == len(want[1])
                for a, b in zip(gets, want[1]):
                    np.testing.assert_array_equal(a, b)
                assert queue == want[2], (queue, want[2])
    finally:
        consensus.discover, counts.agree = real_discover, real_agree
    return taken


if __name__ == "__main__":
    import hpcbsp

    with hpcbsp.BSP() as ctx:
        taken = check(ctx, range(6))
        if ctx.pid == 0:
            print("OK", taken, flush=True)
    sys.exit(0)
