"""Softmax regression and a one-hidden-layer MLP on flat parameter vectors, with Numba kernels
(softmax regression's gradient is :mod:`hpcbsp.kernels`'s).

The parameters are one float64 vector so that the parameter server moves them (and the
gradients) as a single numpy buffer. Loss: mean cross-entropy over the batch.

Layouts (row-major):

* softmax regression: ``W (d x k)`` then ``b (k)``;
* MLP (tanh hidden layer): ``W1 (d x h)``, ``b1 (h)``, ``W2 (h x k)``, ``b2 (k)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from ..kernels.learning import softmax_loss_grad_sum_into

__all__ = ["Model", "SoftmaxRegression", "MLP", "make_model", "MODELS", "NUMPY_MODELS", "TORCH_MODELS",
           "TorchUnavailable"]

NUMPY_MODELS = ("softmax", "mlp")
#: PyTorch networks (:mod:`hpcbsp.elastic.torch.nets`; need the ``torch`` extra).
TORCH_MODELS = ("cnn", "resnet", "student")
MODELS = NUMPY_MODELS + TORCH_MODELS


class TorchUnavailable(RuntimeError):
    """A torch model was asked for, and torch is not installed (the message says how to get it)."""


class Model:
    """What the training code needs from a model (implemented by the two classes below)."""

    n_params: int
    #: dtype of the flat parameters and gradients (float32 for torch models).
    dtype: type = np.float64

    def init(self, seed: int) -> np.ndarray:
        raise NotImplementedError

    def grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        """Gradient of the mean loss on ``(X, y)`` at ``w``, and that loss."""
        raise NotImplementedError

    def probabilities(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def evaluate(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[float, float]:
        """Accuracy and mean cross-entropy on ``(X, y)``."""
        p = self.probabilities(w, X)
        acc = float(np.mean(np.argmax(p, axis=1) == y))
        loss = float(-np.mean(np.log(np.maximum(p[np.arange(y.size), y], 1e-300))))
        return acc, loss


@dataclass(frozen=True)
class SoftmaxRegression(Model):
    """Multinomial logistic regression with ``n_features`` inputs and ``n_classes`` outputs."""

    n_features: int
    n_classes: int

    @property
    def n_params(self) -> int:  # type: ignore[override]
        return (self.n_features + 1) * self.n_classes

    def init(self, seed: int) -> np.ndarray:
        return np.zeros(self.n_params)

    def grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        # The kernels' softmax gradient, on W and b as one (d + 1) x k array with the intercept
        # row last: exactly this model's flat layout.  Called per mini-batch, so unchecked.
        if X.ndim != 2 or X.shape[1] != self.n_features or y.shape != (X.shape[0],) \
                or (y.size and (y.min() < 0 or y.max() >= self.n_classes)):
            raise ValueError(f"softmax regression on {self.n_features} features and "
                             f"{self.n_classes} classes: X of shape {X.shape} and labels of "
                             f"shape {y.shape} do not fit")
        weights = w.reshape(self.n_features + 1, self.n_classes)
        g = np.zeros_like(weights)
        # The kernel is unchecked: one compiled signature, C-contiguous float64 and int64 (no-ops
        # for the simulator's and the workers' batches).
        X = np.ascontiguousarray(X, dtype=np.float64)
        y = np.ascontiguousarray(y, dtype=np.int64)
        loss = softmax_loss_grad_sum_into(weights, X, y, g)
        m = X.shape[0]
        if m:
            g /= m
            loss /= m
        return g.reshape(-1), float(loss)

    def probabilities(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.n_classes))
        _softmax_forward(w, X, self.n_features, self.n_classes, out)
        return out


@dataclass(frozen=True)
class MLP(Model):
    """``n_features -> n_hidden (tanh) -> n_classes`` softmax classifier."""

    n_features: int
    n_hidden: int
    n_classes: int

    @property
    def n_params(self) -> int:  # type: ignore[override]
        d, h, k = self.n_features, self.n_hidden, self.n_classes
        return d * h + h + h * k + k

    def init(self, seed: int) -> np.ndarray:
        # Glorot-uniform weights, zero biases: a symmetric start would keep hidden units equal.
        d, h, k = self.n_features, self.n_hidden, self.n_classes
        rng = np.random.default_rng(seed)
        w = np.zeros(self.n_params)
        w[:d * h] = rng.uniform(-1, 1, d * h) * np.sqrt(6.0 / (d + h))
        w[d * h + h:d * h + h + h * k] = rng.uniform(-1, 1, h * k) * np.sqrt(6.0 / (h + k))
        return w

    def grad(self, w: np.ndarray, X: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
        g = np.empty(self.n_params)
        loss = _mlp_grad(w, X, y, self.n_features, self.n_hidden, self.n_classes, g)
        return g, float(loss)

    def probabilities(self, w: np.ndarray, X: np.ndarray) -> np.ndarray:
        out = np.empty((X.shape[0], self.n_classes))
        _mlp_forward(w, X, self.n_features, self.n_hidden, self.n_classes, out)
        return out


def make_model(name: str, n_features: int, n_classes: int, n_hidden: int = 32, *,
               depth: int = 2, device: str = "cpu", threads: int | None = 1) -> Model:
    """``"softmax"`` or ``"mlp"`` (numpy/Numba), or one of :data:`TORCH_MODELS`.

    For a torch model, ``depth`` and ``device`` are passed on and torch is set to ``threads``
    threads in this process (None: torch's default).
    """
    if name in TORCH_MODELS:
        try:
            import torch

            from .torch import make_torch_model
        except ImportError as exc:
            raise TorchUnavailable(f"--model {name} needs PyTorch, which is not installed: "
                                   "`pip install 'hpcbsp[torch]'` (README: Installing torch)") from exc
        if threads is not None:
            torch.set_num_threads(threads)
        return make_torch_model(name, n_features, n_classes, hidden=n_hidden, depth=depth,
                                device=device)
    if name == "softmax":
        return SoftmaxRegression(n_features, n_classes)
    if name == "mlp":
        if n_hidden < 1:
            raise ValueError(f"the MLP needs at least one hidden unit, got {n_hidden}")
        return MLP(n_features, n_hidden, n_classes)
    raise ValueError(f"unknown model {name!r}; choose from: {', '.join(MODELS)}")


@njit(cache=True)
def _softmax_row(z):
    # In place: z becomes softmax(z); shifting by the max keeps exp() finite.
    zmax = z.max()
    total = 0.0
    for c in range(z.size):
        z[c] = np.exp(z[c] - zmax)
        total += z[c]
    for c in range(z.size):
        z[c] /= total


@njit(cache=True)
def _softmax_forward(w, X, d, k, out):
    bias = d * k
    for s in range(X.shape[0]):
        for c in range(k):
            acc = w[bias + c]
            for j in range(d):
                acc += X[s, j] * w[j * k + c]
            out[s, c] = acc
        _softmax_row(out[s])


@njit(cache=True)
def _mlp_hidden(w, X, d, h, hid):
    for s in range(X.shape[0]):
        for u in range(h):
            acc = w[d * h + u]
            for j in range(d):
                acc += X[s, j] * w[j * h + u]
            hid[s, u] = np.tanh(acc)


@njit(cache=True)
def _mlp_output(w, hid, d, h, k, out):
    o = d * h + h
    for s in range(hid.shape[0]):
        for c in range(k):
            acc = w[o + h * k + c]
            for u in range(h):
                acc += hid[s, u] * w[o + u * k + c]
            out[s, c] = acc
        _softmax_row(out[s])


@njit(cache=True)
def _mlp_forward(w, X, d, h, k, out):
    hid = np.empty((X.shape[0], h))
    _mlp_hidden(w, X, d, h, hid)
    _mlp_output(w, hid, d, h, k, out)


@njit(cache=True)
def _mlp_grad(w, X, y, d, h, k, g):
    m = X.shape[0]
    hid = np.empty((m, h))
    p = np.empty((m, k))
    _mlp_hidden(w, X, d, h, hid)
    _mlp_output(w, hid, d, h, k, p)
    g[:] = 0.0
    o = d * h + h
    loss = 0.0
    dh = np.empty(h)
    for s in range(m):
        loss -= np.log(max(p[s, y[s]], 1e-300))
        p[s, y[s]] -= 1.0
        for u in range(h):
            dh[u] = 0.0
        for c in range(k):
            e = p[s, c] / m
            g[o + h * k + c] += e
            for u in range(h):
                g[o + u * k + c] += hid[s, u] * e
                dh[u] += w[o + u * k + c] * e
        for u in range(h):
            dz = dh[u] * (1.0 - hid[s, u] * hid[s, u])  # tanh' = 1 - tanh^2
            g[d * h + u] += dz
            for j in range(d):
                g[j * h + u] += X[s, j] * dz
    return loss / m
