"""Elastic synchronisation for data-parallel training on a parameter server: the library.

* :mod:`.zipline` - ZipLine: where to put the next ElasticBSP barrier (compiled, O(nR log n)).
* :mod:`.policies` - BSP, ASP, SSP, DSSP, ElasticBSP and backup workers as pure decision logic,
  by name (``make_policy``).
* :mod:`.coordinator` - the server's state machine that applies a policy's decisions.
* :mod:`.simulator` - virtual-clock runs (1,000 workers in seconds, exact for tests), with
  :mod:`.timing` (iteration times) and :mod:`.runlog` (what a run records).
* :mod:`.world` - :func:`launch_world`, the one way to start a training world on MPI: a
  :func:`hpcbsp.run` whose ranks serve (rank 0) and work (ranks 1..n), with the runtime's
  failure, timeout and Ctrl-C handling.
* :mod:`.server` - the same on MPI: rank 0 serves, ranks 1..n work (:mod:`.worker`), speaking
  :mod:`.protocol` (imports mpi4py).
* :mod:`.transport` - the weights in a shared-memory window where server and workers share a node.
* :mod:`.allreduce` - the serverless baseline (gradients summed and the update sharded with
  ``bsp.reduce_scatter`` and ``bsp.allgather_blocks``, as DDP with a ZeRO-1 optimiser does).
* :mod:`.wire` - message layouts: 16-byte header, float64/float32 values, float16/bfloat16 gradients.
* :mod:`.evaluator` - the server's test-set evaluations in a background thread.
* :mod:`.data`, :mod:`.models` - datasets, shards and mini-batch gradients; the numpy models.
* :mod:`.snapshot` - a run's state as tagged JSON (checkpoints without pickle).
* :mod:`.torch` - any PyTorch ``nn.Module`` as a flat-float32 model (needs the ``torch`` extra).

The programs built on it (``python -m hpcbsp.apps.elastic.train``, ``... .paper``) and their
experiment drivers, reports and checkpoint plans live in :mod:`hpcbsp.apps.elastic`.

Layering: this package sits beside ``farm`` (layer 4) and uses MPI directly through
:mod:`.protocol`, :mod:`.server`, :mod:`.worker`, :mod:`.transport`, :mod:`.allreduce` and
:mod:`.world` only; policies, simulator and ZipLine need no MPI (``import hpcbsp.elastic``
starts none: ``launch_world`` and ``World`` are imported on first use).
"""
from __future__ import annotations

from typing import Any

from .policies import REGISTRY, PolicyError, PolicyOptions, SyncPolicy, make_policy
from .zipline import SyncSet, predict_end_times, zipline

__all__ = ["zipline", "SyncSet", "predict_end_times", "make_policy", "REGISTRY", "PolicyOptions",
           "PolicyError", "SyncPolicy", "launch_world", "World"]


def __getattr__(name: str) -> Any:
    if name in ("launch_world", "World"):  # (imports mpi4py and the runtime)
        from . import world

        return getattr(world, name)
    raise AttributeError(f"module 'hpcbsp.elastic' has no attribute {name!r}")
