"""The ``hpcbsp supervise`` command line and its restart loop (the semantics: the package's
docstring; its options: :mod:`.options`).  Every line it writes itself starts with ``[hpcbsp supervise]``
and goes to stderr.  Each launch gets ``HPCBSP_SUPERVISE_RESTART`` (:data:`~.options.RESTART_VAR`)."""
from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Sequence

from ...runtime.api.checkpoint import describe_newest
from ...runtime.launch import find_mpiexec
from ...util.jobcommand import job_command
from ...util.mpiflavour import mpiexec_flavour
from ...util.progress import PROGRESS_ENV
from ...util.text import plural
from . import hosts as hostcheck
from .job import DETECTOR_GRACE, Ended, Stop, run_job
from .options import PROG, RESTART_VAR, Where, checkpoint_of, parse
from .probes import DOWN, Probe
from .verdict import Verdict, classify

TAG = "[hpcbsp supervise]"
__all__ = ["PROG", "TAG", "RESTART_VAR", "Supervisor", "checkpoint_of", "main", "parse"]


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
        #: Why each host that cannot be used now cannot (a probe's verdict, Slurm's state).
        self.why: dict[str, str] = {}
        #: The private folder of the launches' host files (made at the first; removed by :meth:`run`).
        self.folder: str | None = None

    # -- where the next launch runs ----------------------------------------------------------
    @property
    def down(self) -> str:
        """How a host that cannot be used is described."""
        return "is down in sinfo" if self.where.srun else "does not answer"

    def answers(self) -> dict[str, bool]:
        """Every listed host: whether it answers now (empty without a host file or allocation);
        :attr:`why` says why each of the others cannot be used."""
        if self.where.hostfile is not None:
            found, note = hostcheck.check_hosts(self.where.hostfile, self.where.listed)
            answers = {h: p.answers for h, p in found.items()}
            self.why = {h: _why_not(p) for h, p in found.items() if not p.answers}
        elif self.where.srun:
            answers, note = hostcheck.node_states(self.where.listed)
            self.why = {}
        else:
            return {}
        if note:
            say(note)
        return answers

    def plan(self, answers: dict[str, bool], lost: Sequence[str]) -> Plan | None:
        """The next launch, or None when no host is usable."""
        w = self.where
        if not w.spread:
            return Plan(None, [*job_command(w.mpiexec, self.ranks), *self.program], {})
        chosen = hostcheck.choose(w.listed, answers, lost, self.ranks)
        if not chosen:
            return None
        left_out = {h: ("lost by the last launch" if h in lost else self.why.get(h, self.down))
                    for h in w.listed if h not in chosen and (h in lost or not answers.get(h, False))}
        if w.srun:
            # (the PMI plugin is the MPI's: the one of the mpiexec installed with it)
            cmd = job_command(w.mpiexec, len(chosen), launch="srun", kill_on_bad_exit=True,
                              exclude=[h for h in w.listed if h not in chosen],
                              flavour=mpiexec_flavour(find_mpiexec()))
        else:
            assert w.hostfile is not None
            if self.folder is None:  # (private: the host files of the launches, removed at the end)
                self.folder = tempfile.mkdtemp(prefix="hpcbsp-supervise-")
            cmd = job_command(w.mpiexec, len(chosen), hosts=w.hostfile,
                              only=None if chosen == w.listed else chosen, hostfile_dir=self.folder)
        return Plan(chosen, [*cmd, *self.program], left_out)

    # -- the loop ----------------------------------------------------------------------------
    def run(self) -> int:
        try:
            return self.loop()
        finally:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)

    def loop(self) -> int:
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
            # The job's progress lines say how far it got (a restart's steps lost), so they are on
            # though its stderr is a pipe, unless the user turned them off.
            env = {PROGRESS_ENV: "1", **os.environ, RESTART_VAR: str(restarts)}
            ended = run_job(plan.argv, env, self.stop, srun=self.where.srun, flavour=self.flavour)
            if ended.ended_by == "detector":
                say(f"the failure detector ended the job and its launcher still ran {DETECTOR_GRACE:g} s later "
                    f"(waiting for a lost node's processes): ended it (SIGTERM to its process group; exit {ended.code})")
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
        saved = describe_newest(self.checkpoint) if self.checkpoint is not None else None
        reported = ended.signs.progress
        at: int | None = 0
        if self.checkpoint is None:
            start = "from the start (the command gives no --checkpoint DIR)"
        elif saved is None:
            start = f"from the start (no checkpoint in {self.checkpoint} yet)"
        else:
            age = f"{max(time.time() - saved.written - (time.monotonic() - failed_at), 0.0):.1f} s before the failure"
            if os.path.dirname(saved.path) == os.path.abspath(self.checkpoint):
                # one of the program's own checkpoints inside DIR (one per run): its supersteps
                # are not the job's steps
                start = (f"from the checkpoints in {self.checkpoint} (the newest, {os.path.basename(saved.path)}, "
                         f"saved on {plural(saved.nprocs, 'rank')}, {age})")
                at = None
            else:
                start = (f"from checkpoint {self.checkpoint} at superstep {saved.superstep} (saved on "
                         f"{plural(saved.nprocs, 'rank')}, {age})")
                at = saved.superstep
        if reported is None:
            return f"{start}; steps lost: not known (the job printed no progress line)"
        unit = reported.unit or "step"
        done = f"{reported.done:,.0f}" + (f"/{reported.total:,.0f}" if reported.total else "")
        if unit not in ("step", "superstep") or at is None:
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


def _why_not(found: Probe) -> str:
    """How a host that cannot be used is described: ``does not answer: refused, exit 255``."""
    if found.verdict == DOWN:
        return "is down in Slurm"
    return f"does not answer: {found.verdict}" + (f", {found.detail}" if found.detail else "")


def main(argv: Sequence[str] | None = None) -> int:
    args, where = parse(sys.argv[1:] if argv is None else argv)
    stop = Stop()
    previous = {s: signal.signal(s, stop.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return Supervisor(args, where, stop).run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
