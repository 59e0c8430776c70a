"""The kernels compute the same bits whatever flags they were built with (issue 13).

A user, a distribution or a cluster module adds its own ``CFLAGS`` (``-O3 -march=native`` is
usual, ``-ffast-math`` happens).  Two things went wrong with such builds: GCC defines
``FLT_EVAL_METHOD`` as 16 for CPUs with AVX512-FP16 (Sapphire Rapids), which compiled the exact
sum's fast path out, and GCC contracts ``acc + p*q`` into a fused multiply-add wherever FMA is
enabled, which changes ``dot`` and ``sqnorm`` in the last bits.

Oracles:
- the preprocessor and the assembler output of the headers for CPUs this machine may not have
  (compile only, so it runs on any x86-64 CPU): the fast path is compiled in, and no FMA
  instruction appears, for every ``-march`` GCC knows from the baseline to AVX-512;
- the build that ``make`` installs (default flags) against the same sources rebuilt with
  ``CFLAGS="-O3 -march=native"`` and with ``-Ofast -ffast-math``, each loaded in a child process:
  the same integers from every fast-path block, the fast path on, its acceptance equal to the
  independent rule ``may_extract`` of ``test_kernels_exact_sum_fastpath.py``, and the same bits
  from ``sum``, ``dot``, ``sqnorm`` and the exact sum; and loading the extension leaves the
  process's floating-point environment alone (no flush-to-zero from ``crtfastmath.o``).
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hpcbsp.kernels import exact_sum_fastpath

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KERNELS = os.path.join(ROOT, "kernels")
X86 = platform.machine().lower() in ("x86_64", "amd64")
CC = shutil.which("cc") or shutil.which("gcc")

needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc) on PATH")
needs_x86 = pytest.mark.skipif(not X86, reason="the -march values below are x86-64's")

# From the baseline to AVX-512 with FP16; the ones this GCC does not know are skipped by name.
MARCHES = ["x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4", "haswell", "skylake-avx512",
           "icelake-server", "sapphirerapids", "znver3", "znver4"]


def _setup_fp_flags() -> list[str]:
    """The flags setup.py appends after CFLAGS, read from setup.py itself."""
    ns: dict[str, object] = {}
    with open(os.path.join(ROOT, "setup.py")) as fh:
        for line in fh:
            if line.startswith("FP_FLAGS"):
                exec(line, ns)  # one literal list
    flags = ns.get("FP_FLAGS")
    assert isinstance(flags, list) and flags, "setup.py must define FP_FLAGS = [...]"
    return [str(f) for f in flags]


def _gcc_knows(march: str) -> bool:
    proc = subprocess.run([CC, f"-march={march}", "-x", "c", "-fsyntax-only", "-"], input="",
                          capture_output=True, text=True, timeout=60)
    return proc.returncode == 0


PROBE = textwrap.dedent("""
    #include "exactsum_blocks.h"
    _Static_assert(HPCBSP_XS_AVAILABLE, "the exact sum's fast path is compiled out");
    double dot(const double *p, const double *q, ptrdiff_t n) { return hpcbsp_block_dot_f64(p, q, n); }
    double sq(const double *p, ptrdiff_t n) { return hpcbsp_block_sqnorm_f64(p, n); }
    double sum(const double *p, ptrdiff_t n) { return hpcbsp_block_sum_f64(p, n); }
    int xs(const double *p, ptrdiff_t n, int64_t *a, int64_t *b, int *c) {
        return hpcbsp_exact_block_f64(p, n, a, b, c);
    }
""")


@needs_cc
@needs_x86
@pytest.mark.parametrize("extra", [[], ["-ffast-math"]], ids=["plain", "fast-math"])
@pytest.mark.parametrize("march", MARCHES)
def test_headers_keep_the_fast_path_and_make_no_fma_for_every_march(tmp_path, march, extra):
    if not _gcc_knows(march):
        pytest.skip(f"this compiler does not know -march={march}")
    src = tmp_path / "probe.c"
    src.write_text(PROBE)
    flags = ["-O3", f"-march={march}", *extra, *_setup_fp_flags()]  # as setup.py orders them
    proc = subprocess.run([CC, *flags, "-I", KERNELS, "-S", "-o", "-", str(src)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]  # the _Static_assert holds
    fused = [ln for ln in proc.stdout.splitlines() if "vfmadd" in ln or "vfnmadd" in ln
             or "vfmsub" in ln]
    assert not fused, f"-march={march}: fused multiply-adds in the kernels: {fused[:3]}"


@needs_cc
@needs_x86
def test_without_the_setup_flags_fast_math_still_compiles_the_path_out(tmp_path):
    # The compile-time guard itself: a reassociating build must not keep the extraction.
    src = tmp_path / "probe.c"
    src.write_text(PROBE)
    proc = subprocess.run([CC, "-O3", "-ffast-math", "-I", KERNELS, "-fsyntax-only", str(src)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "compiled out" in proc.stderr


@needs_x86
def test_the_installed_build_has_the_fast_path_compiled_in():
    # On x86-64 with a GCC-compatible compiler (what make and CI use), never compiled out: a
    # compiled-out path would make the fast-path tests skip instead of fail.
    assert exact_sum_fastpath.COMPILED_IN
    assert exact_sum_fastpath.self_test_passed()


# -- The same sources rebuilt with a user's CFLAGS -----------------------------------------------

# The child loads the extensions of one build folder by hand and calls them directly: the hooks of
# hpcbsp.kernels.exact_sum_fastpath wrap the installed build only.
CHILD = textwrap.dedent("""
    import importlib.machinery, importlib.util, json, sys
    import numpy as np

    def load(name, folder):
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = f"{folder}/{name}{suffix}"
            try:
                spec = importlib.util.spec_from_file_location(f"hpcbsp.kernels.{name}", path)
                mod = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(mod)
                return mod
            except (FileNotFoundError, ImportError):
                continue
        raise SystemExit(f"no {name} in {folder}")

    folder, data = sys.argv[1], sys.argv[2]
    xs, red = load("_exactsum", folder), load("_reductions", folder)
    arrays = np.load(data)
    out = {"compiled_in": bool(xs.XS_COMPILED_IN), "self_test": bool(xs.extraction_self_test_passed()),
           "ready": bool(xs.extraction_ready()), "blocks": [], "sums": []}
    for key in sorted(arrays.files, key=lambda k: int(k[1:])):
        a = np.ascontiguousarray(arrays[key])
        if key.startswith("b"):
            out["blocks"].append(xs.extract_block(a))
        else:
            state = np.zeros(xs.STATE_LENGTH, dtype=np.int64)
            xs.accumulate(a, state)
            half = a[: a.size // 2]
            out["sums"].append([float(xs.round_state(state)).hex(), red.reduce_sum(a).hex(),
                                red.reduce_dot(a, a[::-1].copy()).hex(), red.reduce_sqnorm(a).hex(),
                                red.reduce_dot(half, half).hex()])
    print(json.dumps(out))
""")


def _build(tmp_path, name: str, cflags: str) -> str:
    """Build the floating-point extensions from a copy of the sources with these CFLAGS."""
    src = tmp_path / name
    (src / "kernels").mkdir(parents=True)
    shutil.copy(os.path.join(ROOT, "setup.py"), src)
    for f in os.listdir(KERNELS):
        if f.endswith((".h", ".pxi")) or f in ("_exactsum.pyx", "_reductions.pyx"):
            shutil.copy(os.path.join(KERNELS, f), src / "kernels")
    env = {k: v for k, v in os.environ.items() if k not in ("CFLAGS", "CPPFLAGS")}
    env["CFLAGS"] = cflags
    proc = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", "lib",
                           "--build-temp", "tmp"], cwd=src, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return str(src / "lib" / "hpcbsp" / "kernels")


def _results(folder: str, data: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, folder, data], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _data(path) -> tuple[str, list[np.ndarray]]:
    rng = np.random.default_rng(2026)
    block = exact_sum_fastpath.BLOCK_VALUES
    arrays: dict[str, np.ndarray] = {}
    blocks = []
    for i in range(60):
        n = int(rng.integers(1, block + 1)) if i % 3 else int(rng.integers(1, 40))
        spread = int(rng.integers(1, 60))
        v = rng.uniform(1, 2, n) * np.exp2(-rng.integers(0, spread, n)) * rng.choice([-1, 1], n)
        if i % 7 == 0:
            v[int(rng.integers(0, n))] = np.ldexp(1 + 2**-52, -80)  # below level two: refused
        blocks.append(v)
        arrays[f"b{i}"] = v
    for i, n in enumerate([1, 7, 8, 9, 31, 1000, 4099, 100_003]):
        arrays[f"s{i}"] = rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))
    path = str(path / "data.npz")
    np.savez(path, **arrays)
    return path, blocks


@needs_cc
@needs_x86
@pytest.mark.long  # two builds of the exact sum and the reductions: `make test-long`
def test_native_and_fast_math_builds_give_the_default_builds_bits(tmp_path):
    from test_kernels_exact_sum_fastpath import may_extract  # the independent acceptance rule

    data, blocks = _data(tmp_path)
    default = _results(os.path.dirname(exact_sum_fastpath.__file__), data)  # the extensions sit beside it
    assert default["compiled_in"] and default["self_test"] and default["ready"]
    accepted = [b is not None for b in default["blocks"]]
    assert accepted == [may_extract(b) for b in blocks]
    assert 0 < sum(accepted) < len(blocks)
    # -Ofast/-ffast-math: also the link, where GCC 12 adds crtfastmath.o, whose constructor
    # would set flush-to-zero for the whole process ("ready" would then be False).
    for name, cflags in [("native", "-O3 -march=native"),
                         ("fastmath", "-Ofast -march=native -ffast-math")]:
        got = _results(_build(tmp_path, name, cflags), data)
        assert got["compiled_in"] and got["self_test"] and got["ready"], (name, got)
        assert got["blocks"] == default["blocks"], f"{name}: fast-path integers differ"
        assert got["sums"] == default["sums"], f"{name}: sum/dot/sqnorm/exact bits differ"
