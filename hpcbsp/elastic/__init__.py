"""Elastic synchronisation for data-parallel training on a parameter server.

* :mod:`.zipline` - ZipLine: where to put the next ElasticBSP barrier (compiled, O(nR log n)).
* :mod:`.policies` - BSP, ASP, SSP, DSSP, ElasticBSP and backup workers as pure decision logic,
  by name (``make_policy``).
* :mod:`.coordinator` - the server's state machine that applies a policy's decisions.
* :mod:`.simulator` - virtual-clock runs (1,000 workers in seconds, exact for tests).
* :mod:`.server` - the same on MPI: rank 0 serves, ranks 1..n work (:mod:`.worker`), speaking
  :mod:`.protocol` (imports mpi4py).
* :mod:`.transport` - the weights in a shared-memory window where server and workers share a node.
* :mod:`.allreduce` - the serverless baseline (gradients summed and the update sharded with
  ``bsp.reduce_scatter`` and ``bsp.allgather_blocks``, as DDP with a ZeRO-1 optimiser does).
* :mod:`.wire` - message layouts: 16-byte header, float64/float32 values, float16/bfloat16 gradients.
* :mod:`.evaluator` - the server's test-set evaluations in a background thread.
* :mod:`.torch` - any PyTorch ``nn.Module`` as a flat-float32 model (needs the ``torch`` extra).
* :mod:`.train` - ``python -m hpcbsp.elastic.train``: training runs, outputs and the comparison.
* :mod:`.paper` - ``python -m hpcbsp.elastic.paper``: the ElasticBSP paper's experiment, small.

Layering: this package sits beside ``cost`` and ``fabsp`` and uses MPI directly through
:mod:`.protocol`, :mod:`.server`, :mod:`.worker`, :mod:`.transport` and :mod:`.allreduce`
only; policies, simulator and ZipLine need no MPI.
"""
from __future__ import annotations

from .policies import REGISTRY, PolicyError, PolicyOptions, SyncPolicy, make_policy
from .zipline import SyncSet, predict_end_times, zipline

__all__ = ["zipline", "SyncSet", "predict_end_times", "make_policy", "REGISTRY", "PolicyOptions",
           "PolicyError", "SyncPolicy"]
