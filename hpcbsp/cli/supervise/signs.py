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

Nothing here starts or stops anything; the patterns follow the lines' one home each (the
launcher in ``slurm/local-cluster.sh``, ``runtime/failure/detector.py`` and ``nodewatch.py``,
``runtime/superstep/control.py``, ``runtime/superstep/supersteps.py``, ``runtime/failure/report.py``,
``util/mpiflavour.py``) and tests/test_supervise.py holds them to it.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

from ...util.flavours import UNKNOWN
from ...util.mpiflavour import crash_line, is_sigkill
from ...util.progress import Reported, parse

#: (pattern with the node as group "node", who says it).
_LOST = (
    (re.compile(r"\[hpcbsp rsh\] lost node (?P<node>\S+?):"), "the launcher"),
    (re.compile(r"\[hpcbsp\] node (?P<node>\S+) \((?:rank|ranks) [^)]*\) has not been heard from"),
     "the failure detector"),
    (re.compile(r"\[hpcbsp\] rank \d+/\d+ \(pid \d+ on (?P<node>\S+)\) has been stopped for"),
     "the failure detector"),
    (re.compile(r"srun: error: Node failure on (?P<node>\S+)"), "Slurm"),
)
#: A sync or exchange timeout: the ranks not arrived, each ``R (on NODE)``.
_LATE = re.compile(r"timed out (?:waiting for the other ranks \(ranks not arrived: (?P<list>[^;]*)\)"
                   r"|after \S+ s waiting for (?P<one>rank \d+ \(on \S+\)))")
_ON = re.compile(r"\d+ \(on ([^)\s]+)\)")
_KILLED = re.compile(r"died without a report: killed by (?:SIGKILL|a signal or crashed)"
                     r"|srun: error: (?P<node>\S+): tasks? [\d,-]+: Killed")
_FAILED = re.compile(r"\[hpcbsp\] rank \d+/\d+ failed:|\[hpcbsp\] error: |died without a report: crashed with ")


@dataclass
class Signs:
    """What the lines of one launch said (see the module docstring)."""

    lost: dict[str, str] = field(default_factory=dict)   #: node -> who named it, in order
    late: list[str] = field(default_factory=list)        #: nodes of ranks a timeout waited for
    killed: str | None = None                            #: the first line of a rank killed from outside
    failed: str | None = None                            #: the first line of the program's own failure
    progress: Reported | None = None                     #: the last progress line
    first_loss: float | None = None                      #: time.monotonic() of the first sign of a loss

    def feed(self, line: str, now: float | None = None) -> None:
        """Read one line of the job's output (stdout or stderr)."""
        now = time.monotonic() if now is None else now
        for pattern, who in _LOST:
            m = pattern.search(line)
            if m:
                self.lost.setdefault(m.group("node"), who)
                self._lost_at(now)
                return
        m = _LATE.search(line)
        if m:
            for node in _ON.findall(m.group("list") or m.group("one") or ""):
                if node not in self.late:
                    self.late.append(node)
            self._lost_at(now)
            return
        m = _KILLED.search(line)
        crash = None if m else crash_line(UNKNOWN, line)
        if m or (crash is not None and is_sigkill(crash)):
            if self.killed is None:
                self.killed = line.strip()
                if m and m.group("node") and not self.lost:
                    self.lost[m.group("node")] = "Slurm (its task was killed)"
            self._lost_at(now)
            return
        if _FAILED.search(line):
            if self.failed is None:
                self.failed = line.strip()
            return
        reported = parse(line)
        if reported is not None:
            self.progress = reported

    def _lost_at(self, now: float) -> None:
        if self.first_loss is None:
            self.first_loss = now
