"""Local compute kernels: Cython (compiled from ``kernels/*.pyx``) and Numba.

The kernels know nothing of MPI.  Every compiled function has a numpy reference beside it in
:mod:`hpcbsp.kernels.reference`, which the tests use as their oracle.
"""
from __future__ import annotations

try:
    from . import _ckernels
except ImportError as exc:  # a broken or missing build: say so clearly, once, at import
    _ckernels = None
    _IMPORT_ERROR: ImportError | None = exc
else:
    _IMPORT_ERROR = None


class KernelsNotBuiltError(ImportError):
    """The Cython extension of hpcbsp is missing (the package was not built)."""


def require_compiled() -> None:
    """Raise :class:`KernelsNotBuiltError` if the Cython extension did not build."""
    if _ckernels is None:
        raise KernelsNotBuiltError(
            "hpcbsp's compiled kernels (hpcbsp.kernels._ckernels) are missing: the package was not "
            "built. Reinstall with a C compiler available: `pip install -e .` (or `make install`). "
            f"Import error: {_IMPORT_ERROR}"
        )


def compiled_status() -> dict[str, bool]:
    """Which kernel families are compiled (reported by ``hpcbsp info``)."""
    return {"cython": _ckernels is not None}


require_compiled()
group_by_dest = _ckernels.group_by_dest
