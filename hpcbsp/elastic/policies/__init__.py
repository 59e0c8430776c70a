"""Synchronisation policies for the parameter server, by name.

``make_policy("ssp", PolicyOptions(s=3))`` builds one; :data:`REGISTRY` lists them. Each policy is
one module: :mod:`.bsp`, :mod:`.asp`, :mod:`.ssp`, :mod:`.dssp`, :mod:`.elastic`, :mod:`.backup`,
and :mod:`.allreduce` (the serverless baseline: BSP's decisions; on MPI it runs without a server).
A new policy is a new module plus one line here.
"""
from __future__ import annotations

from .allreduce import AllReduce
from .asp import ASP
from .backup import Backup
from .base import Decision, PolicyError, PolicyOptions, SyncPolicy
from .bsp import BSP
from .dssp import DSSP
from .elastic import ElasticBSP
from .ssp import SSP

__all__ = ["REGISTRY", "make_policy", "Decision", "PolicyError", "PolicyOptions", "SyncPolicy",
           "ASP", "BSP", "SSP", "DSSP", "ElasticBSP", "Backup", "AllReduce"]

REGISTRY: dict[str, type[SyncPolicy]] = {cls.name: cls for cls in (BSP, ASP, SSP, DSSP, ElasticBSP, Backup,
                                                            AllReduce)}


def make_policy(name: str, options: PolicyOptions | None = None) -> SyncPolicy:
    """Build the policy called ``name`` (one of :data:`REGISTRY`) from ``options``.

    Raises
    ------
    PolicyError
        If no policy has that name.
    """
    cls = REGISTRY.get(name)
    if cls is None:
        raise PolicyError(f"unknown policy {name!r}; choose from: {', '.join(REGISTRY)}")
    return cls.from_options(options or PolicyOptions())
