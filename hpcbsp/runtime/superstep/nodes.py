"""Which ranks of a communicator share a node: computed once when a context starts.

A *node* here is what MPI calls one: the ranks that ``MPI_Comm_split_type(COMM_TYPE_SHARED)``
puts in one group, the ranks an MPI shared-memory window can span.  That is the grouping the
shared arena needs (:mod:`.arena`: ``MPI_Win_allocate_shared`` is defined within one such group
only), and it is the one that is right on the emulated cluster (docs/cluster.md), whose nodes
are namespaces of one kernel: MPI's launchers (hydra's host file, Slurm's nodes) place ranks by
node, so a node there is an emulated node, as its host name says too, although every one of them
could map the same ``/dev/shm`` (a check by the kernel, such as a shared file, would see one
node).  On a real cluster the host names and MPI's groups agree as well.

:meth:`Nodes.of` is one ``Split_type`` and one ``allgather`` (collective over the communicator):
each rank's host name (``MPI_Get_processor_name``, what the messages that name a rank show), its
node (the lowest rank of its group, in the communicator's numbering) and the CPUs it may run on
(its affinity mask).  Every rank then holds the same table, so whatever is decided from it (the
wait mode's ``auto``, whether the arena may exist) is decided alike without another collective.

Its users: the context (:attr:`.supersteps.Supersteps.nodes` and ``hosts``: the control step's
messages name a late rank's host, FA-BSP's routing by node takes the host names), the wait mode
(:mod:`.waiting`: ``auto`` yields where a node runs more ranks than its ranks' cores), the arena
(every rank on one node), and the parameter server's shared window (:mod:`hpcbsp.elastic.transport`).
What it cannot see: cores that other jobs, or the other emulated nodes of one machine, use too.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from mpi4py import MPI

__all__ = ["Nodes", "usable_cores"]


def usable_cores() -> frozenset[int]:
    """The CPUs this process may run on (its affinity mask; all CPUs where that is unknown)."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return frozenset(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class Nodes:
    """Where the ranks of one communicator run, rank by rank (the same on every rank).

    ``hosts[r]``: rank r's host name; ``node[r]``: the lowest rank on rank r's node (MPI's
    ``COMM_TYPE_SHARED`` group); ``cores[r]``: the CPUs rank r may run on.
    """

    hosts: tuple[str, ...]
    node: tuple[int, ...]
    cores: tuple[frozenset[int], ...]

    @classmethod
    def of(cls, comm: MPI.Comm) -> "Nodes":
        """Collective over ``comm`` (no call at all on one rank): every rank's place, as the
        module docstring says."""
        mine = (MPI.Get_processor_name(), usable_cores())
        if comm.Get_size() == 1:
            return cls((mine[0],), (0,), (mine[1],))
        shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
        group, whole = shared.Get_group(), comm.Get_group()
        try:
            (first,) = group.Translate_ranks([0], whole)
        finally:
            group.Free()
            whole.Free()
            shared.Free()
        table = comm.allgather((mine[0], first, mine[1]))
        return cls(tuple(t[0] for t in table), tuple(t[1] for t in table), tuple(t[2] for t in table))

    @property
    def one_node(self) -> bool:
        """Whether every rank shares one node (a shared window may span them all)."""
        return len(set(self.node)) == 1

    def ranks_on(self, rank: int) -> list[int]:
        """The ranks on ``rank``'s node, ascending (``rank`` among them)."""
        here = self.node[rank]
        return [r for r, n in enumerate(self.node) if n == here]

    def oversubscribed(self) -> bool:
        """Whether some node runs more ranks than CPUs in the union of its ranks' affinity masks
        (another job's processes on the same cores are not seen)."""
        ranks: dict[int, int] = {}
        cpus: dict[int, frozenset[int]] = {}
        for n, mask in zip(self.node, self.cores):
            ranks[n] = ranks.get(n, 0) + 1
            cpus[n] = cpus.get(n, frozenset()) | mask
        return any(ranks[n] > len(cpus[n]) for n in ranks)
