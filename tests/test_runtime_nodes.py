"""Which ranks share a node (hpcbsp.runtime.superstep.nodes.Nodes), learnt once per context.

Oracles: tables written by hand for the derived answers (one node, the ranks of a node,
oversubscription per node); for the MPI runs (one rank serially, ``mpiexec -n 2`` and ``-n 3``)
the host names the kernel gives (``socket.gethostname``) and the affinity masks it reports:
ranks share a node exactly where their host names are the same (on this machine, and on the
emulated cluster's nodes, each of which has its own).
"""
from __future__ import annotations

import os
import socket

import pytest
from mpi4py import MPI

import hpcbsp
from hpcbsp.runtime.superstep import waiting
from hpcbsp.runtime.superstep.nodes import Nodes, usable_cores

mpi = pytest.mark.mpi(min_size=2)


def _by_host(hosts: list[str]) -> list[list[int]]:
    """Per rank, the ranks with its host name (the oracle of :meth:`Nodes.ranks_on`)."""
    return [[q for q, h in enumerate(hosts) if h == hosts[r]] for r in range(len(hosts))]


def test_one_rank_is_a_node_of_its_own_with_its_host_and_cores():
    nodes = Nodes.of(MPI.COMM_SELF)
    assert nodes == Nodes((socket.gethostname(),), (0,), (frozenset(os.sched_getaffinity(0)),))
    assert nodes.one_node and nodes.ranks_on(0) == [0]
    assert usable_cores() == frozenset(os.sched_getaffinity(0))


def test_the_ranks_of_a_node_and_one_node_by_hand():
    two = Nodes(("a", "a", "b", "a", "b"), (0, 0, 2, 0, 2), (frozenset({0}),) * 5)
    assert [two.ranks_on(r) for r in range(5)] == [[0, 1, 3], [0, 1, 3], [2, 4], [0, 1, 3], [2, 4]]
    assert not two.one_node
    assert Nodes(("a", "a"), (0, 0), (frozenset({0}),) * 2).one_node


def test_oversubscription_is_ranks_against_the_union_of_their_cores():
    # Three ranks bound to one core each of {0, 1}: 3 ranks, 2 cores.
    assert Nodes(("a",) * 3, (0,) * 3, (frozenset({0}), frozenset({1}), frozenset({0}))).oversubscribed()
    # Two ranks, each allowed on both cores: not oversubscribed.
    assert not Nodes(("a",) * 2, (0,) * 2, (frozenset({0, 1}),) * 2).oversubscribed()


def test_oversubscription_is_counted_node_by_node():
    # Node 0: ranks 0 and 1 on cores 0 and 1; node 2: rank 2 on core 0.  Three ranks on two
    # distinct core numbers, but each node has a core per rank.
    assert not Nodes(("a", "a", "b"), (0, 0, 2), (frozenset({0}), frozenset({1}), frozenset({0}))).oversubscribed()
    # Node 2 gets a second rank on core 0: that node has two ranks for one core.
    assert Nodes(("a", "a", "b", "b"), (0, 0, 2, 2),
                 (frozenset({0}), frozenset({1}), frozenset({0}), frozenset({0}))).oversubscribed()


@mpi
def test_the_ranks_sharing_a_node_are_those_with_its_host_name():
    comm = MPI.COMM_WORLD
    nodes = Nodes.of(comm)
    hosts = comm.allgather(socket.gethostname())
    assert list(nodes.hosts) == hosts
    assert [nodes.ranks_on(r) for r in range(comm.Get_size())] == _by_host(hosts)
    assert list(nodes.node) == [group[0] for group in _by_host(hosts)]
    assert list(nodes.cores) == comm.allgather(frozenset(os.sched_getaffinity(0)))
    assert nodes.one_node == (len(set(hosts)) == 1)
    with hpcbsp.BSP(wait="spin") as bsp:  # a context learns the same, once
        assert bsp.nodes == nodes and bsp.hosts == hosts


@mpi
def test_a_sub_communicator_numbers_its_nodes_by_its_own_ranks():
    world = MPI.COMM_WORLD
    sub = world.Split(world.Get_rank() % 2, key=-world.Get_rank())  # reversed order inside
    try:
        nodes = Nodes.of(sub)
        hosts = sub.allgather(socket.gethostname())
        assert list(nodes.hosts) == hosts and sub.Get_size() == len(nodes.node)
        assert [nodes.ranks_on(r) for r in range(sub.Get_size())] == _by_host(hosts)
        assert list(nodes.node) == [group[0] for group in _by_host(hosts)]
    finally:
        sub.Free()


@mpi
def test_auto_yields_exactly_where_the_nodes_given_are_oversubscribed():
    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    crowded = Nodes(("a",) * p, (0,) * p, (frozenset({0}),) * p)  # every rank on one core
    roomy = Nodes(("a",) * p, (0,) * p, (frozenset(range(p)),) * p)
    assert waiting.resolve("auto", comm, crowded) == "yield"
    assert waiting.resolve("auto", comm, roomy) == "spin"
