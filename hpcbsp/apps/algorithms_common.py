"""Command-line pieces shared by the classic BSP algorithm apps (``lu``, ``spmv``): the ``--grid``
option, checked before any work starts.  (The options every app has come from
:mod:`hpcbsp.util.args`.)"""
from __future__ import annotations

from ..runtime.api.partition import dims_create
from ..util.args.parser import OneLineParser


def add_grid_option(parser: OneLineParser) -> None:
    parser.add_argument("--grid", metavar="MxN", help="processor grid, M*N = ranks (default: "
                                                      "balanced, as MPI_Dims_create)")


def parse_grid(text: str | None, nprocs: int) -> tuple[int, int] | str:
    """``"MxN"`` as (M, N), or an error message; None gives :func:`dims_create` (nprocs, 2)."""
    if text is None:
        m, n = dims_create(nprocs, 2)
        return m, n
    try:
        m, n = (int(v) for v in text.lower().split("x"))
    except ValueError:
        return f"--grid {text!r}: write it as MxN, for example 2x2"
    if m < 1 or n < 1 or m * n != nprocs:
        return f"--grid {text}: M x N must equal the number of ranks ({nprocs})"
    return m, n


def grid_dims(parser: OneLineParser, text: str | None) -> tuple[int, int]:
    """The ``--grid`` of this run (MPI.COMM_WORLD's size), or a usage error."""
    from mpi4py import MPI

    dims = parse_grid(text, MPI.COMM_WORLD.Get_size())
    if isinstance(dims, str):
        parser.error(dims)
    return dims
