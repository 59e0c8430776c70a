# hpcbsp: the two commands a new user runs are `make run` and `make test`.
# Both create .venv if it is missing, install hpcbsp into it (editable, Cython kernels compiled,
# MPICH from PyPI as the embedded MPI) and then run the demonstration / the whole test suite.
# A second call reinstalls nothing unless pyproject.toml, setup.py or kernels/ changed.

PYTHON   ?= python3
VENV     ?= .venv
PY       := $(VENV)/bin/python
MPIEXEC  := $(VENV)/bin/mpiexec
STAMP    := $(VENV)/.hpcbsp-installed
EXTRAS   ?= mpich,test,plot,bench,digits,torch
# torch is pinned to the CPU build that lies on this project's machines (pip finds it in
# /opt/wheels); an unpinned torch would download a multi-GB CUDA build. Elsewhere:
# `make TORCH_PIN="torch==X.Y"` or install torch your own way first (README, "Installing torch").
TORCH_PIN ?= torch==2.13.0
# A deadlocked MPI job fails instead of hanging CI: mpiexec (MPICH hydra) kills it after this.
export MPIEXEC_TIMEOUT ?= 600
export PYTHONUNBUFFERED := 1

KERNEL_SOURCES := $(wildcard kernels/*.pyx kernels/*.pxd kernels/*.h)

.PHONY: run test lint test-serial test-mpi install clean bench help

help:
	@echo "make run    set up .venv and run the demonstration on 2 ranks"
	@echo "make test   set up .venv, lint (ruff, mypy) and run the whole test suite (serial, then mpiexec -n 2 and -n 3)"
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
