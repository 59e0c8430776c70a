"""What the exchange needs of the objects it delivers records to (:mod:`hpcbsp.runtime.api`'s
coarrays and queues): the registry of a context lists them by id, and a record's code says
which protocol its object follows.  h-relation: none (types only)."""
from __future__ import annotations

from typing import Protocol

import numpy as np


class Registered(Protocol):
    """What the exchange needs of every registered object (a coarray or a queue)."""

    itemsize: int
    dtype: np.dtype


class Target(Registered, Protocol):
    """The target of puts and the source of gets (a coarray)."""

    def _read(self, offset: int, count: int) -> np.ndarray:
        """The elements a get reads (before any put of the superstep lands)."""

    def _write(self, offset: int, data: np.ndarray) -> None:
        """Apply a put."""

    def _view(self, offset: int, count: int) -> np.ndarray:
        """Writable memory of the elements, for a large put received in place."""

    def _write_elements(self, record: np.ndarray, count: int) -> None:
        """Apply a packed batch of ``count`` element puts (offsets, then values), in order."""


class Sink(Registered, Protocol):
    """The receiver of queue records (a queue)."""

    def _deliver(self, batches: list[np.ndarray], tags: list[int]) -> None:
        """This superstep's batches for this rank, in source rank and send order, with the tag
        of each (views of the receive buffer, valid during the call)."""
