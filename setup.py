"""Build the Cython kernels in ``kernels/*.pyx`` into ``hpcbsp.kernels._<name>`` extensions.

A ``.pxd`` that one kernel cimports from another lies beside its extension in the package
(``hpcbsp/kernels/_syncstate.pxd``): Cython finds it by the module's package path, and the
cimporting extension then imports ``hpcbsp.kernels._syncstate`` at run time.
Everything else about the package lives in ``pyproject.toml``.  Release builds turn bounds
checking and wrap-around off; set ``HPCBSP_DEBUG_KERNELS=1`` to build with them on.

The kernels' floating-point results must not depend on the flags a user, a distribution or a
cluster adds (``CFLAGS="-O3 -march=native"``, ``-ffast-math``): ``FP_FLAGS`` come after
``CFLAGS`` on the compiler's command line (setuptools puts ``extra_compile_args`` last), so they
win.  ``-ffp-contract=off``: no fused multiply-add in place of a multiply and an add (GCC
contracts by default in GNU C wherever FMA is enabled, as ``-march=native`` does), so ``dot`` and
``sqnorm`` give the baseline build's bits; ``-fno-fast-math -fno-unsafe-math-optimizations``: no
reassociation, which would fold the exact sum's error-free extraction away.  The headers also
switch contraction off per function, for code that includes them elsewhere.  ``LINK_FP_FLAGS``
do the same on the link line (setuptools links with ``CFLAGS`` too): GCC 12 links
``crtfastmath.o`` into a shared object built with ``-ffast-math`` or ``-Ofast``, whose constructor
turns on flush-to-zero for the whole process when the extension loads.

The extensions are translated and compiled on every core (``cythonize(nthreads=)``,
``build_ext --parallel``): on a 2-core machine that halves ``make run``'s first call.
"""
import glob
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

debug = os.environ.get("HPCBSP_DEBUG_KERNELS") == "1"
FP_FLAGS = ["-ffp-contract=off", "-fno-fast-math", "-fno-unsafe-math-optimizations"]
LINK_FP_FLAGS = ["-O3", "-fno-fast-math", "-fno-unsafe-math-optimizations"]
directives = {
    "language_level": 3,
    "boundscheck": debug,
    "wraparound": debug,
    "cdivision": True,
    "initializedcheck": debug,
}
extensions = [
    Extension(
        f"hpcbsp.kernels.{os.path.splitext(os.path.basename(src))[0]}",
        [src],
        # rebuilt when a header, an included .pxi or a cimported .pxd changes; in the sdist
        depends=sorted(glob.glob("kernels/*.h") + glob.glob("kernels/*.pxi") + glob.glob("hpcbsp/kernels/*.pxd")),
        include_dirs=[numpy.get_include(), "kernels"],
        extra_compile_args=["-O3", *FP_FLAGS] + ([] if debug else ["-DNDEBUG"]),
        extra_link_args=LINK_FP_FLAGS,
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    for src in sorted(glob.glob("kernels/*.pyx"))
]

cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
setup(ext_modules=cythonize(extensions, compiler_directives=directives, quiet=True, nthreads=cores),
      options={"build_ext": {"parallel": cores}})
