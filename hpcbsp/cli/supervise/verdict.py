"""Why a launch ended, and whether that is worth a restart: :func:`classify` (pure).

In this order:

1. exit 0: **done**;
2. the supervisor ended it for a Ctrl-C or SIGTERM: **interrupted** (never restarted);
3. a line named a lost node (the launcher, the failure detector, Slurm; with ``spread``, also a
   sync or exchange timeout that names the nodes of the ranks it waited for), or a host of this
   launch no longer answers (``silent``): **lost**, those nodes;
4. exit 2, a usage error or bad input: **failed** (the same arguments would fail again);
5. a rank reported a failure of its own (an exception, bad input, a crash such as SIGSEGV):
   **failed**;
6. a rank was killed from outside (SIGKILL, as every process of a lost node is: a line says so,
   or the job's exit status is 9 or 137, MPICH's hydra's and Open MPI's or Slurm's for it; Intel
   MPI's hydra exits 255, as for any failure, so only its line says it): **killed**, a loss whose
   node is not named;
7. anything else: **failed**.

**lost** and **killed** are restarted (up to ``--max-restarts``); **failed** is not.  Without
``spread`` (every rank on this machine) a timeout is the program's hang, not a lost node: it
falls to rule 5 (the timed-out ranks report it) and is not restarted.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .job import Ended

#: Exit statuses of a job one of whose ranks was killed by SIGKILL (MPICH's hydra: 9; Open MPI's
#: mpiexec, a shell or srun: 137).
KILLED_CODES = (9, 137)


@dataclass(frozen=True)
class Verdict:
    kind: str                   #: "done", "interrupted", "lost", "killed" or "failed"
    why: str                    #: words for the log line
    nodes: tuple[str, ...] = ()  #: the lost nodes ("lost")

    @property
    def restartable(self) -> bool:
        return self.kind in ("lost", "killed")


def classify(ended: Ended, silent: Sequence[str] = (), *, spread: bool = False,
             silent_why: str = "it does not answer") -> Verdict:
    """The verdict on a launch that ended as ``ended``; ``silent``: hosts of the launch that do
    not answer now (``silent_why`` says how that is known); ``spread``: its ranks ran on several
    hosts (see the module docstring)."""
    code, signs = ended.code, ended.signs
    if code == 0:
        return Verdict("done", "exit 0")
    if ended.ended_by == "interrupt":
        return Verdict("interrupted", f"interrupted (exit {code})")
    named = {node: f"said by {who}" for node, who in signs.lost.items()}
    if spread:
        for node in signs.late:
            named.setdefault(node, "a timeout waited for its ranks")
    for host in silent:
        named.setdefault(host, silent_why)
    if named:
        plural = "s" if len(named) > 1 else ""
        said = ", ".join(f"{node} ({how})" for node, how in named.items())
        return Verdict("lost", f"lost node{plural} {said}", tuple(named))
    if code == 2:
        return Verdict("failed", "exit 2: a usage error or bad input, which the same arguments would repeat")
    if signs.failed is not None:
        return Verdict("failed", f"exit {code}: the program failed ({_short(signs.failed)})")
    if signs.killed is not None or code in KILLED_CODES:
        return Verdict("killed", f"a rank was killed from outside (SIGKILL, as a lost node's are, or the "
                                 f"out-of-memory killer) and no node was named; exit {code}")
    return Verdict("failed", f"exit {code}, with no sign of a lost node")


def _short(line: str, limit: int = 160) -> str:
    return line if len(line) <= limit else line[:limit - 3] + "..."
