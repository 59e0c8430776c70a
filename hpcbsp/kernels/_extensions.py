"""Load the compiled (Cython) kernel extensions, remembering why one failed instead of raising.

The extensions are built by ``setup.py`` from ``kernels/*.pyx`` into ``hpcbsp.kernels._<name>``.
:mod:`hpcbsp.kernels` turns a failure into :class:`KernelsNotBuiltError` with a clear message.
"""
from __future__ import annotations

import importlib
from types import ModuleType

#: The Cython extensions, one per concept: ``hpcbsp.kernels.NAME`` built from ``kernels/NAME.pyx``
#: (keep in step with them; ``tests/test_kernels_build.py`` checks).
EXTENSIONS: tuple[str, ...] = ("_grouping", "_indexed", "_reductions", "_exactsum", "_elements", "_syncstate",
                               "_controlstep", "_update", "_envelopes", "_onesided", "_toposort")


class KernelsNotBuiltError(ImportError):
    """The Cython extensions of hpcbsp are missing or broken (the package was not built)."""


def _load() -> tuple[dict[str, ModuleType], dict[str, str]]:
    modules: dict[str, ModuleType] = {}
    errors: dict[str, str] = {}
    for name in EXTENSIONS:
        try:
            modules[name] = importlib.import_module(f"hpcbsp.kernels.{name}")
        except ImportError as exc:  # missing .so, or one built for another Python/numpy
            errors[name] = str(exc)
    return modules, errors


MODULES, ERRORS = _load()


def require_compiled() -> None:
    """Raise :class:`KernelsNotBuiltError` unless every Cython extension imported."""
    if ERRORS:
        detail = "; ".join(f"{name}: {err}" for name, err in ERRORS.items())
        raise KernelsNotBuiltError(
            "hpcbsp's compiled kernels are missing or broken "
            f"({', '.join(f'hpcbsp.kernels.{n}' for n in ERRORS)}): the package was not built. "
            "Reinstall with a C compiler available: `pip install --no-build-isolation -e .` "
            f"(or `make install`). Import error: {detail}"
        )
