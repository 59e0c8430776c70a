"""The compiled kernels are there, say so, and say clearly when they are not; the benchmark's
command line."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from mpi_helpers import clean_env

from hpcbsp import kernels
from hpcbsp.kernels import EXTENSIONS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run(args: list[str], timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT,
                          env=clean_env(**env), timeout=timeout, stdin=subprocess.DEVNULL)


def test_every_extension_is_built_and_reported():
    kernels.require_compiled()  # raises if any is missing
    status = kernels.compiled_status()
    assert set(status) == {"cython", "numba"}
    assert status["cython"] is True and isinstance(status["numba"], bool)
    assert sorted(EXTENSIONS) == sorted(
        os.path.splitext(f)[0] for f in os.listdir(os.path.join(ROOT, "kernels")) if f.endswith(".pyx"))


@pytest.mark.parametrize("missing", EXTENSIONS)
def test_a_missing_extension_fails_the_import_clearly(missing):
    # sys.modules[name] = None makes that import fail, as a missing .so file would
    code = (f"import sys; sys.modules['hpcbsp.kernels.{missing}'] = None\n"
            "try:\n    import hpcbsp\n"
            "except ImportError as exc:\n"
            "    print(type(exc).__name__); print(exc)\n")
    proc = run(["-c", code])
    assert proc.returncode == 0, proc.stderr
    name, message = proc.stdout.split("\n", 1)
    assert name == "KernelsNotBuiltError"
    assert f"hpcbsp.kernels.{missing}" in message and "pip install" in message


def test_numba_is_not_imported_until_a_numba_kernel_is_used():
    proc = run(["-c", "import sys, hpcbsp.kernels as k\n"
                      "print('numba' in sys.modules, k.compiled_status()['numba'])\n"
                      "k.csr_matvec\nprint('numba' in sys.modules)"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True", "True"]


def test_status_reports_numba_off_when_its_jit_is_disabled():
    proc = run(["-c", "import hpcbsp.kernels as k; print(k.compiled_status()['numba'])"],
               NUMBA_DISABLE_JIT="1")
    assert proc.stdout.strip() == "False", proc.stderr


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_kernel"):
        kernels.no_such_kernel  # noqa: B018


def test_benchmark_quick_run_prints_every_kernel_with_its_ratio():
    proc = run(["-m", "hpcbsp.bench", "kernels", "--n", "20000", "--repeat", "1"], timeout=240)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "copy bandwidth" in out
    for name in ("group_by_dest", "scatter_add", "gather", "sum", "dot", "sqnorm", "minmax",
                 "exact_sum"):
        line = next(ln for ln in out.splitlines() if ln.startswith(name + " "))
        assert "x" in line.split()[3]  # the measured ratio column


@pytest.mark.parametrize("args", [["--n", "0"], ["--repeat", "x"], ["--only", "nosuch"]])
def test_benchmark_bad_input_is_one_line_and_status_2(args):
    proc = run(["-m", "hpcbsp.bench", "kernels", *args])
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
