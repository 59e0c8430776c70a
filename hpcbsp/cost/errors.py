"""The one error type of the cost models: input that cannot be used (the CLI exits 2 on it).

Defined with the BSF model in :mod:`hpcbsp.farm.model` (the farm, a layer below, raises it too);
this is its name for the cost package.
"""
from ..farm.model import CostInputError

__all__ = ["CostInputError"]
