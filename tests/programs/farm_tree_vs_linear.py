"""Run Jacobi with the linear and the tree exchange; rank 0 prints JSON: whether both gave the
same bits, and the tree run's supersteps and messages by label (from every rank's ledger).

Used by tests/test_farm_exchange.py at rank counts beyond the -n 2 / -n 3 test runs.
"""
import json
import sys

import numpy as np
from mpi4py import MPI

import hpcbsp
from hpcbsp.apps.bsf.jacobi import jacobi_problem
from hpcbsp.apps.bsf.system import diagonally_dominant_system
from hpcbsp.farm import run_farm

n = int(sys.argv[1]) if len(sys.argv) > 1 else 50
a, b = diagonally_dominant_system(n, seed=5)


def both(bsp):
    out = {}
    for exchange in ("linear", "tree"):
        start = len(bsp.ledger)
        r = run_farm(bsp, jacobi_problem(a, b, 1e-12), np.zeros(n), max_iter=300, exchange=exchange)
        out[exchange] = (r.x.tobytes().hex(), r.iterations, r.converged)
    # The tree run (the last) as it ran: its supersteps by label, the messages every rank sent in them.
    rows = [bsp.ledger[i] for i in range(start, len(bsp.ledger))]
    labels = ("farm:order", "farm:result")
    out["supersteps"] = {label: sum(row.label == label for row in rows) for label in labels}
    out["messages"] = {label: int(bsp.allreduce(sum(row.msgs_out for row in rows if row.label == label), op="sum"))
                       for label in labels}
    return out


out = hpcbsp.run(both)
if MPI.COMM_WORLD.Get_rank() == 0:
    x = np.frombuffer(bytes.fromhex(out["tree"][0]))
    print(json.dumps({"same": out["linear"] == out["tree"], "iterations": out["tree"][1],
                      "converged": out["tree"][2], "error": float(np.abs(x - np.linalg.solve(a, b)).max()),
                      "supersteps": out["supersteps"], "messages": out["messages"]}))
