"""The interface every synchronisation policy implements, and the options they are built from.

A policy is pure decision logic: it is told "worker ``w`` pushed a gradient at time ``now``" and
answers with a :class:`Decision` (which held gradients to apply as one averaged update, which to
drop, which workers to release with the current weights). It never touches MPI, weights or
clocks of its own, so the virtual-clock simulator and the MPI parameter server drive the very
same objects, and the tests can check a policy with hand-made timestamps.

Protocol (enforced by :class:`hpcbsp.elastic.coordinator.Coordinator`): all workers are
released at :meth:`SyncPolicy.reset`; a worker pushes once per release and then waits; its
gradient stays held by the server until a decision applies or drops it.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["Decision", "PolicyOptions", "SyncPolicy", "PolicyError"]


class PolicyError(ValueError):
    """A policy name or parameter is invalid (the message is one line, fit for a CLI)."""


@dataclass(frozen=True)
class Decision:
    """What the server does after one push.

    Attributes
    ----------
    apply : tuple of int
        Workers whose held gradients are applied now, as one update with their mean.
    drop : tuple of int
        Workers whose held gradients are discarded (late backup gradients).
    release : tuple of int
        Workers to send the current weights to (after ``apply``); each then computes again.
    """

    apply: tuple[int, ...] = ()
    drop: tuple[int, ...] = ()
    release: tuple[int, ...] = ()


@dataclass(frozen=True)
class PolicyOptions:
    """Every tunable of every policy; each policy reads only its own.

    Attributes
    ----------
    R : int
        ElasticBSP lookahead: the most iterations a worker may run between two barriers.
    s : int
        SSP staleness bound: a worker is released only while at most ``s`` pushes ahead of the
        slowest.
    s_lower, s_upper : int
        DSSP bounds: SSP with ``s_lower``, plus up to ``s_upper - s_lower`` extra iterations
        granted to the fastest worker by the synchronisation controller.
    backup : int
        Backup workers ``b``: each step applies the first ``n - b`` gradients and drops the rest.
    window : int
        ElasticBSP/DSSP predict a worker's next iteration time as the median of its last
        ``window`` compute intervals (1 is the papers' "latest interval").
    """

    R: int = 20
    s: int = 3
    s_lower: int = 3
    s_upper: int = 15
    backup: int = 1
    window: int = 3

    def __post_init__(self) -> None:
        if self.R < 1:
            raise PolicyError(f"R must be at least 1, got {self.R}")
        if self.s < 0:
            raise PolicyError(f"s must be at least 0, got {self.s}")
        if self.s_lower < 0:
            raise PolicyError(f"s_L must be at least 0, got {self.s_lower}")
        if self.s_lower > self.s_upper:
            raise PolicyError(f"s_L must not exceed s_U, got s_L={self.s_lower} > s_U={self.s_upper}")
        if self.backup < 0:
            raise PolicyError(f"the number of backup workers must be at least 0, got {self.backup}")
        if self.window < 1:
            raise PolicyError(f"window must be at least 1, got {self.window}")


class SyncPolicy(ABC):
    """Base class: subclasses set ``name`` (and ``PARAMETERS``, if they have any) and implement
    :meth:`start` and :meth:`on_push`."""

    name: ClassVar[str]
    #: The :class:`PolicyOptions` fields the policy is built from, in the order its constructor
    #: takes them, each with its label in :meth:`describe` (None: not shown); an attribute of
    #: that name holds each.
    PARAMETERS: ClassVar[dict[str, str | None]] = {}

    def __init__(self) -> None:
        self.n_workers = 0
        self._stats: dict[str, Any] = {}

    @classmethod
    def from_options(cls, options: PolicyOptions) -> "SyncPolicy":
        """Build the policy from the shared options: its :attr:`PARAMETERS`, in order."""
        return cls(*(getattr(options, field) for field in cls.PARAMETERS))

    def describe(self) -> str:
        """A short label with the parameters, e.g. ``ssp(s=3)``; the name alone without any."""
        shown = [f"{label}={getattr(self, field)}" for field, label in self.PARAMETERS.items() if label]
        return f"{self.name}({','.join(shown)})" if shown else self.name

    def reset(self, n_workers: int, now: float) -> None:
        """Begin a run: every worker is released at time ``now`` with the initial weights."""
        if n_workers < 1:
            raise PolicyError(f"a policy needs at least one worker, got {n_workers}")
        self.n_workers = n_workers
        self._stats = {}
        self.start(n_workers, now)

    @abstractmethod
    def start(self, n_workers: int, now: float) -> None:
        """Reset the policy's state for ``n_workers`` workers all released at ``now``."""

    @abstractmethod
    def on_push(self, worker: int, now: float) -> Decision:
        """Worker ``worker`` pushed a gradient at ``now``: say what the server does."""

    @property
    def stats(self) -> dict[str, Any]:
        """Policy-specific counters for the run report (barriers, grants, ...)."""
        return dict(self._stats)

