"""The BSF farm: a master/worker Bulk Synchronous Farm skeleton on the BSP runtime.

>>> problem = BSFProblem(items=cols, map=..., reduce=np.add, compute=..., stop=...)  # doctest: +SKIP
>>> result = hpcbsp.run(run_farm, problem, x0)                                      # doctest: +SKIP
>>> result.x, result.timings.params()                                               # doctest: +SKIP

The run measures its own BSF cost parameters (L, t_c, t_Map, t_a, t_p, l), so one run at a small
K parameterises the model of :mod:`hpcbsp.cost.bsf` (see ``hpcbsp-cost calibrate``).
"""
from .checkpointing import FarmCheckpoint
from .problem import BSFProblem
from .skeleton import FarmResult, run_farm
from .timings import REPORT_ENV, FarmTimings

__all__ = ["BSFProblem", "FarmCheckpoint", "FarmResult", "FarmTimings", "REPORT_ENV", "run_farm"]
