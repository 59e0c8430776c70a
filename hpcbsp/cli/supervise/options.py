"""The ``hpcbsp supervise`` command line: its options, its help, and where launches run (the
semantics: the package's docstring).  :func:`parse` refuses bad arguments in one line, exit 2,
before anything starts."""
from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass, field
from typing import Sequence

from ...runtime.launch import find_mpiexec
from ...util.args.parser import OneLineParser
from ...util.args.types import nonnegative_int, positive_int
from ...util.choices import LAUNCHES
from ...util.jobcommand import JobCommandError, read_hosts
from ...util.launcher import launcher_name
from ...util.text import plural
from . import hosts as hostcheck
from .interpreter import python_without_hpcbsp

PROG = "hpcbsp supervise"
#: The variable each launch gets: the restarts before it (0 for the first launch).
RESTART_VAR = "HPCBSP_SUPERVISE_RESTART"
EXAMPLE = ("hpcbsp supervise --hosts /run/hpcbsp-slurm/hosts -- python -m hpcbsp.apps.heat --n 600 \\\n"
           "      --steps 2000 --checkpoint ck --every 100 --restart")


HELP_EPILOG = f"""\
example (on the emulated cluster of docs/cluster.md):
  {EXAMPLE}

A relaunch runs the same command line: put --restart in it from the start (hpcbsp's apps
resume from --checkpoint DIR when it holds a checkpoint, and start afresh while it does not).
Before each launch every host is checked (`true` run there through the job's launcher, 64 at a
time; under Slurm, the nodes' states in sinfo): a host that does not answer is left out, and so is,
for the next launch only, a node the failed launch lost.  Restarted, with one line naming the
lost node, the checkpoint's superstep and the steps lost: a lost node (named by the launcher,
the failure detector or Slurm, or a host that stops answering) or a rank killed by SIGKILL.
Not restarted: any other failure (an exception, bad input: exit 2, a crash); the exit code is
the program's last one.  Ctrl-C ends the job and the supervisor (exit 130).  Each launch gets
{RESTART_VAR} (0, 1, ...: the restarts before it).
More: docs/cluster.md, "Surviving a lost node: hpcbsp supervise"."""


def build_parser() -> OneLineParser:
    p = OneLineParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        usage=f"{PROG} [--max-restarts N] [--hosts FILE | --launch srun] [-n RANKS] -- PROGRAM ARGS...",
        description="Run an hpcbsp program; when the job fails because a node died, run it again with the\n"
                    "same arguments on the nodes that are left (it resumes from its checkpoint), up to\n"
                    "--max-restarts times.",
        epilog=HELP_EPILOG)
    p.add_argument("--max-restarts", type=nonnegative_int, default=3, metavar="N",
                   help="relaunch at most N times (default 3; 0: run once)")
    p.add_argument("--hosts", metavar="FILE",
                   help="one rank on each host of FILE that answers (mpiexec -f FILE -ppn 1; the local "
                        "cluster's /run/hpcbsp-slurm/hosts goes through its launcher)")
    p.add_argument("--launch", choices=LAUNCHES, default="mpiexec",
                   help="mpiexec (default) or srun: one task per live node of the Slurm allocation "
                        "this runs in (srun --exclude leaves the others out)")
    p.add_argument("-n", dest="ranks", type=positive_int, metavar="RANKS",
                   help="at most this many ranks (default: the hosts of FILE, or the allocation's nodes; "
                        "needed without either)")
    p.add_argument("program", nargs=argparse.REMAINDER, metavar="-- PROGRAM ARGS",
                   help="the program and its arguments, e.g. -- python -m hpcbsp.apps.heat ... --restart")
    return p


@dataclass
class Where:
    """Where launches run: a host file, a Slurm allocation, or this machine."""

    mpiexec: str
    hostfile: str | None = None
    listed: list[str] = field(default_factory=list)  #: the hosts of the file, or the allocation's nodes
    srun: bool = False

    @property
    def spread(self) -> bool:
        return self.hostfile is not None or self.srun


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, Where]:
    """The options and where to launch, or one line and exit 2 (nothing started)."""
    parser = build_parser()
    args = parser.parse_args(list(argv))
    if launcher_name() != "singleton":  # (mpiexec -n 4 hpcbsp supervise: four supervisors)
        parser.error(f"run it on its own, not under {launcher_name()}: it starts the job's launcher itself")
    program = list(args.program)
    if program[:1] == ["--"]:
        program = program[1:]
    if not program:
        parser.error("give the program after --, e.g. -- python -m hpcbsp.apps.heat --checkpoint ck --every 100 --restart")
    if program[0].startswith("-"):
        parser.error(f"unknown option {program[0]!r} (the program goes after --)")
    if shutil.which(program[0]) is None:
        parser.error(f"program {program[0]!r} not found (give a path or a command on PATH)")
    why = python_without_hpcbsp(program[0], os.environ)
    if why:
        parser.error(why)
    args.program = program
    if args.launch == "srun":
        if args.hosts is not None:
            parser.error("--hosts FILE is for mpiexec; with --launch srun the allocation's nodes are used")
        if shutil.which("srun") is None:
            parser.error("--launch srun: no srun on PATH")
        try:
            nodes = hostcheck.allocation_nodes(os.environ)
        except RuntimeError as exc:
            parser.error(str(exc))
        where = Where("srun", listed=nodes, srun=True)
    else:
        mpiexec = find_mpiexec()
        if mpiexec is None:
            parser.error("no mpiexec found beside this Python or on PATH")
        where = Where(mpiexec)
        if args.hosts is not None:
            try:
                where = Where(mpiexec, args.hosts, read_hosts(args.hosts))
            except JobCommandError as exc:
                parser.error(str(exc))
        elif args.ranks is None:
            parser.error("give -n RANKS (or --hosts FILE, or --launch srun inside an allocation)")
    if where.listed and args.ranks is not None and args.ranks > len(where.listed):
        what = f"host file {args.hosts} lists {plural(len(where.listed), 'host')}" if where.hostfile \
            else f"the allocation has {plural(len(where.listed), 'node')}"
        parser.error(f"-n {args.ranks}: {what}, and each rank needs one")
    if args.ranks is None:
        args.ranks = len(where.listed)
    return args, where


def checkpoint_of(program: Sequence[str]) -> str | None:
    """The ``--checkpoint DIR`` of the program's arguments (the last one), or None."""
    found = None
    for i, arg in enumerate(program):
        if arg == "--checkpoint" and i + 1 < len(program):
            found = program[i + 1]
        elif arg.startswith("--checkpoint="):
            found = arg.split("=", 1)[1]
    return found
