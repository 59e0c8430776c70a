"""Where a step of hpcbsp's bucketed allreduce trainer spends its time (``bench ddp --phases``).

The workers run the trainer's step by hand, as :func:`hpcbsp.elastic.allreduce.run_allreduce`
does with its bucketed sum: the same :class:`~hpcbsp.elastic.data.MinibatchGradient` on a
:class:`~hpcbsp.elastic.torch.TorchModel`, a :class:`~hpcbsp.elastic.buckets.BucketedReduce`
started from the backward pass's hooks, :func:`~hpcbsp.kernels.update.sgd_step`; a clock is
read between the phases of every step (:data:`PHASES`):

* the forward pass up to the module that holds the largest parameter (a batch picked, the
  gradient zeroed, the layers before it), and from that module on;
* the loss and the backward pass until the largest parameter's gradient is complete (its
  bucket starts then), and the rest of the backward pass (the buckets in flight);
* the wait for every bucket's sum, and the update.

The ceiling of any schedule that keeps the result (:func:`ceiling_s`): the largest parameter's
gradient exists only after the forward pass and the backward pass down to it, its sum needs an
allreduce of the gradient's bytes, and the next step's forward pass through its module needs
that sum; the other layers' buckets cross the same link, the first layer's after the largest
one's (its gradient comes later).  So a step takes at least the forward pass + the backward
pass until the largest gradient + a bare allreduce of the whole gradient.  What a forward pass
that waits per module for its own buckets could hide at most is the part before the largest
parameter's module; a bucket sent first by priority changes nothing while the first layer's
gradient is the last to be ready.
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np
from mpi4py import MPI

__all__ = ["PHASES", "ceiling_s", "measure_phases", "phase_lines"]

PHASES = ("forward before the largest parameter's module", "forward from it on",
          "loss and backward until the largest gradient", "rest of backward", "wait for the sums",
          "update")


def ceiling_s(forward: float, to_largest: float, allreduce: float) -> float:
    """The shortest step (seconds) of a schedule that keeps the result: the forward pass, the
    backward pass until the largest gradient, a bare allreduce of the whole gradient."""
    return forward + to_largest + allreduce


def measure_phases(workers: MPI.Comm, model: Any, grad: Any, steps: int, bucket_bytes: int,
                   lr: float = 0.05) -> np.ndarray:
    """``steps`` steps of the bucketed trainer on ``workers`` (``model`` a TorchModel on the CPU,
    ``grad`` its MinibatchGradient); returns each step's phases in seconds, one row a step, one
    column per :data:`PHASES`."""
    from hpcbsp.elastic.buckets import BucketedReduce
    from hpcbsp.kernels.update import sgd_step

    sizes = model.sizes
    largest = int(np.argmax(sizes))
    name = [n for n, _ in model.module.named_parameters()][largest]
    holder = model.module.get_submodule(name.rpartition(".")[0])
    vector, weights = model.gradient_vector(), model.weight_vector()
    reduce = BucketedReduce(workers, vector, sizes, bucket_bytes)
    marks: dict[str, float] = {}

    def ready(i: int) -> None:
        if i == largest:
            marks["gradient"] = time.perf_counter()
        reduce.ready(i)

    hooks = [holder.register_forward_pre_hook(lambda *_: marks.__setitem__("module", time.perf_counter())),
             model.module.register_forward_hook(lambda *_: marks.__setitem__("forward", time.perf_counter()))]
    model.on_gradient(ready)
    scale = lr / workers.Get_size()
    rows = np.zeros((steps, len(PHASES)))
    try:
        workers.Barrier()
        for k in range(steps):
            start = time.perf_counter()
            grad(weights)
            backward = time.perf_counter()
            reduce.finish(0, 120.0)
            summed = time.perf_counter()
            sgd_step(weights, vector, scale)
            rows[k] = (marks["module"] - start, marks["forward"] - marks["module"],
                       marks["gradient"] - marks["forward"], backward - marks["gradient"],
                       summed - backward, time.perf_counter() - summed)
    finally:
        model.on_gradient(None)
        for h in hooks:
            h.remove()
    return rows


def phase_lines(rows: np.ndarray, bare_s: float, ddp_rate: float, target: float = 1.2) -> list[str]:
    """What ``bench ddp --phases`` prints: each phase's median per step (``rows`` of all the
    workers' steps), and the ceiling (:func:`ceiling_s` with ``bare_s``) against ``target`` x
    ``ddp_rate`` (steps/s)."""
    med = np.median(rows, axis=0)
    per = ", ".join(f"{what} {1e3 * s:.1f}" for what, s in zip(PHASES, med))
    step = float(np.median(rows.sum(axis=1)))
    forward, to_largest = float(med[0] + med[1]), float(med[2])
    top = ceiling_s(forward, to_largest, bare_s)
    return [f"phases of a step, median of {len(rows)} (ms): {per}; a step {1e3 * step:.1f} "
            f"({1 / step:.1f} steps/s)",
            f"ceiling (forward + backward until the largest gradient + bare allreduce): "
            f"{1e3 * forward:.1f} + {1e3 * to_largest:.1f} + {1e3 * bare_s:.1f} = {1e3 * top:.1f} ms, "
            f"{1 / top:.1f} steps/s = {1 / top / ddp_rate:.2f}x DDP's median ({target:g}x needs "
            f"{target * ddp_rate:.1f} steps/s)"]
