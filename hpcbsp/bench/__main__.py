"""python -m hpcbsp.bench NAME [options]: run one benchmark (NAME "all" runs every one).

Every benchmark prints its figures and, where there is a baseline, the ratio measured side by
side in the same run (shared machines are noisy: read the ratios). Run sync, fabsp and snn under
mpiexec -n 2; `make bench` runs them all as recorded in docs/performance.md.
Options of one benchmark: python -m hpcbsp.bench NAME --help; --quiet (any benchmark) turns off
the progress lines on stderr (which appear on a terminal only, or with HPCBSP_PROGRESS=1).

(A benchmark is a module hpcbsp/bench/NAME.py with main(argv) -> int and a docstring whose first
line is its summary.)
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import sys

import hpcbsp.bench as _pkg
from hpcbsp.bench import announce, measuring
from hpcbsp.util.args.parser import quiet_pipe
from hpcbsp.util.launcher import launcher_rank
from hpcbsp.util.progress import PROGRESS_ENV
from hpcbsp.util.provenance import describe


def available() -> dict[str, str]:
    names = {}
    for info in pkgutil.iter_modules(_pkg.__path__):
        if info.name.startswith("_"):
            continue
        doc = importlib.import_module(f"hpcbsp.bench.{info.name}").__doc__ or ""
        names[info.name] = doc.strip().splitlines()[0] if doc.strip() else ""
    return names


def main(argv: list[str] | None = None) -> int:
    """Run a benchmark; its exit status (141, quietly, when stdout's reader has gone)."""
    return quiet_pipe(lambda: _main(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    benches = available()
    if not argv or argv[0] in ("-h", "--help"):
        out = sys.stdout if argv else sys.stderr  # (no benchmark named: a usage error)
        print(__doc__.strip(), file=out)
        print("\nbenchmarks:", file=out)
        for name, summary in sorted(benches.items()):
            print(f"  {name:10s} {summary}", file=out)
        return 0 if argv else 2
    name, rest = argv[0], [a for a in argv[1:] if a != "--quiet"]
    if len(rest) < len(argv) - 1:  # for the benchmark, the jobs it starts and their ranks alike
        os.environ[PROGRESS_ENV] = "0"
    if name == "all":
        _say_which(rest)
        if not any(arg in ("-h", "--help") for arg in rest):
            measuring()  # (once, before the first benchmark's header)
        status = 0
        for bench in sorted(benches):
            print(f"\n=== {bench} ===", flush=True)
            status |= importlib.import_module(f"hpcbsp.bench.{bench}").main(rest)
        return status
    if name not in benches:
        print(f"hpcbsp.bench: unknown benchmark {name!r}; choose from: {', '.join(sorted(benches))}",
              file=sys.stderr)
        return 2
    _say_which(rest)
    return importlib.import_module(f"hpcbsp.bench.{name}").main(rest)


def _say_which(rest: list[str]) -> None:
    """First line of a run, once the benchmark has checked its arguments (:func:`hpcbsp.bench.measuring`;
    on the first rank, as the launcher's variables say; MPI is the benchmark's to start; not in
    the job a benchmark launches itself, ``--inner``): which copy of hpcbsp it measures."""
    if launcher_rank() == 0 and "--inner" not in rest:
        announce(f"measuring {describe()}")


if __name__ == "__main__":
    sys.exit(main())
