"""The control step's compiled path: the MPI library's functions called from C, not through Python.

An empty ``sync`` is one control step, an ``Allreduce`` of a 10-word record (persistent, or
blocking where the library runs that faster: :mod:`.control`).  Through mpi4py that step is four
Python-level calls (pack, ``Start``, ``Wait``, unpack) of about a microsecond together, as much as
the collective itself on a node.  :func:`compiled_step` builds a
:class:`hpcbsp.kernels.controlstep.RecordStep` that does the same in one compiled call: it writes
the record, calls the MPI library's ``MPI_Start`` and ``MPI_Wait`` on the very request mpi4py set
up (with the GIL released), and checks the reduced record.  Both paths drive the same persistent
request, so they match each other: a rank may take either, and the result is the same.
:func:`compiled_allreduce_step` is the same step on ``MPI_Allreduce`` itself, called with the
handles mpi4py holds (``MPI_IN_PLACE``, ``MPI_INT64_T``, ``MPI_MAX``, the communicator) at the
library's handle width (C ints in MPICH's ABI, pointers in Open MPI's; any other width leaves the
Python path); it matches mpi4py's blocking ``Allreduce`` of the same record.

The functions are found in the MPI library this process already runs, the one mpi4py loaded: the
mapped shared objects named ``libmpi*`` (``/proc/self/maps``) are opened without loading anything
new (``RTLD_NOLOAD``), and one is used only if it is the only one that exports ``MPI_Start``,
``MPI_Wait`` and ``MPI_Initialized`` and says MPI is initialised.  :func:`mpi_symbols` is that
lookup for any functions (the irregular apps' one-sided baseline finds ``MPI_Accumulate`` and
``MPI_Get`` with it).  Anything else (no ``/proc``, a
statically linked MPI, two MPI libraries, a library without persistent collectives) leaves the
Python path, which is always correct.  ``HPCBSP_COMPILED_SYNC=0`` chooses the Python path.

:func:`compiled_loop` starts and waits for any persistent request ``n`` times in one compiled
call: the collective's own latency, with no interpreter between the calls.  :func:`compiled_call`
does it once per call from Python: the least any collective called from Python costs.  A
benchmark compares the empty sync with both.

h-relation: none (the control step's record).
"""
from __future__ import annotations

import ctypes
import functools
import os
from typing import Any, Callable, cast

from mpi4py import MPI

from ...kernels.controlstep import DIVERGED, RecordStep, allreduce_step, start_wait_loop
from ..environment import setting

__all__ = ["DIVERGED", "RecordStep", "compiled_allreduce_step", "compiled_call", "compiled_loop", "compiled_step",
           "mpi_functions", "mpi_symbols", "start_wait_loop", "why_not_compiled"]

_found: dict[tuple[str, ...], tuple[int, ...] | None] = {}  # each lookup, once per process


def _address(fn: Any) -> int:
    return int(ctypes.cast(fn, ctypes.c_void_p).value or 0)


def mpi_symbols(names: tuple[str, ...]) -> tuple[int, ...] | None:
    """The addresses of the C functions ``names`` in the running MPI library (the module notes
    say which library counts), or None if they are not found surely."""
    if names in _found:
        return _found[names]
    found: list[tuple[int, ...]] = []
    noload = getattr(os, "RTLD_NOLOAD", 0)  # without it, opening could load a library anew
    try:
        with open("/proc/self/maps") as maps:
            paths = dict.fromkeys(
                parts[5].strip() for parts in (line.split(None, 5) for line in maps)
                if len(parts) == 6 and os.path.basename(parts[5]).startswith("libmpi")) if noload else {}
    except OSError:
        paths = {}
    for path in paths:
        try:
            lib = ctypes.CDLL(path, mode=noload | os.RTLD_LAZY)
            functions, initialized = [getattr(lib, name) for name in names], lib.MPI_Initialized
        except (OSError, AttributeError):
            continue
        initialized.argtypes = [ctypes.POINTER(ctypes.c_int)]
        flag = ctypes.c_int(0)
        if initialized(ctypes.byref(flag)) == 0 and flag.value:
            addresses = tuple(_address(fn) for fn in functions)
            if all(addresses) and addresses not in found:
                found.append(addresses)
    _found[names] = found[0] if len(found) == 1 else None
    return _found[names]


def mpi_functions() -> tuple[int, int] | None:
    """``(MPI_Start, MPI_Wait)`` addresses in the running MPI library, or None if not found surely."""
    pair = mpi_symbols(("MPI_Start", "MPI_Wait"))
    return None if pair is None else (pair[0], pair[1])


def why_not_compiled(collective: str = "persistent") -> str:
    """Why :func:`compiled_step` (``collective="persistent"``) or :func:`compiled_allreduce_step`
    (``"blocking"``) gives None in this process whatever the request or communicator ('' where
    it does not): ``HPCBSP_COMPILED_SYNC=0``, the MPI library's functions not found for sure, or
    (blocking) handles of a width the compiled call does not know."""
    if not setting("HPCBSP_COMPILED_SYNC"):
        return "HPCBSP_COMPILED_SYNC=0"
    if collective == "blocking":
        if mpi_symbols(("MPI_Allreduce",)) is None:
            return "MPI_Allreduce was not found for sure in the running MPI library"
        if _handle_width() is None:
            return "the MPI library's handles are neither all 4 nor all 8 bytes wide"
        return ""
    if mpi_functions() is None:
        return "MPI_Start and MPI_Wait were not found for sure in the running MPI library"
    return ""


def _handle_width() -> int | None:
    """The width of the library's communicator, datatype and op handles (4: C ints, as in MPICH's
    ABI; 8: pointers, as in Open MPI's), or None where they differ or are neither."""
    widths = {MPI._sizeof(MPI.Comm), MPI._sizeof(MPI.Datatype), MPI._sizeof(MPI.Op)}
    return widths.pop() if len(widths) == 1 and widths <= {4, 8} else None


def compiled_step(request: MPI.Prequest, record: bytearray) -> RecordStep | None:
    """A compiled control step on ``request`` (a persistent ``Allreduce`` of ``record`` in place,
    10 int64 words, or 12 for a step that watches lateness), or None where the Python path must
    do (see the module's docstring and :func:`why_not_compiled`)."""
    functions = None if why_not_compiled() else mpi_functions()
    if functions is None or len(record) not in (80, 96):
        return None
    handle = MPI._addressof(request)  # the MPI_Request inside mpi4py's object
    buffer = (ctypes.c_char * len(record)).from_buffer(record)
    return RecordStep(functions[0], functions[1], handle, ctypes.addressof(buffer),
                      (request, record, buffer), MPI.Exception)


def compiled_allreduce_step(comm: MPI.Comm, record: bytearray) -> RecordStep | None:
    """A compiled control step that is one blocking ``MPI_Allreduce(MPI_IN_PLACE, record, 10,
    MPI_INT64_T, MPI_MAX, comm)`` (12 words for a step that watches lateness), or None where the
    Python path must do (:func:`why_not_compiled` with ``"blocking"``).  ``close()`` it before
    ``comm`` is freed."""
    if why_not_compiled("blocking") or len(record) not in (80, 96):
        return None
    allreduce, width = cast(tuple[int], mpi_symbols(("MPI_Allreduce",)))[0], cast(int, _handle_width())

    def handle(obj: Any) -> int:  # as the C type of that width holds it (an int may be negative)
        value = MPI._handleof(obj) & ((1 << 8 * width) - 1)
        return value - (1 << 8 * width) if width == 4 and value >= 1 << 31 else value

    buffer = (ctypes.c_char * len(record)).from_buffer(record)
    return allreduce_step(allreduce, width, int(MPI.IN_PLACE), handle(MPI.INT64_T), handle(MPI.MAX),
                          handle(comm), ctypes.addressof(buffer), (comm, record, buffer), MPI.Exception)


def compiled_call(request: MPI.Prequest) -> Callable[[], int] | None:
    """``call()``: start and wait for ``request`` (a persistent request) once from C, returning
    the MPI error code (0 on success); None where the library's functions are not found for sure.
    One call of it from Python is the least any collective called from Python can cost: the
    collective plus the interpreter's call (what a benchmark compares the empty sync with, beside
    :func:`compiled_loop`).  The caller keeps ``request`` alive and unfreed while it uses ``call``."""
    functions = mpi_functions()
    if functions is None:
        return None
    return functools.partial(start_wait_loop, functions[0], functions[1], MPI._addressof(request), 1)


def compiled_loop(request: MPI.Prequest) -> Any:
    """``loop(n)``: start and wait for ``request`` (a persistent request) ``n`` times in a row from
    C, raising ``MPI.Exception`` on an error; None where the MPI library's functions are not
    found for sure (see the module's docstring).  The caller keeps ``request`` alive and unfreed
    while it uses ``loop``."""
    functions = mpi_functions()
    if functions is None:
        return None
    start, wait = functions
    handle = MPI._addressof(request)

    def loop(n: int) -> None:
        code = start_wait_loop(start, wait, handle, n)
        if code:
            raise MPI.Exception(code)

    return loop
