"""PyTorch models on the parameter server (needs the ``torch`` extra).

* :mod:`.adapter` - :class:`TorchModel`: any ``nn.Module`` as a flat-float32 model for the
  simulator, the MPI server, the allreduce baseline, checkpoints and reports.
* :mod:`.nets` - the CLI's networks: ``cnn``, ``resnet``, ``student``.

Importing this package imports torch; :mod:`hpcbsp.elastic.models` names these models without it.
"""
from __future__ import annotations

from .adapter import TorchModel, TorchModelError
from .nets import TORCH_MODELS, build_net

__all__ = ["TorchModel", "TorchModelError", "TORCH_MODELS", "build_net", "make_torch_model"]


def make_torch_model(name: str, n_features: int, n_classes: int, *, hidden: int = 32,
                     depth: int = 2, device: str = "cpu") -> TorchModel:
    """The CLI's network ``name`` (:data:`TORCH_MODELS`) wrapped for the parameter server."""
    net, shape = build_net(name, n_features, n_classes, hidden=hidden, depth=depth)
    return TorchModel(net, input_shape=shape, n_features=n_features, n_classes=n_classes,
                      device=device)
