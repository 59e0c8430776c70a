"""The runtime's failure lines: each written by one function here and read back by :func:`parse`.

A job that fails says why on stderr in lines that start with ``[hpcbsp]``; ``hpcbsp supervise``
reads them to tell a lost node from the program's own failure (:mod:`hpcbsp.cli.supervise.signs`).
Writer and reader live here together, as :mod:`hpcbsp.util.progress` keeps progress lines:

==================  ================================================================  ===============
kind                the line (written by)                                              :func:`parse`
==================  ================================================================  ===============
``node silent``     ``[hpcbsp] node HOST (ranks R) has not been heard from for T s:    ``node``
                    ...; ending the job (...)`` (:func:`node_silent`; the detector)
``rank stopped``    ``[hpcbsp] rank R/P (pid X on HOST) has been stopped for T s       ``node``,
                    (...); ending the job (...)`` (:func:`rank_stopped`; the detector)  ``rank``
``died``            ``[hpcbsp] rank R/P (pid X on HOST) died without a report: HOW``   ``node``,
                    (:func:`rank_died`; the node's watcher)                            ``how``
``failed``          ``[hpcbsp] rank R/P failed:`` then the rank's traceback            ``rank``
                    (:func:`failed_header`; :mod:`.report`)
``error``           ``[hpcbsp] error: TEXT``: bad input, once for the job (:func:`error`)  ``text``
``said``            ``[hpcbsp] rank R/P: TEXT``: a peer's failure, a timeout, Ctrl-C,    ``text``
                    a failure the others did not hear in time (:func:`rank_says`;
                    :mod:`.report`, :mod:`.guards`, ``superstep/lifecycle.py``)
``aborted``         ``[hpcbsp] rank R/P aborted the program at superstep S: TEXT``     ``rank``,
                    (:func:`aborted`; ``BSP.abort``)                                   ``text``
==================  ================================================================  ===============

A timeout (``said`` by the rank that waited; its text from ``runtime/superstep``) names the
ranks not arrived, each ``R (on HOST)``: :func:`parse` gives their hosts as ``nodes``.
:attr:`Said.ends_job` is true for the detector's lines: the detector has ended the job when it
prints one (``hpcbsp supervise`` then ends the launcher after a short grace).

Many ranks are written as ranges (:func:`hpcbsp.util.text.ranks`: ``ranks 0-4095 except 17``),
never one number each: a divergence (:func:`diverged`) and a list of failed peers
(:func:`peers_failed`) are one short line however many ranks a job has.

Standard library only (and ``util/text.py``), so that the node's watcher can load this module by
path as it loads its siblings (``python -I -S nodewatch.py`` puts ``util/`` on its path).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

if __package__:
    from ...util.text import ranges, ranks
else:  # loaded by path by the node's watcher, which puts util/ on sys.path
    from text import ranges, ranks  # type: ignore[no-redef]

__all__ = ["Said", "parse", "node_silent", "rank_stopped", "rank_died", "failed_header", "error",
           "node_ended", "rank_says", "aborted", "diverged", "peers_failed", "ranks_on_hosts", "PREFIX"]

#: What every failure line of the runtime starts with.
PREFIX = "[hpcbsp]"
#: Failed peers a line describes one by one before it only counts the rest.
SHOWN_PEERS = 4
#: Groups of a divergence described before the rest are counted.
SHOWN_GROUPS = 6
#: Ranks a list names one by one with their hosts; beyond, it goes host by host.
SHOWN_RANKS = 8
#: Hosts a list names, host by host, before it only counts the rest.
SHOWN_HOSTS = 8


# -- writing -----------------------------------------------------------------------------------
def node_silent(host: str, node_ranks: Sequence[int], seconds: float, timeout: float) -> str:
    """The detector's line for a node not heard from for ``seconds``: it ends the job."""
    return (f"{PREFIX} node {host} ({ranks(node_ranks)}) has not been heard from for {seconds:.0f} s: "
            f"it died, froze or lost its link; ending the job (HPCBSP_HEARTBEAT_TIMEOUT={timeout:g})")


def node_ended(host: str) -> str:
    """The line of a node that learnt another node ended the job for a stopped rank there."""
    return f"{PREFIX} node {host} ended the job (a rank there was stopped)"


def rank_stopped(rank: int, size: int, pid: int, host: str, seconds: float, timeout: float) -> str:
    """The detector's line for a rank stopped (SIGSTOP, a frozen node) for ``seconds``: it ends the job."""
    return (f"{PREFIX} rank {rank}/{size} (pid {pid} on {host}) has been stopped for {seconds:.0f} s "
            f"(SIGSTOP, or a frozen node); ending the job (HPCBSP_HEARTBEAT_TIMEOUT={timeout:g})")


def rank_died(rank: int, size: int, pid: int, host: str, how: str) -> str:
    """The node watcher's line for a rank that died silently; ``how``: ``killed by SIGKILL (...)``,
    ``killed by a signal or crashed``, ``crashed with SIGSEGV``, ..."""
    return f"{PREFIX} rank {rank}/{size} (pid {pid} on {host}) died without a report: {how}"


def failed_header(rank: int, size: int) -> str:
    """The line before a failed rank's traceback."""
    return f"{PREFIX} rank {rank}/{size} failed:"


def error(text: str) -> str:
    """Bad input, said once for the job."""
    return f"{PREFIX} error: {text}"


def rank_says(rank: int, size: int, text: str) -> str:
    """One line of rank ``rank``: a peer's failure, a timeout, an interrupt."""
    return f"{PREFIX} rank {rank}/{size}: {text}"


def aborted(rank: int, size: int, superstep: int, message: str) -> str:
    """``bsp_abort`` of one rank (:meth:`hpcbsp.BSP.abort`): it ends the job."""
    return f"{PREFIX} rank {rank}/{size} aborted the program at superstep {superstep}: {message}"


def diverged(groups: Mapping[str, Iterable[int]]) -> str:
    """The message of a divergence: what each group of ranks was doing (``{what: ranks}``, in
    order), each group's ranks as ranges, at most :data:`SHOWN_GROUPS` groups described."""
    items = [(what, sorted(set(rs))) for what, rs in groups.items()]
    parts = [f"{ranks(rs)}: {what}" for what, rs in items[:SHOWN_GROUPS]]
    rest = [r for _, rs in items[SHOWN_GROUPS:] for r in rs]
    if rest:
        parts.append(f"{ranks(rest)}: {len(items) - SHOWN_GROUPS} other calls")
    return ("the ranks of this BSP program diverged: " + "; ".join(parts)
            + ". Every rank must make the same sequence of collective BSP calls (sync, coarray, "
            "queue, allreduce, broadcast, split) and leave the BSP block together.")


def ranks_on_hosts(chosen: Sequence[int], hosts: Sequence[str] | None) -> str:
    """Ranks with their hosts where known: ``2 (on node3), 3 (on node4)``; more than
    :data:`SHOWN_RANKS` ranks host by host as ranges, ``0-3 (on node1), 8-11 (on node3)``, at
    most :data:`SHOWN_HOSTS` hosts and then ``and 40 more ranks on 10 hosts``: never a list that
    grows with the job.  :func:`parse` reads the hosts back either way."""
    if hosts is None:
        return ranges(chosen) if len(chosen) > SHOWN_RANKS else ", ".join(map(str, chosen))
    if len(chosen) <= SHOWN_RANKS:
        return ", ".join(f"{r} (on {hosts[r]})" if 0 <= r < len(hosts) else str(r) for r in chosen)
    by_host: dict[str, list[int]] = {}
    for r in sorted(set(chosen)):
        by_host.setdefault(hosts[r] if 0 <= r < len(hosts) else "?", []).append(r)
    groups = list(by_host.items())
    text = ", ".join(f"{ranges(rs)} (on {host})" for host, rs in groups[:SHOWN_HOSTS])
    rest = sum(len(rs) for _, rs in groups[SHOWN_HOSTS:])
    if rest:
        text += f", and {rest} more ranks on {len(groups) - SHOWN_HOSTS} hosts"
    return text


def peers_failed(failed: Sequence[tuple[int, str]]) -> str:
    """``stopping because rank 3 failed ...``: the first :data:`SHOWN_PEERS` failed ranks with
    what each said, the others as ranges."""
    shown = "; ".join(f"rank {r} {d}" for r, d in failed[:SHOWN_PEERS])
    rest = [r for r, _ in failed[SHOWN_PEERS:]]
    return f"stopping because {shown}" + (f"; and {ranks(rest)} failed too" if rest else "")


# -- reading -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Said:
    """What a failure line says (:func:`parse`)."""

    kind: str                    #: see the module's table
    rank: int | None = None
    size: int | None = None
    node: str | None = None      #: the node it names
    text: str = ""               #: ``died``: how; ``error``, ``said``: the text after the prefix
    nodes: tuple[str, ...] = ()  #: a timeout's: the hosts of the ranks it waited for

    @property
    def ends_job(self) -> bool:
        """The failure detector ended the job (a silent node, a stopped rank)."""
        return self.kind in ("node silent", "rank stopped")

    @property
    def killed(self) -> bool:
        """A rank killed from outside (SIGKILL, or an end the watcher could not tell from one)."""
        return self.kind == "died" and self.text.startswith(("killed by SIGKILL", "killed by a signal or crashed"))

    @property
    def crashed(self) -> bool:
        """A rank that crashed (SIGSEGV, SIGBUS, ...): the program's own failure."""
        return self.kind == "died" and self.text.startswith("crashed with ")


_RANK = r"\[hpcbsp\] rank (?P<rank>\d+)/(?P<size>\d+)"
_PATTERNS = (
    ("node silent", re.compile(r"\[hpcbsp\] node (?P<node>\S+) \((?:rank|ranks) .*?\) has not been heard from")),
    ("rank stopped", re.compile(_RANK + r" \(pid \d+ on (?P<node>\S+)\) has been stopped for")),
    ("died", re.compile(_RANK + r" \(pid \d+ on (?P<node>\S+)\) died without a report: (?P<text>.*)")),
    ("failed", re.compile(_RANK + r" failed:")),
    ("aborted", re.compile(_RANK + r" aborted the program at superstep \d+: (?P<text>.*)")),
    ("error", re.compile(r"\[hpcbsp\] error: (?P<text>.*)")),
    ("said", re.compile(_RANK + r": (?P<text>.*)")),
)
#: A sync's or an exchange's timeout: the ranks not arrived, each ``R (on HOST)``.
_LATE = re.compile(r"timed out (?:waiting for the other ranks \(ranks not arrived: (?P<list>[^;]*)\)"
                   r"|after \S+ s waiting for (?P<one>rank \d+ \(on \S+\)))")
_ON = re.compile(r"\d+ \(on ([^)\s]+)\)")


def parse(line: str) -> Said | None:
    """What a failure line says, or None for any other line; found anywhere in the line (a
    launcher may put words before it)."""
    for kind, pattern in _PATTERNS:
        m = pattern.search(line)
        if m is None:
            continue
        got = m.groupdict()
        rank, size = got.get("rank"), got.get("size")
        text = (got.get("text") or "").strip()
        nodes: tuple[str, ...] = ()
        if kind == "said":
            late = _LATE.search(text)
            if late is not None:
                kind = "timeout"
                nodes = tuple(dict.fromkeys(_ON.findall(late.group("list") or late.group("one") or "")))
        return Said(kind, int(rank) if rank else None, int(size) if size else None, got.get("node"), text, nodes)
    late = _LATE.search(line)  # a timeout not yet reported by the rank (an exception's text)
    if late is not None:
        return Said("timeout", text=line.strip(),
                    nodes=tuple(dict.fromkeys(_ON.findall(late.group("list") or late.group("one") or ""))))
    return None
