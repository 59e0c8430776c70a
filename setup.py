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

The kernels link no MPI, so one build serves every virtualenv of the same Python (``.venv``,
``.venv-openmpi``, ``.venv-impi``): an installation reuses the extension that an earlier one left
in the package (``hpcbsp/kernels/_NAME.<ABI tag>.so``, the tag naming the interpreter) when it is
newer than its sources and was built with the same flags, Cython, numpy and compiler settings
(``hpcbsp/kernels/.build-key``), instead of compiling it again (about 30 s here).
``HPCBSP_REBUILD_KERNELS=1`` compiles anyway.
"""
import filecmp
import glob
import json
import os
import shutil
import sys
import sysconfig

import Cython
import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

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

KEY_FILE = os.path.join("hpcbsp", "kernels", ".build-key")
#: The file name ending of an extension for this interpreter (".cpython-311-x86_64-linux-gnu.so").
SUFFIX = sysconfig.get_config_var("EXT_SUFFIX")


def build_key(ext: Extension) -> str:
    """What decides an extension's bytes besides its sources: flags, tool versions, the interpreter."""
    return json.dumps({"args": ext.extra_compile_args, "link": ext.extra_link_args, "directives": directives,
                       "cython": Cython.__version__, "numpy": numpy.__version__, "python": sys.version,
                       "env": {v: os.environ.get(v, "") for v in ("CC", "CFLAGS", "LDFLAGS", "CPPFLAGS")}},
                      sort_keys=True)


def built_keys() -> dict[str, str]:
    """The build key of each extension left in the package by the last build ({} where none)."""
    try:
        with open(KEY_FILE, encoding="utf-8") as f:
            return dict(json.load(f))
    except (OSError, ValueError, TypeError):
        return {}


def reusable(ext: Extension, keys: dict[str, str]) -> bool:
    """Whether the extension left in the package (``hpcbsp/kernels/_NAME.<ABI tag>.so``) serves
    as it is: built with this build key (``keys``: :func:`built_keys`) and newer than its own
    sources (the ``.pyx`` and the headers, ``.pxi`` and ``.pxd`` of this tree; not the generated
    ``.c``, which Cython writes again whenever a new virtualenv's numpy headers are newer than it)."""
    in_place = os.path.join("hpcbsp", "kernels", ext.name.rsplit(".", 1)[1] + SUFFIX)
    if keys.get(ext.name) != build_key(ext) or not os.path.exists(in_place):
        return False
    return os.path.getmtime(in_place) >= max(os.path.getmtime(p) for p in [*ext.sources, *ext.depends])


class ReusingBuildExt(build_ext):
    """``build_ext`` that copies an up-to-date in-place extension of the same build key."""

    def build_extension(self, ext: Extension) -> None:
        if ext.name not in REUSED:
            super().build_extension(ext)
            return
        target = self.get_ext_fullpath(ext.name)
        in_place = os.path.join("hpcbsp", "kernels", os.path.basename(target))
        # An editable install (make's) builds in place: the target is the extension itself.
        if os.path.abspath(target) != os.path.abspath(in_place):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            shutil.copy2(in_place, target)
        print(f"hpcbsp: reusing {in_place} (up to date, same build key)")

    def copy_file(self, infile, outfile, *args, **kwargs):  # type: ignore[no-untyped-def]
        """Into the package, an extension is replaced by a rename, and not at all when unchanged:
        an install beside running tests (CI builds the other MPIs' virtualenvs during make test)
        must not rewrite a shared object that a running process has mapped."""
        if os.path.isfile(outfile) and filecmp.cmp(infile, outfile, shallow=False):
            return outfile, False
        if os.path.isdir(outfile):
            return super().copy_file(infile, outfile, *args, **kwargs)
        partial = f"{outfile}.{os.getpid()}.partial"
        shutil.copy2(infile, partial)
        os.replace(partial, outfile)
        return outfile, True

    def run(self) -> None:
        super().run()
        if not os.path.isdir(os.path.dirname(KEY_FILE)):
            return  # a build of the sources alone (tests/test_kernels_build_flags.py): nothing in place
        keys = {ext.name: build_key(ext) for ext in self.extensions}
        partial = f"{KEY_FILE}.{os.getpid()}.partial"
        with open(partial, "w", encoding="utf-8") as f:
            json.dump(keys, f)
        os.replace(partial, KEY_FILE)


cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
# Decided before Cython runs: a reused extension is neither translated nor compiled again (its
# sources are named as the .c it was built from, which nothing then reads).
forced = os.environ.get("HPCBSP_REBUILD_KERNELS") == "1" or bool({"-f", "--force"} & set(sys.argv))
keys = {} if forced else built_keys()
REUSED = {ext.name for ext in extensions if reusable(ext, keys)}
for ext in extensions:
    if ext.name in REUSED:
        ext.sources = [os.path.splitext(src)[0] + ".c" for src in ext.sources]
fresh = [ext for ext in extensions if ext.name not in REUSED]
setup(ext_modules=[*(cythonize(fresh, compiler_directives=directives, quiet=True, nthreads=cores) if fresh else []),
                   *(ext for ext in extensions if ext.name in REUSED)],
      cmdclass={"build_ext": ReusingBuildExt}, options={"build_ext": {"parallel": cores}})
