"""Element puts through the node's shared arena for two supersteps, then rank 1 raises: the
others must stop with one line each, and nobody may wait in the arena's collective free."""
import numpy as np

import hpcbsp


def prog(bsp):
    n = 200_000
    c = bsp.coarray(n, name="table")
    rng = np.random.default_rng(bsp.pid)
    for _ in range(2):  # the first grows the arena, the second uses it
        c.put_elements(rng.integers(0, bsp.nprocs, n), rng.integers(0, n, n), rng.standard_normal(n))
        bsp.sync()
    print(f"rank {bsp.pid}: announced {bsp.extension.arena.announced}", flush=True)
    if bsp.pid == 1:
        raise ZeroDivisionError("rank one divides by zero")
    bsp.sync()


hpcbsp.run(prog)
print("UNREACHABLE")
