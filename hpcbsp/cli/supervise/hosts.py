"""Where the next launch may run: the hosts that answer, the allocation's nodes that are up.

* **Under Slurm** (``SLURM_JOB_ID`` set: inside ``salloc`` or ``sbatch``): a node's state comes
  from Slurm, not from a probe of it: ``sinfo -h -N -n $SLURM_JOB_NODELIST -o '%N %T'`` (the
  job's nodes; ``scontrol -o show node`` where sinfo fails).  A node is up when its state runs
  job steps (:data:`UP_STATES`) with no flag of a node that does not respond (``*``), is powered
  off or draining (:func:`is_up`).  With ``--launch srun`` the allocation's nodes are ``scontrol
  show hostnames $SLURM_JOB_NODELIST``; where Slurm does not answer, every node counts as up.
  With ``--hosts FILE`` under Slurm, the hosts Slurm does not know are probed as below.
* **Elsewhere** (``--hosts FILE``): every listed host is probed by running ``true`` there
  through the launcher the job will use (:func:`hpcbsp.util.jobcommand.probe_command`: the
  local cluster's ``rsh``, else ``ssh`` in batch mode), at most :data:`~.probes.IN_FLIGHT` at
  once, each bounded by :data:`PROBE_S` seconds, each with a verdict (:mod:`.probes`: answered,
  refused, timed out, could not fork; only an answer counts).  A host that is this machine
  (``localhost``, its own name) answers without a probe (hydra starts its ranks without a
  launcher).

:func:`choose` then picks the hosts of the next launch (pure, the unit tests' oracle): those
that answer, in the file's order, without the ones named lost by the launch that just failed
(unless nothing else answers), at most one per rank asked for.
"""
from __future__ import annotations

import os
import socket
import subprocess
from typing import Mapping, Sequence

from ...util.jobcommand import probe_command
from .probes import ANSWERED, DOWN, IN_FLIGHT, UP, Probe, probe, summary

#: Seconds one host check may take.
PROBE_S = 8.0
#: Seconds ``scontrol``/``sinfo`` may take.
SLURM_S = 15.0
#: States (lower case, flags stripped) of a node that runs job steps: ``sinfo %t`` and ``%T``, scontrol's.
UP_STATES = frozenset({"idle", "alloc", "allocated", "mix", "mixed", "comp", "completing", "resv",
                       "reserved", "plnd", "planned"})
#: ``sinfo`` flags after a state: not responding, powered off, powering up or down.
_DOWN_FLAGS = "*~#%!"
#: scontrol's flags (``IDLE+DRAIN``) of a node that takes no new job step.
_DOWN_WORDS = frozenset({"DRAIN", "DRAINING", "DRAINED", "NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN",
                         "POWERING_DOWN", "POWERING_UP", "FAIL", "FAILING", "MAINT"})
def is_this_machine(host: str) -> bool:
    """Whether ``host`` names this machine (hydra then starts its ranks without a launcher)."""
    names = {"localhost", "localhost.localdomain", "127.0.0.1", "::1"}
    try:
        names |= {socket.gethostname(), socket.getfqdn()}
    except OSError:
        pass
    return host in names


def check_hosts(hostfile: str, hosts: Sequence[str], env: Mapping[str, str] | None = None,
                timeout: float = PROBE_S, in_flight: int = IN_FLIGHT) -> tuple[dict[str, Probe], str | None]:
    """``({host: Probe}, note)`` (see the module docstring); ``note``: one line on what could not be
    checked, else None.  ``env`` (default: this process's) says whether this runs under Slurm."""
    env = os.environ if env is None else env
    found = {h: Probe(ANSWERED, "this machine") for h in hosts if is_this_machine(h)}
    notes: list[str] = []
    if env.get("SLURM_JOB_ID"):
        states, note = slurm_states(env)
        notes += [note] if note else []
        found.update({h: Probe(UP if states[h] else DOWN) for h in hosts if h not in found and h in states})
    rest = {h: probe_command(hostfile, h) for h in hosts if h not in found}
    found.update(probe(rest, timeout, in_flight))
    said = summary(found)
    notes += [said] if said else []
    return {h: found[h] for h in hosts}, "; ".join(notes) or None


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


def node_states(nodes: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[dict[str, bool], str | None]:
    """``({node: up}, note)`` from Slurm (:func:`slurm_states`); where it does not answer every
    node is up and ``note`` says so."""
    states, note = slurm_states(os.environ if env is None else env)
    if note:
        return {n: True for n in nodes}, f"{note}: using every node"
    return {n: states.get(n, False) for n in nodes}, None


def slurm_states(env: Mapping[str, str]) -> tuple[dict[str, bool], str | None]:
    """``({node: up}, note)`` for the nodes of the job (``$SLURM_JOB_NODELIST``; every node
    without it): sinfo's states, else scontrol's; ``({}, note)`` where neither answers."""
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    only = ["-n", nodelist] if nodelist else []
    out, why = _ask(["sinfo", "-h", "-N", *only, "-o", "%N %T"])
    if out is not None:
        seen: dict[str, bool] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:  # a node in several partitions is listed once per partition
                seen[parts[0]] = seen.get(parts[0], True) and is_up(parts[1])
        return seen, None
    out, why2 = _ask(["scontrol", "-o", "show", "node", *([nodelist] if nodelist else [])])
    if out is not None:
        fields = [dict(f.split("=", 1) for f in line.split() if "=" in f) for line in out.splitlines()]
        return {f["NodeName"]: is_up_words(f.get("State", "")) for f in fields if "NodeName" in f}, None
    return {}, f"cannot ask Slurm for the nodes' states ({why}; {why2})"


def _ask(argv: list[str]) -> tuple[str | None, str]:
    """``(stdout, "")`` of a Slurm command that succeeded, else ``(None, why)``."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=SLURM_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{argv[0]}: {exc}"
    if out.returncode != 0:
        return None, f"{argv[0]} failed: {out.stderr.strip() or f'exit {out.returncode}'}"
    return out.stdout, ""


def is_up_words(state: str) -> bool:
    """Whether scontrol's ``State=`` (``IDLE``, ``MIXED+COMPLETING``, ``IDLE+DRAIN``,
    ``DOWN+NOT_RESPONDING``, ...) runs job steps."""
    words = state.upper().split("+")
    return words[0].lower() in UP_STATES and not _DOWN_WORDS.intersection(words[1:])


def is_up(state: str) -> bool:
    """Whether an ``sinfo`` ``%t`` or ``%T`` state (``idle``, ``mix``, ``mixed``, ``down*``,
    ``drain``, ``allocated+``, ...) runs job steps."""
    return not any(flag in state for flag in _DOWN_FLAGS) and state.lower().rstrip(_DOWN_FLAGS + "$@^-+") in UP_STATES


def choose(listed: Sequence[str], answers: Mapping[str, bool], lost: Sequence[str],
           ranks: int) -> list[str]:
    """The hosts of the next launch: those of ``listed`` that answer, in order, leaving out those
    in ``lost`` (named lost by the launch that just failed) unless no other host answers; at most
    ``ranks`` of them."""
    up = [h for h in listed if answers.get(h, False)]
    kept = [h for h in up if h not in lost] or up
    return kept[:ranks]
