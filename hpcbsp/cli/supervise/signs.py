"""What a supervised job's output says about how it ended, read line by line as it passes through.

:class:`Signs` collects, from the lines of one launch:

* **lost nodes**, each with the line that named it and who said so:

  ==========================================================  ==================================
  ``[hpcbsp rsh] lost node NODE: ...``                        the local cluster's launcher
  ``[hpcbsp] node NODE (rank R) has not been heard from ...``  the failure detector (a lost node)
  ``[hpcbsp] rank R/P (pid X on NODE) has been stopped ...``   the failure detector (a frozen node)
  ``srun: error: Node failure on NODE``                       Slurm
  ``srun: error: NODE: task R: Killed`` (the first such line)  Slurm (its task was killed)
  ``... timed out ... (ranks not arrived: R (on NODE), ...)``  a sync timeout (kept apart: see below)
  ``... timed out after S s waiting for rank R (on NODE)``     the data exchange's timeout (the same)
  ==========================================================  ==================================

  Under srun the first task killed (SIGKILL) names its node: the other tasks are ended after
  it (``srun --kill-on-bad-exit``, which the supervisor uses); a node of a task that the
  out-of-memory killer ended is left out of one launch for nothing, the price of not waiting for
  the failure detector.  The timeouts name the nodes of the ranks that did not arrive; they are kept apart
  (:attr:`Signs.late`) because on one machine a rank that never syncs is the program's hang,
  not a lost node: the caller decides.
* **a rank killed from outside** (what a lost node that nobody names looks like, or the
  out-of-memory killer): ``[hpcbsp] rank R/P (...) died without a report: killed by SIGKILL``
  (the runtime's death watch), mpiexec's own report of a rank that died of signal 9 (in any
  MPI's words, :func:`hpcbsp.util.mpiflavour.crash_line`: MPICH's hydra ``EXIT STRING: Killed
  (signal 9)``, Intel MPI's ``KILLED BY SIGNAL: 9 (Killed)``; Open MPI's spans two lines and is
  read from its exit status instead, :mod:`.verdict`), Slurm's ``srun: error: NODE: task R:
  Killed`` (which also names NODE, above);
* **the program's own failure**: ``[hpcbsp] rank R/P failed:`` (an exception, its traceback
  follows), ``[hpcbsp] error: ...`` (bad input), a rank that ``crashed with SIGSEGV`` (or another
  crash signal);
* **progress**: the last progress line (:func:`hpcbsp.util.progress.parse`) and when the first
  sign of a loss came.

Nothing here starts or stops anything.  The runtime's lines are read by their one home,
:func:`hpcbsp.runtime.failure.lines.parse` (which writes them too); the launcher's, Slurm's and
the MPIs' here (``slurm/local-cluster.sh``, ``util/mpiflavour.py``); tests/test_supervise.py
holds them to their sources.  :attr:`Signs.ended` is when the failure detector said it ended
the job (the supervisor then ends the launcher after a short grace, :mod:`.job`).
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from ...runtime.failure import lines
from ...util.flavours import UNKNOWN
from ...util.mpiflavour import crash_line, is_sigkill
from ...util.progress import Reported, parse

#: Who names a lost node in the runtime's lines.
_DETECTOR = "the failure detector"
#: The launcher's and Slurm's lines that name a lost node (pattern with the node as group "node", who says it).
_LOST = (
    (re.compile(r"\[hpcbsp rsh\] lost node (?P<node>\S+?):"), "the launcher"),
    (re.compile(r"srun: error: Node failure on (?P<node>\S+)"), "Slurm"),
)
#: Slurm's line for a task killed (SIGKILL), naming its node.
_SRUN_KILLED = re.compile(r"srun: error: (?P<node>\S+): tasks? [\d,-]+: Killed")


@dataclass
class Signs:
    """What the lines of one launch said (see the module docstring)."""

    lost: dict[str, str] = field(default_factory=dict)   #: node -> who named it, in order
    late: list[str] = field(default_factory=list)        #: nodes of ranks a timeout waited for
    killed: str | None = None                            #: the first line of a rank killed from outside
    failed: str | None = None                            #: the first line of the program's own failure
    progress: Reported | None = None                     #: the last progress line
    first_loss: float | None = None                      #: time.monotonic() of the first sign of a loss
    ended: float | None = None                           #: ... of the detector's line that ended the job

    def feed(self, line: str, now: float | None = None) -> None:
        """Read one line of the job's output (stdout or stderr)."""
        now = time.monotonic() if now is None else now
        said = lines.parse(line)
        if said is not None and said.ends_job and said.node:
            self.lost.setdefault(said.node, _DETECTOR)
            if self.ended is None:
                self.ended = now
            self._lost_at(now)
            return
        for pattern, who in _LOST:
            m = pattern.search(line)
            if m:
                self.lost.setdefault(m.group("node"), who)
                self._lost_at(now)
                return
        if said is not None and said.kind == "timeout":
            for node in said.nodes:
                if node not in self.late:
                    self.late.append(node)
            self._lost_at(now)
            return
        m = _SRUN_KILLED.search(line)
        crash = None if m or said is not None else crash_line(UNKNOWN, line)
        if m or (said is not None and said.killed) or (crash is not None and is_sigkill(crash)):
            if self.killed is None:
                self.killed = line.strip()
                if m and not self.lost:
                    self.lost[m.group("node")] = "Slurm (its task was killed)"
            self._lost_at(now)
            return
        if said is not None and (said.kind in ("failed", "error", "aborted") or said.crashed):
            if self.failed is None:
                self.failed = line.strip()
            return
        reported = parse(line)
        if reported is not None:
            self.progress = reported

    def _lost_at(self, now: float) -> None:
        if self.first_loss is None:
            self.first_loss = now
