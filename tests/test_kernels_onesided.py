"""The compiled one-sided loop's own checks (hpcbsp.kernels.onesided.Updates), no MPI needed:
its results are checked in tests/test_fabsp_apps.py (histogram and index-gather in mode rma,
against np.bincount and the table indexed, at 2 and 3 ranks)."""
from __future__ import annotations

import numpy as np
import pytest

from hpcbsp.kernels.onesided import Updates


def test_null_functions_and_odd_handles_are_refused():
    with pytest.raises(ValueError, match="null function"):
        Updates(0, 1, 4, 0, 0, 0, None)
    with pytest.raises(ValueError, match="handle of 2 bytes"):
        Updates(1, 1, 2, 0, 0, 0, None)


def test_a_closed_loop_and_mismatched_arrays_raise_before_any_call():
    """Addresses that are not functions are never called: every check comes first."""
    loop = Updates(1, 1, 4, 0, 0, 0, None)
    ranks = np.zeros(3, dtype=np.int64)
    with pytest.raises(ValueError, match="2 offsets for 3 ranks"):
        loop.accumulate(ranks, np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="3 offsets and 1 outputs for 3 ranks"):
        loop.get(ranks, np.zeros(3, dtype=np.int64), np.zeros(1, dtype=np.int64))
    assert loop.accumulate(ranks[:0], ranks[:0]) == (0, 0)
    loop.close()
    with pytest.raises(ValueError, match="closed"):
        loop.accumulate(ranks, ranks)
    with pytest.raises(ValueError, match="closed"):
        loop.get(ranks, ranks, ranks.copy())
