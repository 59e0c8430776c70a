"""The summed weight gradient of a Linear layer from its sufficient factors (allgathered rows).

A ``nn.Linear`` layer's weight gradient on a mini-batch of ``B`` rows is ``G^T X``: ``G`` the
gradient of the loss by the layer's output (``B x out``, the loss's mean already in it), ``X``
its input (``B x in``).  The sum over ``n`` workers is then ``Gall^T Xall``, the workers' ``G``
and ``X`` stacked in rank order.  So a worker need not send its ``out x in`` gradient: it sends
``B (out + in)`` values (an ``MPI.Iallgather``) and every worker multiplies the stacked
factors (Xie et al., "Distributed machine learning via sufficient factor broadcasting", 2016;
Poseidon, USENIX ATC 2017).  :class:`LinearFactors` does this for every Linear layer of a
:class:`~hpcbsp.elastic.torch.TorchModel` whose factors are fewer values than its weight for
batches of up to ``rows`` rows (``rows (out + in) < out in``): the student MLP's 1024 x 1024
layer at batch 64 sends 131,072 values instead of 1,048,576.

Per step: a forward hook keeps the layer's input (a copy into the send buffer); a hook on its
output's gradient, which backward computes before the layer's own backward, copies ``G`` and
starts the ``Iallgather`` at once, so the exchange overlaps the rest of the backward pass.  The
weight's own gradient is then not computed at all (``requires_grad`` is off while the factors
are in use; :meth:`LinearFactors.close` restores it): its slice of the model's gradient vector
is written by :meth:`LinearFactors.finish`, one ``torch.mm`` of the stacked factors.

Arithmetic: the same sum as an allreduce of the gradients, rounded in another order (the
products of one matmul instead of each worker's matmul and then MPI's additions); every worker
multiplies the same bits in the same order, so with one matmul kernel on every worker (the same
torch build and CPU type) every worker gets the same bits.  Needs the same batch size on every
worker in a step (the allgather's blocks), 2-D inputs (``B x in``), the CPU device.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from mpi4py import MPI
from torch import nn

from ..protocol import wait_all

__all__ = ["LinearFactors"]


class _Layer:
    """One factored layer: its parameter index, shape, buffers and the step's request."""

    def __init__(self, index: int, module: nn.Linear):
        self.index, self.module = index, module
        self.out, self.inp = module.out_features, module.in_features
        self.mine = np.zeros((0, self.out + self.inp), dtype=np.float32)
        self.stacked = self.mine
        self.request: MPI.Request | None = None


class LinearFactors:
    """Sum the weight gradients of ``model``'s large Linear layers over ``comm`` from their
    sufficient factors (see the module docstring), for batches of up to ``rows`` rows."""

    def __init__(self, comm: MPI.Comm, model: Any, rows: int):
        if rows < 1:
            raise ValueError(f"rank {comm.Get_rank()}: LinearFactors: rows must be at least 1, got {rows}")
        self.comm, self.rows, self.model = comm, rows, model
        index = {id(p): i for i, p in enumerate(model.module.parameters())}
        self.layers = [_Layer(index[id(m.weight)], m) for m in model.module.modules()
                       if isinstance(m, nn.Linear) and rows * (m.in_features + m.out_features)
                       < m.in_features * m.out_features]
        offsets = np.concatenate([[0], np.cumsum(np.asarray(model.sizes, dtype=np.int64))])
        vector = model.gradient_vector()
        self._slices = [vector[offsets[k.index]:offsets[k.index + 1]] for k in self.layers]
        self._hooks = [k.module.register_forward_hook(self._forward_hook(k)) for k in self.layers]
        for k in self.layers:
            k.module.weight.requires_grad_(False)

    @property
    def params(self) -> set[int]:
        """The parameters (indices in the model's order) whose sums this object makes."""
        return {k.index for k in self.layers}

    def _forward_hook(self, k: _Layer) -> Any:
        def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
            if not torch.is_grad_enabled() or not output.requires_grad:
                return  # (evaluation: no backward follows)
            x = inputs[0]
            if x.dim() != 2 or x.shape[0] > self.rows:
                raise ValueError(f"rank {self.comm.Get_rank()}: sufficient factors take inputs of "
                                 f"at most {self.rows} rows x {k.inp}, got {tuple(x.shape)}")
            if k.mine.shape[0] != x.shape[0]:
                k.mine = np.zeros((x.shape[0], k.out + k.inp), dtype=np.float32)
                k.stacked = np.zeros((self.comm.Get_size() * x.shape[0], k.out + k.inp), dtype=np.float32)
            k.mine[:, k.out:] = x.detach().numpy()
            output.register_hook(lambda g: self._start(k, g))
        return hook

    def _start(self, k: _Layer, g: torch.Tensor) -> None:
        k.mine[:, :k.out] = g.detach().numpy()
        k.request = self.comm.Iallgather(k.mine, k.stacked)

    def finish(self, timeout: float) -> None:
        """Wait for every layer's allgather and write each weight's summed gradient into the
        model's gradient vector (one ``torch.mm`` each)."""
        started = [k.request for k in self.layers if k.request is not None]
        wait_all(started, timeout, f"allgather of the sufficient factors on rank {self.comm.Get_rank()}",
                 mode="spin")
        for k, out in zip(self.layers, self._slices):
            if k.request is None:
                raise RuntimeError(f"rank {self.comm.Get_rank()}: no gradient reached Linear "
                                   f"layer {k.index} in this step's backward pass")
            stacked = torch.from_numpy(k.stacked)
            torch.mm(stacked[:, :k.out].t(), stacked[:, k.out:], out=torch.from_numpy(out).view(k.out, k.inp))
            k.request = None

    def close(self) -> None:
        """Remove the hooks; the weights' gradients are computed by autograd again."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        for k in self.layers:
            k.module.weight.requires_grad_(True)
