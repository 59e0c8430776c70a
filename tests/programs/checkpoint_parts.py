"""Save or restore a checkpoint of two coarrays, and say which of its files each rank opened.

    python checkpoint_parts.py save PATH N KIND [--per-node [--nodes L0,L1,...]]
    python checkpoint_parts.py restore PATH N KIND

``x`` (int64) and ``y`` (float64) are laid out by ``KIND`` (block, cyclic) over N elements on
this job's ranks; global element g holds ``3 g + 1`` in x and ``0.5 g`` in y.  A restore checks
``--nodes`` gives each rank's node (its lowest rank) in place of MPI's, as if the ranks ran on
several nodes (``bsp.nodes``, public, replaced after the context started; only the checkpoint
reads it then).  A restore checks them against that formula (numpy) and the replicated state, and every rank prints one line
``rank R opened: NAMES`` (printed by rank 0 for all) (the files under PATH it opened or listed while restoring, from
Python's audit hook ``open``, ``os.listdir`` and ``os.scandir``), then ``rank R OK``.
"""
import dataclasses
import os
import sys

import numpy as np

import hpcbsp
from hpcbsp.runtime.api.partition import partitioning

mode, path, n, kind = sys.argv[1], os.path.abspath(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
per_node = "--per-node" in sys.argv[5:]
nodes = sys.argv[sys.argv.index("--nodes") + 1] if "--nodes" in sys.argv else None


def prog(bsp: "hpcbsp.BSP") -> None:
    lay = partitioning(kind, n, bsp.nprocs)
    x = bsp.coarray(dtype=np.int64, name="x", layout=lay)
    y = bsp.coarray(dtype=np.float64, name="y", layout=lay)
    g = lay.global_indices(bsp.pid)
    if mode == "save":
        if nodes is not None:
            bsp.nodes = dataclasses.replace(bsp.nodes, node=tuple(int(v) for v in nodes.split(",")))
        x.local[:] = 3 * g + 1
        y.local[:] = 0.5 * g
        bsp.sync()
        bsp.checkpoint(path, program="parts", per_node=per_node, step=np.int64(7), v=np.arange(4.0))
        return
    opened: list[str] = []
    recording = [True]

    def audit(event: str, args: tuple) -> None:
        if recording[0] and event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
            name = os.fsdecode(args[0])
            if name == path or name.startswith(path + os.sep) or name.startswith(path + "."):
                opened.append(os.path.relpath(name, path) if name != path else ".")

    sys.addaudithook(audit)
    ck = bsp.restore(path, program="parts")
    recording[0] = False  # (an audit hook cannot be removed)
    seen = sorted(set(opened))
    np.testing.assert_array_equal(x.local, 3 * g + 1)
    np.testing.assert_array_equal(y.local, 0.5 * g)
    assert int(ck.state["step"]) == 7 and ck.state["v"].tolist() == [0.0, 1.0, 2.0, 3.0]
    lines = bsp.comm.gather(f"rank {bsp.pid} opened: {','.join(seen)}\nrank {bsp.pid} OK", root=0)
    if lines is not None:  # one process prints: lines of several would interleave
        print("\n".join(lines), flush=True)


hpcbsp.run(prog)
