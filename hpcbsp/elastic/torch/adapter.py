"""A PyTorch ``nn.Module`` as a parameter-server model: one flat float32 buffer each way.

:class:`TorchModel` implements the :class:`hpcbsp.elastic.models.Model` interface (``n_params``,
``init``, ``grad``, ``evaluate``), so the simulator, the MPI server, every policy, the allreduce
baseline, checkpoints and reports take a torch model exactly as they take the numpy ones.

Memory layout.  At construction every parameter's storage is moved into ONE contiguous float32
tensor (``flat``) and each parameter becomes a view of its slice; likewise every ``.grad`` is a
view of one contiguous gradient tensor (``flat_grad``).  So

* loading the weights a worker pulled is one copy (``flat.copy_(weights)``),
* the gradient after ``backward()`` already lies in one buffer: :meth:`grad` returns a numpy view
  of it (no per-tensor pack; autograd accumulates into the existing ``.grad`` views).  Should an
  operation replace a ``.grad`` by a tensor of its own, the adapter notices (data pointers are
  checked after every backward) and packs that one parameter's gradient into the buffer: at most
  one pack, never a per-tensor message.

Parameter order is ``module.parameters()`` order.  The numpy arrays returned by :meth:`grad`
and :meth:`init` on the CPU device share memory with the model: :meth:`grad`'s result is valid
until the next call (the server and the simulator copy it at once).

Threads: the adapter does not change torch's thread count; the training CLI sets one torch
thread per rank (``torch.set_num_threads(1)``: ranks, not threads, are the parallelism).

Restrictions, checked at construction with a one-line error: the module must have parameters,
all of them floating point (float64/float16 parameters are converted to float32, the wire
format), and no floating-point buffers (BatchNorm's running statistics would be per rank, not
synchronised by the server: use GroupNorm/LayerNorm, or ``track_running_stats=False``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from ..models import Model

__all__ = ["TorchModel", "TorchModelError"]


class TorchModelError(ValueError):
    """A module, loss or data the adapter cannot use (the message says what and what to do)."""


def check_device(device: str) -> torch.device:
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise TorchModelError(f"--device {device!r} is not a torch device (cpu, cuda, cuda:1, mps...)") from exc
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise TorchModelError(f"--device {device}: this torch build sees no CUDA device "
                              "(torch.cuda.is_available() is False); use --device cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise TorchModelError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise TorchModelError(f"--device {device}: MPS is not available here; use --device cpu")
    return dev


class TorchModel(Model):
    """Wrap ``module`` for the parameter server (see the module docstring).

    Parameters
    ----------
    module : torch.nn.Module
        The network; its parameters are re-homed into one flat float32 buffer (in place: the
        module keeps working as before, on that storage).
    input_shape : sequence of int, optional
        Shape of one sample as the module takes it, e.g. ``(1, 8, 8)`` for a CNN on digits; a
        flat row of the dataset is reshaped to it.  Default: the flat row.
    n_features : int, optional
        Length of a flat sample row (default: the product of ``input_shape``).
    loss : callable, optional
        ``loss(outputs, labels) -> scalar tensor``, a mean over the batch (default
        ``torch.nn.functional.cross_entropy``).  Accuracy is ``argmax(outputs) == labels``.
    n_classes : int, optional
        Labels must lie in ``0..n_classes-1`` (checked per batch when given).
    device : str
        Where the module computes (``"cpu"``, ``"cuda"``, ``"cuda:1"``...).
    eval_batch : int
        Evaluation runs in chunks of this many samples.
    """

    dtype = np.float32

    def __init__(self, module: nn.Module, *, input_shape: Sequence[int] | None = None,
                 n_features: int | None = None, loss: Callable[..., torch.Tensor] | None = None,
                 n_classes: int | None = None, device: str = "cpu", eval_batch: int = 1024):
        if not isinstance(module, nn.Module):
            raise TorchModelError(f"TorchModel needs a torch.nn.Module, got {type(module).__name__}")
        params = list(module.parameters())
        if not params:
            raise TorchModelError(f"{type(module).__name__} has no parameters: there is nothing "
                                  "for the parameter server to train")
        for name, p in module.named_parameters():
            if not p.is_floating_point():
                raise TorchModelError(f"parameter {name!r} of {type(module).__name__} is {p.dtype}, "
                                      "not floating point: gradients (and the server's SGD) need "
                                      "float parameters")
        for name, b in module.named_buffers():
            if b.is_floating_point():
                raise TorchModelError(f"buffer {name!r} of {type(module).__name__} is floating point "
                                      "(running statistics?): the parameter server does not "
                                      "synchronise buffers; use GroupNorm/LayerNorm or "
                                      "track_running_stats=False")
        if not input_shape:
            if n_features is None:
                raise TorchModelError("TorchModel needs input_shape or n_features")
            input_shape = (n_features,)
        self.input_shape = tuple(int(s) for s in input_shape)
        self.n_features = int(np.prod(self.input_shape)) if n_features is None else int(n_features)
        if int(np.prod(self.input_shape)) != self.n_features:
            raise TorchModelError(f"input_shape {self.input_shape} holds {int(np.prod(self.input_shape))} "
                                  f"values, not n_features = {self.n_features}")
        self.n_classes = n_classes
        self.loss = loss if loss is not None else nn.functional.cross_entropy
        self.device = check_device(device)
        self.eval_batch = int(eval_batch)
        self.module = module.to(device=self.device, dtype=torch.float32)
        self._params = list(self.module.parameters())
        self._sizes = [p.numel() for p in self._params]
        total = int(sum(self._sizes))
        self.flat = torch.empty(total, dtype=torch.float32, device=self.device)
        self.flat_grad = torch.zeros(total, dtype=torch.float32, device=self.device)
        self._grad_views: list[torch.Tensor] = []
        offset = 0
        with torch.no_grad():
            for p, n in zip(self._params, self._sizes):
                view = self.flat[offset:offset + n].view_as(p)
                view.copy_(p)
                p.data = view
                g = self.flat_grad[offset:offset + n].view_as(p)
                p.grad = g
                self._grad_views.append(g)
                offset += n
        self.packs = 0  # parameters whose gradient had to be copied into flat_grad (see grad())

    @property
    def n_params(self) -> int:  # type: ignore[override]
        return int(self.flat.numel())

    # ------------------------------------------------------------------ weights in and out
    def _numpy(self, t: torch.Tensor) -> np.ndarray:
        return t.numpy() if t.device.type == "cpu" else t.detach().cpu().numpy()

    def get_weights(self) -> np.ndarray:
        """A copy of the current parameters as one float32 vector."""
        return self._numpy(self.flat).copy()

    def set_weights(self, w: np.ndarray) -> None:
        """Load the flat float32 vector ``w`` into the module (one copy)."""
        w = np.asarray(w)
        if w.shape != (self.n_params,):
            raise TorchModelError(f"weights of shape {w.shape} for a model of {self.n_params} "
                                  "parameters")
        if self.device.type == "cpu" and w.dtype == np.float32 and \
                w.__array_interface__["data"][0] == self.flat.data_ptr():
            return  # (the model's own weights: weight_vector())
        with torch.no_grad():
            self.flat.copy_(torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)))

    def init(self, seed: int) -> np.ndarray:
        """Initial weights: every submodule's ``reset_parameters()`` under ``torch.manual_seed(seed)``.

        The same seed gives the same weights on every rank.  Parameters of submodules without
        ``reset_parameters`` keep the values the module was built with.
        """
        with torch.random.fork_rng(devices=[] if self.device.type == "cpu" else [self.device]):
            torch.manual_seed(seed)
            with torch.no_grad():
                for m in self.module.modules():
                    reset = getattr(m, "reset_parameters", None)
                    if callable(reset):
                        reset()
        self._check_views()
        return self.get_weights()

    def _check_views(self) -> None:
        for p, n in zip(self._params, self._sizes):
            if p.data_ptr() < self.flat.data_ptr() or \
                    p.data_ptr() >= self.flat.data_ptr() + 4 * self.flat.numel():
                raise TorchModelError("a parameter's storage was replaced (reset_parameters "
                                      "assigned a new tensor?): the flat buffer no longer holds it")

    # ------------------------------------------------------------------ data
    def _batch(self, X: np.ndarray, y: np.ndarray | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise TorchModelError(f"data of shape {X.shape}: this model takes rows of "
                                  f"{self.n_features} values (reshaped to {self.input_shape})")
        xt = torch.from_numpy(np.ascontiguousarray(X, dtype=np.float32))
        xt = xt.reshape((X.shape[0],) + self.input_shape).to(self.device)
        return xt, None if y is None else self._labels(y, X.shape[0])

    def _labels(self, y: np.ndarray, n: int) -> torch.Tensor:
        y = np.asarray(y)
        if y.shape != (n,) or y.dtype.kind not in "iu":
            raise TorchModelError(f"labels of shape {y.shape} and dtype {y.dtype} for {n} "
                                  "samples: need one integer label per sample")
        if self.n_classes is not None and y.size and (y.min() < 0 or y.max() >= self.n_classes):
            raise TorchModelError(f"labels must lie in 0..{self.n_classes - 1}, got "
                                  f"{int(y.min())}..{int(y.max())}")
        return torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)).to(self.device)

    # ------------------------------------------------------------------ Model interface
    def grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        """Gradient of the mean loss on ``(X, y)`` at weights ``w``, as one float32 vector.

        The result shares memory with :attr:`flat_grad` on the CPU: valid until the next call.
        """
        xt, yt = self._batch(X, y)
        assert yt is not None  # (labels given)
        self.set_weights(w)
        self.module.train()
        self.flat_grad.zero_()
        for p, g in zip(self._params, self._grad_views):
            if p.grad is not g:  # someone replaced it: put the view back
                p.grad = g
        loss = self.loss(self.module(xt), yt)
        loss.backward()
        self._pack_strays()
        return self._numpy(self.flat_grad), float(loss.detach())

    @property
    def sizes(self) -> list[int]:
        """The values of each parameter, in :attr:`flat_grad`'s order."""
        return list(self._sizes)

    def gradient_vector(self) -> np.ndarray:
        """:attr:`flat_grad` as numpy (shared memory on the CPU, a copy elsewhere): what
        :meth:`grad` returns."""
        return self._numpy(self.flat_grad)

    def weight_vector(self) -> np.ndarray:
        """:attr:`flat` as numpy (shared memory on the CPU, a copy elsewhere): weights given to
        :meth:`grad` or :meth:`set_weights` in this very memory are not copied."""
        return self._numpy(self.flat)

    def on_gradient(self, callback: Callable[[int], None] | None) -> None:
        """During every later backward pass, call ``callback(i)`` as soon as parameter ``i``'s
        gradient is complete in :attr:`flat_grad` (torch's post-accumulate-grad hook; a gradient
        a hook or op gave a tensor of its own is copied into its slice first).  None removes it.
        So a bucketed allreduce (:mod:`hpcbsp.elastic.buckets`) starts while backward runs.
        Parameters that do not require a gradient get no call."""
        for handle in getattr(self, "_hook_handles", []):
            handle.remove()
        self._hook_handles = []
        if callback is None:
            return
        for i, (p, g) in enumerate(zip(self._params, self._grad_views)):
            if not p.requires_grad:
                continue  # (no gradient comes: summed by other means, hpcbsp.elastic.torch.factors)

            def hook(param: torch.Tensor, i: int = i, g: torch.Tensor = g) -> None:
                if param.grad is not g:
                    with torch.no_grad():
                        g.copy_(param.grad)  # type: ignore[arg-type]
                    param.grad = g
                    self.packs += 1
                callback(i)
            self._hook_handles.append(p.register_post_accumulate_grad_hook(hook))

    def _pack_strays(self) -> None:
        # autograd accumulates into the existing .grad views; a hook or custom op could have
        # given a parameter a gradient tensor of its own: copy that one into the flat buffer.
        with torch.no_grad():
            for p, g in zip(self._params, self._grad_views):
                if p.grad is None:
                    continue  # unused parameter: its slice stays 0
                if p.grad is not g:
                    g.copy_(p.grad)
                    p.grad = g
                    self.packs += 1

    def outputs(self, w: np.ndarray, X: np.ndarray) -> torch.Tensor:
        """The module's outputs on ``X`` at weights ``w`` (evaluation mode, no gradients)."""
        xt, _ = self._batch(X, None)
        self.set_weights(w)
        self.module.eval()
        with torch.no_grad():
            return torch.cat([self.module(xt[i:i + self.eval_batch])
                              for i in range(0, max(xt.shape[0], 1), self.eval_batch)])

    def probabilities(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        return torch.softmax(self.outputs(w, X), dim=1).cpu().numpy().astype(np.float64)

    def evaluate(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Accuracy (argmax of the outputs) and mean loss on ``(X, y)``."""
        yt = self._labels(y, np.asarray(X).shape[0])
        if yt.numel() == 0:
            return float("nan"), float("nan")
        out = self.outputs(w, X)
        with torch.no_grad():
            loss = float(self.loss(out, yt))
            acc = int((out.argmax(dim=1) == yt).sum()) / yt.numel()
        return acc, loss

    def describe(self) -> dict[str, Any]:
        """What a run report says about the model."""
        return {"module": type(self.module).__name__, "parameters": self.n_params,
                "dtype": "float32", "device": str(self.device), "input_shape": list(self.input_shape),
                "torch": torch.__version__, "torch_threads": torch.get_num_threads()}
