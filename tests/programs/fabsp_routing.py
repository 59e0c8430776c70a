"""Routed mailboxes at P ranks (tests/test_fabsp_programs.py runs this at P = 4, 9, 16).

    fabsp_routing.py ROUTING

Every rank sends 4,000 records to random ranks (three supersteps, the second with replies sent
by the handlers: request, then answer to the origin).  Each rank checks, against what it
regenerates of every other rank's draws: every record arrived once, in send order per source,
the answers carry the right values; and that it sent only to its grid neighbours (the ranks
that differ from it in one grid coordinate, by ``np.unravel_index``).  Prints one line per rank:
``rank R ok peers=D buffers=B``.
"""
import sys

import numpy as np

import hpcbsp
from hpcbsp.fabsp.routing import grid_dims

ROUTING = sys.argv[1]
N = 4000


def draws(src, p):
    return np.random.default_rng([3, src]).integers(0, p, N), 10_000_000 * src + np.arange(N)


def prog(bsp):
    p, me = bsp.nprocs, bsp.pid
    got = []
    box = bsp.mailbox(lambda recs, src: got.append((src, recs.copy())), np.int64, with_source=True,
                      routing=ROUTING, buffer=64, max_pending=4)
    answers = {}
    reply = bsp.mailbox(lambda recs, src: answers.setdefault(src, []).extend(recs.tolist()),
                        np.int64, with_source=True, routing=ROUTING, buffer=16, max_pending=2)
    request = bsp.mailbox(lambda recs, src: reply.send(src, recs * recs), np.int64,
                          with_source=True, routing=ROUTING, buffer=16, max_pending=2)
    dests, values = draws(me, p)
    for step in range(3):
        got.clear()
        if step == 1:
            request.send(dests, values)
        else:
            for start in range(0, N, 1000):
                box.send(dests[start:start + 1000], values[start:start + 1000])
        bsp.sync()
    for src in range(p):
        d, v = draws(src, p)
        want = v[d == me].tolist()
        mine = [x for s, recs in got if s == src for x in recs.tolist()]
        assert mine == want, f"rank {me}: records from rank {src} (superstep 2)"
    for dest in range(p):
        want = (values[dests == dest] ** 2).tolist()
        assert answers.get(dest, []) == want, f"rank {me}: answers from rank {dest}"
    dims = grid_dims(p, ROUTING)
    mine_c = np.array(np.unravel_index(me, dims))
    neighbours = [r for r in range(p)
                  if np.count_nonzero(np.array(np.unravel_index(r, dims)) != mine_c) == 1]
    assert box.peers == len(neighbours), (box.peers, neighbours)
    mem = box.memory()
    assert mem["buffers"] <= len(neighbours) + 4
    print(f"rank {me} ok peers={mem['peers']} buffers={mem['buffers']}", flush=True)


hpcbsp.run(prog)
