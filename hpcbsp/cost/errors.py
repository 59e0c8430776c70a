"""The one error type of the cost models: input that cannot be used (the CLI exits 2 on it).

Defined with the BSF model's parameters in :mod:`hpcbsp.farm.params` (the farm, a layer below,
raises it too); this is its name for the cost package.
"""
from ..farm.params import CostInputError

__all__ = ["CostInputError"]
