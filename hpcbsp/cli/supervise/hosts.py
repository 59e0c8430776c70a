"""Where the next launch may run: the hosts that answer, the allocation's nodes that are up.

* **A host file** (``--hosts FILE``): before each launch every listed host is checked at once
  by running ``true`` there through the launcher the job will use
  (:func:`hpcbsp.util.jobcommand.probe_command`: the local cluster's ``rsh``, else ``ssh`` in
  batch mode), each check bounded by :data:`PROBE_S` seconds.  A host that is this machine
  (``localhost``, its own name) answers without a check (hydra starts its ranks without a
  launcher).  Where the checking program itself is missing, every host counts as answering
  and :func:`check_hosts` says so.
* **A Slurm allocation** (``--launch srun``): its nodes are ``scontrol show hostnames
  $SLURM_JOB_NODELIST``; a node is up when ``sinfo`` shows it in a state that runs job steps
  (:data:`UP_STATES`) with no flag of a node that does not respond (``*``) or is powered off.
  Where ``sinfo`` does not answer, every node counts as up.

:func:`choose` then picks the hosts of the next launch (pure, the unit tests' oracle): those
that answer, in the file's order, without the ones named lost by the launch that just failed
(unless nothing else answers), at most one per rank asked for.
"""
from __future__ import annotations

import os
import socket
import subprocess
import time
from typing import Mapping, Sequence

from ...util.jobcommand import probe_command

#: Seconds one host check may take (all run at once).
PROBE_S = 8.0
#: Seconds ``scontrol``/``sinfo`` may take.
SLURM_S = 15.0
#: ``sinfo %t`` states (flags stripped) of a node that runs job steps.
UP_STATES = frozenset({"idle", "alloc", "allocated", "mix", "mixed", "comp", "completing", "resv",
                       "reserved", "plnd", "planned"})
#: ``sinfo`` flags after a state: not responding, powered off, powering up or down.
_DOWN_FLAGS = "*~#%!"


def is_this_machine(host: str) -> bool:
    """Whether ``host`` names this machine (hydra then starts its ranks without a launcher)."""
    names = {"localhost", "localhost.localdomain", "127.0.0.1", "::1"}
    try:
        names |= {socket.gethostname(), socket.getfqdn()}
    except OSError:
        pass
    return host in names


def check_hosts(hostfile: str, hosts: Sequence[str], timeout: float = PROBE_S) -> tuple[dict[str, bool], str | None]:
    """``({host: answers}, note)``: every host checked at once, each within ``timeout`` seconds;
    ``note`` says why nothing could be checked (the checking program is missing), else None."""
    answers = {h: True for h in hosts if is_this_machine(h)}
    running: dict[str, subprocess.Popen[bytes]] = {}
    for host in hosts:
        if host in answers:
            continue
        cmd = probe_command(hostfile, host)
        try:
            running[host] = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            for proc in running.values():
                _kill(proc)
            return {h: True for h in hosts}, f"cannot check the hosts ({cmd[0]}: {exc.strerror or exc}): using them all"
    deadline = time.monotonic() + timeout
    while running:
        for host, proc in list(running.items()):
            if proc.poll() is not None:
                answers[host] = proc.returncode == 0
                del running[host]
        if not running:
            break
        if time.monotonic() > deadline:
            for host, proc in running.items():
                _kill(proc)
                answers[host] = False
            break
        time.sleep(0.05)
    return {h: answers[h] for h in hosts}, None


def _kill(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        pass
    proc.wait()


def allocation_nodes(env: Mapping[str, str]) -> list[str]:
    """The nodes of the Slurm allocation this runs in (``scontrol show hostnames``); a
    :class:`RuntimeError` with one line where there is none or Slurm does not answer."""
    nodelist = env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise RuntimeError("--launch srun runs inside a Slurm allocation (salloc or sbatch), and "
                           "SLURM_JOB_NODELIST is not set here")
    try:
        out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                             timeout=SLURM_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"scontrol show hostnames {nodelist}: {exc}") from None
    nodes = out.stdout.split()
    if out.returncode != 0 or not nodes:
        raise RuntimeError(f"scontrol show hostnames {nodelist} failed: {out.stderr.strip() or 'no nodes'}")
    return nodes


def node_states(nodes: Sequence[str]) -> tuple[dict[str, bool], str | None]:
    """``({node: up}, note)`` from ``sinfo``; where it does not answer every node is up and
    ``note`` says so."""
    try:
        out = subprocess.run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N %t"], capture_output=True,
                             text=True, timeout=SLURM_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {n: True for n in nodes}, f"cannot ask sinfo for the nodes' states ({exc}): using them all"
    if out.returncode != 0:
        return {n: True for n in nodes}, f"sinfo failed ({out.stderr.strip()}): using every node"
    seen: dict[str, bool] = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2:  # a node in several partitions is listed once per partition
            seen[parts[0]] = seen.get(parts[0], True) and is_up(parts[1])
    return {n: seen.get(n, False) for n in nodes}, None


def is_up(state: str) -> bool:
    """Whether an ``sinfo %t`` state (``idle``, ``mix``, ``down*``, ``drain``, ...) runs job steps."""
    return not any(flag in state for flag in _DOWN_FLAGS) and state.rstrip(_DOWN_FLAGS + "$@^-") in UP_STATES


def choose(listed: Sequence[str], answers: Mapping[str, bool], lost: Sequence[str],
           ranks: int) -> list[str]:
    """The hosts of the next launch: those of ``listed`` that answer, in order, leaving out those
    in ``lost`` (named lost by the launch that just failed) unless no other host answers; at most
    ``ranks`` of them."""
    up = [h for h in listed if answers.get(h, False)]
    kept = [h for h in up if h not in lost] or up
    return kept[:ranks]
