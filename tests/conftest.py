"""Shared pytest set-up.

Serial run: ``pytest tests`` (MPI-marked tests are skipped with pytest-mpi's reason).
MPI run:    ``mpiexec -n 2 python -m pytest --only-mpi tests`` (and ``-n 3``).  Note: with pytest-mpi
0.6, ``--with-mpi`` runs the serial tests too; ``--only-mpi`` alone runs just the MPI-marked ones.
Under mpiexec only rank 0 prints the usual report; a failure on another rank is printed to
stderr with its rank, and every rank's exit status counts.
"""
from __future__ import annotations

import os
import sys

import pytest

os.environ.setdefault("MPIEXEC_TIMEOUT", "600")
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".hpcbsp-cache", "numba"))


def _mpi_rank() -> int:
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    under_mpi = config.getoption("--with-mpi", default=False) or config.getoption("--only-mpi", default=False)
    if under_mpi and _mpi_rank() > 0:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    rank = _mpi_rank()
    if rank > 0 and report.failed:
        sys.stderr.write(f"\n[rank {rank}] FAILED {report.nodeid} ({report.when})\n{report.longreprtext}\n")
        sys.stderr.flush()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Say how MPI tests are run when they are skipped in the serial pass."""
    if config.getoption("--with-mpi", default=False) or config.getoption("--only-mpi", default=False):
        return
    reason = ("an MPI test: `make test` runs it under `mpiexec -n 2` and `-n 3` "
              "(python -m pytest --only-mpi)")
    for item in items:
        if item.get_closest_marker("mpi") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
