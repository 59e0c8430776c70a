"""The layout of a sharded parameter server, without MPI: which weights each shard holds, which
ranks serve, the pieces a worker receives (:mod:`.shards` runs it), and the memory a shard holds.

The weights ``0..P-1`` are cut into ``S`` contiguous key ranges, the first ``P % S`` one weight
longer than the others; shard ``s`` holds range ``s``.  The servers sit one per node as far as
the job has nodes (the first rank of each node, in rank order), then on the lowest ranks left.

A server rank's buffers for the run (:func:`shard_memory`; :meth:`.round.ServerRound.memory`
counts the arrays themselves): its key range of the weights, a row of held gradients per worker
(the coordinator's, whatever the policy: a policy that holds none, ASP, never writes them, so
they stay unresident zero pages) and a receive buffer per worker for its push, in the
gradients' wire format (none where the gradients come through the single server's shared window).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..util.text import byte_size
from .wire import pieces

__all__ = ["key_ranges", "worker_pieces", "servers_problem", "server_ranks", "ShardMemory", "shard_memory"]


def key_ranges(size: int, servers: int) -> list[slice]:
    """The ``servers`` contiguous key ranges of ``size`` weights, in order (the first
    ``size % servers`` one longer)."""
    base, extra = divmod(size, servers)
    bounds = np.cumsum([0] + [base + (s < extra) for s in range(servers)])
    return [slice(int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:])]


def worker_pieces(size: int, itemsize: int, servers: int) -> tuple[list[slice], list[tuple[int, slice]]]:
    """A worker's layout: the key ranges (:func:`key_ranges`: what it pushes to each shard) and
    the pieces it receives a reply in, ``(shard, slice of the whole weights)``, each shard's
    range cut as its server cuts its reply (:func:`.wire.pieces`)."""
    ranges, out = key_ranges(size, servers), []
    for s, keys in enumerate(ranges):
        out += [(s, slice(keys.start + p.start, keys.start + p.stop))
                for p in pieces(keys.stop - keys.start, itemsize)]
    return ranges, out


def servers_problem(servers: int, ranks: int) -> str | None:
    """Why ``servers`` shards cannot run on ``ranks`` ranks (None: they can)."""
    if servers < 1:
        return f"--servers {servers}: give at least 1 server rank"
    if servers > ranks - 1:
        return (f"--servers {servers} needs at least {servers + 1} ranks ({servers} server{'s' if servers > 1 else ''} and a "
                f"worker); this job has {ranks}: start more ranks or give fewer servers")
    return None


def server_ranks(hosts: Sequence[str], servers: int) -> list[int]:
    """The ranks that serve, shard by shard: the first rank of each node in order of rank, as
    far as there are nodes, then the lowest ranks not yet taken."""
    chosen: list[int] = []
    seen: set[str] = set()
    for rank, host in enumerate(hosts):
        if host not in seen and len(chosen) < servers:
            seen.add(host)
            chosen.append(rank)
    chosen += [r for r in range(len(hosts)) if r not in chosen][:servers - len(chosen)]
    return chosen


@dataclass(frozen=True)
class ShardMemory:
    """Bytes a server rank holds for the run (see the module docstring)."""

    weights: int  #: its key range of the weights
    held: int     #: a row per worker for the gradients the policy holds
    receive: int  #: a receive buffer per worker for its push

    @property
    def total(self) -> int:
        return self.weights + self.held + self.receive

    def text(self) -> str:
        """``A weights + B held gradients + C receive buffers = D`` (:func:`~hpcbsp.util.text.byte_size`)."""
        return (f"{byte_size(self.weights)} weights + {byte_size(self.held)} held gradients + "
                f"{byte_size(self.receive)} receive buffers = {byte_size(self.total)}")


def shard_memory(size: int, servers: int, workers: int, itemsize: int, grad_itemsize: int,
                 window: bool = False) -> ShardMemory:
    """The buffers of the busiest of ``servers`` shards (the longest key range of ``size``
    weights of ``itemsize`` bytes) for ``workers`` workers whose gradients travel in
    ``grad_itemsize`` bytes a value; ``window``: they come through the shared window (no
    receive buffers)."""
    keys = max(k.stop - k.start for k in key_ranges(size, servers))
    return ShardMemory(keys * itemsize, workers * keys * itemsize, 0 if window else workers * keys * grad_itemsize)
