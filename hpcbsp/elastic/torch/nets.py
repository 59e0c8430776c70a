"""The networks ``python -m hpcbsp.apps.elastic.train --model NAME`` builds (all float32, no buffers).

* ``cnn`` - two 3x3 convolutions (16 and 32 channels, ReLU), 2x2 max-pooling, a 64-unit hidden
  layer: about 40 k parameters on 8x8 digits.
* ``resnet`` - a ResNet-style network: a 3x3 stem, ``depth`` residual blocks (two 3x3 convolutions
  with GroupNorm and an identity skip), global average pooling, a linear classifier.  GroupNorm
  instead of BatchNorm: BatchNorm's running statistics are buffers the server does not
  synchronise.
* ``student`` - a ReLU MLP with ``depth`` hidden layers of ``hidden`` units, the student of the
  teacher-student task (``--dataset teacher``): ``--hidden 1024 --depth 2`` on 256 inputs is
  about 1.3 M parameters, enough that communication matters.

The image networks take square single-channel images: a dataset row of ``side * side`` values.
"""
from __future__ import annotations

import math

from torch import nn

from .adapter import TorchModelError

__all__ = ["TORCH_MODELS", "build_net", "image_side"]

TORCH_MODELS = ("cnn", "resnet", "student")


def image_side(n_features: int, model: str) -> int:
    """The side of the square image a row of ``n_features`` values holds (error if none)."""
    side = math.isqrt(n_features)
    if side * side != n_features or side < 2:
        raise TorchModelError(f"--model {model} takes square images, but the data's rows hold "
                              f"{n_features} values: use --dataset digits (8x8), or "
                              "--teacher-dim a square number, or --model student")
    return side


class _Block(nn.Module):
    def __init__(self, width: int, groups: int):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(width, width, 3, padding=1, bias=False), nn.GroupNorm(groups, width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1, bias=False), nn.GroupNorm(groups, width))
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(x + self.body(x))


def build_net(name: str, n_features: int, n_classes: int, *, hidden: int = 32,
              depth: int = 2) -> tuple[nn.Module, tuple[int, ...]]:
    """The network called ``name`` and the shape of one of its input samples."""
    if hidden < 1 or depth < 1:
        raise TorchModelError(f"--hidden and --depth must be at least 1, got {hidden} and {depth}")
    if name == "student":
        layers: list[nn.Module] = []
        width = n_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, n_classes))
        return nn.Sequential(*layers), (n_features,)
    if name == "cnn":
        side = image_side(n_features, name)
        pooled = side // 2
        net = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(32 * pooled * pooled, 64), nn.ReLU(), nn.Linear(64, n_classes))
        return net, (1, side, side)
    if name == "resnet":
        side = image_side(n_features, name)
        width = 16
        net = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1, bias=False), nn.GroupNorm(4, width), nn.ReLU(),
            *[_Block(width, 4) for _ in range(depth)],
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, n_classes))
        return net, (1, side, side)
    raise TorchModelError(f"unknown torch model {name!r}; choose from: {', '.join(TORCH_MODELS)}")
