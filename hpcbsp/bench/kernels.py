"""Compiled kernels against their numpy equivalents: throughput, ratio and copy bandwidth.

Each kernel and its numpy equivalent run on the same arrays in the same process, alternately,
and the best of ``--repeat`` timings is kept for each.  The bandwidth of a plain array copy
(``np.copyto``, counting the bytes read and written) is the physical reference: the
memory-bound reductions also print the bandwidth they reach and its fraction of the copy's.
Targets (issue 3, scatter-add's from issue 13): grouping >= 3x ``argsort(kind="stable")`` +
``bincount``; checked scatter-add >= 1.2x ``np.add.at`` (the 5x of issue 3 was withdrawn: numpy
>= 1.25 compiles ``np.add.at``, and the ceiling below shows 5x out of reach); sum, dot, norm >=
0.8x numpy; exact summation >= 0.25x ``np.sum``.

The read bandwidth of ``np.sum`` bounds every streaming kernel from above: scatter-add must read
an index (8 bytes) and a value (8 bytes) per update however its table is updated, so its rows
print the ratio to ``np.add.at`` that streaming alone would allow ("ceiling").  The exact sum is
timed twice: on normal data (its extraction fast path) and on values spread over 2**600 (the
general path, integer bins).

numpy's ``dot`` calls BLAS, which may use several threads; the kernels use one (an MPI rank per
core).  When ``threadpoolctl`` is installed, the comparison runs with numpy's BLAS limited to one
thread, like for like, and dot and sqnorm are measured once more at the end against numpy's
default number of BLAS threads (no target there).
"""
from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpcbsp import kernels
from hpcbsp.bench import measuring
from hpcbsp.kernels._extensions import MODULES
from hpcbsp.util.args.parser import OneLineParser
from hpcbsp.util.args.types import positive_int
from hpcbsp.util.args.vocabulary import add_n, add_repeats, add_seed
from hpcbsp.util.progress import Progress


@dataclass
class Row:
    """One kernel measured against its numpy equivalent."""

    name: str
    ours: Callable[[], Any]
    numpy_name: str
    theirs: Callable[[], Any]
    target: float | None = None   # minimum ratio ours/numpy speed, from the issue
    bytes_per_elem: int = 0       # memory traffic of the kernel (0: not memory-bound)
    stream_bytes: int = 0         # bytes it must read per element at least (0: no ceiling shown)


def _best(fn: Callable[[], Any], repeat: int, number: int) -> float:
    best = math.inf
    for _ in range(repeat):
        tic = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - tic) / number)
    return best


def _pair(a: Callable[[], Any], b: Callable[[], Any], repeat: int, number: int,
          interleave: bool = True) -> tuple[float, float]:
    """Best times of a and b; measured alternately, so that drifting load hits both alike,
    unless ``interleave`` is false (then all of a, then all of b)."""
    if not interleave:
        return _best(a, repeat, number), _best(b, repeat, number)
    ta = tb = math.inf
    for _ in range(repeat):
        ta = min(ta, _best(a, 1, number))
        tb = min(tb, _best(b, 1, number))
    return ta, tb


def _one_blas_thread() -> Callable[[], Any] | None:
    """A context factory limiting BLAS to one thread, or None without threadpoolctl."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return None
    return lambda: threadpool_limits(limits=1, user_api="blas")


def _blas_threads() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    return ", ".join(f"{p['internal_api']} {p['num_threads']}" for p in pools) or "none found"


def _rows(n: int, nprocs: int, table: int, seed: int, fsum: bool,
          blas: str) -> tuple[list[Row], list[Row]]:
    """The like-for-like rows, and the rows against numpy's default BLAS threads."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n)
    y = rng.standard_normal(n)
    wide = x * np.exp2(rng.integers(-300, 300, n))
    dest = rng.integers(0, nprocs, n)
    idx = rng.integers(0, table, n)
    vals = rng.random(n)
    ftab = np.zeros(table)
    itab = np.zeros(table, dtype=np.int64)
    gout = np.empty(n)
    fsum_rows = [Row("exact_sum", lambda: kernels.exact_sum(x), "math.fsum",
                     lambda: math.fsum(x))] if fsum else []
    rows = [
        Row("group_by_dest", lambda: kernels.group_by_dest(dest, nprocs),
            "argsort(stable)+bincount",
            lambda: (np.argsort(dest, kind="stable"), np.bincount(dest, minlength=nprocs)), 3.0),
        Row("scatter_add", lambda: kernels.scatter_add(ftab, idx, vals),
            "np.add.at", lambda: np.add.at(ftab, idx, vals), 1.2, stream_bytes=16),
        Row("scatter_add (+1)", lambda: kernels.scatter_add(itab, idx, 1),
            "np.add.at", lambda: np.add.at(itab, idx, 1), 1.2, stream_bytes=8),
        # The compiled loop without any bounds test: what checking costs.
        Row("scatter_add loop alone", lambda: MODULES["_indexed"].scatter_add(ftab, idx, vals),
            "np.add.at", lambda: np.add.at(ftab, idx, vals), stream_bytes=16),
        Row("gather", lambda: kernels.gather(ftab, idx, gout), "np.take",
            lambda: np.take(ftab, idx, out=gout)),
        Row("sum", lambda: kernels.sum(x), "np.sum", lambda: np.sum(x), 0.8, 8),
        Row("dot", lambda: kernels.dot(x, y), f"np.dot ({blas})", lambda: np.dot(x, y), 0.8, 16),
        Row("sqnorm", lambda: kernels.sqnorm(x), f"np.dot(x, x) ({blas})", lambda: np.dot(x, x),
            0.8, 8),
        Row("minmax", lambda: kernels.minmax(x), "np.min+np.max",
            lambda: (np.min(x), np.max(x)), None, 8),
        Row("exact_sum", lambda: kernels.exact_sum(x), "np.sum", lambda: np.sum(x), 0.25, 8),
        Row("exact_sum (wide)", lambda: kernels.exact_sum(wide), "np.sum", lambda: np.sum(wide),
            None, 8),
        *fsum_rows,
    ]
    threaded = [
        Row("dot", lambda: kernels.dot(x, y), "np.dot (default BLAS threads)",
            lambda: np.dot(x, y), None, 16),
        Row("sqnorm", lambda: kernels.sqnorm(x), "np.dot(x, x) (default threads)",
            lambda: np.dot(x, x), None, 8),
    ]
    return rows, threaded


def _fmt_rate(n: int, seconds: float) -> str:
    return f"{n / seconds / 1e6:9.1f}"


def _report(row: Row, n: int, repeat: int, number: int, copy_bw: float, read_bw: float,
            interleave: bool) -> bool:
    """Measure and print one row; True when it misses its target."""
    ours, theirs = _pair(row.ours, row.theirs, repeat, number, interleave)
    ratio = theirs / ours
    notes = []
    if row.bytes_per_elem:
        bw = row.bytes_per_elem * n / ours / 1e9
        notes.append(f"{bw:.1f} GB/s = {bw / copy_bw:.2f} of copy")
    if row.stream_bytes:
        # Reading stream_bytes per element at np.sum's rate, and nothing else, takes this long.
        floor = row.stream_bytes * n / (read_bw * 1e9)
        notes.append(f"ceiling {theirs / floor:.2f}x ({row.stream_bytes} B/elem at the read rate)")
    verdict = ""
    if row.target is not None:
        verdict = "ok" if ratio >= row.target else "BELOW"
    target = f">={row.target:g}x" if row.target is not None else "-"
    print(f"{row.name:22s} {_fmt_rate(n, ours)} {_fmt_rate(n, theirs)} {ratio:5.2f}x "
          f"{target:>7s}  {row.numpy_name:30s} {verdict} {'; '.join(notes)}".rstrip(), flush=True)
    return verdict == "BELOW"


def main(argv: list[str]) -> int:
    p = OneLineParser(prog="python -m hpcbsp.bench kernels", description=__doc__.split("\n\n")[0])
    add_n(p, "elements per array", per="in total", default=None, shown_default="10,000,000; --quick 1,000,000")
    p.add_argument("--quick", action="store_true", help="a short run: 1,000,000 elements, 3 repeats")
    add_repeats(p, "timings per kernel, best kept", default=None, shown_default="5; --quick 3", dest="repeat",
                old=("--repeat",))
    p.add_argument("--nprocs", type=positive_int, default=64, help="ranks to group by (default 64)")
    p.add_argument("--table", type=positive_int, default=4096,
                   help="table size for scatter-add and gather (default 4096)")
    p.add_argument("--only", default=None,
                   help="comma-separated kernel names to run (default: all)")
    p.add_argument("--fsum", action="store_true",
                   help="also time exact_sum against math.fsum (slow)")
    add_seed(p, "seed of the random arrays")
    args = p.parse_args(argv)
    n = args.n if args.n is not None else (1_000_000 if args.quick else 10_000_000)
    repeat = args.repeat if args.repeat is not None else (3 if args.quick else 5)
    if n < 1:
        p.error("--n must be at least 1")
    if repeat < 1:
        p.error("--repeats must be at least 1")
    if args.nprocs < 1 or args.table < 1:
        p.error("--nprocs and --table must be at least 1")

    one_thread = _one_blas_thread()
    rows, threaded = _rows(n, args.nprocs, args.table, args.seed, args.fsum,
                           "1 BLAS thread" if one_thread else "BLAS, default threads")
    if one_thread is None:
        threaded = []
    if args.only:
        wanted = [w.strip() for w in args.only.split(",") if w.strip()]
        known = {r.name for r in rows}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            p.error(f"unknown kernel {unknown[0]!r}; choose from {', '.join(sorted(known))}")
        rows = [r for r in rows if r.name in wanted]
        threaded = [r for r in threaded if r.name in wanted]
    measuring()
    # Repeat small calls so that one timing lasts a few milliseconds at least.
    number = max(1, 2_000_000 // n)

    print(f"kernels benchmark: n = {n:,} elements ({n * 8 / 1e6:.0f} MB per float64 array), "
          f"best of {repeat}; numpy {np.__version__}; {os.cpu_count()} CPUs; "
          f"BLAS threads: {_blas_threads()}", flush=True)
    src, dst = np.random.default_rng(1).random(n), np.empty(n)
    copy_t = _best(lambda: np.copyto(dst, src), repeat, number)
    copy_bw = 16 * n / copy_t / 1e9
    read_t = _best(lambda: np.sum(src), repeat, number)
    read_bw = 8 * n / read_t / 1e9
    print(f"copy bandwidth (np.copyto, read + write): {copy_bw:.1f} GB/s; "
          f"read bandwidth (np.sum): {read_bw:.1f} GB/s", flush=True)
    print(f"{'kernel':22s} {'hpcbsp':>9s} {'numpy':>9s} {'ratio':>6s} {'target':>7s}  "
          f"{'numpy equivalent':30s} notes")
    print(f"{'':22s} {'Melem/s':>9s} {'Melem/s':>9s}")
    below = 0
    # Like for like first: numpy's BLAS on one thread, as the kernels (an MPI rank per core).
    # Idle OpenBLAS threads spin for a while after a call, which would slow whatever runs next
    # on a small machine, so the rows against several BLAS threads come last, not interleaved.
    show = Progress("bench kernels", len(rows) + len(threaded), unit="kernel")
    with one_thread() if one_thread else nullcontext():
        for done, row in enumerate(rows):
            show(done)
            below += _report(row, n, repeat, number, copy_bw, read_bw, interleave=True)
    for done, row in enumerate(threaded, start=len(rows)):
        show(done)
        _report(row, n, repeat, number, copy_bw, read_bw, interleave=False)
    print(f"{below} kernel(s) below target" if below else "all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
