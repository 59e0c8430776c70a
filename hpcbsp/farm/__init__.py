"""The BSF farm: a master/worker Bulk Synchronous Farm skeleton on the BSP runtime.

>>> problem = BSFProblem(items=cols, map=..., reduce=np.add, compute=..., stop=...)  # doctest: +SKIP
>>> result = hpcbsp.run(run_farm, problem, x0)                                      # doctest: +SKIP
>>> result.x, result.timings.params()                                               # doctest: +SKIP

The run measures its own BSF cost parameters (L, t_c, t_Map, t_a, t_p, l), so one run at a small
K parameterises the model of :mod:`hpcbsp.farm.model` (see ``hpcbsp-cost calibrate``).  The
exchange is linear (one by one) or a tree; the workers' compute can be emulated (waits of its
measured time: a simulation of compute, :mod:`hpcbsp.farm.emulation`).
"""
from ..util.choices import EXCHANGES
from .checkpointing import FarmCheckpoint
from .emulation import EMULATE_ENV, FarmEmulation, parse_emulation
from .problem import BSFProblem
from .skeleton import EXCHANGE_ENV, FarmResult, run_farm
from .timings import REPORT_ENV, FarmTimings

__all__ = ["BSFProblem", "EMULATE_ENV", "EXCHANGES", "EXCHANGE_ENV", "FarmCheckpoint", "FarmEmulation",
           "FarmResult", "FarmTimings", "REPORT_ENV", "parse_emulation", "run_farm"]
