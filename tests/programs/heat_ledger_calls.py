"""hpcbsp.apps.heat with ``Ledger.gather`` counted (run under mpiexec -n P).

    python tests/programs/heat_ledger_calls.py HEAT_ARGS...

Runs the app's ``main`` with HEAT_ARGS; every rank then prints ``gathers RANK N`` (N: the calls
of ``bsp.ledger.gather`` the run made on that rank), and the app's exit status is this one's.
"""
from __future__ import annotations

import sys

from hpcbsp.apps import heat
from hpcbsp.runtime.superstep.ledger import Ledger

calls = [0]
gather = Ledger.gather


def counted(self: Ledger, root: int | None = 0):  # type: ignore[no-untyped-def]
    calls[0] += 1
    return gather(self, root)


Ledger.gather = counted  # type: ignore[method-assign]
status = heat.main(sys.argv[1:])
from mpi4py import MPI  # noqa: E402  (after the run: MPI is up)

print(f"gathers {MPI.COMM_WORLD.Get_rank()} {calls[0]}", flush=True)
sys.exit(status)
