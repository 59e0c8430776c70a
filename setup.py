"""Build the Cython kernels in ``kernels/*.pyx`` into ``hpcbsp.kernels._<name>`` extensions.

Everything else about the package lives in ``pyproject.toml``.  Release builds turn bounds
checking and wrap-around off; set ``HPCBSP_DEBUG_KERNELS=1`` to build with them on.
"""
import glob
import os

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

debug = os.environ.get("HPCBSP_DEBUG_KERNELS") == "1"
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
        depends=sorted(glob.glob("kernels/*.h")),  # rebuilt when a header changes; in the sdist
        include_dirs=[numpy.get_include(), "kernels"],
        extra_compile_args=["-O3"] + ([] if debug else ["-DNDEBUG"]),
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )
    for src in sorted(glob.glob("kernels/*.pyx"))
]

setup(ext_modules=cythonize(extensions, compiler_directives=directives, quiet=True))
