"""Elastic synchronisation for data-parallel training on a parameter server.

* :mod:`.zipline` - ZipLine: where to put the next ElasticBSP barrier (compiled, O(nR log n)).
* :mod:`.policies` - BSP, ASP, SSP, DSSP, ElasticBSP and backup workers as pure decision logic,
  by name (``make_policy``).
* :mod:`.coordinator` - the server's state machine that applies a policy's decisions.
* :mod:`.simulator` - virtual-clock runs (1,000 workers in seconds, exact for tests).
* :mod:`.server` - the same on MPI: rank 0 serves, ranks 1..n work (imports mpi4py).
* :mod:`.train` - ``python -m hpcbsp.elastic.train``: training runs, outputs and the comparison.

Layering: this package sits beside ``cost`` and ``fabsp`` and uses MPI directly through
:mod:`.server` only; policies, simulator and ZipLine need no MPI.
"""
from __future__ import annotations

from .policies import REGISTRY, PolicyError, PolicyOptions, SyncPolicy, make_policy
from .zipline import SyncSet, predict_end_times, zipline

__all__ = ["zipline", "SyncSet", "predict_end_times", "make_policy", "REGISTRY", "PolicyOptions",
           "PolicyError", "SyncPolicy"]
