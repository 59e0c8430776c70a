"""The ``hpcbsp supervise`` command line and its restart loop (the semantics: the package's
docstring).  Every line it writes itself starts with ``[hpcbsp supervise]`` and goes to stderr."""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Sequence

from ...runtime.api.checkpoint import describe
from ...runtime.launch import find_mpiexec
from ...util.args.parser import OneLineParser
from ...util.args.types import nonnegative_int, positive_int
from ...util.choices import LAUNCHES
from ...util.jobcommand import JobCommandError, job_command, read_hosts
from ...util.launcher import launcher_name
from ...util.mpiflavour import mpiexec_flavour
from ...util.text import plural
from . import hosts as hostcheck
from .interpreter import python_without_hpcbsp
from .job import Ended, Stop, run_job
from .verdict import Verdict, classify

PROG = "hpcbsp supervise"
TAG = "[hpcbsp supervise]"
#: The variable each launch gets: the restarts before it (0 for the first launch).
RESTART_VAR = "HPCBSP_SUPERVISE_RESTART"
EXAMPLE = ("hpcbsp supervise --hosts /run/hpcbsp-slurm/hosts -- python -m hpcbsp.apps.heat --n 600 \\\n"
           "      --steps 2000 --checkpoint ck --every 100 --restart")


HELP_EPILOG = f"""\
example (on the emulated cluster of docs/cluster.md):
  {EXAMPLE}

A relaunch runs the same command line: put --restart in it from the start (hpcbsp's apps
resume from --checkpoint DIR when it holds a checkpoint, and start afresh while it does not).
Before each launch every host is checked at once (`true` run there through the job's launcher;
with srun, the nodes' states in sinfo): a host that does not answer is left out, and so is,
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


def say(text: str) -> None:
    sys.stderr.write(f"{TAG} {text}\n")
    sys.stderr.flush()


@dataclass
class Plan:
    """One launch: the hosts (None: mpiexec -n here), its command, the hosts left out and why."""

    hosts: list[str] | None
    argv: list[str]
    left_out: dict[str, str]


class Supervisor:
    """The restart loop (see the package docstring)."""

    def __init__(self, args: argparse.Namespace, where: Where, stop: Stop) -> None:
        self.program: list[str] = args.program
        self.max_restarts: int = args.max_restarts
        self.ranks: int = args.ranks
        self.where = where
        self.stop = stop
        self.checkpoint = checkpoint_of(self.program)
        self.last_code = 1  #: the exit status of the last launch
        #: The MPI the jobs run on (its launcher's own lines, its leftover files).
        self.flavour = mpiexec_flavour(find_mpiexec() if where.srun else where.mpiexec)

    # -- where the next launch runs ----------------------------------------------------------
    @property
    def down(self) -> str:
        """How a host that cannot be used is described."""
        return "is down in sinfo" if self.where.srun else "does not answer"

    def answers(self) -> dict[str, bool]:
        """Every listed host: whether it answers now (empty without a host file or allocation)."""
        if self.where.hostfile is not None:
            found, note = hostcheck.check_hosts(self.where.hostfile, self.where.listed)
        elif self.where.srun:
            found, note = hostcheck.node_states(self.where.listed)
        else:
            return {}
        if note:
            say(note)
        return found

    def plan(self, answers: dict[str, bool], lost: Sequence[str]) -> Plan | None:
        """The next launch, or None when no host is usable."""
        w = self.where
        if not w.spread:
            return Plan(None, [*job_command(w.mpiexec, self.ranks), *self.program], {})
        chosen = hostcheck.choose(w.listed, answers, lost, self.ranks)
        if not chosen:
            return None
        left_out = {h: ("lost by the last launch" if h in lost else self.down)
                    for h in w.listed if h not in chosen and (h in lost or not answers.get(h, False))}
        if w.srun:
            # (the PMI plugin is the MPI's: the one of the mpiexec installed with it)
            cmd = job_command(w.mpiexec, len(chosen), launch="srun", kill_on_bad_exit=True,
                              exclude=[h for h in w.listed if h not in chosen],
                              flavour=mpiexec_flavour(find_mpiexec()))
        else:
            assert w.hostfile is not None
            cmd = job_command(w.mpiexec, len(chosen), hosts=w.hostfile,
                              only=None if chosen == w.listed else chosen)
        return Plan(chosen, [*cmd, *self.program], left_out)

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> int:
        if self.checkpoint is not None and "--restart" not in self.program:
            say(f"warning: the command has --checkpoint {self.checkpoint} but no --restart: each relaunch "
                "starts from the beginning (hpcbsp's apps resume with --restart, and start afresh with it "
                "while there is no checkpoint)")
        restarts = 0
        answers = self.answers()
        lost: list[str] = []
        while True:
            if self.stop.signum is not None:
                return self.interrupted(None)
            plan = self.plan(answers, lost)
            if plan is None:
                code = 1 if restarts == 0 else self.last_code
                say(f"no host of {self.where.hostfile or 'the allocation'} answers: nothing to launch on "
                    f"(exit {code})")
                return code
            self.announce(restarts, plan)
            env = {**os.environ, RESTART_VAR: str(restarts)}
            ended = run_job(plan.argv, env, self.stop, srun=self.where.srun, flavour=self.flavour)
            self.last_code = ended.code
            if ended.code == 0:
                if restarts:
                    say(f"the job finished (exit 0) after {plural(restarts, 'restart')}")
                return 0
            if ended.ended_by == "interrupt" or self.stop.signum is not None:
                return self.interrupted(ended)
            answers = self.answers() if self.where.spread else {}
            silent = [h for h in (plan.hosts or []) if not answers.get(h, True)]
            verdict = classify(ended, silent, spread=self.where.spread, silent_why=f"it {self.down}")
            if not verdict.restartable:
                say(f"the job failed, not because a node was lost: {verdict.why}; not restarting "
                    f"(exit {ended.code})")
                return ended.code
            if restarts >= self.max_restarts:
                say(f"{verdict.why}; no restart left (--max-restarts {self.max_restarts}): giving up "
                    f"(exit {ended.code})")
                return ended.code
            restarts += 1
            lost = list(verdict.nodes)
            nxt = self.plan(answers, lost)
            say(self.restart_line(restarts, verdict, ended, nxt))

    def announce(self, restarts: int, plan: Plan) -> None:
        where = (f"{plural(len(plan.hosts), 'rank')} on {','.join(plan.hosts)}" if plan.hosts is not None
                 else f"{plural(self.ranks, 'rank')} on this machine")
        if plan.left_out:
            where += "; left out: " + ", ".join(f"{h} ({why})" for h, why in plan.left_out.items())
        say(f"launch {restarts + 1} (restarts left: {self.max_restarts - restarts}): {where}: "
            f"{shlex.join(plan.argv)}")

    def restart_line(self, restarts: int, verdict: Verdict, ended: Ended, nxt: Plan | None) -> str:
        """The one line of a restart: what was lost, where it relaunches, from where, what is lost."""
        failed_at = ended.signs.first_loss if ended.signs.first_loss is not None else ended.ended
        where = ("relaunching" if nxt is None or nxt.hosts is None
                 else f"relaunching {plural(len(nxt.hosts), 'rank')} on {','.join(nxt.hosts)}")
        return (f"restart {restarts} of {self.max_restarts}, {time.monotonic() - failed_at:.1f} s after the "
                f"failure: {verdict.why}; {where} {self.resume_words(ended, failed_at)}")

    def resume_words(self, ended: Ended, failed_at: float) -> str:
        """``from checkpoint DIR at superstep S (...)`` and the steps lost."""
        saved = describe(self.checkpoint) if self.checkpoint is not None else None
        reported = ended.signs.progress
        if self.checkpoint is None:
            start, at = "from the start (the command gives no --checkpoint DIR)", 0
        elif saved is None:
            start, at = f"from the start (no checkpoint in {self.checkpoint} yet)", 0
        else:
            age = time.time() - saved.written - (time.monotonic() - failed_at)
            start = (f"from checkpoint {self.checkpoint} at superstep {saved.superstep} (saved on "
                     f"{plural(saved.nprocs, 'rank')}, {max(age, 0.0):.1f} s before the failure)")
            at = saved.superstep
        if reported is None:
            return f"{start}; steps lost: not known (the job printed no progress line)"
        unit = reported.unit or "step"
        done = f"{reported.done:,.0f}" + (f"/{reported.total:,.0f}" if reported.total else "")
        if unit not in ("step", "superstep"):
            return f"{start}; the job's last progress line said {unit} {done}"
        if reported.done < at:
            return f"{start}; steps lost: not known (the job's last progress line, {unit} {done}, came before it)"
        return (f"{start}; about {plural(int(reported.done) - at, 'step')} lost (the job's last progress "
                f"line said {unit} {done})")

    def interrupted(self, ended: Ended | None) -> int:
        """The line after Ctrl-C or SIGTERM, naming the signal received, and its exit status."""
        signum = self.stop.signum or signal.SIGINT
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        done = ""
        if ended is not None:
            done = "the job was ended; "
            if ended.removed:
                done += f"removed the {plural(len(ended.removed), 'file')} it left ({', '.join(ended.removed)}); "
        say(f"interrupted ({name}): {done}no restart")
        return 128 + signum


def main(argv: Sequence[str] | None = None) -> int:
    args, where = parse(sys.argv[1:] if argv is None else argv)
    stop = Stop()
    previous = {s: signal.signal(s, stop.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return Supervisor(args, where, stop).run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
