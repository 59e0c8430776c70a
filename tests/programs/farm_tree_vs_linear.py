"""Run Jacobi and a weighted mean with the linear and the tree exchange; rank 0 prints JSON.

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
        r = run_farm(bsp, jacobi_problem(a, b, 1e-12), np.zeros(n), max_iter=300, exchange=exchange)
        out[exchange] = (r.x.tobytes().hex(), r.iterations, r.converged)
    return out


out = hpcbsp.run(both)
if MPI.COMM_WORLD.Get_rank() == 0:
    x = np.frombuffer(bytes.fromhex(out["tree"][0]))
    print(json.dumps({"same": out["linear"] == out["tree"], "iterations": out["tree"][1],
                      "converged": out["tree"][2], "error": float(np.abs(x - np.linalg.solve(a, b)).max())}))
