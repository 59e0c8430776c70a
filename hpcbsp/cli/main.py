"""hpcbsp (also python -m hpcbsp): the package's command line.

    hpcbsp info [--json]              versions, MPI library, world size, launcher, kernels
    hpcbsp apps                       list the apps (run one: python -m hpcbsp.apps.NAME --help)
    hpcbsp run SCRIPT [ARGS...]       run a Python script with hpcbsp's failure handling
    hpcbsp run -m MODULE [ARGS...]    run a module the same way (like python -m MODULE)
    hpcbsp SCRIPT [ARGS...]           the same as hpcbsp run SCRIPT (any existing file)
    hpcbsp -m MODULE [ARGS...]        the same as hpcbsp run -m MODULE
    hpcbsp supervise [--max-restarts N] [--hosts FILE | --launch srun] [-n RANKS] -- PROGRAM ARGS...
                                      run a job and relaunch it on the nodes left when it loses one
    hpcbsp ledger merge DIR -o OUT    merge a streamed superstep ledger (bsp.ledger.stream, --ledger) into one file
    hpcbsp report LEDGER [--out DIR]  which rank made each superstep late; DIR/report.html with figures
    hpcbsp --version

Run them under your launcher (all but supervise, which starts the launcher itself), e.g.
mpiexec -n 4 hpcbsp info, or srun --mpi=pmi2 -n 4 hpcbsp info, much as python -m mpi4py SCRIPT runs a script under mpi4py's handling.
An exception on one rank is printed once with its rank and ends every rank with a non-zero status.
Cost models: hpcbsp-cost --help.  Benchmarks: python -m hpcbsp.bench --help.
Every command's options: docs/cli.md.
"""
from __future__ import annotations

import os
import sys

from ..util.args.parser import quiet_pipe, settings_ok
from ..util.launcher import launcher_rank
from ..util.text import plain

PROG = "hpcbsp"
RUN_USAGE = ("usage: hpcbsp run SCRIPT [ARGS...] | hpcbsp run -m MODULE [ARGS...]\n\n"
             "Run a Python script (any file) or a module as __main__, with hpcbsp's failure handling:\n"
             "an exception on one rank is printed once with its rank and ends every rank with a\n"
             "non-zero status.  ARGS are passed on (sys.argv[1:]).  Under a launcher:\n"
             "    mpiexec -n 4 hpcbsp run my_program.py --size 1000\n"
             "    mpiexec -n 2 hpcbsp run -m hpcbsp.apps.heat --n 1000")


def _say(text: str) -> None:
    if launcher_rank() == 0:
        print(text, file=sys.stderr)


def version() -> str:
    """The installed hpcbsp's version."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("hpcbsp")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _run(rest: list[str]) -> int:
    """``hpcbsp run ...`` (``rest``: what follows ``run``); a bad ``HPCBSP_*`` variable is one
    line and status 2 before the program starts (:func:`hpcbsp.util.args.settings_ok`)."""
    if rest and rest[0] not in ("-h", "--help") and not settings_ok():
        return 2
    if not rest:
        _say(f"{PROG} run: give a script or -m MODULE to run (see {PROG} run --help)")
        return 2
    if rest[0] in ("-h", "--help"):
        print(RUN_USAGE)
        return 0
    if rest[0] == "-m":
        if len(rest) < 2:
            _say(f"{PROG} run -m: give a module name, e.g. {PROG} run -m hpcbsp.apps.heat")
            return 2
        return _run_module(rest[1], rest[2:])
    if rest[0].startswith("-m") and len(rest[0]) > 2:  # -mMODULE, like python
        return _run_module(rest[0][2:], rest[1:])
    return _run_script(rest[0], rest[1:])


def _run_script(path: str, argv: list[str]) -> int:
    if not os.path.exists(path):
        _say(f"{PROG}: no such script: {path}")
        return 2
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "__main__.py")):
        _say(f"{PROG}: {path} is a folder without a __main__.py; give a Python script (or -m MODULE)")
        return 2
    if not os.access(path, os.R_OK):
        _say(f"{PROG}: cannot read {path}: permission denied")
        return 2
    from ..runtime.api.runner import run_script

    return run_script(path, argv)


def _run_module(name: str, argv: list[str]) -> int:
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError) as exc:  # a parent package that is missing, or '.x'
        spec = None
        why = str(exc)
    else:
        why = ""
    if spec is None:
        _say(f"{PROG}: no module named {name!r}{f' ({why})' if why else ''}")
        return 2
    from ..runtime.api.runner import run_module

    return run_module(name, spec.origin or name, argv)


def list_apps() -> list[tuple[str, str]]:
    """``(name, summary)`` of every runnable module under hpcbsp.apps (read from the source: no
    app is imported, so listing starts no MPI); the summary is the first paragraph of its
    docstring as plain text (:func:`hpcbsp.util.text.plain`: no reStructuredText markup)."""
    import ast
    import pkgutil

    import hpcbsp.apps as apps

    found = []

    def scan(folder: str, prefix: str) -> None:
        for info in pkgutil.iter_modules([folder]):
            if info.name.startswith("_"):
                continue
            base = os.path.join(folder, info.name)
            if info.ispkg and not os.path.isfile(os.path.join(base, "__main__.py")):
                scan(base, f"{prefix}{info.name}.")  # a family of apps (apps/irregular/, apps/bsf/)
                continue
            path = os.path.join(base, "__main__.py") if info.ispkg else base + ".py"
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            if not any(isinstance(node, ast.FunctionDef) and node.name == "main" for node in tree.body):
                continue
            doc = ast.get_docstring(tree) or ""
            first = doc.strip().split("\n\n")[0].replace("\n", " ")
            found.append((prefix + info.name, plain(first)))

    scan(apps.__path__[0], "")
    return sorted(found)


def _apps() -> int:
    print("hpcbsp apps (run one: mpiexec -n 2 python -m hpcbsp.apps.NAME [options]; "
          "options: python -m hpcbsp.apps.NAME --help):")
    apps = list_apps()
    width = max((len(name) for name, _ in apps), default=0)
    for name, summary in apps:
        print(f"  {name:{width}s}  {summary}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``hpcbsp``; returns the exit status (141, quietly, when stdout's reader
    has gone: :func:`hpcbsp.util.args.parser.quiet_pipe`)."""
    return quiet_pipe(lambda: _main(sys.argv[1:] if argv is None else argv))


def _main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    cmd, rest = argv[0], argv[1:]
    if cmd in ("-h", "--help", "help"):
        print(__doc__.strip())
        return 0
    if cmd in ("-V", "--version"):
        print(f"{PROG} {version()}")
        return 0
    if cmd == "info":
        from .info import main as info_main

        return info_main(rest)
    if cmd == "apps":
        if rest and rest[0] in ("-h", "--help"):
            print("usage: hpcbsp apps\n\nList the apps under hpcbsp.apps with a line on each.")
            return 0
        if rest:
            _say(f"{PROG} apps: takes no arguments, got {' '.join(rest)}")
            return 2
        return _apps()
    if cmd == "run":
        return _run(rest)
    if cmd == "ledger":
        from .ledger import main as ledger_main

        return ledger_main(rest)
    if cmd == "report":
        from .report import main as report_main

        return report_main(rest)
    if cmd == "supervise":
        from .supervise import main as supervise_main

        return supervise_main(rest)
    if cmd.startswith("-m"):
        return _run(argv)
    if cmd.startswith("-"):
        _say(f"{PROG}: unknown option {cmd!r} (see {PROG} --help)")
        return 2
    if os.path.exists(cmd) or cmd.endswith(".py"):
        return _run_script(cmd, rest)
    _say(f"{PROG}: unknown command {cmd!r}: not a command (info, apps, run, supervise, ledger, report) nor an existing script "
         f"(see {PROG} --help)")
    return 2


if __name__ == "__main__":
    sys.exit(main())
