"""Shared pytest set-up.

Serial run: ``pytest tests`` (MPI-marked tests are skipped with pytest-mpi's reason).
MPI run:    ``mpiexec -n 2 python -m pytest --only-mpi tests`` (and ``-n 3``).  Note: with pytest-mpi
0.6, ``--with-mpi`` runs the serial tests too; ``--only-mpi`` alone runs just the MPI-marked ones.
Under mpiexec only rank 0 prints the usual report; a failure on another rank is printed to
stderr with its rank, and every rank's exit status counts.

Markers: ``mpi`` (runs under mpiexec, once per rank), ``serial_only`` (runs in the serial pass
only: under `mpiexec -n P pytest --with-mpi` pytest-mpi 0.6 runs unmarked tests on every rank,
and a test that starts MPI jobs of its own, or a child Python, would run P times at once or
inherit the rank's process-manager variables), ``alone`` (looks at machine-wide state, such as
every file in /dev/shm: `make test` runs the serial pass on several workers (pytest-xdist,
``-m "not alone"``), then these with no other test beside them), ``long`` (soak-style or
build-heavy: `make test-long`), ``cluster`` (given here to every test of the emulated cluster
or Slurm: `make test-cluster`).  Fixture ``bsp``: a BSP context on COMM_WORLD.

Under ``--only-mpi`` a test file that marks no test ``mpi`` is not even imported: every rank of
the MPI passes would otherwise collect all of them.
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

from hpcbsp.runtime.launch import expected_world_size

os.environ.setdefault("MPIEXEC_TIMEOUT", "600")
# The suite runs as a user of this virtualenv would, activated: its bin/ first on PATH, so that the
# `python`, `mpiexec` and `hpcbsp` that commands and launched programs name are the venv's.
_VENV_BIN = os.path.dirname(sys.executable)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _VENV_BIN:
    os.environ["PATH"] = os.pathsep.join([_VENV_BIN, os.environ.get("PATH", "")])
os.environ.setdefault("NUMBA_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".hpcbsp-cache", "numba"))
# numpy's OpenBLAS starts a thread per core in every process that imports numpy, and each spins
# about 0.1 s before it sleeps: 45 ms of CPU in each of the suite's thousand-odd ranks and programs
# (2 cores).  Ranks, not BLAS threads, are the tests' parallelism, and no test measures BLAS.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _mpi_rank() -> int:
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if var in os.environ:
            return int(os.environ[var])
    return 0


def _under_mpi(config: pytest.Config) -> bool:
    return bool(config.getoption("--with-mpi", default=False) or config.getoption("--only-mpi", default=False))


class _RankTemp:
    """Under mpiexec every rank gets a temporary directory of its own, removed at the end: the
    ranks of one job are pytest sessions of one user at once, and pytest's numbered directories
    under /tmp/pytest-of-USER (with their ``pytest-current`` link) are not safe for that (with 8
    ranks, one rank's clean-up removed the link another was removing).  It must run before
    pytest's own set-up reads ``--basetemp``, hence a plugin of its own that runs first."""

    def __init__(self) -> None:
        self.own: str | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        if _under_mpi(config) and config.option.basetemp is None:
            self.own = config.option.basetemp = tempfile.mkdtemp(prefix=f"hpcbsp-pytest-rank{_mpi_rank()}-")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.own is not None:
            shutil.rmtree(self.own, ignore_errors=True)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.register(_RankTemp(), "hpcbsp-rank-temp")  # before pytest_configure is called


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if _under_mpi(config) and _mpi_rank() > 0:  # only rank 0 prints pytest's report
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            config.pluginmanager.unregister(reporter)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    rank = _mpi_rank()
    if rank > 0 and report.failed:
        sys.stderr.write(f"\n[rank {rank}] FAILED {report.nodeid} ({report.when})\n{report.longreprtext}\n")
        sys.stderr.flush()


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    """In the MPI passes (``--only-mpi``), skip the test files with no MPI test (no ``mark.mpi`` in
    their text): collecting them on every rank costs seconds of CPU and runs nothing."""
    if (config.getoption("--only-mpi", default=False) and collection_path.suffix == ".py"
            and collection_path.name.startswith("test_")):
        try:
            return "mark.mpi" not in collection_path.read_text()
        except OSError:
            return None
    return None


@pytest.fixture
def bsp():
    """A BSP context on MPI.COMM_WORLD, left (collectively) at the end of the test."""
    import hpcbsp

    with hpcbsp.BSP() as ctx:
        yield ctx


#: Tests that use the one emulated cluster (slurm/local-cluster.sh) or its Slurm: they freeze its
#: nodes, cut its links, time its links' rates and fill its queue, so they run on their own
#: (`make test-cluster`), not beside the parallel pass: under its load their bounds in seconds (a
#: fault named within 30 s, a link at its line rate) measured the load, not hpcbsp.  Those that
#: cut, shape or count the links or set a node down are also marked ``alone`` and run one after
#: another; the others, two at a time (each job touches only its own processes, by its tag).
CLUSTER = pytest.mark.cluster


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip serial-only tests inside an MPI job, and say how MPI tests are run when they are
    skipped in the serial pass; mark the tests of the emulated cluster ``cluster``."""
    for item in items:
        if item.get_closest_marker("slurm") is not None or item.path.name.startswith(("test_cluster_", "test_slurm_")):
            item.add_marker(CLUSTER)
    if (expected_world_size() or 1) > 1:
        serial = pytest.mark.skip(reason="serial_only: runs in the serial pass (plain pytest), not once "
                                         "per rank of an MPI job")
        for item in items:
            if item.get_closest_marker("serial_only") is not None:
                item.add_marker(serial)
    if config.getoption("--with-mpi", default=False) or config.getoption("--only-mpi", default=False):
        return
    reason = ("an MPI test: `make test` runs it under `mpiexec -n 2` and `-n 3` "
              "(python -m pytest --only-mpi)")
    for item in items:
        if item.get_closest_marker("mpi") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))
