"""Shared command-line plumbing: an argparse parser whose usage errors are one line, exit 2."""
from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn


def launcher_rank() -> int:
    """This process's rank as the launcher's environment says (readable before MPI starts)."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                return 0
    return 0


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line naming the program, and exits 2.

    Under mpiexec every rank parses the same arguments; only rank 0 prints the error, so the
    user sees it once.
    """

    def error(self, message: str) -> NoReturn:
        if launcher_rank() == 0:
            sys.stderr.write(f"{self.prog}: error: {message} (see {self.prog} --help)\n")
        sys.exit(2)
