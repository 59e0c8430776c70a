"""One side of a round of ``Alltoallv`` for the large puts (``hpcbsp.runtime.superstep.exchange.regions``):
the buffer, counts and displacements MPI is given for each rank's region.  Oracle: the regions'
own addresses and sizes, counted by hand, and the bytes MPI would read at buffer + displacement
(read back through numpy), which must be the regions' bytes."""
from __future__ import annotations

import numpy as np
from mpi4py import MPI

from hpcbsp.runtime.superstep.exchange import regions


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def _read(buf, displacement: int, count: int) -> np.ndarray:
    """The ``count`` bytes MPI would take from ``buf`` at ``displacement``."""
    return np.frombuffer(buf, dtype=np.uint8)[displacement:displacement + count]


def test_one_region_is_passed_as_itself():
    """Two ranks (or one peer in this round): no span and no address arithmetic."""
    region = np.arange(1000, dtype=np.uint8)
    buf, counts, displs, staging = regions.regions([None, region, None])
    assert buf is region and counts == [0, 1000, 0] and displs == [0, 0, 0] and staging is None


def test_several_regions_are_one_span_with_their_displacements():
    big = np.arange(5000, dtype=np.int64).view(np.uint8)
    a, b = big[8000:16000], big[100:900]  # b lies before a: the span starts at b
    buf, counts, displs, staging = regions.regions([a, None, b])
    assert staging is None and counts == [8000, 0, 800]
    assert displs == [_address(a) - _address(b), 0, 0]
    assert isinstance(buf, MPI.buffer) and len(buf) == _address(a) + 8000 - _address(b)
    np.testing.assert_array_equal(_read(buf, displs[0], counts[0]), a)
    np.testing.assert_array_equal(_read(buf, displs[2], counts[2]), b)


def test_regions_too_far_apart_are_staged_end_to_end(monkeypatch):
    monkeypatch.setattr(regions, "SPAN", 0)  # as if they lay more than 2 GiB apart
    a, b = np.full(300, 7, np.uint8), np.full(200, 9, np.uint8)
    buf, counts, displs, staging = regions.regions([a, b, np.empty(0, np.uint8)])
    assert staging is buf and staging.size == 500 and counts == [300, 200, 0] and displs == [0, 300, 500]


def test_no_region_is_an_empty_buffer():
    buf, counts, displs, staging = regions.regions([None, np.empty(0, np.uint8)])
    assert len(buf) == 0 and counts == [0, 0] and displs == [0, 0] and staging is None
