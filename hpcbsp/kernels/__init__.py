"""Local compute kernels: Cython (compiled from ``kernels/*.pyx``) and Numba.

The kernels know nothing of MPI.  Every kernel has a numpy reference beside it in
:mod:`hpcbsp.kernels.reference`, which the tests use as their oracle.

Cython (imported eagerly; importing this package fails with :class:`KernelsNotBuiltError`
when one of the extensions :data:`EXTENSIONS` was not built):

- :func:`group_by_dest` - stable grouping of items by destination rank; :func:`append_by_dest`
  - appending records to per-destination buffers in one pass;
- :func:`scatter_add`, :func:`gather` - histogram update and index-gather, bounds-checked;
- :mod:`.elements` - packing element puts by destination and applying them in order;
- :func:`sum`, :func:`dot`, :func:`sqnorm`, :func:`minmax` - one-pass reductions;
- :func:`exact_sum_state`, :func:`exact_sum_round`, :func:`exact_sum` - exact, reproducible
  summation of float64 (merge states by integer addition, round once).

Numba (imported on first use, since importing numba takes a while):

- :func:`csr_matvec`, :func:`jacobi_sweep_dense`, :func:`jacobi_sweep_csr`,
  :func:`softmax_loss_grad`.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

from ._extensions import ERRORS, EXTENSIONS, KernelsNotBuiltError, require_compiled

require_compiled()

from .exact_sum import (  # noqa: E402 - only once the extensions are known to be there
    EXACT_SUM_MAX_MERGE,
    EXACT_SUM_STATE_LEN,
    exact_sum,
    exact_sum_fast_path_enabled,
    exact_sum_round,
    exact_sum_state,
)
from .grouping import append_by_dest, check_dests, group_by_dest  # noqa: E402
from .indexed import gather, scatter_add  # noqa: E402
from .reductions import dot, minmax, sqnorm, sum  # noqa: E402,A004

#: The Numba kernels, by the module that holds them (imported on first use: numba is slow to load).
_NUMBA_HOMES = {"csr_matvec": ".linear", "jacobi_sweep_dense": ".linear", "jacobi_sweep_csr": ".linear",
                "softmax_loss_grad": ".learning"}
_NUMBA_NAMES = tuple(_NUMBA_HOMES)

__all__ = [
    "EXTENSIONS", "KernelsNotBuiltError", "require_compiled", "compiled_status",
    "append_by_dest", "check_dests", "group_by_dest", "scatter_add", "gather", "sum", "dot", "sqnorm", "minmax",
    "exact_sum_state", "exact_sum_round", "exact_sum", "exact_sum_fast_path_enabled", "EXACT_SUM_STATE_LEN",
    "EXACT_SUM_MAX_MERGE", *_NUMBA_NAMES,
]


def __getattr__(name: str) -> Any:
    """Import the Numba kernels on first use."""
    if name in _NUMBA_NAMES:
        return getattr(importlib.import_module(_NUMBA_HOMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _numba_jit_enabled() -> bool:
    if "numba" in sys.modules:
        return not sys.modules["numba"].config.DISABLE_JIT
    if importlib.util.find_spec("numba") is None:
        return False
    return os.environ.get("NUMBA_DISABLE_JIT", "0").strip() in ("", "0")


def compiled_status() -> dict[str, bool]:
    """Which kernel families are compiled (``hpcbsp info`` prints this).

    Returns
    -------
    dict
        ``"cython"``: every Cython extension imported (always True once this package
        imported); ``"numba"``: numba is installed and its JIT is not disabled
        (``NUMBA_DISABLE_JIT``), without importing numba.
    """
    return {"cython": not ERRORS, "numba": _numba_jit_enabled()}
