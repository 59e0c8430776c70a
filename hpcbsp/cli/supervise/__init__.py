"""``hpcbsp supervise``: run a job again, on the nodes that are left, when it loses a node.

    hpcbsp supervise [--max-restarts N] [--hosts FILE | --launch srun] [-n RANKS] -- PROGRAM ARGS...

Semantics (like torchrun's ``--max-restarts`` and Horovod Elastic's restarts):

* **What runs.**  ``PROGRAM ARGS`` on RANKS ranks: one per host of FILE through ``mpiexec``
  (:func:`hpcbsp.util.jobcommand.job_command`: the local cluster's launcher when FILE is its host
  file), one task per node of the Slurm allocation with ``--launch srun`` (inside ``salloc`` or
  ``sbatch``), or ``mpiexec -n RANKS`` on this machine.  RANKS defaults to the hosts of FILE, or
  the allocation's nodes; a launch uses ``min(RANKS, nodes usable now)``.
* **The same arguments every time.**  A relaunch runs the very same command line.  Resuming is
  the program's job: hpcbsp's apps resume with ``--restart`` from ``--checkpoint DIR`` when it
  holds a checkpoint and start afresh when it does not, so ``--restart`` belongs in the command
  from the first launch (a command with ``--checkpoint`` and no ``--restart`` is run, with a
  warning that every relaunch starts from the beginning).  Each launch gets
  ``HPCBSP_SUPERVISE_RESTART`` (0, 1, ...: the restarts before it).
* **Which nodes.**  Before each launch every host is checked, each within a few seconds
  (:mod:`.hosts`: under Slurm, the node states of ``sinfo`` or ``scontrol``; elsewhere ``true``
  run there through the job's launcher, at most 64 at a time, each answered, refused, timed out
  or not started: :mod:`.probes`).  The launch's hosts go to ``mpiexec`` as a host file
  (``-f FILE``, ``--hostfile FILE``) in a private folder removed at the end.  A host that does
  not answer is left out; so is a node that the failed launch
  lost (named by the lines below), for the next launch only: at the restart after that, every
  host that answers is used again, the lost one too once it is back.
* **What is a lost node** (:mod:`.verdict`, :mod:`.signs`): the job's output passes through as it
  comes, and is read for the lines that name a lost node (the local cluster's launcher:
  ``[hpcbsp rsh] lost node ...``; the runtime's failure detector: ``[hpcbsp] node ... has not been
  heard from ...``; Slurm: ``Node failure on ...``; across hosts, a sync timeout naming the nodes
  it waited for), or a host of the launch that no longer answers, or, with no node named, a rank
  killed from outside (SIGKILL: exit 9 or 137).  Those are restarted, up to ``--max-restarts``
  times (default 3), each with one log line: the lost node, the checkpoint and superstep the
  program will resume from (its ``meta.json``) and the steps lost (from the job's last progress
  line).  Anything else (an exception, bad input: exit 2, a crash) is the program's failure:
  not restarted, said so, and its exit code is the supervisor's.
* **Bounded.**  A launcher that still runs 2 s after the failure detector said it ended the job
  is ended (SIGTERM to its process group: it waits for a lost node's ``ssh``), and one that
  still runs 10 s after another line said it lost a node (SIGINT); SIGKILL 5 s later; each host
  check takes at most 8 s; the relaunch follows at once.
* **Interrupted** (Ctrl-C, SIGTERM): the job's launcher gets the signal the supervisor got and
  passes it on to the ranks; the job's files in ``/dev/shm`` and ``/tmp`` that its MPI removes
  only at a normal end (MPICH's ``mpich_shm_*``, hydra's ``hydra_hwloc_xmlfile_*``) are removed
  once it has ended: those its processes held open when the signal came, found through their
  process ids (:mod:`.leftovers`), never another job's.  One line names the signal received.
* **Output**: the job's stdout and stderr pass through as they come, but the launcher's own
  lines on stdout (hydra's ``Sending Ctrl-C ...``, its ``BAD TERMINATION`` banner) go to
  stderr (:mod:`.output`), so that stdout holds what the program printed.
* **Exit code**: the program's last one (0 when a relaunch finished); 130 after Ctrl-C, which
  ends the job and the supervisor without a restart (143 for SIGTERM).  Bad arguments: one
  line, exit 2, before anything starts (among them a host file with a line that is not a host,
  and a ``python`` for the program that cannot import hpcbsp, :mod:`.interpreter`: the one first on PATH is often
  another than the one hpcbsp is installed in).
"""
from __future__ import annotations

from .command import main

__all__ = ["main"]
