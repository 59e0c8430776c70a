"""The allreduce baseline (synchronous data parallelism as DDP and Horovod do it), as a policy.

On MPI, ``--policy allreduce`` runs without a server: every step each worker computes a
gradient, ``bsp.allreduce`` sums them, and every worker applies the same averaged update to its
own copy of the weights (:mod:`hpcbsp.elastic.allreduce`).  The updates are exactly BSP's (the
mean of all ``n`` gradients, every worker on the same weights, each step as long as the slowest
worker); only the transport differs.  So on the virtual clock, which models no communication
cost, this policy *is* BSP under another name, and the simulator runs it as such.
"""
from __future__ import annotations

from .bsp import BSP

__all__ = ["AllReduce"]


class AllReduce(BSP):
    """BSP's decisions under the name ``allreduce`` (see the module docstring)."""

    name = "allreduce"
