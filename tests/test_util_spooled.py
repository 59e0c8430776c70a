"""``hpcbsp.util.spooled.Spooled``: rows partly on disk behave as the plain list of the same rows.

Oracle: a Python list given the same operations (append, extend, sort), read back by every
access the run log and its outputs use; a buffer of 3 rows puts most of them in the file.
"""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from hpcbsp.elastic.runlog import POINT, PUSH, RunLog
from hpcbsp.elastic.snapshot import decode, encode
from hpcbsp.util.spooled import Spooled

ROWS = [(i % 5, 0.1 * i + 1e-12 * i * i) for i in range(23)]


def _both() -> tuple[Spooled, list]:
    spooled, plain = Spooled(PUSH, buffer=3), []
    for row in ROWS[:10]:
        spooled.append(row)
        plain.append(row)
    spooled.extend(ROWS[10:])
    plain.extend(ROWS[10:])
    return spooled, plain


def test_reads_give_back_exactly_the_rows_stored():
    spooled, plain = _both()
    assert len(spooled) == len(plain) and bool(spooled) and not Spooled(PUSH)
    assert list(spooled) == plain and spooled == plain and spooled == Spooled(PUSH, plain, buffer=7)
    assert all(type(w) is int and type(t) is float for w, t in spooled)
    for i in (0, 1, 2, 3, 20, 21, 22, -1, -3, -23):
        assert spooled[i] == plain[i]
    for s in (slice(-5, None), slice(2, 9), slice(None, None, 4), slice(30, 40)):
        assert spooled[s] == plain[s]
    with pytest.raises(IndexError):
        spooled[23]
    assert spooled != plain[:-1] and spooled != [*plain[:-1], (9, 9.0)]


def test_sort_clear_and_state():
    spooled, plain = _both()
    spooled.sort(key=lambda e: (-e[1], e[0]))
    plain.sort(key=lambda e: (-e[1], e[0]))
    assert spooled == plain
    again = pickle.loads(pickle.dumps(spooled))
    assert again == plain and again.buffer == 3
    spooled.clear()
    assert len(spooled) == 0 and list(spooled) == []


def test_a_run_log_snapshot_restores_every_push_and_point_and_spools_again():
    log = RunLog(3)
    log.push_times.extend(ROWS * 500)  # beyond the 4096 rows kept in memory
    for k in range(40):
        log.record_eval(0.5 * k, 0.01 * k, 1.0 / (k + 1), updates=k)
    back = decode(json.loads(json.dumps(encode(log))))
    assert isinstance(back.push_times, Spooled) and back.push_times == ROWS * 500
    assert back.curve == [(0.5 * k, 0.01 * k, 1.0 / (k + 1), k) for k in range(40)]
    assert back.curve[-1][3] == 39 and back.curve.dtype == np.dtype(POINT)
    back.push_times.append((2, 1e9))
    assert back.push_times[-1] == (2, 1e9) and len(back.push_times) == len(ROWS) * 500 + 1
