"""Cost models: the BSP machine probe and ledger predictions, and the BSF farm model.

* :mod:`~hpcbsp.farm.model`: BSF iteration time, speedup, efficiency and K_max (closed form and argmax),
  with its parameters (:mod:`~hpcbsp.farm.params`) and its terms per K (:mod:`~hpcbsp.farm.terms`);
* :mod:`~hpcbsp.cost.fit` (with :mod:`~hpcbsp.cost.nnls`): fitting the BSF model to measured runs;
* :mod:`~hpcbsp.cost.farmmodel`: the BSF model from one farm run's own measurements;
* :mod:`~hpcbsp.cost.calibrate`: running a farm program at a few K and modelling it;
* :mod:`~hpcbsp.cost.predict`, :mod:`~hpcbsp.cost.validate`, :mod:`~hpcbsp.cost.plot`: using a model;
* :mod:`~hpcbsp.cost.runs`: RUNS.csv; :mod:`~hpcbsp.cost.modelfile`: MODEL.json;
* :mod:`~hpcbsp.cost.probe`, :mod:`~hpcbsp.cost.profile`, :mod:`~hpcbsp.cost.bspmodel`: the BSP
  machine parameters r, g, l and the superstep cost w + g·h + l beside a ledger.

The command line is ``hpcbsp-cost`` (:mod:`hpcbsp.cli.cost`).

Nothing here is imported by the runtime; the cost models read what the runtime records.
"""
from ..farm.model import BSFModel
from ..farm.params import BSFParams
from .errors import CostInputError

__all__ = ["BSFModel", "BSFParams", "CostInputError"]
