"""hpcbsp (also python -m hpcbsp): the package's command line.

    hpcbsp info [--json]          versions, MPI library, world size, launcher, kernels
    hpcbsp run SCRIPT [ARGS...]   run a Python script with hpcbsp's failure handling
    python -m hpcbsp SCRIPT.py    the same (like python -m mpi4py)

Run them under your launcher, e.g. mpiexec -n 4 hpcbsp info, or srun --mpi=pmi2 -n 4 hpcbsp info.
An exception on one rank is printed once with its rank and ends every rank with a non-zero status.
Cost models: hpcbsp-cost --help.  Benchmarks: python -m hpcbsp.bench --help.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if argv else 2
    cmd, rest = argv[0], argv[1:]
    if cmd == "info":
        from .info import main as info_main

        return info_main(rest)
    if cmd == "run":
        if not rest:
            print("hpcbsp run: give a script to run: hpcbsp run SCRIPT.py [ARGS...]", file=sys.stderr)
            return 2
        cmd, rest = rest[0], rest[1:]
    if cmd.endswith(".py"):
        import os

        if not os.path.exists(cmd):
            print(f"hpcbsp: no such script: {cmd}", file=sys.stderr)
            return 2
        from ..runtime.runner import run_script

        return run_script(cmd, rest)
    print(f"hpcbsp: unknown command {cmd!r}; try `hpcbsp info`, `hpcbsp run SCRIPT.py` or --help",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
