"""Benchmarks: ``python -m hpcbsp.bench NAME``. ``docs/performance.md`` shows the current figures with
their commands and machines; ``docs/notes/performance-journal.md`` keeps every past measurement.

A run through ``python -m hpcbsp.bench`` begins with one line on stdout naming the copy of
hpcbsp it measures (``measuring hpcbsp from PATH (commit ...)``).  That line comes once the
benchmark has parsed and checked its arguments, just before its work (each benchmark calls
:func:`measuring` there): never before ``--help``, nor before a usage error (one line on
stderr, exit 2).  It is printed on the first rank only (as the launcher's variables say: MPI is
the benchmark's to start), and not in a job a benchmark launches itself (``--inner``).
"""
from __future__ import annotations

#: The line :func:`measuring` prints, set by ``python -m hpcbsp.bench`` (empty: print nothing).
_banner: list[str] = []


def announce(line: str) -> None:
    """Have :func:`measuring` print ``line`` (``python -m hpcbsp.bench`` calls it)."""
    _banner[:] = [line]


def measuring() -> None:
    """Print the line :func:`announce` was given, once: a benchmark calls it when its arguments
    are checked and its work begins."""
    if _banner:
        print(_banner.pop(), flush=True)
